#!/usr/bin/env bash
# Benchmark of the TCP time-sequence graph: `roundtrip capture timeline --svg/--report` beside
# `tcptrace -S` (tcptrace's time-sequence graphs, xplot files) on a capture of about PACKETS packets.
#
# Records its own capture: one iperf3 connection in a private network namespace whose loopback has a 1500-byte
# MTU and an nftables rule that drops DROP_PER_MILLE of every thousand full-sized data segments on input,
# after tcpdump saw them leave (so the connection has retransmissions and SACK blocks, as a lossy path gives), paced at RATE, written by
# `tcpdump -s 96` until it holds PACKETS packets. Then, interleaved, ROUNDS times each: roundtrip drawing the
# data connection (-q, --svg and --report), roundtrip with --json as well, and tcptrace -S; prints the median
# wall time, the peak RSS (/usr/bin/time -v) and the size of every output. Deletes its files at the end.
#
# Needs root (namespace, tcpdump), iperf3, tcpdump, tcptrace, nft, ethtool, /usr/bin/time. Usage:
#   bench/timeline.sh                       # 1M packets, 5 rounds
#   PACKETS=200000 ROUNDS=3 bench/timeline.sh
set -euo pipefail

ROUNDS=${ROUNDS:-5}
PACKETS=${PACKETS:-1000000}
RATE=${RATE:-400M}
DROP_PER_MILLE=${DROP_PER_MILLE:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/release/roundtrip

for tool in tcpdump iperf3 tcptrace nft ip ethtool /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench/timeline.sh: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "bench/timeline.sh: needs root (network namespace, tcpdump)" >&2; exit 1; }

(cd "$ROOT" && cargo build --release --quiet)
WORK=$(mktemp -d /tmp/roundtrip-timeline-bench.XXXXXX)
NS=rttlbench$$
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

ip netns add "$NS"
ip netns exec "$NS" ip link set lo mtu 1500 up
# One skb per segment, so that the drop rule drops single segments (loopback offloads otherwise).
ip netns exec "$NS" ethtool -K lo tso off gso off >/dev/null 2>&1 || true
ip netns exec "$NS" nft -f - <<EOF
table inet rtbench {
  chain in {
    type filter hook input priority 0;
    tcp dport 5201 meta length > 1400 numgen random mod 1000 < $DROP_PER_MILLE drop
  }
}
EOF
FILE=$WORK/bulk.pcap
ip netns exec "$NS" iperf3 -s -1 >/dev/null 2>&1 &
PIDS+=($!)
ip netns exec "$NS" tcpdump -i lo -n -s 96 -B 262144 -w "$FILE" "tcp port 5201" 2>"$WORK/tcpdump.log" &
TD=$!
PIDS+=("$TD")
sleep 1.5
ip netns exec "$NS" iperf3 -c 127.0.0.1 -b "$RATE" -t 600 >/dev/null 2>&1 &
CLI=$!
PIDS+=("$CLI")
# About 112 bytes a packet at -s 96 in pcap (16-byte record header, 96 captured).
deadline=$((SECONDS + 600))
while [ "$(stat -c %s "$FILE" 2>/dev/null || echo 0)" -lt $((PACKETS * 112)) ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
kill "$CLI" 2>/dev/null || true
wait "$CLI" 2>/dev/null || true
sleep 1.5
kill -INT "$TD"
wait "$TD" 2>/dev/null || true
cat "$FILE" >/dev/null

packets=$("$BIN" capture stats "$FILE" --json | sed -n 's/.*"packets_read": \([0-9]*\).*/\1/p' | head -1)
flow=$("$BIN" capture flows "$FILE" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
f = max(d["flows"], key=lambda f: f["client_to_server"]["payload_bytes"] + f["server_to_client"]["payload_bytes"])
print(f["client"] + "-" + f["server"])')
echo "capture: $(stat -c %s "$FILE") bytes, $packets packets ($(grep -h 'dropped by kernel' "$WORK/tcpdump.log")); data connection $flow"

declare -A TIMES RSS
run() { # name command...
    local name=$1
    shift
    local t0 t1
    t0=$(date +%s.%N)
    /usr/bin/time -v -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/err.txt" || { cat "$WORK/err.txt" >&2; exit 1; }
    t1=$(date +%s.%N)
    TIMES[$name]+="$(echo "$t1 - $t0" | bc) "
    RSS[$name]+="$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/time.txt") "
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

mkdir -p "$WORK/tcptrace"
for r in $(seq 1 "$ROUNDS"); do
    run "roundtrip --svg --report" "$BIN" capture timeline "$FILE" --flow "$flow" -q --svg "$WORK/seq.svg" --report "$WORK/seq.html"
    run "roundtrip --svg --report --json" sh -c "'$BIN' capture timeline '$FILE' --flow '$flow' --json --svg '$WORK/seq2.svg' --report '$WORK/seq2.html' > '$WORK/seq.json'"
    run "tcptrace -S" sh -c "cd '$WORK/tcptrace' && rm -f *.xpl && tcptrace -n -S '$FILE'"
done
printf '%-34s %10s %12s\n' tool "median s" "peak RSS MB"
for name in "roundtrip --svg --report" "roundtrip --svg --report --json" "tcptrace -S"; do
    printf '%-34s %10.2f %12.1f\n' "$name" "$(echo "${TIMES[$name]}" | median)" "$(echo "$(echo "${RSS[$name]}" | median) / 1024" | bc -l)"
done
echo "outputs: seq.svg $(stat -c %s "$WORK/seq.svg") bytes, seq.html $(stat -c %s "$WORK/seq.html") bytes, --json $(stat -c %s "$WORK/seq.json") bytes; tcptrace -S: $(ls "$WORK/tcptrace" | wc -l) xplot files, $(du -cb "$WORK"/tcptrace/*.xpl | tail -1 | cut -f1) bytes"
"$BIN" capture timeline "$FILE" --flow "$flow" -q | tail -2
