#!/usr/bin/env bash
# Abuse, measured: 10,000 slowloris connections against `roundtrip server` (and, in abuse_proxy, 10,000 idle
# connections through `roundtrip proxy`): the process's RSS and threads under attack, and a well-behaved
# `roundtrip ping` beside the same ping without the attack.
#   bash bench/abuse.sh [server|proxy|all=all] [CONNECTIONS=10000] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}; CONNS=${2:-10000}; ROUNDS=${3:-3}
# Each connection is a file descriptor on both ends (the attacker runs here too).
ulimit -n 200000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
cargo build --release -q
RT=$PWD/target/release/roundtrip
out=bench/out; mkdir -p $out
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
rss_mb() { awk '/VmRSS/{printf "%.1f", $2/1024}' /proc/"$1"/status; }
threads() { awk '/Threads/{print $2}' /proc/"$1"/status; }
# p50 of a 3 s ping, in us.
ping_p50() { $RT ping "$1" -t 3s --warmup 500ms --json \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"]["rtt"]["p50_ns"]/1000)'; }

abuse_server() {
  local port; port=$(free_port)
  $RT server --bind 127.0.0.1 --port "$port" 2>$out/abuse-server.log & local srv=$!; pids+=($srv)
  sleep 1
  : > $out/abuse.before; : > $out/abuse.during; : > $out/abuse.after
  for _ in $(seq 1 "$ROUNDS"); do ping_p50 127.0.0.1:"$port" >> $out/abuse.before; done
  local rss0; rss0=$(rss_mb $srv)
  # From 250 source addresses (40 each, under --max-per-address 256), so every connection is held.
  python3 bench/slowloris.py 127.0.0.1 "$port" "$CONNS" 5 40 > $out/slowloris.log & local atk=$!; pids+=($atk)
  for _ in $(seq 1 120); do
    sleep 1
    local open; open=$(tail -1 $out/slowloris.log | awk '{print $2}')
    [ "${open:-0}" -ge "$CONNS" ] && break
  done
  local peak=0 peak_threads=0 peak_clients=0
  for _ in $(seq 1 "$ROUNDS"); do
    ping_p50 127.0.0.1:"$port" >> $out/abuse.during
    local r; r=$(rss_mb $srv); peak=$(echo "if ($r > $peak) $r else $peak" | bc)
    local t; t=$(threads $srv); [ "$t" -gt "$peak_threads" ] && peak_threads=$t
    local c; c=$(ss -Htn state established "( sport = :$port )" | wc -l); [ "$c" -gt "$peak_clients" ] && peak_clients=$c
  done
  local atk_line; atk_line=$(tail -1 $out/slowloris.log)
  kill $atk; wait $atk 2>/dev/null || true
  sleep 12  # the held connections reach their deadline and go
  for _ in $(seq 1 "$ROUNDS"); do ping_p50 127.0.0.1:"$port" >> $out/abuse.after; done
  local dropped; dropped=$(grep -c "message deadline\|did not complete" $out/abuse-server.log || true)
  echo "roundtrip server under $CONNS slowloris connections (256 KiB announced, 1 byte / 5 s, from 250 addresses):"
  echo "  RSS before ${rss0} MB, peak during ${peak} MB; threads peak ${peak_threads}; server-side connections seen ${peak_clients}"
  echo "  attacker: $atk_line (dropped = closed by the server's 10 s message deadline, then reopened)"
  printf "  ping p50 (us, median of %s x 3 s): before %s, during attack %s, after %s\n" "$ROUNDS" \
    "$(median < $out/abuse.before)" "$(median < $out/abuse.during)" "$(median < $out/abuse.after)"
  echo "  deadline log lines (rate-limited, one per second with counts): $dropped"
  kill $srv; wait $srv 2>/dev/null || true
  # The same flood from one address (127.0.0.2; the ping comes from 127.0.0.1): all but --max-per-address are
  # refused at once.
  port=$(free_port)
  $RT server --bind 127.0.0.1 --port "$port" 2>$out/abuse-server1.log & srv=$!; pids+=($srv)
  sleep 1
  python3 bench/slowloris.py 127.0.0.1 "$port" "$CONNS" 5 0 > $out/slowloris1.log & atk=$!; pids+=($atk)
  sleep 8
  local p50; p50=$(ping_p50 127.0.0.1:"$port")
  local held; held=$(ss -Htn state established "( sport = :$port )" | wc -l)
  local refused; refused=$(python3 -c '
import re, sys
n = 0
for l in open(sys.argv[1]):
    if "--max-per-address" not in l: continue
    m = re.match(r"\.\.\. (\d+) more", l)
    if m: n += int(m.group(1)); continue
    n += 1
    m = re.search(r"\(and (\d+) more", l)
    if m: n += int(m.group(1))
print(n)' $out/abuse-server1.log)
  echo "  from one address: held ${held} connections (--max-per-address), refused at once about ${refused} attempts; server RSS $(rss_mb $srv) MB, threads $(threads $srv), ping p50 ${p50} us"
  kill $atk $srv; wait $atk $srv 2>/dev/null || true
}

# 10,000 idle connections through `roundtrip proxy` (in front of a roundtrip server that admits them all):
# the proxy's RSS and threads, a ping through the proxy before / during / after; then the same flood against
# the default --max-clients (4096): the rest are refused at once.
abuse_proxy() {
  local sport pport; sport=$(free_port); pport=$(free_port)
  $RT server --bind 127.0.0.1 --port "$sport" --max-clients 30000 --max-per-address 30000 2>/dev/null & local srv=$!; pids+=($srv)
  local max=$((CONNS + 100))
  $RT proxy --listen 127.0.0.1:"$pport" --upstream 127.0.0.1:"$sport" --max-clients "$max" >/dev/null 2>$out/abuse-proxy.log & local prx=$!; pids+=($prx)
  sleep 1
  : > $out/abusep.before; : > $out/abusep.during; : > $out/abusep.after
  for _ in $(seq 1 "$ROUNDS"); do ping_p50 127.0.0.1:"$pport" >> $out/abusep.before; done
  local rss0 thr0; rss0=$(rss_mb $prx); thr0=$(threads $prx)
  python3 bench/idle_conns.py 127.0.0.1 "$pport" "$CONNS" > $out/idle.log & local atk=$!; pids+=($atk)
  for _ in $(seq 1 120); do
    sleep 1
    local held; held=$(ss -Htn state established "( sport = :$pport )" | wc -l)
    [ "$held" -ge "$CONNS" ] && break
  done
  sleep 2
  local peak=0 peak_threads=0
  for _ in $(seq 1 "$ROUNDS"); do
    ping_p50 127.0.0.1:"$pport" >> $out/abusep.during
    local r; r=$(rss_mb $prx); peak=$(echo "if ($r > $peak) $r else $peak" | bc)
    local t; t=$(threads $prx); [ "$t" -gt "$peak_threads" ] && peak_threads=$t
  done
  local held; held=$(ss -Htn state established "( sport = :$pport )" | wc -l)
  kill $atk; wait $atk 2>/dev/null || true
  sleep 3
  for _ in $(seq 1 "$ROUNDS"); do ping_p50 127.0.0.1:"$pport" >> $out/abusep.after; done
  echo "roundtrip proxy --max-clients $max under $CONNS idle connections (relayed to a roundtrip server):"
  echo "  held ${held}; RSS before ${rss0} MB, peak during ${peak} MB; threads before ${thr0}, peak ${peak_threads}; after: RSS $(rss_mb $prx) MB, threads $(threads $prx)"
  printf "  ping p50 through the proxy (us, median of %s x 3 s): before %s, during %s, after %s\n" "$ROUNDS" \
    "$(median < $out/abusep.before)" "$(median < $out/abusep.during)" "$(median < $out/abusep.after)"
  kill $prx; wait $prx 2>/dev/null || true
  # As shipped: the default --max-clients turns the rest away at once.
  pport=$(free_port)
  $RT proxy --listen 127.0.0.1:"$pport" --upstream 127.0.0.1:"$sport" >/dev/null 2>$out/abuse-proxy2.log & prx=$!; pids+=($prx)
  sleep 1
  python3 bench/idle_conns.py 127.0.0.1 "$pport" "$CONNS" > $out/idle2.log & atk=$!; pids+=($atk)
  sleep 10
  local p50; p50=$(ping_p50 127.0.0.1:"$pport" || echo refused)
  held=$(ss -Htn state established "( sport = :$pport )" | wc -l)
  echo "  default --max-clients: held ${held}, RSS $(rss_mb $prx) MB, threads $(threads $prx), ping p50 ${p50} us (the ping is refused when it comes over the limit); log: $(grep -c refused $out/abuse-proxy2.log) rate-limited refusal lines"
  kill $atk $prx $srv; wait $atk $prx $srv 2>/dev/null || true
}

case $WHAT in
  server) abuse_server ;;
  proxy) abuse_proxy ;;
  all) abuse_server; if declare -F abuse_proxy >/dev/null; then abuse_proxy; fi ;;
  *) echo "usage: bash bench/abuse.sh [server|proxy|all] [CONNECTIONS] [ROUNDS]" >&2; exit 2 ;;
esac
