#!/usr/bin/env bash
# Benchmark of `roundtrip capture stats` and `capture flows` against tcpstat and tshark.
#
# Records its own captures: iperf3 on loopback written by tcpdump (full snap; SNAP=96 for `tcpdump -s 96`),
# one of SIZE_MB (default 500) and one of BIG_MB (default 2048) megabytes. Each file is read once to be in
# the page cache, then every tool runs ROUNDS times (default 5), interleaved, and the script prints the
# median MB/s (file bytes / wall time) and the peak RSS (/usr/bin/time -v) of each. The capture files are
# deleted at the end (the disk is shared).
#
# The filter: `capture stats --filter EXPR` (roundtrip's classic BPF, interpreted in user space) beside
# `tcpdump -r FILE -w /dev/null EXPR` (libpcap's optimised BPF) on the same file; EXPR is FILTER (default: an
# expression every packet runs to its end: two ports no packet has, or the data segments).
#
# Needs root (tcpdump), iperf3, tcpdump, tcpstat, tshark, /usr/bin/time. Usage:
#   bench/capture.sh                 # 500 MB and 2 GB, 5 rounds
#   ROUNDS=3 SIZE_MB=500 BIG_MB=0 bench/capture.sh
#   ONLY_FILTER=1 ROUNDS=5 SIZE_MB=300 BIG_MB=0 bench/capture.sh   # just the filter rows
#   SMALL=1 ONLY_FILTER=1 SIZE_MB=200 BIG_MB=0 bench/capture.sh    # 64-byte UDP datagrams: millions of packets,
#                                                                  # where the per-packet filter cost shows
set -euo pipefail

ROUNDS=${ROUNDS:-5}
SIZE_MB=${SIZE_MB:-500}
BIG_MB=${BIG_MB:-2048}
SNAP=${SNAP:-262144}
FILTER=${FILTER:-tcp port 5432 or tcp port 6379 or greater 1000}
ONLY_FILTER=${ONLY_FILTER:-0}
SMALL=${SMALL:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/release/roundtrip

for tool in tcpdump iperf3 tcpstat tshark /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench/capture.sh: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "bench/capture.sh: tcpdump needs root" >&2; exit 1; }

(cd "$ROOT" && cargo build --release --quiet)
WORK=$(mktemp -d /tmp/roundtrip-capture-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# record FILE MB: iperf3 on loopback until tcpdump has written MB megabytes.
record() {
    local file=$1 mb=$2 port
    port=$((20000 + RANDOM % 20000))
    iperf3 -s -p "$port" -1 >/dev/null 2>&1 &
    local srv=$!
    PIDS+=("$srv")
    local what="tcp port $port" small=()
    if [ "$SMALL" = 1 ]; then what="port $port"; small=(-u -l 64 -b 0); fi
    tcpdump -i lo -n -s "$SNAP" -B 262144 -w "$file" "$what" 2>"$WORK/tcpdump.log" &
    local td=$!
    PIDS+=("$td")
    sleep 1.5
    iperf3 -c 127.0.0.1 -p "$port" -t 600 "${small[@]}" >/dev/null 2>&1 &
    local cli=$!
    PIDS+=("$cli")
    local deadline=$((SECONDS + 300))
    while [ "$(stat -c %s "$file" 2>/dev/null || echo 0)" -lt $((mb * 1000000)) ] && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
    kill "$cli" 2>/dev/null || true
    wait "$cli" 2>/dev/null || true
    sleep 1.5
    kill -INT "$td"
    wait "$td" 2>/dev/null || true
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    cat "$file" >/dev/null # into the page cache
}

# measure NAME FILE CMD...: appends "seconds rss_kb" to $WORK/NAME.times
measure() {
    local name=$1; shift
    local t0 t1
    t0=$(date +%s%N)
    /usr/bin/time -v -o "$WORK/time.txt" "$@" >/dev/null 2>"$WORK/err.txt" || {
        echo "bench/capture.sh: $name failed: $(tail -1 "$WORK/err.txt")" >&2
    }
    t1=$(date +%s%N)
    local rss
    rss=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$WORK/time.txt")
    echo "$(( t1 - t0 )) $rss" >>"$WORK/$name.times"
}

# report NAME BYTES: median MB/s and max peak RSS over the rounds
report() {
    local name=$1 bytes=$2
    sort -n "$WORK/$name.times" | awk -v b="$bytes" -v n="$name" '
        { t[NR] = $1; if ($2 > rss) rss = $2 }
        END {
            m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
            printf "  %-28s %9.0f MB/s   median %8.3f s   peak RSS %7.1f MB   (%d rounds)\n",
                n, b / 1e6 / (m / 1e9), m / 1e9, rss / 1024, NR
        }'
    rm -f "$WORK/$name.times"
}

run_size() {
    local mb=$1 with_peers=$2
    local file=$WORK/lo-$mb.pcap
    record "$file" "$mb"
    local bytes packets
    bytes=$(stat -c %s "$file")
    packets=$("$BIN" capture stats --json "$file" | awk -F: '/"packets_read"/ {gsub(/[ ,]/, "", $2); print $2; exit}')
    echo "capture: $((bytes / 1000000)) MB, $packets packets, snap $SNAP ($(tail -3 "$WORK/tcpdump.log" | tr '\n' ' '))"
    local kept
    kept=$("$BIN" capture stats --json "$file" --filter "$FILTER" | awk -F: '/"packets_matched"/ {gsub(/[ ,]/, "", $2); print $2; exit}')
    echo "filter '$FILTER': $kept of $packets packets pass"
    for _ in $(seq "$ROUNDS"); do
        measure "roundtrip-stats-filter" "$BIN" capture stats "$file" --filter "$FILTER"
        measure "tcpdump-r-filter-w-null" tcpdump -r "$file" -w /dev/null "$FILTER"
        measure "tcpdump-r-w-null" tcpdump -r "$file" -w /dev/null
        [ "$ONLY_FILTER" = 1 ] && continue
        measure "roundtrip-capture-stats" "$BIN" capture stats "$file"
        measure "roundtrip-capture-flows" "$BIN" capture flows "$file"
        if [ "$with_peers" = 1 ]; then
            measure "tcpstat-1s" tcpstat -r "$file" 1
            measure "tshark-io-stat-1s" tshark -n -r "$file" -q -z io,stat,1
            measure "tshark-conv-tcp" tshark -n -r "$file" -q -z conv,tcp
        fi
    done
    report "roundtrip-stats-filter" "$bytes"
    report "tcpdump-r-filter-w-null" "$bytes"
    report "tcpdump-r-w-null" "$bytes"
    if [ "$ONLY_FILTER" = 1 ]; then
        rm -f "$file"
        return
    fi
    report "roundtrip-capture-stats" "$bytes"
    report "roundtrip-capture-flows" "$bytes"
    if [ "$with_peers" = 1 ]; then
        report "tcpstat-1s" "$bytes"
        report "tshark-io-stat-1s" "$bytes"
        report "tshark-conv-tcp" "$bytes"
    fi
    rm -f "$file"
}

echo "roundtrip capture benchmark, $(date -u +%FT%TZ), $(nproc) cores (machine shared with other builds: noisy)"
echo "== ${SIZE_MB} MB"
run_size "$SIZE_MB" 1
if [ "$BIG_MB" -gt 0 ]; then
    echo "== ${BIG_MB} MB (roundtrip only: peak memory must not grow with the file)"
    run_size "$BIG_MB" 0
fi
