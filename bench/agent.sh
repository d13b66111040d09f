#!/usr/bin/env bash
# Benchmark of `roundtrip agent` at fleet scale, beside the Debian probers a Prometheus user would run instead.
#
# Targets: N (default 5,000) loopback addresses 127.1.Y.Z, all answered by ONE `roundtrip server --bind 0.0.0.0`
# on a free port. Per round, one after the other (the order rotates every round):
#   roundtrip    `roundtrip agent --no-responder --peers-file F --interval 1s --probe tcp --size 64`: one TCP
#                ping (64 B message on a kept connection) per target per second. Measured: CPU (utime+stime
#                from /proc/PID/stat over the window) as % of one core and per probe (probes from the increase
#                of roundtrip_probes_total), RSS (VmRSS at the end), schedule lag p99 (the window's increase of
#                roundtrip_agent_schedule_lag_seconds_bucket, quantile interpolated as Prometheus does),
#                /metrics scrape time (curl time_total, median of 5, after the window), and the same with 1,000
#                idle TCP connections held open to the metrics port (scrape_idle_ms).
#   baseline     (only with BASELINE=path to another build of roundtrip) the same as roundtrip, that build.
#   blackbox     prometheus-blackbox-exporter, module tcp_connect, every target probed once a second by a small
#                asyncio driver (64 kept-alive HTTP connections to /probe?target=...&module=tcp_connect, all N
#                targets per second-long round): the exporter's CPU only (not the driver's) per probe answered.
#   floor        bench/ref_agent.c, built here with cc: the least a prober can do per TCP ping (one connection
#                per target, the same 64 B message once a second, the same 2^21 ns wake-up grid and 500 us
#                kernel timer slack, replies through level-triggered epoll, RTT into a log2 histogram, nothing
#                else): what the kernel costs per probe on this machine, which no prober gets below with this
#                policy. Its probes are counted in a shared mapping (no system call).
#   smokeping    prometheus-smokeping-prober, protocol udp (unprivileged ICMP datagram sockets), interval 1s,
#                the same N hosts: its CPU per echo request (increase of smokeping_requests_total). It runs in
#                a network namespace of its own (lo only; the kernel answers the echoes for 127.0.0.0/8) so
#                that its net.ipv4.ping_group_range can allow the datagram sockets without touching the host's.
#                If it cannot run N hosts it is retried with 1,000 and the table says so.
# Every tool gets WARMUP seconds before a MEASURE-second window. Figures: medians over the rounds.
#
# Usage: sudo bench/agent.sh [ROUNDS]   (default 3; env N=5000 MEASURE=60 WARMUP=15; RT_BIN=path to skip the
# build; BASELINE=path to an older build, measured as one more tool in the same rounds; TOOLS="roundtrip
# floor blackbox baseline" to run only those, in that order; the default is roundtrip, floor, blackbox and
# smokeping). Needs root (namespace for smokeping), python3, curl, ip, prometheus-blackbox-exporter,
# prometheus-smokeping-prober (apt-get install -y prometheus-blackbox-exporter prometheus-smokeping-prober).
set -euo pipefail
ROUNDS=${1:-3}
N=${N:-5000}
MEASURE=${MEASURE:-60}
WARMUP=${WARMUP:-15}
here=$(cd "$(dirname "$0")/.." && pwd)
RT=${RT_BIN:-$here/target/release/roundtrip}
BLACKBOX=${BLACKBOX:-prometheus-blackbox-exporter}
SMOKEPING=${SMOKEPING:-prometheus-smokeping-prober}

if [[ $(id -u) != 0 ]]; then
    echo "agent.sh: needs root (a network namespace for smokeping_prober); run it with sudo" >&2
    exit 1
fi
for t in python3 curl ip cc "$BLACKBOX" "$SMOKEPING"; do
    command -v "$t" >/dev/null || { echo "agent.sh: $t is not installed" >&2; exit 1; }
done
if [[ -z ${RT_BIN:-} ]]; then
    (cd "$here" && cargo build --release --quiet)
fi
# one descriptor per target in the agent, the responder and the driver
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [[ $(ulimit -n) -lt $((N + 1000)) ]]; then
    echo "agent.sh: ulimit -n is $(ulimit -n), too low for $N targets" >&2
    exit 1
fi

WORK=$(mktemp -d /tmp/rt-agent-bench.XXXXXX)
NS=rtbench$$
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    ip netns pids "$NS" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
CLK_TCK=$(getconf CLK_TCK)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_mb() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
# wait_http URL [NS]: until URL answers, at most 120 s
wait_http() {
    for _ in $(seq 600); do
        if ${2:+ip netns exec "$2"} curl -sf -o /dev/null --max-time 2 "$1"; then return 0; fi
        sleep 0.2
    done
    echo "agent.sh: $1 did not answer within 120 s" >&2
    return 1
}
stop() { # stop PID: SIGTERM, then SIGKILL after 10 s
    kill "$1" 2>/dev/null || return 0
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# Prometheus text-format helpers: `sum NAME` (sum of all series of NAME), `quantile Q NAME FILE0 FILE1` (the
# quantile of the increase of histogram NAME between two scrapes, interpolated as histogram_quantile does).
cat >"$WORK/prom.py" <<'EOF'
import math, re, sys
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LE = re.compile(r'(?:^|,)le="([^"]*)"')
def series(path, name):
    for line in open(path):
        m = LINE.match(line)
        if m and m.group(1) == name:
            yield (m.group(3) or ""), float(m.group(4))
def buckets(path, name):
    b = {}
    for labels, v in series(path, name + "_bucket"):
        le = LE.search(labels)
        if le:
            k = float(le.group(1))
            b[k] = b.get(k, 0.0) + v
    return b
cmd = sys.argv[1]
if cmd == "sum":
    print(sum(v for _, v in series(sys.argv[3], sys.argv[2])))
elif cmd == "quantile":
    q, name, f0, f1 = float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    b0, b1 = buckets(f0, name), buckets(f1, name)
    les = sorted(b1)
    cum = [b1[le] - b0.get(le, 0.0) for le in les]
    if not les or cum[-1] <= 0:
        print("nan"); sys.exit()
    rank = q * cum[-1]
    for i, le in enumerate(les):
        if cum[i] >= rank:
            if math.isinf(le):
                print(les[i - 1] if i > 0 else "nan"); break
            lo = les[i - 1] if i > 0 else 0.0
            below = cum[i - 1] if i > 0 else 0.0
            inb = cum[i] - below
            print(lo + (le - lo) * ((rank - below) / inb if inb > 0 else 1.0)); break
EOF
prom() { python3 "$WORK/prom.py" "$@"; }

# The blackbox driver: every second, all targets through 64 kept-alive connections; the number of probes
# answered so far in FILE (rewritten every half second).
cat >"$WORK/driver.py" <<'EOF'
import asyncio, os, sys, time
host, port, targets_file, count_file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
targets = [l.strip() for l in open(targets_file) if l.strip()]
done = 0
failed = 0
async def worker(q):
    global done, failed
    r, w = await asyncio.open_connection(host, port)
    while True:
        t = await q.get()
        w.write(f"GET /probe?target={t}&module=tcp_connect HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await r.readuntil(b"\r\n\r\n")
        n = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        body = await r.readexactly(n)
        if b"probe_success 1" in body:
            done += 1
        else:
            failed += 1
        q.task_done()
async def writer():
    while True:
        with open(count_file + ".tmp", "w") as f:
            f.write(f"{done} {failed}\n")
        os.replace(count_file + ".tmp", count_file)
        await asyncio.sleep(0.5)
async def main():
    q = asyncio.Queue()
    tasks = [asyncio.create_task(worker(q)) for _ in range(64)]
    asyncio.create_task(writer())
    while True:
        t0 = time.monotonic()
        for t in targets:
            q.put_nowait(t)
        await q.join()
        left = 1.0 - (time.monotonic() - t0)
        if left > 0:
            await asyncio.sleep(left)
asyncio.run(main())
EOF

# --- the targets and their responder ---
PORT=$(free_port)
# every probe connection comes from 127.0.0.1: lift the per-address cap (256 by default)
"$RT" server --bind 0.0.0.0 -p "$PORT" --max-per-address $((N + 1000)) --max-clients $((N + 1000)) \
    >"$WORK/server.log" 2>&1 &
PIDS+=($!)
python3 - "$N" "$PORT" >"$WORK/peers" <<'EOF'
import sys
n, port = int(sys.argv[1]), sys.argv[2]
for i in range(n):
    print(f"127.1.{i // 250}.{i % 250 + 1}:{port}")
EOF
cut -d: -f1 "$WORK/peers" >"$WORK/hosts"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.1.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

# --- smokeping's namespace ---
ip netns add "$NS"
ip -n "$NS" link set lo up
ip netns exec "$NS" sysctl -q -w net.ipv4.ping_group_range="0 2147483647"

RESULTS=$WORK/results # lines: TOOL ROUND cpu% us/probe probes/s rss_mb lag_p99_ms scrape_ms note scrape_idle_ms
: >"$RESULTS"

# measure TOOL PID COUNTER_CMD...: over the window, CPU of PID as % of one core, COUNTER's rate, and CPU per
# unit of COUNTER (CPU rate / counter rate). Each reading is timed: a counter's time is when its command
# starts (the scrape; parsing it takes a while after), the CPU's when its ticks are read.
measure() {
    local t0 t1 n0 n1 s0 s1 c0 c1
    s0=$(date +%s.%N)
    n0=$("${@:3}")
    c0=$(date +%s.%N)
    t0=$(cpu_ticks "$2")
    sleep "$MEASURE"
    t1=$(cpu_ticks "$2")
    c1=$(date +%s.%N)
    s1=$(date +%s.%N)
    n1=$("${@:3}")
    python3 -c "
cpu=($t1-$t0)/$CLK_TCK/($c1-$c0); rate=($n1-$n0)/($s1-$s0)
print(f'{100*cpu:.2f} {1e6*cpu/rate if rate > 0 else float(\"nan\"):.2f} {rate:.0f}')"
}

# idle N HOST PORT: holds N idle TCP connections to HOST:PORT until killed
cat >"$WORK/idle.py" <<'EOF2'
import socket, sys, time
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
held = [socket.create_connection((host, port)) for _ in range(n)]
print("ready", flush=True)
time.sleep(3600)
EOF2

run_baseline() { RT=$BASELINE TOOL=baseline run_roundtrip "$@"; }
run_roundtrip() {
    local round=$1 log=$WORK/agent.log pid url
    "$RT" agent --no-responder --peers-file "$WORK/peers" --interval 1s --timeout 1s --probe tcp --size 64 \
        --metrics 127.0.0.1:0 --max-series $((N * 40)) >"$log" 2>&1 &
    pid=$!
    PIDS+=($pid)
    for _ in $(seq 600); do
        grep -q "metrics on http" "$log" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    url=$(grep -o 'metrics on http://[^ ]*' "$log" | head -1 | sed 's/metrics on //')
    if [[ -z $url ]]; then
        echo "roundtrip agent did not start:" >&2
        cat "$log" >&2
        stop "$pid"
        return 1
    fi
    sleep "$WARMUP"
    curl -sf --max-time 10 "$url" >"$WORK/m0"
    local cpu
    cpu=$(measure roundtrip "$pid" prom_sum_scrape "$url" roundtrip_probes_total)
    cp "$WORK/last" "$WORK/m1"
    local rss lag scrape
    rss=$(rss_mb "$pid")
    lag=$(prom quantile 0.99 roundtrip_agent_schedule_lag_seconds "$WORK/m0" "$WORK/m1")
    lag=$(python3 -c "print(f'{1e3*float(\"$lag\"):.3f}')")
    scrape=$(for _ in 1 2 3 4 5; do curl -s -o /dev/null --max-time 10 -w '%{time_total}\n' "$url"; done | median)
    scrape=$(python3 -c "print(f'{1e3*$scrape:.1f}')")
    # The same with 1,000 idle connections held open to the metrics port.
    local hp=${url#http://} ipid idle
    hp=${hp%%/*}
    python3 "$WORK/idle.py" 1000 "${hp%:*}" "${hp##*:}" >"$WORK/idle.out" 2>&1 &
    ipid=$!
    for _ in $(seq 100); do grep -q ready "$WORK/idle.out" 2>/dev/null && break; sleep 0.1; done
    # (a scrape that fails counts as inf)
    idle=$(for _ in 1 2 3 4 5; do curl -s -o /dev/null --max-time 30 -w '%{http_code} %{time_total}\n' "$url" |
        awk '{print ($1 == 200) ? $2 : "inf"}'; done | median)
    idle=$(python3 -c "print(f'{1e3*$idle:.1f}')")
    stop "$ipid"
    stop "$pid"
    echo "${TOOL:-roundtrip} $round $cpu $rss $lag $scrape - $idle" >>"$RESULTS"
}
# prom_sum_scrape URL NAME: scrape URL into $WORK/last, print the sum of NAME
prom_sum_scrape() {
    curl -sf --max-time 10 "$1" >"$WORK/last"
    prom sum "$2" "$WORK/last"
}

run_blackbox() {
    local round=$1 bport pid dpid
    bport=$(free_port)
    cat >"$WORK/blackbox.yml" <<EOF
modules:
  tcp_connect:
    prober: tcp
    timeout: 5s
EOF
    "$BLACKBOX" --config.file="$WORK/blackbox.yml" --web.listen-address="127.0.0.1:$bport" \
        --log.level=warn >"$WORK/blackbox.log" 2>&1 &
    pid=$!
    PIDS+=($pid)
    wait_http "http://127.0.0.1:$bport/metrics" || { stop "$pid"; return 1; }
    python3 "$WORK/driver.py" 127.0.0.1 "$bport" "$WORK/peers" "$WORK/bbcount" 2>"$WORK/driver.log" &
    dpid=$!
    PIDS+=($dpid)
    sleep "$WARMUP"
    local cpu rss
    cpu=$(measure blackbox "$pid" awk '{print $1}' "$WORK/bbcount")
    rss=$(rss_mb "$pid")
    local failed
    failed=$(awk '{print $2}' "$WORK/bbcount")
    stop "$dpid"
    stop "$pid"
    echo "blackbox $round $cpu $rss - - failed=$failed" >>"$RESULTS"
}

run_floor() {
    local round=$1 pid
    [[ -x $WORK/ref_agent ]] || cc -O2 -o "$WORK/ref_agent" "$here/bench/ref_agent.c"
    "$WORK/ref_agent" "$WORK/peers" "$WORK/floorcount" 2>"$WORK/floor.log" &
    pid=$!
    PIDS+=($pid)
    sleep "$WARMUP"
    kill -0 "$pid" 2>/dev/null || { cat "$WORK/floor.log" >&2; return 1; }
    local cpu rss
    cpu=$(measure floor "$pid" floor_count)
    rss=$(rss_mb "$pid")
    stop "$pid"
    echo "floor $round $cpu $rss - - -" >>"$RESULTS"
}
floor_count() { tr -d '\0' <"$WORK/floorcount"; }

run_smokeping() {
    local round=$1 hosts=$N sport pid note="-"
    while :; do
        sport=$(free_port)
        {
            echo "targets:"
            echo "- hosts:"
            head -n "$hosts" "$WORK/hosts" | sed 's/^/  - /'
            echo "  interval: 1s"
            echo "  network: ip4"
            echo "  protocol: udp"
            echo "  size: 56"
        } >"$WORK/smokeping.yml"
        ip netns exec "$NS" "$SMOKEPING" --config.file="$WORK/smokeping.yml" \
            --web.listen-address="127.0.0.1:$sport" --log.level=warn >"$WORK/smokeping.log" 2>&1 &
        pid=$!
        PIDS+=($pid)
        if wait_http "http://127.0.0.1:$sport/metrics" "$NS" && kill -0 "$pid" 2>/dev/null; then
            break
        fi
        stop "$pid"
        if [[ $hosts -le 1000 ]]; then
            echo "smokeping_prober does not start:" >&2
            tail -5 "$WORK/smokeping.log" >&2
            return 1
        fi
        hosts=1000
        note="1000-hosts"
    done
    sleep "$WARMUP"
    local cpu rss
    cpu=$(measure smokeping "$pid" smoke_sum "$sport")
    rss=$(rss_mb "$pid")
    stop "$pid"
    echo "smokeping $round $cpu $rss - - $note" >>"$RESULTS"
}
smoke_sum() {
    ip netns exec "$NS" curl -sf --max-time 10 "http://127.0.0.1:$1/metrics" >"$WORK/smoke"
    prom sum smokeping_requests_total "$WORK/smoke"
}

if [[ -n ${TOOLS:-} ]]; then
    read -ra tools <<<"$TOOLS"
else
    tools=(roundtrip floor blackbox smokeping)
    [[ -n ${BASELINE:-} ]] && tools+=(baseline)
fi
nt=${#tools[@]}
for r in $(seq "$ROUNDS"); do
    for k in $(seq 0 $((nt - 1))); do
        t=${tools[$(((k + r - 1) % nt))]}
        echo "round $r: $t ($N targets, ${WARMUP}s warm-up, ${MEASURE}s window)" >&2
        "run_$t" "$r" || echo "$t $r nan nan nan nan - - failed -" >>"$RESULTS"
        tail -1 "$RESULTS" >&2
    done
done

echo
echo "roundtrip agent vs Debian probers: $N targets on loopback, 1 probe/s each, ${MEASURE}s windows, medians of $ROUNDS rounds"
printf "%-10s %9s %11s %9s %8s %12s %11s %16s  %s\n" tool "cpu%core" "us/probe" "probes/s" "rss_MB" "lag_p99_ms" "scrape_ms" "scrape_idle_ms" note
for t in "${tools[@]}"; do
    row=()
    for col in 3 4 5 6 7 8 10; do
        row+=("$(awk -v t="$t" -v c="$col" '$1 == t && $c != "-" && $c != "nan" {print $c}' "$RESULTS" | median)")
    done
    note=$(awk -v t="$t" '$1 == t {print $9}' "$RESULTS" | sort -u | paste -sd, -)
    printf "%-10s %9s %11s %9s %8s %12s %11s %16s  %s\n" "$t" "${row[@]}" "$note"
done
