#!/usr/bin/env bash
# Benchmark of `roundtrip capture rpc` on TLS: a PostgreSQL session over TLS 1.3 (the local server, ssl = on)
# with N queries, recorded here with tcpdump and the client's key log; timed, interleaved over ROUNDS rounds
# (medians): `capture rpc` without keys (turns of TLS records), `capture rpc --keylog` (decrypted, statements
# named), and `tshark -o tls.keylog_file:...` decrypting and dissecting the same file.
#
# Usage: bench/tls.sh [ROUNDS] [N] (as root for tcpdump; needs PostgreSQL on 127.0.0.1:5432 with ssl = on,
# tcpdump, tshark, python3).
set -euo pipefail
ROUNDS=${1:-5}
N=${2:-20000}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
WORK=$(mktemp -d /tmp/rt-tls-bench.XXXXXX)
TCPDUMP_PID=""
cleanup() {
    [ -n "$TCPDUMP_PID" ] && kill "$TCPDUMP_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
secs() { # wall time of a command, seconds
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || true
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

PCAP=$WORK/pg-tls.pcap
KEYS=$WORK/pg-tls.keys
coproc CLIENT { python3 tests/pg_tls_client.py 5432 "$N" --keylog "$KEYS"; }
read -r -u "${CLIENT[0]}" port
tcpdump -i lo -s 0 -B 65536 -U -w "$PCAP" "tcp port $port" 2>"$WORK/tcpdump.log" &
TCPDUMP_PID=$!
sleep 1.5
echo go >&"${CLIENT[1]}"
read -r -u "${CLIENT[0]}" version
cat <&"${CLIENT[0]}" >/dev/null || true
sleep 2.5
kill -INT "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2>/dev/null || true; TCPDUMP_PID=""
grep -E "captured|dropped" "$WORK/tcpdump.log" || true
MB=$(echo "$(stat -c %s "$PCAP") / 1000000" | bc -l)
printf 'PostgreSQL over %s, %d queries, %.1f MB capture; %d rounds, interleaved\n' "$version" "$N" "$MB" "$ROUNDS"
"$RT" capture rpc "$PCAP" --top 0 2>&1 | head -3
"$RT" capture rpc "$PCAP" --top 0 --keylog "$KEYS" 2>&1 | head -4
printf 'tshark decrypts %s simple queries\n' \
    "$(tshark -r "$PCAP" -o "tls.keylog_file:$KEYS" -Y 'pgsql.type == "Simple query"' -T fields -e frame.number 2>/dev/null | wc -l)"

: >"$WORK/turns"; : >"$WORK/keyed"; : >"$WORK/tshark"
for _ in $(seq "$ROUNDS"); do
    secs "$RT" capture rpc "$PCAP" --json >>"$WORK/turns"
    secs "$RT" capture rpc "$PCAP" --json --keylog "$KEYS" >>"$WORK/keyed"
    secs tshark -r "$PCAP" -o "tls.keylog_file:$KEYS" -q -z io,stat,0,pgsql.type >>"$WORK/tshark"
done
t1=$(median <"$WORK/turns"); t2=$(median <"$WORK/keyed"); t3=$(median <"$WORK/tshark")
printf 'capture rpc (turns, no keys):      median %.3f s = %.0f MB/s\n' "$t1" "$(echo "$MB / $t1" | bc -l)"
printf 'capture rpc --keylog (decrypted):  median %.3f s = %.0f MB/s\n' "$t2" "$(echo "$MB / $t2" | bc -l)"
printf 'tshark -o tls.keylog_file, same:   median %.3f s = %.0f MB/s (%.1fx slower than --keylog)\n' \
    "$t3" "$(echo "$MB / $t3" | bc -l)" "$(echo "$t3 / $t2" | bc -l)"
uptime
