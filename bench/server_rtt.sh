#!/usr/bin/env bash
# The server's share of the round trip: one blocking C client (bench/ref_pingpong.c) against `roundtrip server` and
# against `sockperf server`, same machine, interleaved rounds; prints the medians of the per-round means and p50s.
#   bash bench/server_rtt.sh [ROUNDS=5] [COUNT=20000] [SIZE=64]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}; COUNT=${2:-20000}; SIZE=${3:-64}
command -v sockperf >/dev/null || { echo "needs sockperf (apt-get install sockperf)"; exit 1; }
cargo build --release -q
out=bench/out; mkdir -p $out
cc -O2 -o $out/ref_pingpong bench/ref_pingpong.c
RT=target/release/roundtrip

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

rt_port=$(free_port); sp_tcp=$(free_port); sp_udp=$(free_port)
$RT server --bind 127.0.0.1 --port "$rt_port" 2>/dev/null & pids+=($!)
sockperf server -i 127.0.0.1 -p "$sp_tcp" --tcp >/dev/null 2>&1 & pids+=($!)
sockperf server -i 127.0.0.1 -p "$sp_udp" >/dev/null 2>&1 & pids+=($!)
sleep 1

for proto in tcp udp; do
  : > $out/srv.rt.$proto; : > $out/srv.sp.$proto
  sp_port=$sp_tcp; [ $proto = udp ] && sp_port=$sp_udp
  for r in $(seq 1 "$ROUNDS"); do
    order="rt sp"; [ $((r % 2)) = 0 ] && order="sp rt"
    for s in $order; do
      port=$rt_port; [ $s = sp ] && port=$sp_port
      # Columns: p50 p99 count mean (ns), after 0.5 s of warm-up.
      $out/ref_pingpong $proto 127.0.0.1 "$port" "$SIZE" 60 0.5 "$COUNT" >> $out/srv.$s.$proto
    done
  done
  rt_mean=$(awk '{print $4/1000}' $out/srv.rt.$proto | median); sp_mean=$(awk '{print $4/1000}' $out/srv.sp.$proto | median)
  rt_p50=$(awk '{print $1/1000}' $out/srv.rt.$proto | median);  sp_p50=$(awk '{print $1/1000}' $out/srv.sp.$proto | median)
  echo "$proto ${SIZE}B, blocking C client, $ROUNDS rounds x $COUNT round trips, medians of per-round values (us):"
  printf "  against roundtrip server  mean %8.2f  p50 %8.2f\n" "$rt_mean" "$rt_p50"
  printf "  against sockperf server   mean %8.2f  p50 %8.2f\n" "$sp_mean" "$sp_p50"
  printf "  roundtrip / sockperf      mean %.3fx   p50 %.3fx   (per round: %s)\n" \
    "$(echo "$rt_mean / $sp_mean" | bc -l)" "$(echo "$rt_p50 / $sp_p50" | bc -l)" \
    "$(paste -d' ' <(awk '{print $4}' $out/srv.rt.$proto) <(awk '{print $4}' $out/srv.sp.$proto) | awk '{printf "%.2f ", $1/$2}')"
done
