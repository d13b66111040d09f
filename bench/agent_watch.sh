#!/usr/bin/env bash
# Benchmark of `roundtrip agent --watch`: what watching the real application's requests costs the application,
# beside tcpdump, and what it costs the agent.
#
# Part 1, the application's cost (pgbench -n -S against the local PostgreSQL, a scratch database of its own).
# Per round, one after the other (the order rotates every round), the same pgbench run with:
#   none      nobody watching;
#   agent     `roundtrip agent --no-responder --watch lo --watch-filter 'tcp port 5432'`;
#   tcpdump   `tcpdump -i lo -w /dev/null 'tcp port 5432'`.
# Two loads: at saturation (`-c 4 -j 2`, TPS), and at a fixed rate (`-R`, half the first saturated TPS of
# nobody watching; TPS and the p99 of pgbench's own per-transaction log). For the agent also: CPU per observed
# request (utime+stime of the process over the run / the increase of roundtrip_requests_total) and RSS.
# Part 2, the agent's memory at 10,000 tracked connections (held open to a local listener on a watched port).
# Part 3, a /metrics scrape with 50 servers x 10 ops (ten Redis commands to 50 local RESP listeners): curl time,
# median of 5.
# Figures: medians over the rounds.
#
# Usage: bench/agent_watch.sh [ROUNDS] [SECONDS]   (default 3 rounds of 10 s; RT_BIN=path to skip the build;
# PARTS="2 3" runs only those parts).
# Needs root (packet socket), pgbench, psql, tcpdump, python3, curl.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
RT=${RT_BIN:-$here/target/release/roundtrip}
# shellcheck source=bench/lib.sh
. "$here/bench/lib.sh"
for t in pgbench psql tcpdump python3 curl; do
    command -v "$t" >/dev/null || { echo "agent_watch.sh: $t is not installed" >&2; exit 1; }
done
[[ $(id -u) == 0 ]] || { echo "agent_watch.sh: needs root (a packet socket on lo)" >&2; exit 1; }
if [[ -z ${RT_BIN:-} ]]; then (cd "$here" && cargo build --release --quiet); fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

WORK=$(mktemp -d /tmp/rt-watch-bench.XXXXXX)
DB=rt_watch_bench
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    psql -h 127.0.0.1 -U postgres -d test -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
PG=(-h 127.0.0.1 -p 5432 -U postgres)
psql "${PG[@]}" -d test -qc "DROP DATABASE IF EXISTS $DB" >/dev/null
psql "${PG[@]}" -d test -qc "CREATE DATABASE $DB" >/dev/null
pgbench "${PG[@]}" -i -s 1 -q "$DB" >/dev/null 2>&1

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
metric_sum() { # sum of every sample of metric $2 on the agent at port $1
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 ~ "^"m"[{ ]" || $1 == m {s += $NF} END {printf "%d\n", s}'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

start_agent() { # $1 filter; sets APORT, APID
    APORT=$(free_port)
    "$RT" agent --no-responder --metrics "127.0.0.1:$APORT" --watch lo --watch-filter "$1" \
        >"$WORK/agent.log" 2>&1 &
    APID=$!
    PIDS+=("$APID")
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$APORT/metrics" >/dev/null && return 0; sleep 0.1; done
    echo "agent_watch.sh: the agent did not start: $(cat "$WORK/agent.log")" >&2
    exit 1
}
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

run_pgbench() { # $1 mode, $2 extra args...; prints "TPS P99_MS [CPU_US_PER_REQ RSS_MB]"
    local mode=$1; shift
    local pid="" before=0 req0=0
    case $mode in
        agent) start_agent 'tcp port 5432'; pid=$APID; before=$(cpu_ticks "$pid"); req0=$(metric_sum "$APORT" roundtrip_requests_total) ;;
        tcpdump) tcpdump -i lo -w /dev/null -q 'tcp port 5432' 2>/dev/null & pid=$!; PIDS+=("$pid"); sleep 1 ;;
    esac
    rm -f "$WORK"/pgbench_log.*
    local out
    out=$(cd "$WORK" && pgbench "${PG[@]}" -n -S -c 4 -j 2 -T "$SECS" -l "$@" "$DB" 2>&1)
    local tps p99
    tps=$(echo "$out" | awk '/^tps/ {print $3; exit}')
    p99=$(cat "$WORK"/pgbench_log.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99); if (i<1) i=1; printf "%.3f\n", a[i]/1000}')
    local extra=""
    if [[ $mode == agent ]]; then
        local ticks req hz
        hz=$(getconf CLK_TCK)
        ticks=$(( $(cpu_ticks "$pid") - before ))
        req=$(( $(metric_sum "$APORT" roundtrip_requests_total) - req0 ))
        extra=" $(awk -v t="$ticks" -v r="$req" -v hz="$hz" 'BEGIN {printf "%.2f", (r > 0 ? t / hz * 1e6 / r : 0)}') $(awk -v k="$(rss_kb "$pid")" 'BEGIN {printf "%.1f", k/1024}')"
    fi
    [[ -n $pid ]] && stop_pid "$pid"
    echo "$tps $p99$extra"
}

part() { [[ " ${PARTS:-1 2 3} " == *" $1 "* ]]; }

if part 1; then
echo "# part 1: pgbench -n -S -c 4 -j 2, ${SECS} s per run, $ROUNDS rounds"
modes=(none agent tcpdump)
RATE=""
for r in $(seq 1 "$ROUNDS"); do
    for i in 0 1 2; do
        m=${modes[$(( (i + r) % 3 ))]}
        res=$(run_pgbench "$m")
        echo "round $r saturated $m: $res"
        echo "$res" >>"$WORK/sat.$m"
        if [[ -z $RATE && $m == none ]]; then RATE=$(awk -v t="${res%% *}" 'BEGIN {printf "%d", t / 2}'); fi
    done
    for i in 0 1 2; do
        m=${modes[$(( (i + r) % 3 ))]}
        res=$(run_pgbench "$m" -R "$RATE")
        echo "round $r rate $RATE/s $m: $res"
        echo "$res" >>"$WORK/rate.$m"
    done
done
printf '\n%-8s %14s %14s %14s %18s %10s\n' watcher "sat TPS" "-R TPS" "-R p99 ms" "agent us/request" "agent RSS"
for m in "${modes[@]}"; do
    printf '%-8s %14s %14s %14s %18s %10s\n' "$m" \
        "$(cut -d' ' -f1 "$WORK/sat.$m" | median)" \
        "$(cut -d' ' -f1 "$WORK/rate.$m" | median)" \
        "$(cut -d' ' -f2 "$WORK/rate.$m" | median)" \
        "$( [[ $m == agent ]] && cat "$WORK/sat.$m" "$WORK/rate.$m" | cut -d' ' -f3 | median || echo -)" \
        "$( [[ $m == agent ]] && cat "$WORK/sat.$m" "$WORK/rate.$m" | cut -d' ' -f4 | median | sed 's/$/ MB/' || echo -)"
done
fi

if part 2; then
echo
echo "# part 2: RSS with 10,000 tracked connections"
LPORT=$(free_port)
start_agent "tcp port $LPORT"
rss0=$(rss_kb "$APID")
# The listener and the clients in two processes: each holds 10,000 descriptors (the hard limit may be 20,000).
python3 - "$LPORT" 10000 <<'EOF' &
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port)); l.listen(4096)
ss = [l.accept()[0] for _ in range(n)]
time.sleep(90)
EOF
LPID=$!
PIDS+=("$LPID")
sleep 0.5
python3 - "$LPORT" 10000 <<'EOF' &
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
cs = []
for i in range(n):
    c = socket.create_connection(("127.0.0.1", port)); cs.append(c)
    c.send(b"x")  # one byte so each connection is seen carrying data
print("held", len(cs), flush=True)
time.sleep(90)
EOF
HPID=$!
PIDS+=("$HPID")
for _ in $(seq 1 120); do
    conns=$(metric_sum "$APORT" roundtrip_watch_connections)
    [[ $conns -ge 10000 ]] && break
    sleep 0.5
done
rss1=$(rss_kb "$APID")
echo "tracked connections $conns: RSS $((rss0 / 1024)) MB before, $((rss1 / 1024)) MB with them ($(( (rss1 - rss0) * 1024 / (conns > 0 ? conns : 1) )) bytes each)"
stop_pid "$HPID"
stop_pid "$LPID"
stop_pid "$APID"
fi

if part 3; then
echo
echo "# part 3: a scrape with 50 servers x 10 ops"
BASE=$(free_port)
while [[ $BASE -gt 60000 ]]; do BASE=$(free_port); done
start_agent "tcp portrange $BASE-$((BASE + 49))"
python3 - "$BASE" <<'EOF'
import selectors, socket, sys, threading
base = int(sys.argv[1])
sel = selectors.DefaultSelector()
for p in range(base, base + 50):
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", p)); l.listen(64); l.setblocking(False)
    sel.register(l, selectors.EVENT_READ, "listen")
def serve():  # a RESP server that answers +OK to every command (the client waits for each answer)
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if key.data == "listen":
                c, _ = s.accept(); c.setblocking(False); sel.register(c, selectors.EVENT_READ, "conn")
            else:
                try:
                    d = s.recv(65536)
                except OSError:
                    d = b""
                if not d:
                    sel.unregister(s); s.close(); continue
                s.sendall(b"+OK\r\n")
threading.Thread(target=serve, daemon=True).start()
# Ten commands of the Redis op vocabulary: each is its own series (HTTP has only nine methods in it, and the
# decoder takes no other method for a request).
cmds = ["GET", "SET", "DEL", "EXISTS", "EXPIRE", "INCR", "HGET", "HSET", "LPUSH", "RPOP"]
for p in range(base, base + 50):
    c = socket.create_connection(("127.0.0.1", p))
    for m in cmds:
        for _ in range(20):
            c.sendall(f"*2\r\n${len(m)}\r\n{m}\r\n$1\r\nk\r\n".encode())
            got = b""
            while not got.endswith(b"\r\n"):
                got += c.recv(4096)
    c.close()
EOF
sleep 1
series=$(curl -s "http://127.0.0.1:$APORT/metrics" | grep -c '^roundtrip_request_duration_seconds_count')
for _ in 1 2 3 4 5; do
    curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$APORT/metrics"
done | awk '{print $1 * 1000}' >"$WORK/scrape"
echo "request series (server x op): $series; /metrics scrape median $(median <"$WORK/scrape") ms ($(curl -s "http://127.0.0.1:$APORT/metrics" | wc -c) bytes)"
stop_pid "$APID"
fi
