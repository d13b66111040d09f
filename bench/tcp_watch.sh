#!/usr/bin/env bash
# Benchmark: the CPU `roundtrip tcp` spends per sample of N open loopback connections, against `ss -tin` run
# once per interval on the same sockets (the issue's bar: lower than ss, and < 5% of one core at 1 sample/s).
#
#   roundtrip: `roundtrip tcp --port P --report-interval 1s -t SECS` (text to /dev/null), user+sys CPU / samples taken
#   ss:        `ss -tinH 'sport = :P or dport = :P'` (to /dev/null) run SECS times, user+sys CPU / runs
#
# Both see every one of the 2*N sockets (both ends of each connection are on this machine).
# Interleaved: each round runs both once; the figures are medians over the rounds.
# Usage: bench/tcp_watch.sh [CONNECTIONS (default 10000)] [ROUNDS (default 5)] [SECONDS per run (default 5)]
set -euo pipefail

N=${1:-10000}
ROUNDS=${2:-5}
SECS=${3:-5}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
for t in ss python3; do
    command -v "$t" >/dev/null || { echo "bench/tcp_watch.sh: $t is not installed" >&2; exit 1; }
done
# One process holds the accepted ends, a forked child the connecting ends: N descriptors each.
ulimit -n $((N + 100))
WORK=$(mktemp -d)
HOLDER=
cleanup() {
    [ -n "$HOLDER" ] && kill "$HOLDER" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# N connections to one listener on loopback, held open (idle) while the rounds run.
python3 - "$N" "$WORK/port" <<'PY' &
import os, signal, socket, sys, time
n = int(sys.argv[1])
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4096)
port = l.getsockname()[1]
child = os.fork()
if child == 0:
    l.close()
    keep = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port)); c.send(b"x"); keep.append(c)
    time.sleep(3600)
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda *a: (os.kill(child, signal.SIGKILL), sys.exit(0)))
keep = [l.accept()[0] for _ in range(n)]
open(sys.argv[2], "w").write(str(port))
time.sleep(3600)
PY
HOLDER=$!
while [ ! -s "$WORK/port" ]; do sleep 0.2; done
P=$(cat "$WORK/port")
echo "bench/tcp_watch.sh: $N connections on 127.0.0.1:$P ($((2 * N)) sockets), $ROUNDS rounds of ${SECS}s"

# CPU seconds (user+sys) of one command, from the kernel's rusage of the finished child.
cpu_of() { python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$@"; }

rt_ms=(); rt_steady=(); ss_ms=()
for r in $(seq "$ROUNDS"); do
    c=$(cpu_of "$RT" tcp --port "$P" --report-interval 1s -t "${SECS}s")
    one=$(cpu_of "$RT" tcp --port "$P" --report-interval 1s -t 1ms)
    # roundtrip samples at 0s, 1s, ... SECS-1 s: SECS samples, each of every socket. Per sample: the whole
    # run (start and the end summary included) / SECS; steady: the samples after the first only.
    rt_ms+=("$(python3 -c "print(round($c / $SECS * 1000, 1))")")
    rt_steady+=("$(python3 -c "print(round(($c - $one) / ($SECS - 1) * 1000, 1))")")
    c=$(cpu_of sh -c "for i in \$(seq $SECS); do ss -tinH 'sport = :$P or dport = :$P'; sleep 1; done")
    ss_ms+=("$(python3 -c "print(round($c / $SECS * 1000, 1))")")
    echo "round $r: roundtrip ${rt_ms[-1]} ms CPU per sample (steady ${rt_steady[-1]} ms), ss ${ss_ms[-1]} ms CPU per run"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
RT_MED=$(median "${rt_ms[@]}"); RT_ST=$(median "${rt_steady[@]}"); SS_MED=$(median "${ss_ms[@]}")
echo "median CPU per sample of $((2 * N)) sockets: roundtrip tcp ${RT_MED} ms (steady ${RT_ST} ms), ss -tin ${SS_MED} ms"
echo "at one sample per second: roundtrip tcp $(python3 -c "print(round($RT_MED / 10, 1))")% of one core (steady $(python3 -c "print(round($RT_ST / 10, 1))")%), ss $(python3 -c "print(round($SS_MED / 10, 1))")%"

# --trace against one loopback iperf3 stream at full speed (root): events traced, and the events the kernel
# dropped because a ring buffer was full (the issue's bar: keep up, or report the loss).
if [ "$(id -u)" = 0 ] && command -v iperf3 >/dev/null; then
    IP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    iperf3 -s -1 -B 127.0.0.1 -p "$IP" >/dev/null 2>&1 &
    sleep 0.5
    iperf3 -c 127.0.0.1 -p "$IP" -t $((SECS + 2)) -f g >"$WORK/iperf" 2>&1 &
    IPERF=$!
    sleep 1
    "$RT" tcp --per-packet --port "$IP" -t "${SECS}s" --json >"$WORK/trace.json"
    wait "$IPERF" || true
    python3 - "$WORK/trace.json" "$WORK/iperf" "$SECS" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
rate = re.findall(r"([\d.]+) Gbits/sec.*sender", open(sys.argv[2]).read())
print(f"--trace on one loopback iperf3 stream ({rate[0] if rate else '?'} Gbit/s): "
      f"{d['events']} events in {sys.argv[3]}s ({d['events'] / float(sys.argv[3]):.0f}/s), "
      f"{d['lost_events']} lost by the kernel")
PY
fi
