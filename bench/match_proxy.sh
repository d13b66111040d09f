#!/usr/bin/env bash
# Benchmark of `roundtrip capture match` across a TCP-terminating box (issue 16 part 4): Redis traffic
# (redis-benchmark, 20 connections) through `roundtrip proxy` on loopback, tcpdump on the proxy's port (client
# side) and on Redis's port (server side). No sequence number is common to the two files, so every request is
# paired by content (and order). Times, interleaved rounds, medians:
#   match-proxy: capture match client.pcap server.pcap (content pairing, connection pairs by votes)
#   match-same:  capture match server.pcap server.pcap (TCP sequence numbers: the old path, for reference)
#   rpc:         capture rpc client.pcap (reading and parsing alone)
# Prints the pairs found by each method once.
#
# Usage: bench/match_proxy.sh [ROUNDS] [REQUESTS] (root for tcpdump; needs redis-server, redis-benchmark,
# tcpdump). The files are deleted at the end.
set -euo pipefail
ROUNDS=${1:-5}
REQUESTS=${2:-200000}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
WORK=$(mktemp -d /tmp/rt-match-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -n "${KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
secs() {
    /usr/bin/time -f "%e" -o "$WORK/time" "$@" >/dev/null 2>&1 || true
    cat "$WORK/time"
}

RPORT=$((20000 + $$ % 20000))
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$RT" proxy --listen 127.0.0.1:0 --upstream "127.0.0.1:$RPORT" >"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do grep -q "listening on" "$WORK/proxy.log" && break; sleep 0.1; done
PPORT=$(grep -oE 'listening on 127.0.0.1:[0-9]+' "$WORK/proxy.log" | grep -oE '[0-9]+$')
tcpdump -i lo -s 0 -B 65536 -U -w "$WORK/client.pcap" "tcp port $PPORT" 2>"$WORK/td1.log" &
PIDS+=($!)
TD1=$!
tcpdump -i lo -s 0 -B 65536 -U -w "$WORK/server.pcap" "tcp port $RPORT" 2>"$WORK/td2.log" &
PIDS+=($!)
TD2=$!
sleep 1
redis-benchmark -p "$PPORT" -c 20 -n "$REQUESTS" -d 100 -t set,get -q >/dev/null
sleep 1
kill -INT "$TD1" "$TD2"
wait "$TD1" "$TD2" 2>/dev/null || true
ls -l "$WORK"/*.pcap | awk '{print $5, $9}'
"$RT" capture match "$WORK/client.pcap" "$WORK/server.pcap" | grep -E "matched|paired by|verdict" || true

for _ in $(seq "$ROUNDS"); do
    secs "$RT" capture match "$WORK/client.pcap" "$WORK/server.pcap" >>"$WORK/t.proxy"
    secs "$RT" capture match "$WORK/server.pcap" "$WORK/server.pcap" >>"$WORK/t.same"
    secs "$RT" capture rpc "$WORK/client.pcap" >>"$WORK/t.rpc"
done
printf "%-12s %8s\n" what "median s"
printf "%-12s %8s\n" match-proxy "$(median <"$WORK/t.proxy")"
printf "%-12s %8s\n" match-same "$(median <"$WORK/t.same")"
printf "%-12s %8s\n" rpc "$(median <"$WORK/t.rpc")"
