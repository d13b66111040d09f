#!/usr/bin/env bash
# Benchmark of `roundtrip replay` against the application it replays, through `roundtrip proxy --rtt R`.
# Two applications, each captured once directly on loopback (tcpdump on a private port): a Samba copy
# (`smbclient -c 'get big /dev/null'` of a SIZE_MB file; smbd from Debian `samba` on a free port with a
# generated smb.conf and a temp share) and `pgbench -c 1 -t TX -S` (PostgreSQL 127.0.0.1:5432, a scratch
# database created and dropped here). Then per RTT (5 ms, 20 ms), ROUNDS interleaved rounds of: the
# application run through a proxy adding RTT in front of its server (its connections' span, first to last
# packet, in a capture at the client's side of the proxy: the client process's own start-up left out, as the
# replay leaves it out), and
# `roundtrip replay` of its capture through the same proxy in front of `roundtrip server --allow-replay`
# (the replayed duration it reports). Medians and the ratio replayed / measured.
#
# Usage: bench/replay.sh [ROUNDS] [SIZE_MB] [TX] (run as root: smbd and tcpdump; needs smbd, smbclient,
# pgbench, psql, tcpdump, python3, bc).
set -euo pipefail
ROUNDS=${1:-3}
SIZE_MB=${2:-20}
TX=${3:-100}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
WORK=$(mktemp -d /tmp/rt-replay-bench.XXXXXX)
DB=rt_replay_bench_$$
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    psql -h 127.0.0.1 -U postgres -d test -q -c "drop database if exists $DB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
. "$(dirname "$0")/lib.sh"
# start_bg LOGFILE CMD...: runs CMD in the background, remembers its pid
start_bg() {
    local log=$1
    shift
    "$@" >"$log" 2>&1 &
    PIDS+=($!)
}
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; }
proxy() { # proxy UPSTREAM_PORT RTT: prints the listening port
    local p
    p=$(free_port)
    start_bg "$WORK/proxy-$p.log" "$RT" proxy --listen "127.0.0.1:$p" --upstream "127.0.0.1:$1" ${2:+--rtt "$2"}
    wait_port "$p"
    echo "$p"
}
capture() { # capture FILE PORT CMD...: tcpdump on PORT while CMD runs
    local file=$1 port=$2
    shift 2
    tcpdump --immediate-mode -i lo -s 0 -B 65536 -U -w "$file" "tcp port $port" 2>"$WORK/tcpdump.log" &
    local td=$!
    for _ in $(seq 100); do grep -q "listening on" "$WORK/tcpdump.log" 2>/dev/null && break; sleep 0.1; done
    "$@" >/dev/null 2>&1
    sleep 0.5
    kill -INT "$td"
    wait "$td" 2>/dev/null || true
}
span() { # span PORT CMD...: capture the application's connections through PORT while CMD runs; print their span
    local port=$1
    shift
    capture "$WORK/span.pcap" "$port" "$@"
    "$RT" capture whatif "$WORK/span.pcap" --rtt 1ms --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["capture_duration_s"])'
}
replayed() { # replayed FILE PORT [--generic]: the replayed duration in seconds
    if "$RT" replay "$1" --to "127.0.0.1:$2" --rtt-pings 0 --json ${3:-} >"$WORK/replay.json" 2>"$WORK/replay.err"; then
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("data", d)["replayed_seconds"])' <"$WORK/replay.json"
    else
        grep error "$WORK/replay.err" >&2
        echo nan
    fi
}

# --- Samba ---
SMB_PORT=$(free_port)
samba_conf "$WORK" "$SMB_PORT"
head -c $((SIZE_MB * 1000000)) /dev/urandom >"$WORK/share/big"
start_bg "$WORK/smbd.out" setsid smbd --foreground --no-process-group --debug-stdout -s "$WORK/smb.conf"
wait_port "$SMB_PORT"
smb_get() { smbclient "//127.0.0.1/share" -p "$1" -N -c 'get big /dev/null'; }

# --- PostgreSQL ---
psql -h 127.0.0.1 -U postgres -d test -q -c "create database $DB" >/dev/null
pgbench -h 127.0.0.1 -U postgres -i -q "$DB" >/dev/null 2>&1
pg_run() { pgbench -h 127.0.0.1 -p "$1" -U postgres -c 1 -t "$TX" -S "$DB"; }

# --- captures, directly ---
SERVER_PORT=$(free_port)
start_bg "$WORK/server.log" "$RT" server --bind 127.0.0.1 -p "$SERVER_PORT" --tcp-only --allow-replay
wait_port "$SERVER_PORT"
capture "$WORK/smb.pcap" "$SMB_PORT" smb_get "$SMB_PORT"
capture "$WORK/pg.pcap" 5432 pg_run 5432

echo "roundtrip replay vs the application through roundtrip proxy --rtt R; $ROUNDS interleaved rounds, medians"
echo "samba: get of a $SIZE_MB MB file; pgbench: -c 1 -t $TX -S"
# measured: the application's connections, first to last packet, at the client's side of the proxy; replayed: capture
# whatif's turns (decoded, pipelining kept); generic: every byte as plain request/response runs (--generic).
printf '%-8s %-6s %12s %12s %8s %12s %8s\n' app rtt measured replayed ratio generic ratio
for RTT in 5ms 20ms; do
    SMB_P=$(proxy "$SMB_PORT" "$RTT")
    PG_P=$(proxy 5432 "$RTT")
    RP_P=$(proxy "$SERVER_PORT" "$RTT")
    : >"$WORK/m_smb"; : >"$WORK/r_smb"; : >"$WORK/g_smb"; : >"$WORK/m_pg"; : >"$WORK/r_pg"; : >"$WORK/g_pg"
    for _ in $(seq "$ROUNDS"); do
        span "$SMB_P" smb_get "$SMB_P" >>"$WORK/m_smb"
        replayed "$WORK/smb.pcap" "$RP_P" >>"$WORK/r_smb"
        replayed "$WORK/smb.pcap" "$RP_P" --generic >>"$WORK/g_smb"
        span "$PG_P" pg_run "$PG_P" >>"$WORK/m_pg"
        replayed "$WORK/pg.pcap" "$RP_P" >>"$WORK/r_pg"
        replayed "$WORK/pg.pcap" "$RP_P" --generic >>"$WORK/g_pg"
    done
    for app in smb pg; do
        m=$(median <"$WORK/m_$app")
        r=$(median <"$WORK/r_$app")
        g=$(median <"$WORK/g_$app")
        printf '%-8s %-6s %11.3fs %11.3fs %7.2fx %11.3fs %7.2fx\n' "$app" "$RTT" "$m" "$r" "$(echo "$r / $m" | bc -l)" \
            "$g" "$(echo "$g / $m" | bc -l)"
    done
done
