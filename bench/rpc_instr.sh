#!/usr/bin/env bash
# Instructions per request of `roundtrip capture rpc` on a pgbench -S capture (issue 21's per-request cost),
# counted by callgrind: repeatable on a loaded machine, where CPU times are not. The file path runs the same
# decode -> driver -> matcher -> statistics code as `capture rpc --live` (only the packet source differs), so
# this is the figure to watch when changing the per-packet/per-request path; bench/live.sh measures the live
# CPU per request against tcpdump.
#
# Prints, for each binary: all instructions of the run, those inside the analysis (run::feed_on, without the
# process start and the report), the requests answered, and both per request.
#
# Usage: bench/rpc_instr.sh [FILE] [BINARY...]
#   FILE: a capture of PostgreSQL traffic (default: records 5 s of `pgbench -S -c 4` through a relay port on
#         loopback; needs root, tcpdump, pgbench, socat and PostgreSQL on 127.0.0.1:5432 with trust auth).
#   BINARY: roundtrip binaries to compare (default: this tree's release build).
#   PROTO (environment): the protocol the file holds (default pgsql; e.g. PROTO=redis for a redis-benchmark capture).
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=${1:-}
shift || true
BINS=("$@")
if [ ${#BINS[@]} -eq 0 ]; then
    cargo build --release -q
    BINS=("$PWD/target/release/roundtrip")
fi
WORK=$(mktemp -d /tmp/rt-rpc-instr.XXXXXX)
pids=()
DB=rt_rpc_instr_$$
cleanup() {
    kill "${pids[@]}" 2>/dev/null || true
    [ -z "$FILE" ] || [ "$FILE" != "$WORK/pgbench-S.pcap" ] ||
        psql -h 127.0.0.1 -U postgres -d postgres -qc "drop database if exists $DB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "$FILE" ]; then
    FILE=$WORK/pgbench-S.pcap
    psql -h 127.0.0.1 -U postgres -d postgres -qc "create database $DB" >/dev/null
    pgbench -h 127.0.0.1 -U postgres -i -q "$DB" >/dev/null 2>&1
    RP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    socat TCP-LISTEN:"$RP",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:5432 &
    pids+=($!)
    sleep 0.5
    tcpdump -i lo -n --time-stamp-precision=nano -w "$FILE" "tcp port $RP" 2>/dev/null &
    TP=$!
    pids+=("$TP")
    sleep 1
    PGSSLMODE=disable pgbench -h 127.0.0.1 -p "$RP" -U postgres -n -S -c 4 -j 2 -T 5 "$DB" >/dev/null 2>&1
    sleep 1
    kill -INT "$TP"
    wait "$TP" 2>/dev/null || true
fi

printf '%-50s %14s %14s %10s %10s %10s\n' binary "instr (all)" "instr (feed)" requests "all/req" "feed/req"
for b in "${BINS[@]}"; do
    out=$WORK/cg.out
    valgrind --tool=callgrind --callgrind-out-file="$out" "$b" capture rpc --proto "${PROTO:-pgsql}" "$FILE" \
        >"$WORK/rpc.txt" 2>"$WORK/vg.txt"
    all=$(grep -oE 'Collected : [0-9]+' "$WORK/vg.txt" | awk '{print $3}')
    feed=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null | grep -E 'run::feed_on \[' | head -1 |
        awk '{gsub(",", "", $1); print $1}')
    req=$(grep -oE '[0-9]+ requests answered' "$WORK/rpc.txt" | awk '{print $1}')
    printf '%-50s %14s %14s %10s %10.0f %10.0f\n' "$b" "$all" "${feed:-0}" "$req" \
        "$(echo "$all / $req" | bc -l)" "$(echo "${feed:-0} / $req" | bc -l)"
done
