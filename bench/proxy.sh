#!/usr/bin/env bash
# Benchmark: `roundtrip proxy` against direct loopback and against socat (the plain relay it must not be slower
# than), and the accuracy of 20 ms each way.
#
#   RTT:        roundtrip ping (TCP, 64 B) median and p99, direct / via roundtrip proxy / via socat
#   throughput: iperf3 (one TCP stream), direct / via roundtrip proxy / via socat / via HAProxy when installed
#               (mode tcp, splice both ways: the zero-copy relay to match)
#   accuracy:   roundtrip ping through `roundtrip proxy --delay 20ms` (both directions): median and p99
#
#   idle CPUs:  the same with --cpu-wake (the wake-up of halted CPUs hidden; root)
#   busy conns: CONNS connections (default 10,000, capped by the fd limit: the proxy holds 2 per connection),
#               each a 64 B ping-pong once per second (bench/busy_conns.py), through `roundtrip proxy`
#               pass-through and --delay 20ms: the proxy's threads and RSS (peak of 1 s samples), RTT p50/p99
#               and the share answered; with BASELINE, the old build at BASE_CONNS (default 1,000) connections.
#
# Interleaved: every round runs every peer once, in turn; the figures are medians over the rounds.
# Usage: bench/proxy.sh [ROUNDS (default 5)] [SECONDS per run (default 3)]
# With BASELINE=/path/to/an/older/roundtrip, that build's proxy runs as one more peer in the same rounds.
set -euo pipefail

ROUNDS=${1:-5}
SECS=${2:-3}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
for t in iperf3 socat python3; do
    command -v "$t" >/dev/null || { echo "bench/proxy.sh: $t is not installed (apt-get install $t)" >&2; exit 1; }
done

. bench/lib.sh
S=$(free_port); I=$(free_port); P_S=$(free_port); P_I=$(free_port); X_S=$(free_port); X_I=$(free_port); D_S=$(free_port)
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

"$RT" server --bind 127.0.0.1 --port "$S" >/dev/null 2>&1 & PIDS+=($!)
iperf3 -s -B 127.0.0.1 -p "$I" >/dev/null 2>&1 & PIDS+=($!)
"$RT" proxy --listen 127.0.0.1:"$P_S" --upstream 127.0.0.1:"$S" >/dev/null 2>&1 & PIDS+=($!)
"$RT" proxy --listen 127.0.0.1:"$P_I" --upstream 127.0.0.1:"$I" >/dev/null 2>&1 & PIDS+=($!)
socat TCP-LISTEN:"$X_S",bind=127.0.0.1,fork,reuseaddr TCP:127.0.0.1:"$S" & PIDS+=($!)
socat TCP-LISTEN:"$X_I",bind=127.0.0.1,fork,reuseaddr TCP:127.0.0.1:"$I" & PIDS+=($!)
"$RT" proxy --listen 127.0.0.1:"$D_S" --upstream 127.0.0.1:"$S" --delay 20ms >/dev/null 2>&1 & PIDS+=($!)
DN_S=$(free_port)
"$RT" proxy --listen 127.0.0.1:"$DN_S" --upstream 127.0.0.1:"$S" --delay 20ms --cpu-wake >/dev/null 2>&1 & PIDS+=($!)
PING_PEERS="direct:$S roundtrip:$P_S socat:$X_S"
IPERF_PEERS="direct:$I roundtrip:$P_I socat:$X_I"
DELAY_PEERS="delay20:$D_S delay20-cpu-wake:$DN_S"
if command -v haproxy >/dev/null; then
    H_I=$(free_port)
    haproxy_splice_conf "$WORK/haproxy.cfg" 127.0.0.1:"$H_I" 127.0.0.1:"$I"
    haproxy -f "$WORK/haproxy.cfg" -db >/dev/null 2>&1 & PIDS+=($!)
    IPERF_PEERS="$IPERF_PEERS haproxy:$H_I"
fi
if [ -n "${BASELINE:-}" ]; then
    B_S=$(free_port); B_I=$(free_port); B_D=$(free_port)
    "$BASELINE" proxy --listen 127.0.0.1:"$B_S" --upstream 127.0.0.1:"$S" >/dev/null 2>&1 & PIDS+=($!)
    "$BASELINE" proxy --listen 127.0.0.1:"$B_I" --upstream 127.0.0.1:"$I" >/dev/null 2>&1 & PIDS+=($!)
    "$BASELINE" proxy --listen 127.0.0.1:"$B_D" --upstream 127.0.0.1:"$S" --delay 20ms >/dev/null 2>&1 & PIDS+=($!)
    PING_PEERS="$PING_PEERS baseline:$B_S"; IPERF_PEERS="$IPERF_PEERS baseline:$B_I"
    DELAY_PEERS="$DELAY_PEERS delay20-baseline:$B_D"
fi
sleep 1

ping_json() { "$RT" ping 127.0.0.1:"$1" -t "${2}s" --warmup 500ms --json > "$3"; }
iperf_json() { iperf3 -c 127.0.0.1 -p "$1" -t "$SECS" -J > "$2" || true; }

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) (shared with other jobs), kernel $(uname -r)"
for r in $(seq 1 "$ROUNDS"); do
    for peer in $PING_PEERS; do
        ping_json "${peer#*:}" "$SECS" "$WORK/ping.${peer%%:*}.$r.json"
    done
    for peer in $IPERF_PEERS; do
        iperf_json "${peer#*:}" "$WORK/iperf.${peer%%:*}.$r.json"
    done
    for peer in $DELAY_PEERS; do
        ping_json "${peer#*:}" $((SECS + 2)) "$WORK/ping.${peer%%:*}.$r.json"
    done
    echo "round $r/$ROUNDS done" >&2
done

# Many busy connections: one run per proxy (opening them takes a while), after the rounds.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
FDMAX=$(ulimit -n)
CONNS=${CONNS:-10000}
if [ $((CONNS * 2 + 100)) -gt "$FDMAX" ]; then
    CONNS=$(( (FDMAX - 100) / 2 / 100 * 100 ))
    echo "busy conns: the fd limit here is $FDMAX (hard), so $CONNS connections (2 fds each in the proxy)" >&2
fi
BUSY_SECS=${BUSY_SECS:-20}
busy_run() { # NAME BINARY CONNS EXTRA...
    local name=$1 bin=$2 n=$3; shift 3
    local e p pp ep cp peak_t=0 peak_r=0
    e=$(free_port); p=$(free_port)
    python3 bench/busy_conns.py echo "$e" & ep=$!
    "$bin" proxy --listen 127.0.0.1:"$p" --upstream 127.0.0.1:"$e" --max-clients 20000 "$@" >/dev/null 2>&1 & pp=$!
    sleep 1
    python3 bench/busy_conns.py client 127.0.0.1 "$p" "$n" "$BUSY_SECS" > "$WORK/busy.$name.json" & cp=$!
    while kill -0 "$cp" 2>/dev/null; do
        t=$(awk '/^Threads:/{print $2}' /proc/$pp/status 2>/dev/null || echo 0)
        r=$(awk '/^VmRSS:/{print $2}' /proc/$pp/status 2>/dev/null || echo 0)
        [ "${t:-0}" -gt "$peak_t" ] && peak_t=$t
        [ "${r:-0}" -gt "$peak_r" ] && peak_r=$r
        sleep 1
    done
    echo "{\"threads\": $peak_t, \"rss_kib\": $peak_r}" > "$WORK/busy.$name.proc.json"
    kill "$pp" "$ep" 2>/dev/null || true
    wait "$pp" "$ep" 2>/dev/null || true
    echo "busy conns: $name done" >&2
}
BUSY_PEERS="roundtrip roundtrip-delay20"
busy_run roundtrip "$RT" "$CONNS"
busy_run roundtrip-delay20 "$RT" "$CONNS" --delay 20ms
if [ -n "${BASELINE:-}" ]; then
    busy_run baseline "$BASELINE" "${BASE_CONNS:-1000}"
    BUSY_PEERS="$BUSY_PEERS baseline"
fi

python3 - "$WORK" "$ROUNDS" "$PING_PEERS" "$IPERF_PEERS" "$DELAY_PEERS" "$BUSY_PEERS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
busy_peers = sys.argv[6].split()
names = lambda arg: [p.split(":")[0] for p in arg.split()]
ping_peers, iperf_peers, delay_peers = names(sys.argv[3]), names(sys.argv[4]), names(sys.argv[5])
def load(kind, peer):
    return [json.load(open(f"{work}/{kind}.{peer}.{r}.json")) for r in range(1, rounds + 1)]
def ping(peer):
    docs = load("ping", peer)
    return (statistics.median(d["summary"]["rtt"]["p50_ns"] for d in docs),
            statistics.median(d["summary"]["rtt"]["p99_ns"] for d in docs),
            [d["summary"]["rtt"]["p50_ns"] for d in docs])
def iperf(peer):
    docs = load("iperf", peer)
    # A round whose iperf3 run failed (its JSON has no total) is left out.
    v = [d["end"]["sum_received"]["bits_per_second"] for d in docs if "sum_received" in d.get("end", {})]
    return statistics.median(v), v
print(f"\n{rounds} interleaved rounds, medians over rounds\n")
d50, d99, dl = ping("direct")
print(f"{'TCP 64 B RTT':28} {'p50':>10} {'p99':>10} {'p50 added':>10}   per-round p50 (us)")
for peer in ping_peers:
    p50, p99, l = ping(peer)
    print(f"{peer:28} {p50/1e3:8.1f}us {p99/1e3:8.1f}us {(p50-d50)/1e3:8.1f}us   {[round(x/1e3,1) for x in l]}")
dt, _ = iperf("direct")
print(f"\n{'iperf3 1 stream':28} {'Gbit/s':>10} {'x direct':>10}   per-round Gbit/s")
for peer in iperf_peers:
    t, l = iperf(peer)
    print(f"{peer:28} {t/1e9:10.2f} {t/dt:10.2f}   {[round(x/1e9,2) for x in l]}")
print(f"\nproxy --delay 20ms (40 ms RTT; ideal 40 ms + direct {d50/1e3:.1f} us = {(40e6+d50)/1e6:.3f} ms)")
print(f"{'':28} {'p50':>10} {'p99':>10} {'p50 excess':>10}   per-round p50 (ms)")
for peer in delay_peers:
    p50, p99, l = ping(peer)
    print(f"{peer:28} {p50/1e6:8.3f}ms {p99/1e6:8.3f}ms {(p50-40e6-d50)/1e3:8.1f}us   {[round(x/1e6,3) for x in l]}")
print(f"\n{'busy conns (64 B/s each)':28} {'conns':>6} {'threads':>8} {'RSS MiB':>8} {'answered':>9} {'p50':>10} {'p99':>10}")
for peer in busy_peers:
    b = json.load(open(f"{work}/busy.{peer}.json")); pr = json.load(open(f"{work}/busy.{peer}.proc.json"))
    share = b["answered"] / max(1, b["sent"])
    p50 = "-" if b["p50_us"] is None else f"{b['p50_us']/1e3:.2f}ms"
    p99 = "-" if b["p99_us"] is None else f"{b['p99_us']/1e3:.2f}ms"
    print(f"{peer:28} {b['conns']:6} {pr['threads']:8} {pr['rss_kib']/1024:8.1f} {share:9.1%} {p50:>10} {p99:>10}")
PY
