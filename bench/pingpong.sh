#!/usr/bin/env bash
# Ping-pong RTT on loopback, side by side: a minimal blocking C loop (bench/ref_pingpong.c), roundtrip ping and
# sockperf ping-pong --full-rtt, all against the same server, interleaved, several rounds; prints medians.
#   bash bench/pingpong.sh [ROUNDS=5] [SECONDS=3] [SIZE=64]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}; SECS=${2:-3}; SIZE=${3:-64}
command -v sockperf >/dev/null || { echo "needs sockperf (apt-get install sockperf)"; exit 1; }
cargo build --release -q
out=bench/out; mkdir -p $out
cc -O2 -o $out/ref_pingpong bench/ref_pingpong.c
RT=target/release/roundtrip

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cleanup() { kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT

median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

run_ref()  { $out/ref_pingpong "$1" 127.0.0.1 "$2" "$SIZE" "$SECS" 1 | awk '{print $1/1000, $2/1000}'; }
run_rt()   { local u=""; [ "$1" = udp ] && u=--udp
             $RT ping 127.0.0.1:"$2" $u -s "$SIZE" -t "${SECS}s" --warmup 1s --json \
               | python3 -c 'import json,sys; d=json.load(sys.stdin)["summary"]["rtt"]; print(d["p50_ns"]/1000, d["p99_ns"]/1000)'; }
run_sp()   { local t=""; [ "$1" = tcp ] && t=--tcp
             sockperf ping-pong -i 127.0.0.1 -p "$2" $t -m "$SIZE" -t "$SECS" --full-rtt 2>&1 \
               | awk '/percentile 50.000/{p50=$NF} /percentile 99.000/{p99=$NF} END{print p50, p99}'; }

for server in roundtrip sockperf; do
  for proto in tcp udp; do
    port=$(free_port)
    if [ $server = roundtrip ]; then
      $RT server --bind 127.0.0.1 --port "$port" 2>/dev/null &
    else
      t=""; [ $proto = tcp ] && t=--tcp
      sockperf server -i 127.0.0.1 -p "$port" $t >/dev/null 2>&1 &
    fi
    spid=$!; sleep 1
    : > $out/ref.$proto; : > $out/rt.$proto; : > $out/sp.$proto
    for r in $(seq 1 "$ROUNDS"); do
      # Rotate the order each round so no tool always runs first.
      case $((r % 3)) in
        0) order="ref rt sp";; 1) order="rt sp ref";; 2) order="sp ref rt";;
      esac
      for tool in $order; do "run_$tool" $proto "$port" >> $out/$tool.$proto; done
    done
    kill $spid; wait $spid 2>/dev/null || true
    ref50=$(cut -d' ' -f1 $out/ref.$proto | median); ref99=$(cut -d' ' -f2 $out/ref.$proto | median)
    rt50=$(cut -d' ' -f1 $out/rt.$proto | median);  rt99=$(cut -d' ' -f2 $out/rt.$proto | median)
    sp50=$(cut -d' ' -f1 $out/sp.$proto | median);  sp99=$(cut -d' ' -f2 $out/sp.$proto | median)
    echo "server=$server $proto ${SIZE}B, $ROUNDS rounds x ${SECS}s, medians of per-round p50 / p99 RTT (us):"
    printf "  C reference   p50 %8.2f  p99 %8.2f\n" "$ref50" "$ref99"
    printf "  roundtrip     p50 %8.2f  p99 %8.2f   (p50 %.3fx ref, p99 %.3fx ref)\n" "$rt50" "$rt99" \
      "$(echo "$rt50 / $ref50" | bc -l)" "$(echo "$rt99 / $ref99" | bc -l)"
    printf "  sockperf      p50 %8.2f  p99 %8.2f   (roundtrip p50 / sockperf p50 = %.3f)\n" "$sp50" "$sp99" \
      "$(echo "$rt50 / $sp50" | bc -l)"
  done
done
