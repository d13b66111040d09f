#!/usr/bin/env bash
# `roundtrip ping -i` on its open-loop schedule through `roundtrip proxy --rtt 40ms` on loopback: the run time of
# 100 pings at -i 10ms (TCP and UDP) and of 300 UDP pings at -i 10ms with the proxy's --loss, beside what a closed
# loop (each send waiting for the answer or --timeout, ping before the open loop) takes for the same round trips
# and losses: sent x median RTT + lost x timeout, or, with BASELINE=/path/to/old/roundtrip, that build measured in
# the same rounds. Several rounds, interleaved; prints medians.
#   bash bench/ping_pacing.sh [ROUNDS=3] [LOSS=1.5%]   (the proxy drops LOSS of the datagrams each way: ~3% of pings)
#   RT=target/debug/roundtrip bash bench/ping_pacing.sh     # an existing build instead of a release build
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${1:-3}; LOSS=${2:-1.5%}
if [ -z "${RT:-}" ]; then cargo build --release -q; RT=target/release/roundtrip; fi
out=bench/out; mkdir -p $out

cleanup() { kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

port=$(free_port)
$RT server --bind 127.0.0.1 --port "$port" >/dev/null 2>&1 &
sleep 1
# proxy NAME ARGS...: starts a proxy in front of the server, sets $NAME to its port.
proxy() {
  local name=$1; shift
  $RT proxy --listen 127.0.0.1:0 --upstream 127.0.0.1:"$port" "$@" > $out/pacing_proxy_$name.txt 2>&1 &
  for _ in $(seq 50); do grep -q 'listening on' $out/pacing_proxy_$name.txt 2>/dev/null && break; sleep 0.1; done
  printf -v "$name" '%s' "$(grep -o 'listening on 127.0.0.1:[0-9]*' $out/pacing_proxy_$name.txt | cut -d: -f2)"
}
proxy TCP --rtt 40ms
proxy UDP --udp --rtt 40ms
proxy LOSSY --udp --rtt 40ms --loss "$LOSS"

# run BIN PORT ARGS...: one ping; prints wall seconds, measured seconds, sent, lost, p50 RTT seconds.
run() {
  local bin=$1 p=$2; shift 2
  local t0 t1
  t0=$(date +%s.%N)
  $bin ping 127.0.0.1:"$p" --warmup 0 --timeout 2s --json "$@" > $out/pacing_run.json || true
  t1=$(date +%s.%N)
  python3 -c '
import json, sys
d = json.load(open(sys.argv[3]))["summary"]
wall = float(sys.argv[2]) - float(sys.argv[1])
print("%.3f %.3f %d %d %.6f" % (wall, d["elapsed_s"], d["sent"], d["lost"], d["rtt"]["p50_ns"] / 1e9))
' "$t0" "$t1" $out/pacing_run.json
}

cases="tcp100 udp100 lossy300"
args_tcp100="$TCP --count 100 -i 10ms"; args_udp100="$UDP --udp --count 100 -i 10ms"; args_lossy300="$LOSSY --udp --count 300 -i 10ms"
tools="rt"; [ -n "${BASELINE:-}" ] && tools="rt base"
for c in $cases; do for t in $tools; do : > $out/pacing.$c.$t; done; done
for r in $(seq 1 "$ROUNDS"); do
  for c in $cases; do
    order=$tools; [ $((r % 2)) = 0 ] && [ -n "${BASELINE:-}" ] && order="base rt"
    for t in $order; do
      bin=$RT; [ $t = base ] && bin=$BASELINE
      eval "a=\$args_$c"
      # shellcheck disable=SC2086
      run "$bin" $a >> $out/pacing.$c.$t
    done
  done
done

echo "ping -i 10ms through proxy --rtt 40ms (loss case: --loss $LOSS), --timeout 2s, $ROUNDS rounds, medians:"
for c in $cases; do
  for t in $tools; do
    f=$out/pacing.$c.$t
    wall=$(cut -d' ' -f1 $f | median); el=$(cut -d' ' -f2 $f | median); sent=$(cut -d' ' -f3 $f | median)
    lost=$(cut -d' ' -f4 $f | median); p50=$(cut -d' ' -f5 $f | median)
    closed=$(echo "$sent * $p50 + $lost * 2" | bc -l)
    name=roundtrip; [ $t = base ] && name=baseline
    printf "  %-9s %-8s wall %7.3f s  measured %7.3f s  sent %4s  lost %3s  p50 %6.2f ms  closed loop for these: %7.3f s\n" \
      "$c" "$name" "$wall" "$el" "$sent" "$lost" "$(echo "$p50 * 1000" | bc -l)" "$closed"
  done
done
