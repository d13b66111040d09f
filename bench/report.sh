#!/usr/bin/env bash
# Report rendering speed and size for a huge full log: `roundtrip report RESULT.json --full-log LOG.csv -o F.html`
# with a 10-million-row full log, several rounds; prints the median wall time, peak memory and file sizes.
# The document comes from a real ping against a local roundtrip server; the 10M-row log is synthetic (a real run of
# 10M round trips would take minutes), deterministic, with a heavy tail and two planted extremes that the drawn
# chart must still show.
#   bash bench/report.sh [ROUNDS=5] [ROWS=10000000]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}; ROWS=${2:-10000000}
cargo build --release -q
out=bench/out/report; mkdir -p $out
RT=target/release/roundtrip

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cleanup() { kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

port=$(free_port)
$RT server -p "$port" >/dev/null 2>&1 &
sleep 0.5
$RT ping 127.0.0.1:"$port" -t 2s --warmup 200ms --json > $out/run.json

log=$out/full-$ROWS.csv
if [ ! -s "$log" ]; then
  echo "generating $ROWS rows into $log ..."
  # One round trip every 1us of send time; RTT 20us plus a Pareto-like tail; extremes: 7us at row 1234567,
  # 987.654321ms at row ROWS*3/4.
  mawk -v n="$ROWS" 'BEGIN{
    srand(42); print "seq,send_ns,recv_ns,rtt_ns,server_ns";
    lo = 1234567; hi = int(n*3/4);
    for (i = 1; i <= n; i++) {
      s = i * 1000;
      u = rand(); r = int(20000 / ((1 - u) ^ 0.4));
      if (i == lo) r = 7000; if (i == hi) r = 987654321;
      printf "%.0f,%.0f,%.0f,%.0f,700\n", i, s, s + r, r }
  }' > "$log"
fi
echo "full log: $(wc -l < "$log") lines, $(du -m "$log" | cut -f1) MB"

times=(); rss=()
for i in $(seq 1 "$ROUNDS"); do
  /usr/bin/time -f "%e %M" -o $out/time.txt $RT report $out/run.json --full-log "$log" -o $out/report.html \
    --svg $out/rtt-time.svg --chart rtt-time 2>/dev/null
  read -r t m < $out/time.txt
  times+=("$t"); rss+=("$m")
  echo "round $i: ${t}s, peak RSS ${m} KiB"
done
echo "median wall time: $(printf '%s\n' "${times[@]}" | median)s over $ROUNDS rounds"
echo "median peak RSS: $(printf '%s\n' "${rss[@]}" | median) KiB"
echo "report.html: $(stat -c %s $out/report.html) bytes; rtt-time.svg: $(stat -c %s $out/rtt-time.svg) bytes"
# The planted extremes are drawn: the y axis reaches 987ms and 7us (log axis from 5us to 1s).
grep -o '<g class="tick y">[^/]*/><text[^>]*>[^<]*' $out/rtt-time.svg | sed 's/.*>//' | tr '\n' ' '; echo
