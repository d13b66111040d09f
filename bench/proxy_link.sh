#!/usr/bin/env bash
# Benchmark: `roundtrip proxy` pass-through on a link-limited path, the case users run it in (a relay in front
# of a database or a service across a network), against the same path without the proxy and through HAProxy.
#
# bench/proxy.sh measures the relay on loopback, where the bytes never wait for a link and both TCP hops are
# pure CPU: there a second hop costs the same kernel work again and a 2-core machine cannot reach direct speed
# (HAProxy with splice measures the same ratio as ours). Here three network namespaces stand for client,
# middle host and server, joined by two veth pairs whose every end is shaped by a tbf qdisc to RATE:
#
#   client 10.231.1.1 --veth/tbf-- 10.231.1.2 middle 10.231.2.1 --veth/tbf-- 10.231.2.2 server (iperf3 -s)
#
#   direct:    the middle host forwards (ip_forward), the client talks to the server
#   roundtrip: `roundtrip proxy` on the middle host, no impairment (splice pass-through)
#   haproxy:   HAProxy `mode tcp` with splice both ways on the middle host, when installed
#
# Both ways cross both links, so the link is the same for every peer; what differs is forwarding vs relaying.
# iperf3 one TCP stream, RTT with `roundtrip ping` 64 B. Interleaved rounds, medians.
# Usage: bench/proxy_link.sh [ROUNDS (default 5)] [SECONDS per run (default 5)]   (root: namespaces, tc)
# RATES="1gbit 4gbit" (default) lists the link rates to run.
set -euo pipefail

ROUNDS=${1:-5}
SECS=${2:-5}
RATES=${RATES:-1gbit 4gbit}
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
for t in iperf3 ip tc python3; do
    command -v "$t" >/dev/null || { echo "bench/proxy_link.sh: $t is not installed" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "bench/proxy_link.sh: needs root (network namespaces, tc)" >&2; exit 1; }

TAG=rtpl$$
C=${TAG}c M=${TAG}m S=${TAG}s
WORK=$(mktemp -d)
cleanup() {
    for ns in "$C" "$M" "$S"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    done
    sleep 0.3
    for ns in "$C" "$M" "$S"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

for ns in "$C" "$M" "$S"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add c0 netns "$C" type veth peer name m0 netns "$M"
ip link add m1 netns "$M" type veth peer name s0 netns "$S"
ip -n "$C" addr add 10.231.1.1/24 dev c0
ip -n "$M" addr add 10.231.1.2/24 dev m0
ip -n "$M" addr add 10.231.2.1/24 dev m1
ip -n "$S" addr add 10.231.2.2/24 dev s0
for pair in "$C:c0" "$M:m0" "$M:m1" "$S:s0"; do ip -n "${pair%%:*}" link set "${pair#*:}" up; done
ip -n "$C" route add default via 10.231.1.2
ip -n "$S" route add default via 10.231.2.1
ip netns exec "$M" sysctl -qw net.ipv4.ip_forward=1

shape() { # RATE: every veth end sends at most RATE
    for pair in "$C:c0" "$M:m0" "$M:m1" "$S:s0"; do
        tc -n "${pair%%:*}" qdisc replace dev "${pair#*:}" root tbf rate "$1" burst 4mb latency 50ms
    done
}

ip netns exec "$S" iperf3 -s -B 10.231.2.2 -p 5201 >/dev/null 2>&1 &
ip netns exec "$S" "$RT" server --bind 10.231.2.2 --port 7000 >/dev/null 2>&1 &
ip netns exec "$M" "$RT" proxy --listen 10.231.1.2:6201 --upstream 10.231.2.2:5201 >/dev/null 2>&1 &
ip netns exec "$M" "$RT" proxy --listen 10.231.1.2:6000 --upstream 10.231.2.2:7000 >/dev/null 2>&1 &
IPERF_PEERS="direct:10.231.2.2:5201 roundtrip:10.231.1.2:6201"
PING_PEERS="direct:10.231.2.2:7000 roundtrip:10.231.1.2:6000"
if command -v haproxy >/dev/null; then
    haproxy_splice_conf "$WORK/haproxy.cfg" 10.231.1.2:6202 10.231.2.2:5201
    ip netns exec "$M" haproxy -f "$WORK/haproxy.cfg" -db >/dev/null 2>&1 &
    IPERF_PEERS="$IPERF_PEERS haproxy:10.231.1.2:6202"
fi
sleep 1

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) (shared with other jobs), kernel $(uname -r)"
for rate in $RATES; do
    shape "$rate"
    for r in $(seq 1 "$ROUNDS"); do
        for peer in $IPERF_PEERS; do
            a=${peer#*:}
            ip netns exec "$C" iperf3 -c "${a%:*}" -p "${a##*:}" -t "$SECS" -J \
                > "$WORK/iperf.$rate.${peer%%:*}.$r.json" || true
        done
        for peer in $PING_PEERS; do
            ip netns exec "$C" "$RT" ping "${peer#*:}" -t 2s --warmup 500ms --json \
                > "$WORK/ping.$rate.${peer%%:*}.$r.json"
        done
        echo "$rate: round $r/$ROUNDS done" >&2
    done
done

python3 - "$WORK" "$ROUNDS" "$RATES" "$IPERF_PEERS" "$PING_PEERS" <<'PY'
import json, statistics, sys
work, rounds, rates = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
names = lambda arg: [p.split(":")[0] for p in arg.split()]
iperf_peers, ping_peers = names(sys.argv[4]), names(sys.argv[5])
def docs(kind, rate, peer):
    return [json.load(open(f"{work}/{kind}.{rate}.{peer}.{r}.json")) for r in range(1, rounds + 1)]
def iperf(rate, peer):
    # A round whose iperf3 run failed (its JSON has no total) is left out.
    v = [d["end"]["sum_received"]["bits_per_second"] for d in docs("iperf", rate, peer)
         if "sum_received" in d.get("end", {})]
    return statistics.median(v), v
print(f"\n{rounds} interleaved rounds per link rate, medians over rounds")
for rate in rates:
    dt, _ = iperf(rate, "direct")
    print(f"\nlink {rate} each hop   {'Gbit/s':>8} {'x direct':>9}   per-round Gbit/s")
    for peer in iperf_peers:
        t, v = iperf(rate, peer)
        print(f"  {peer:20} {t/1e9:8.3f} {t/dt:9.2f}   {[round(x/1e9, 3) for x in v]}")
    print(f"  {'TCP 64 B RTT':20} {'p50':>8} {'p99':>9}")
    for peer in ping_peers:
        d = docs("ping", rate, peer)
        p50 = statistics.median(x["summary"]["rtt"]["p50_ns"] for x in d)
        p99 = statistics.median(x["summary"]["rtt"]["p99_ns"] for x in d)
        print(f"  {peer:20} {p50/1e3:6.1f}us {p99/1e3:7.1f}us")
PY
