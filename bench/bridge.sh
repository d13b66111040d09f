#!/usr/bin/env bash
# Benchmark: `roundtrip proxy --bridge` (frames between two veths of a middle namespace) against a direct veth
# path, and the accuracy of its delay, loss and TCP behaviour. Root (network namespaces).
#
#   RTT:        roundtrip ping (TCP, 64 B) direct, and across the bridge at --rtt 40ms: median and p99
#               (ideal: 40 ms + the direct RTT; goal: median within 0.3 ms, p99 within 1 ms); and with
#               --cpu-wake (idle CPUs kept polling around each release, so the receiver wakes at once); and
#               with the endpoints (server and ping) at real-time priority (chrt -f 1), which separates the
#               bridge's own timing from the endpoints waking up late on a loaded machine
#   throughput: iperf3 one TCP stream, direct veth vs across the bridge without impairment (goal >= 0.5x)
#   loss:       100,000 UDP pings with --loss 1% one way: measured loss vs the binomial 99.9% interval
#   bursts:     100,000 UDP pings with --loss 1% --loss-burst 4 one way (Gilbert-Elliott): mean length of the
#               runs of lost sequence numbers (ping --full-log) vs 4, and the loss vs 1%
#   handshake:  the client's handshake RTT in its own capture (`capture flows`) at --rtt 40ms (the ping
#               connections) and at --rtt 20ms (the curl downloads) (goal: within 0.3 ms of the RTT + direct)
#   TCP:        iperf3 across the bridge at --rtt 20ms, captured at the client: `capture timeline --svg`
#               (the sequence graph) and the bytes the client sent per 20 ms from its own capture (slow start
#               doubling per RTT, then a window-limited plateau)
#   what-if:    a curl download (one connection, 4 MB from python's http.server) captured on the direct path,
#               predicted at 20 ms by `capture whatif --path tcp`, then run across the bridge at --rtt 20ms
#               and timed from its own client capture (first to last packet) (goal: within 15%)
#
# Interleaved: every round runs every peer once, in turn; the figures are medians over the rounds.
# Usage: bench/bridge.sh [ROUNDS (default 5)] [SECONDS per run (default 3)]   (OUT=DIR keeps the SVG)
set -euo pipefail

ROUNDS=${1:-5}
SECS=${2:-3}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
for t in iperf3 tcpdump python3 curl ip; do
    command -v "$t" >/dev/null || { echo "bench/bridge.sh: $t is not installed (apt-get install $t)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "bench/bridge.sh: needs root (network namespaces)" >&2; exit 1; }

T=brb$$
WORK=$(mktemp -d)
OUT=${OUT:-$WORK}
NSS=()
cleanup() {
    for n in "${NSS[@]}"; do
        for p in $(ip netns pids "$n" 2>/dev/null); do kill -INT "$p" 2>/dev/null || true; done
    done
    sleep 0.5
    for n in "${NSS[@]}"; do
        for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
        ip netns del "$n" 2>/dev/null || true
    done
    [ "$OUT" = "$WORK" ] && rm -rf "$WORK" || true
}
trap cleanup EXIT

ns() { ip netns add "$1"; NSS+=("$1"); ip -n "$1" link set lo up; }
X() { local n=$1; shift; ip netns exec "$n" "$@"; }

# direct: D-c 10.250.9.1 <-> D-s 10.250.9.2
ns "${T}Dc"; ns "${T}Ds"
ip link add eth0 netns "${T}Dc" type veth peer name eth0 netns "${T}Ds"
ip -n "${T}Dc" addr add 10.250.9.1/24 dev eth0; ip -n "${T}Dc" link set eth0 up
ip -n "${T}Ds" addr add 10.250.9.2/24 dev eth0; ip -n "${T}Ds" link set eth0 up

# bridged NAME SUBNET ARGS...: NAME-c 10.250.SUBNET.1 <-> [NAME-b: roundtrip proxy --bridge ba,bb ARGS] <-> NAME-s .2
bridged() {
    local n=$1 s=$2; shift 2
    ns "${T}${n}c"; ns "${T}${n}b"; ns "${T}${n}s"
    X "${T}${n}b" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip link add eth0 netns "${T}${n}c" type veth peer name ba netns "${T}${n}b"
    ip link add eth0 netns "${T}${n}s" type veth peer name bb netns "${T}${n}b"
    ip -n "${T}${n}b" link set ba up; ip -n "${T}${n}b" link set bb up
    ip -n "${T}${n}c" addr add "10.250.$s.1/24" dev eth0; ip -n "${T}${n}c" link set eth0 up
    ip -n "${T}${n}s" addr add "10.250.$s.2/24" dev eth0; ip -n "${T}${n}s" link set eth0 up
    X "${T}${n}b" "$RT" proxy --bridge ba,bb "$@" > "$WORK/bridge.$n.out" 2>&1 &
}
bridged B0 10
bridged B40 11 --rtt 40ms
bridged B40w 14 --rtt 40ms --cpu-wake
bridged B20 12 --rtt 20ms
bridged BL 13 --loss 1% --direction up
bridged BG 15 --loss 1% --loss-burst 4 --direction up
bridged B40r 16 --rtt 40ms

# servers: roundtrip server, iperf3, and a web server with 2 MB files
head -c 4000000 /dev/urandom > "$WORK/f4m"
for pair in D:9 B0:10 B40:11 B20:12 BL:13 B40w:14 BG:15; do
    n=${pair%%:*}; s=${pair#*:}
    X "${T}${n}s" "$RT" server --bind "10.250.$s.2" >/dev/null 2>&1 &
    X "${T}${n}s" iperf3 -s -B "10.250.$s.2" >/dev/null 2>&1 &
done
X "${T}B40rs" chrt -f 1 "$RT" server --bind 10.250.16.2 >/dev/null 2>&1 &
for pair in D:9 B20:12; do
    n=${pair%%:*}
    (cd "$WORK" && X "${T}${n}s" python3 -m http.server 8080 --bind "10.250.${pair#*:}.2" >/dev/null 2>&1 &)
done
sleep 2

ping_json() { X "${T}$1c" "$RT" ping "10.250.$2.2" -t "${3}s" --warmup 500ms --json > "$4"; }
iperf_json() { X "${T}$1c" iperf3 -c "10.250.$2.2" -t "$SECS" -J > "$3"; }
curl_run() { # NAME SUBNET FILE.pcap: the workload, captured at the client
    # Started without a shell function in between: $! is tcpdump itself (ip netns exec execs it).
    ip netns exec "${T}$1c" tcpdump --immediate-mode -B 65536 -U -n -i eth0 -w "$3" tcp port 8080 2>/dev/null & local tp=$!
    sleep 1
    X "${T}$1c" curl -s -o /dev/null "http://10.250.$2.2:8080/f4m"
    sleep 0.5; kill -INT $tp; wait $tp 2>/dev/null || true
}

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) (shared with other jobs), kernel $(uname -r)"
for r in $(seq 1 "$ROUNDS"); do
    ping_json D 9 "$SECS" "$WORK/ping.direct.$r.json"
    # The ping's own connection is captured at the client: its handshake RTT at 40 ms.
    ip netns exec "${T}B40c" tcpdump --immediate-mode -U -n -s 128 -i eth0 -w "$WORK/ping.bridge40.$r.pcap" tcp 2>/dev/null & TP=$!
    sleep 1
    ping_json B40 11 $((SECS + 2)) "$WORK/ping.bridge40.$r.json"
    sleep 0.5; kill -INT $TP; wait $TP 2>/dev/null || true
    "$RT" capture flows "$WORK/ping.bridge40.$r.pcap" --json > "$WORK/flows.bridge40.$r.json"
    ping_json B40w 14 $((SECS + 2)) "$WORK/ping.bridge40w.$r.json"
    X "${T}B40rc" chrt -f 1 "$RT" ping 10.250.16.2 -t "$((SECS + 2))s" --warmup 500ms --json > "$WORK/ping.bridge40r.$r.json"
    iperf_json D 9 "$WORK/iperf.direct.$r.json"
    iperf_json B0 10 "$WORK/iperf.bridge.$r.json"
    curl_run D 9 "$WORK/curl.direct.$r.pcap"
    curl_run B20 12 "$WORK/curl.bridge20.$r.pcap"
    "$RT" capture whatif "$WORK/curl.direct.$r.pcap" --rtt 20ms --path tcp --json > "$WORK/whatif.$r.json"
    "$RT" capture flows "$WORK/curl.bridge20.$r.pcap" --json > "$WORK/flows.bridge20.$r.json"
    echo "round $r/$ROUNDS done" >&2
done

# loss: 100,000 UDP pings, 1% one way
X "${T}BLc" "$RT" ping -u 10.250.13.2 -c 100000 --warmup 0 --timeout 20ms --json > "$WORK/loss.json"
# bursts: the same with --loss-burst 4; every received round trip logged, so the lost ones are the gaps
X "${T}BGc" "$RT" ping -u 10.250.15.2 -c 100000 --warmup 0 --timeout 20ms --full-log "$WORK/burst.csv" --json > "$WORK/burst.json"

# TCP across 20 ms: the client's capture of one iperf3 stream, drawn
ip netns exec "${T}B20c" tcpdump --immediate-mode -B 65536 -U -n -s 128 -i eth0 -w "$WORK/iperf20.pcap" tcp port 5201 2>/dev/null & TP=$!
sleep 1
X "${T}B20c" iperf3 -c 10.250.12.2 -t 4 -J > "$WORK/iperf20.json"
sleep 0.5; kill -INT $TP; wait $TP 2>/dev/null || true
DATAFLOW=$("$RT" capture flows "$WORK/iperf20.pcap" --json | python3 -c '
import json,sys
f=max(json.load(sys.stdin)["flows"], key=lambda f: f["client_to_server"]["wire_bytes"])
print(f["client"]+"-"+f["server"])')
"$RT" capture timeline "$WORK/iperf20.pcap" --flow "$DATAFLOW" --svg "$OUT/bridge-20ms-timeline.svg" > /dev/null
"$RT" capture flows "$WORK/iperf20.pcap" > "$WORK/flows20.txt"

python3 - "$WORK" "$ROUNDS" "$OUT" <<'PY'
import json, statistics, struct, sys, glob
work, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
med = statistics.median
def load(kind, peer):
    return [json.load(open(f"{work}/{kind}.{peer}.{r}.json")) for r in range(1, rounds + 1)]
def pcap_span(path):
    b = open(path, "rb").read()
    magic = struct.unpack("<I", b[:4])[0]
    ns = magic in (0xa1b23c4d,)
    off, first, last = 24, None, None
    while off + 16 <= len(b):
        s, f, incl, _ = struct.unpack("<IIII", b[off:off + 16])
        t = s + f / (1e9 if ns else 1e6)
        first = t if first is None else first
        last = t
        off += 16 + incl
    return last - first
print(f"\n{rounds} interleaved rounds, medians over rounds\n")
d = [x["summary"]["rtt"]["p50_ns"] for x in load("ping", "direct")]
d99 = [x["summary"]["rtt"]["p99_ns"] for x in load("ping", "direct")]
b50 = [x["summary"]["rtt"]["p50_ns"] for x in load("ping", "bridge40")]
b99 = [x["summary"]["rtt"]["p99_ns"] for x in load("ping", "bridge40")]
ideal = 40e6 + med(d)
print(f"TCP 64 B RTT direct veth:        p50 {med(d)/1e3:.1f} us   p99 {med(d99)/1e3:.1f} us   per-round p50 {[round(x/1e3,1) for x in d]}")
print(f"across the bridge, --rtt 40ms:   p50 {med(b50)/1e6:.3f} ms (ideal {ideal/1e6:.3f}; excess {(med(b50)-ideal)/1e3:+.1f} us)"
      f"   p99 {med(b99)/1e6:.3f} ms (excess {(med(b99)-ideal)/1e3:+.1f} us)")
print(f"   per-round p50 (ms) {[round(x/1e6,3) for x in b50]}  p99 {[round(x/1e6,3) for x in b99]}")
w50 = [x["summary"]["rtt"]["p50_ns"] for x in load("ping", "bridge40w")]
w99 = [x["summary"]["rtt"]["p99_ns"] for x in load("ping", "bridge40w")]
print(f"the same with --cpu-wake:        p50 {med(w50)/1e6:.3f} ms (excess {(med(w50)-ideal)/1e3:+.1f} us)   p99 {med(w99)/1e6:.3f} ms (excess {(med(w99)-ideal)/1e3:+.1f} us)")
print(f"   per-round p50 (ms) {[round(x/1e6,3) for x in w50]}  p99 {[round(x/1e6,3) for x in w99]}")
r50 = [x["summary"]["rtt"]["p50_ns"] for x in load("ping", "bridge40r")]
r99 = [x["summary"]["rtt"]["p99_ns"] for x in load("ping", "bridge40r")]
print(f"endpoints at chrt -f 1:          p50 {med(r50)/1e6:.3f} ms (excess {(med(r50)-ideal)/1e3:+.1f} us)   p99 {med(r99)/1e6:.3f} ms (excess {(med(r99)-ideal)/1e3:+.1f} us)")
print(f"   per-round p50 (ms) {[round(x/1e6,3) for x in r50]}  p99 {[round(x/1e6,3) for x in r99]}")
it = lambda p: [x["end"]["sum_received"]["bits_per_second"] for x in load("iperf", p)]
di, bi = it("direct"), it("bridge")
print(f"\niperf3 1 stream direct veth:     {med(di)/1e9:.2f} Gbit/s   per round {[round(x/1e9,2) for x in di]}")
print(f"across the bridge (no impairment): {med(bi)/1e9:.2f} Gbit/s = {med(bi)/med(di):.2f}x direct   per round {[round(x/1e9,2) for x in bi]}")
l = json.load(open(f"{work}/loss.json"))["summary"]
n, lost, p = l["sent"], l["lost"], 0.01
half = 3.29 * (p * (1 - p) / n) ** 0.5
print(f"\nloss 1% one way: {lost} of {n} UDP pings = {100*lost/n:.3f}% (binomial 99.9% interval {100*(p-half):.3f}%..{100*(p+half):.3f}%)"
      f" -> {'inside' if abs(lost/n-p) < half else 'OUTSIDE'}")
pred, meas = [], []
for r in range(1, rounds + 1):
    w = json.load(open(f"{work}/whatif.{r}.json"))
    pred.append(w["predictions"][0]["predicted_s"])
    meas.append(pcap_span(f"{work}/curl.bridge20.{r}.pcap"))
seqs = sorted(int(l.split(",")[0]) for l in open(f"{work}/burst.csv").read().splitlines()[1:] if l)
bn = json.load(open(f"{work}/burst.json"))["summary"]["sent"]
# (a run of losses before the first or after the last answered ping is not seen: 1% of pings at most)
runs, prev = [], seqs[0] - 1
for s in seqs:
    if s - prev > 1:
        runs.append(s - prev - 1)
    prev = s
runs = [x for x in runs if x > 0]
lost_b = bn - len(seqs)
# Runs are geometric with mean 4: the sample mean of k runs has standard deviation sqrt(4*3/k).
k = len(runs)
half_b = 3.29 * (12 / max(k, 1)) ** 0.5
print(f"bursts (--loss 1% --loss-burst 4, one way): {lost_b} of {bn} lost = {100*lost_b/bn:.3f}%, {k} runs of lost pings,"
      f" mean length {sum(runs)/max(k,1):.2f} (configured 4; 99.9% interval for {k} runs {4-half_b:.2f}..{4+half_b:.2f})"
      f" -> {'inside' if abs(sum(runs)/max(k,1)-4) < half_b else 'OUTSIDE'}; longest {max(runs) if runs else 0}")
print(f"\nwhat-if, curl 4 MB: predicted at 20 ms {med(pred):.3f} s, measured across the bridge at --rtt 20ms {med(meas):.3f} s"
      f" -> error {100*(med(pred)/med(meas)-1):+.1f}%   per round predicted {[round(x,3) for x in pred]} measured {[round(x,3) for x in meas]}")
def handshakes(kind):
    return [f["handshake"]["rtt_ns"] for r in range(1, rounds + 1)
            for f in json.load(open(f"{work}/flows.{kind}.{r}.json"))["flows"] if f.get("handshake")]
h40 = handshakes("bridge40")
print(f"\nclient's TCP handshake RTT (capture flows on its own capture) at --rtt 40ms: median {med(h40)/1e6:.3f} ms"
      f" (excess over 40 ms + direct p50: {(med(h40)-40e6-med(d))/1e3:+.1f} us)   all {[round(x/1e6,3) for x in h40]}")
hs = handshakes("bridge20")
print(f"\nclient's TCP handshake RTT (capture flows on its own capture) at --rtt 20ms: median {med(hs)/1e6:.3f} ms"
      f" (excess over 20 ms + direct p50: {(med(hs)-20e6-med(d))/1e3:+.1f} us)   all {[round(x/1e6,3) for x in hs]}")
print(f"\nTCP at 20 ms: sequence graph {out}/bridge-20ms-timeline.svg")
# Bytes the client sent per 20 ms (highest sequence number reached), from its own capture of the iperf3 stream.
b = open(f"{work}/iperf20.pcap", "rb").read()
nsres = struct.unpack("<I", b[:4])[0] == 0xa1b23c4d
off, hi, isn0, t0, per = 24, {}, {}, None, {}
while off + 16 <= len(b):
    s_, f_, incl, _ = struct.unpack("<IIII", b[off:off + 16])
    pkt = b[off + 16:off + 16 + incl]
    off += 16 + incl
    t = s_ + f_ / (1e9 if nsres else 1e6)
    if len(pkt) < 54 or pkt[12:14] != b"\x08\x00" or pkt[23] != 6:
        continue
    ihl = (pkt[14] & 15) * 4
    tcp = pkt[14 + ihl:]
    total = struct.unpack(">H", pkt[16:18])[0]
    sport, dport, seq = struct.unpack(">HHI", tcp[:8])
    payload = total - ihl - (tcp[12] >> 4) * 4
    if dport != 5201 or payload <= 0:
        continue
    key = (sport, dport)
    isn0.setdefault(key, seq)
    per.setdefault(key, []).append((t, (seq - isn0[key]) % 2**32 + payload))
flow = max(per.values(), key=lambda v: max(x[1] for x in v))
t0 = flow[0][0]
bins = {}
for t, end in flow:
    i = int((t - t0) / 0.020)
    bins[i] = max(bins.get(i, 0), end)
reach, last = [], 0
for i in range(max(bins) + 1):
    last = max(last, bins.get(i, last))
    reach.append(last)
sent = [reach[0]] + [reach[i] - reach[i - 1] for i in range(1, len(reach))]
print("  KB sent per 20 ms, first 14 RTTs:", [round(x / 1e3) for x in sent[:14]])
tail = sent[len(sent) // 2:]
print(f"  second half of the run: median {med(tail)/1e3:.0f} KB per 20 ms ({8*med(tail)/0.020/1e6:.0f} Mbit/s),"
      f" min {min(tail)/1e3:.0f}, max {max(tail)/1e3:.0f}")
PY
echo "capture flows on it (the data connection is the one with bytes c>s):"
grep -v '^diagnosis\|^  #' "$WORK/flows20.txt" | sed -n '3,$p'
echo "bridge summaries (late = released > 250 us after the planned time):"
for n in B40 B40w B40r B0; do
    for p in $(ip netns pids "${T}${n}b"); do kill -INT "$p"; done
done
sleep 1
for n in B40 B40w B40r B0; do echo "-- $n"; grep -A12 'frames in' "$WORK/bridge.$n.out" | grep 'frames out\|late\|latest\|queue full' || true; done
