#!/usr/bin/env bash
# Side-by-side loopback benchmark of `roundtrip throughput` / `roundtrip load` against iperf3 and sockperf.
#
#   bench/throughput.sh [ROUNDS] [SECONDS]      (defaults: 5 rounds of 5 s per measurement)
#
# Every round runs each measurement once, in the same order, so the peers see the same machine state
# (interleaved); the script prints every value and the median of each column at the end.
#   1. TCP, one stream, 128 KiB writes: `roundtrip tp -s 128k` vs `iperf3 -c -l 128K` (Mbit/s, sender side).
#   2. 64-byte messages, TCP, throughput mode: `roundtrip tp -m 64` vs `sockperf tp -m 64` (msg/s), each
#      against its own server, and roundtrip's client against the sockperf server too.
#   3. `roundtrip load --rate 100k`: schedule lag p99 and max (target: p99 < 1 ms), achieved rate; once as a
#      normal thread and once with --realtime (SCHED_FIFO sender; needs root).
# Needs: iperf3, sockperf, python3 (to read JSON). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}

for p in iperf3 sockperf python3; do
  command -v "$p" >/dev/null || { echo "bench: $p is not installed" >&2; exit 1; }
done
cargo build --release -q
RT=target/release/roundtrip

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_tcp() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 did not open" >&2; return 1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

RT_PORT=$(free_port); SP_PORT=$(free_port); IP_PORT=$(free_port)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$RT" server --bind 127.0.0.1 -p "$RT_PORT" 2>/dev/null & pids+=($!)
sockperf server --tcp -i 127.0.0.1 -p "$SP_PORT" >/dev/null 2>&1 & pids+=($!)
iperf3 -s -B 127.0.0.1 -p "$IP_PORT" >/dev/null 2>&1 & pids+=($!)
wait_tcp "$RT_PORT"; wait_tcp "$SP_PORT"; wait_tcp "$IP_PORT"

echo "# $(date -u +%FT%TZ) $(uname -r), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# rounds=$ROUNDS seconds=$SECS; roundtrip server :$RT_PORT, sockperf server :$SP_PORT, iperf3 -s :$IP_PORT"
cols="rt_128k_mbit iperf3_128k_mbit rt_64_msgs sockperf_64_msgs rt_to_sockperf_64_msgs load100k_lag_p99_us load100k_lag_max_us load100k_achieved load100k_rt_lag_p99_us load100k_rt_lag_max_us load100k_rt_achieved"
printf '%s\n' "round $cols" | tr ' ' '\t'
declare -A all
for r in $(seq 1 "$ROUNDS"); do
  a=$("$RT" tp "127.0.0.1:$RT_PORT" -s 128k -t "${SECS}s" --json | json 'round(d["runs"][0]["total"]["mbit_per_s"])')
  b=$(iperf3 -c 127.0.0.1 -p "$IP_PORT" -l 128K -t "$SECS" -J | json 'round(d["end"]["sum_sent"]["bits_per_second"]/1e6)')
  c=$("$RT" tp "127.0.0.1:$RT_PORT" -s 64 -t "${SECS}s" --json | json 'round(d["runs"][0]["total"]["messages_per_s"])')
  d=$(sockperf tp --tcp -i 127.0.0.1 -p "$SP_PORT" -m 64 -t "$SECS" 2>&1 | sed -n 's/.*Message Rate is \([0-9]*\).*/\1/p')
  e=$("$RT" tp "127.0.0.1:$SP_PORT" -s 64 -t "${SECS}s" --json | json 'round(d["runs"][0]["total"]["messages_per_s"])')
  l=$("$RT" load "127.0.0.1:$RT_PORT" --rate 100k -t "${SECS}s" --json 2>/dev/null)
  f=$(echo "$l" | json 'round(d["summary"]["schedule_lag"]["p99_ns"]/1e3,1)')
  g=$(echo "$l" | json 'round(d["summary"]["schedule_lag"]["max_ns"]/1e3,1)')
  h=$(echo "$l" | json 'round(d["summary"]["achieved_rate_per_s"])')
  l=$("$RT" load "127.0.0.1:$RT_PORT" --rate 100k -t "${SECS}s" --realtime --json 2>/dev/null)
  i=$(echo "$l" | json 'round(d["summary"]["schedule_lag"]["p99_ns"]/1e3,1)')
  j=$(echo "$l" | json 'round(d["summary"]["schedule_lag"]["max_ns"]/1e3,1)')
  k=$(echo "$l" | json 'round(d["summary"]["achieved_rate_per_s"])')
  row=("$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$i" "$j" "$k")
  printf '%s' "$r"; printf '\t%s' "${row[@]}"; echo
  i=0; for col in $cols; do all[$col]+="${row[$i]} "; i=$((i + 1)); done
done
printf 'median'
for col in $cols; do
  printf '\t%s' "$(echo "${all[$col]}" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')"
done
echo
