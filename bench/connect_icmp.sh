#!/usr/bin/env bash
# Benchmark: `roundtrip connect` against `nping --tcp-connect` and `hping3 -S`, and `roundtrip icmp` against
# `fping`, on loopback. Same run, tools interleaved (the order rotates every round), ROUNDS rounds of N probes
# each, N probes INTERVAL apart; the figure per tool is the median over rounds of each round's median.
#
# Needs root (hping3 and raw sockets), nping (nmap), hping3, fping, python3. Usage:
#   sudo bench/connect_icmp.sh            # ROUNDS=7 N=100 INTERVAL_MS=10
#   ROUNDS=9 N=200 sudo -E bench/connect_icmp.sh
#
# What each tool reports, and its resolution:
#   roundtrip connect        connect() bracketed by the clock: the whole handshake (on loopback the kernel runs
#                            SYN, SYN-ACK and ACK inside that one system call). Median of N, ns resolution.
#   roundtrip connect --raw  raw SYN sent -> SYN-ACK received (kernel receive timestamp), answered with RST.
#   nping --tcp-connect      prints only min/avg/max (us resolution): the avg is used, compared with our mean.
#   hping3 -S                rtt per reply with 0.1 ms resolution (libpcap): median of those.
#   fping -C N               per-echo RTT (kernel receive timestamps, 10 ns printed): median.
#   roundtrip icmp           per-echo RTT (kernel receive timestamps): median.
set -euo pipefail

ROUNDS=${ROUNDS:-7}
N=${N:-100}
INTERVAL_MS=${INTERVAL_MS:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
RT=${RT_BIN:-$here/target/release/roundtrip}

if [[ $(id -u) != 0 ]]; then
    echo "connect_icmp.sh: needs root (hping3 -S and raw sockets); run it with sudo" >&2
    exit 1
fi
for t in nping hping3 fping python3; do
    command -v "$t" >/dev/null || { echo "connect_icmp.sh: $t is not installed" >&2; exit 1; }
done
if [[ -z ${RT_BIN:-} ]]; then
    (cd "$here" && cargo build --release --quiet)
fi

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$RT" server --bind 127.0.0.1 --port "$PORT" --tcp-only 2>/dev/null &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    "$RT" connect "127.0.0.1:$PORT" -c 1 >/dev/null 2>&1 && break
    sleep 0.1
done

interval="${INTERVAL_MS}ms"
# "median/mean" in microseconds from a roundtrip --json document; $1 is the summary's key.
json_us() { python3 -c "import json,sys; s=json.load(sys.stdin)['$1']; print(f\"{s['p50_ns']/1e3:.1f}/{s['mean_ns']/1e3:.1f}\")"; }

rt_connect() { "$RT" connect "127.0.0.1:$PORT" -c "$N" -i "$interval" --json | json_us handshake; }
rt_raw()     { "$RT" connect "127.0.0.1:$PORT" -c "$N" -i "$interval" --raw --json | json_us handshake; }
# Reference: a blocking connect() timed around the call in Python, to show what the system call costs here.
py_connect() {
    python3 - "$PORT" "$N" "$INTERVAL_MS" <<'PY'
import socket, statistics, sys, time
port, n, gap = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) / 1000
v = []
for _ in range(n):
    s = socket.socket()
    t = time.perf_counter_ns()
    s.connect(("127.0.0.1", port))
    v.append(time.perf_counter_ns() - t)
    s.close()
    time.sleep(gap)
print(f"{statistics.median(v)/1e3:.1f}/{statistics.mean(v)/1e3:.1f}")
PY
}
nping_avg()  {
    nping --tcp-connect -p "$PORT" -c "$N" --delay "$interval" 127.0.0.1 2>/dev/null |
        python3 -c 'import re,sys; t=sys.stdin.read(); print("%.1f" % (float(re.search(r"Avg rtt: ([0-9.]+)ms", t).group(1))*1000))'
}
hping_med()  {
    hping3 -S -p "$PORT" -c "$N" -i "u$((INTERVAL_MS * 1000))" 127.0.0.1 2>/dev/null |
        python3 -c 'import re,sys,statistics; v=[float(x) for x in re.findall(r"rtt=([0-9.]+) ms", sys.stdin.read())]; print("%.1f" % (statistics.median(v)*1000))'
}
rt_icmp()    { "$RT" icmp 127.0.0.1 -c "$N" -i "$interval" --json | json_us rtt; }
fping_med()  {
    fping -C "$N" -p "$INTERVAL_MS" -q 127.0.0.1 2>&1 |
        python3 -c 'import sys,statistics; v=[float(x) for x in sys.stdin.read().split(":",1)[1].split() if x != "-"]; print("%.1f" % (statistics.median(v)*1000))'
}

tools=(rt_connect rt_raw nping_avg hping_med py_connect rt_icmp fping_med)
declare -A results
echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg); rounds=$ROUNDS N=$N interval=$interval port=$PORT"
echo "# per round: tool=median_us, or median_us/mean_us where the tool gives both"
for r in $(seq "$ROUNDS"); do
    line="round $r:"
    k=$(( (r - 1) % ${#tools[@]} ))
    for i in $(seq 0 $(( ${#tools[@]} - 1 ))); do
        t=${tools[$(( (i + k) % ${#tools[@]} ))]}
        v=$($t)
        results[$t]+="$v;"
        line+=" $t=$v"
    done
    echo "$line"
done

python3 - "${results[rt_connect]}" "${results[rt_raw]}" "${results[nping_avg]}" "${results[hping_med]}" \
    "${results[rt_icmp]}" "${results[fping_med]}" "${results[py_connect]}" <<'PY'
import statistics, sys
def parse(s):
    return [[float(v) for v in x.split("/")] for x in s.split(";") if x.strip()]
rt_c, rt_r, np_, hp, rt_i, fp, py = (parse(a) for a in sys.argv[1:])
med = lambda rows, i=0: statistics.median(r[i] for r in rows)
print()
print(f"{'tool':<34}{'median of round medians':>26}{'median of round means':>24}")
print(f"{'roundtrip connect (connect())':<34}{med(rt_c):>23.1f} us{med(rt_c,1):>21.1f} us")
print(f"{'roundtrip connect --raw':<34}{med(rt_r):>23.1f} us{med(rt_r,1):>21.1f} us")
print(f"{'nping --tcp-connect (avg only)':<34}{'-':>26}{med(np_):>21.1f} us")
print(f"{'hping3 -S (0.1 ms resolution)':<34}{med(hp):>23.1f} us{'-':>24}")
print(f"{'python3 blocking connect()':<34}{med(py):>23.1f} us{med(py,1):>21.1f} us")
print(f"{'roundtrip icmp':<34}{med(rt_i):>23.1f} us{med(rt_i,1):>21.1f} us")
print(f"{'fping':<34}{med(fp):>23.1f} us{'-':>24}")
print()
print(f"icmp: roundtrip / fping = {med(rt_i)/med(fp):.2f}")
print(f"raw SYN: roundtrip --raw / hping3 -S = {med(rt_r)/max(med(hp),1e-9):.2f} (hping3 rounds to 0.1 ms)")
print(f"connect(): roundtrip mean / nping avg = {med(rt_c,1)/med(np_):.2f}")
PY
