#!/usr/bin/env bash
# Re-records the small captures the documentation's examples read (docs/captures/*.pcap): tcpdump on the loopback
# interface while a real client talks to a real server on this machine. Needs root (tcpdump), tcpdump, a built
# roundtrip (target/release/roundtrip, or ROUNDTRIP=path), and for the database captures a PostgreSQL on
# 127.0.0.1:5432 that accepts user postgres without a password (PGHOST/PGPORT/PGUSER override) with pgbench, and a
# Redis on 127.0.0.1:6379 with redis-benchmark. Each capture is a few seconds of traffic and stays under 100 KB.
#
#   bash docs/captures/record.sh            # all three
#   bash docs/captures/record.sh ping       # only pgbench | redis | ping
set -euo pipefail
cd "$(dirname "$0")"
RT=${ROUNDTRIP:-../../target/release/roundtrip}
export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
# Plain text so the statements can be named (with TLS, capture rpc times TLS records as turns).
export PGSSLMODE=disable
DB=roundtrip_captures
which=${1:-all}

# capture FILE FILTER COMMAND...: tcpdump on lo with FILTER while COMMAND runs.
capture() {
  local file=$1 filter=$2; shift 2
  local log; log=$(mktemp)
  tcpdump -i lo -s 0 -U --immediate-mode -w "$file.tmp" "$filter" 2>"$log" &
  local tp=$!
  # tcpdump takes a moment (seconds on a loaded machine) before it listens: wait for it to say so.
  for _ in $(seq 1 100); do grep -q 'listening on' "$log" && break; sleep 0.1; done
  sleep 0.2
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; cat "$log" >&2; }
  sleep 0.5
  kill -INT "$tp"; wait "$tp" || true
  rm -f "$log"
  mv "$file.tmp" "$file"
  echo "$file: $(stat -c %s "$file") bytes"
}

if [[ $which == all || $which == pgbench ]]; then
  # pgbench's select-only script (-S) on a scale-1 database: 200 transactions by one client on one
  # connection (pgbench opens a second one first to check the tables).
  psql -d postgres -Atc "select 1 from pg_database where datname='$DB'" | grep -q 1 || psql -d postgres -qc "create database $DB"
  psql -d "$DB" -Atc "select 1 from pg_tables where tablename='pgbench_accounts'" | grep -q 1 || pgbench -q -i -s 1 "$DB" >/dev/null 2>&1
  capture pgbench-select.pcap "tcp port $PGPORT" pgbench -n -S -c 1 -t 200 "$DB"
fi

if [[ $which == all || $which == redis ]]; then
  # redis-benchmark: 200 GET and 200 SET requests on one connection, no pipelining.
  capture redis-benchmark.pcap "tcp port 6379" redis-benchmark -h 127.0.0.1 -p 6379 -c 1 -n 200 -t get,set -q
fi

if [[ $which == all || $which == ping ]]; then
  # roundtrip ping against roundtrip server: 200 TCP round trips of 64 bytes, 5 ms apart.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$RT" server --bind 127.0.0.1 --port "$port" >/dev/null 2>&1 &
  sp=$!
  trap 'kill $sp 2>/dev/null || true' EXIT
  sleep 1
  capture roundtrip-ping.pcap "tcp port $port" "$RT" ping "127.0.0.1:$port" -c 200 -i 5ms --warmup 0
  kill "$sp"; wait "$sp" 2>/dev/null || true
fi
