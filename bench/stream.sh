#!/usr/bin/env bash
# One TCP stream, 128 KiB messages, loopback: `roundtrip throughput` against `roundtrip server`, side by side with
# iperf3 (its own client and server) and, with BASELINE, with the same client against an older build's server
# (e.g. the one before the event-loop rewrite: BASELINE=/path/to/old/roundtrip).
#
#   bench/stream.sh [ROUNDS (default 7)] [SECONDS per run (default 4)]
#
# Every round runs every peer once; the order rotates every round. Per run it records the sender's rate
# (Mbit/s; roundtrip's total, iperf3's sum_sent), the receiving server's CPU time per GB received (from
# /proc/PID/stat, user + system: the cost of the receive path, steadier than the rate on a shared machine) and,
# with perf installed, the server's syscalls and context switches per GB. Prints every run, then the medians and
# the ratios to iperf3.
# Needs: iperf3, python3; perf (optional, for syscalls per GB; root). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-7}
SECS=${2:-4}
for p in iperf3 python3; do
  command -v "$p" >/dev/null || { echo "bench/stream.sh: $p is not installed (apt-get install $p)" >&2; exit 1; }
done
cargo build --release -q
RT=$PWD/target/release/roundtrip
PERF=""
if command -v perf >/dev/null && [ "$(id -u)" = 0 ]; then PERF=perf; fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_tcp() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 did not open" >&2; return 1; }
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

RT_PORT=$(free_port); IP_PORT=$(free_port)
"$RT" server --bind 127.0.0.1 -p "$RT_PORT" >/dev/null 2>&1 & pids+=($!); RT_PID=$!
iperf3 -s -B 127.0.0.1 -p "$IP_PORT" >/dev/null 2>&1 & pids+=($!); IP_PID=$!
PEERS="roundtrip:$RT_PORT:$RT_PID iperf3:$IP_PORT:$IP_PID"
wait_tcp "$RT_PORT"; wait_tcp "$IP_PORT"
if [ -n "${BASELINE:-}" ]; then
  B_PORT=$(free_port)
  "$BASELINE" server --bind 127.0.0.1 -p "$B_PORT" >/dev/null 2>&1 & pids+=($!); B_PID=$!
  wait_tcp "$B_PORT"
  PEERS="$PEERS old-server:$B_PORT:$B_PID"
fi

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# rounds=$ROUNDS seconds=$SECS peers: $PEERS${BASELINE:+ (old-server: $BASELINE)}"
printf 'round\tpeer\tmbit_s\tserver_cpu_ms_per_gb\tserver_syscalls_per_gb\tserver_ctxsw_per_gb\n'
read -ra peers <<< "$PEERS"
n=${#peers[@]}
for r in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    IFS=: read -r name port pid <<< "${peers[$(( (k + r) % n ))]}"
    if [ -n "$PERF" ]; then
      $PERF stat -x, -e raw_syscalls:sys_enter,context-switches -p "$pid" -o "$WORK/perf" -- sleep $((SECS + 2)) &
      perf_pid=$!
      sleep 0.3
    fi
    t0=$(ticks "$pid")
    case $name in
      iperf3)
        iperf3 -c 127.0.0.1 -p "$port" -l 128K -t "$SECS" -J > "$WORK/out.json"
        read -r mbit bytes < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["end"]["sum_sent"]; print(d["bits_per_second"]/1e6, d["bytes"])' "$WORK/out.json") ;;
      old-server)
        # The old build answers no count request: the client runs without extensions (data messages only).
        "$RT" tp "127.0.0.1:$port" -s 128k -t "${SECS}s" --no-extensions --json > "$WORK/out.json"
        read -r mbit bytes < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["runs"][0]["total"]; print(d["mbit_per_s"], d["bytes"])' "$WORK/out.json") ;;
      *)
        "$RT" tp "127.0.0.1:$port" -s 128k -t "${SECS}s" --json > "$WORK/out.json"
        read -r mbit bytes < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["runs"][0]["total"]; print(d["mbit_per_s"], d["bytes"])' "$WORK/out.json") ;;
    esac
    sleep 0.2
    t1=$(ticks "$pid")
    sys=NA; csw=NA
    if [ -n "$PERF" ]; then
      wait "$perf_pid" || true
      read -r sys csw < <(python3 -c '
import sys
v = {}
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].isdigit():
        v[f[2]] = int(f[0])
gb = int(sys.argv[2]) / 1e9
print(round(v.get("raw_syscalls:sys_enter", 0) / gb), round(v.get("context-switches", 0) / gb))' "$WORK/perf" "$bytes")
    fi
    cpu=$(python3 -c "print(round(($t1 - $t0) * 1000 / $HZ / ($bytes / 1e9), 1))")
    printf '%s\t%s\t%.0f\t%s\t%s\t%s\n' "$r" "$name" "$mbit" "$cpu" "$sys" "$csw" | tee -a "$WORK/rows"
  done
done
python3 - "$WORK/rows" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
peers = list(dict.fromkeys(r[1] for r in rows))
med = {}
print("median\tpeer\tmbit_s\tserver_cpu_ms_per_gb\tserver_syscalls_per_gb\tserver_ctxsw_per_gb")
for p in peers:
    cols = []
    for i in range(2, 6):
        vals = [float(r[i]) for r in rows if r[1] == p and r[i] != "NA"]
        cols.append(statistics.median(vals) if vals else None)
    med[p] = cols
    print("median\t" + p + "\t" + "\t".join("NA" if c is None else f"{c:.0f}" for c in cols))
if "iperf3" in med:
    for p in peers:
        if p != "iperf3":
            print(f"{p} / iperf3: rate {med[p][0] / med['iperf3'][0]:.2f}x, server CPU per GB {med[p][1] / med['iperf3'][1]:.2f}x")
if "old-server" in med:
    print(f"roundtrip / old-server: rate {med['roundtrip'][0] / med['old-server'][0]:.2f}x, server CPU per GB {med['roundtrip'][1] / med['old-server'][1]:.2f}x")
PY
