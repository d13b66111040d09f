#!/usr/bin/env bash
# roundtrip db --link against PostgreSQL's own timing of the same dblink call, same run, interleaved rounds:
#   the far end of the link is the local PostgreSQL reached through `roundtrip proxy --rtt DELAY`;
#   rt:   `roundtrip db URL --link 'host=... port=PROXY ...' -c N` link round trip p50 (local clock_timestamp())
#   peer: psql, dblink_connect once, then N x EXPLAIN ANALYZE SELECT * FROM dblink(...): Execution Time p50
#   (and both without the proxy, for the overhead of dblink itself)
# Usage: bench/db_link.sh [ROUNDS] [CALLS] [DELAY]    (needs PostgreSQL on 127.0.0.1 with the dblink package, psql)
set -euo pipefail
ROUNDS=${1:-5}
CALLS=${2:-30}
DELAY=${3:-10ms}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=target/release/roundtrip
DB=rt_dblink_bench_$$
PSQL=(psql -h 127.0.0.1 -U postgres -At)
unset PGPASSWORD PGSSLMODE || true
work=$(mktemp -d)
proxy_pid=
cleanup() {
    [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null || true
    "${PSQL[@]}" -d test -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"${PSQL[@]}" -d test -c "CREATE DATABASE $DB" >/dev/null
"${PSQL[@]}" -d "$DB" -c "CREATE EXTENSION dblink" >/dev/null
"$RT" proxy --listen 127.0.0.1:0 --upstream 127.0.0.1:5432 --rtt "$DELAY" >"$work/proxy.out" 2>&1 &
proxy_pid=$!
for _ in $(seq 50); do grep -q "listening on" "$work/proxy.out" && break; sleep 0.1; done
PROXY=$(grep -o '127.0.0.1:[0-9]*' "$work/proxy.out" | head -1 | cut -d: -f2)
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
target() { echo "host=127.0.0.1 port=$1 dbname=test user=postgres sslmode=disable"; }

rt() { # link round trip p50, microseconds
    "$RT" db "postgres://postgres@127.0.0.1/$DB?sslmode=disable" --link "$(target "$1")" --connects 1 --rows 0 \
        -c "$CALLS" --json | jq -r '.link.round_trip.p50_ns / 1000'
}
peer() { # EXPLAIN ANALYZE Execution Time p50 of the same dblink call, microseconds
    {
        echo "SELECT dblink_connect('c', '$(target "$1")');"
        for _ in $(seq "$CALLS"); do
            echo "EXPLAIN ANALYZE SELECT * FROM dblink('c', 'SELECT clock_timestamp(), NULL::text') AS r(t timestamptz, f text);"
        done
    } | "${PSQL[@]}" -d "$DB" | awk '/Execution Time/ {print $3 * 1000}' | median
}

printf '%-6s %16s %18s | %16s %18s\n' round rt_proxy_p50_us explain_proxy_p50_us rt_direct_p50_us explain_direct_p50_us
for r in $(seq 1 "$ROUNDS"); do
    if ((r % 2)); then
        a=$(rt "$PROXY"); b=$(peer "$PROXY"); c=$(rt 5432); d=$(peer 5432)
    else
        b=$(peer "$PROXY"); a=$(rt "$PROXY"); d=$(peer 5432); c=$(rt 5432)
    fi
    printf '%-6s %16s %18s | %16s %18s\n' "$r" "$a" "$b" "$c" "$d" | tee -a "$work/rows"
done
printf '%-6s %16s %18s | %16s %18s\n' median \
    "$(awk '{print $2}' "$work/rows" | median)" "$(awk '{print $3}' "$work/rows" | median)" \
    "$(awk '{print $5}' "$work/rows" | median)" "$(awk '{print $6}' "$work/rows" | median)"
