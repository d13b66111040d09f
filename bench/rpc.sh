#!/usr/bin/env bash
# Benchmark of `roundtrip capture rpc`:
#  1. MB/s on a >= 500 MB capture of Redis traffic recorded here (redis-benchmark on loopback, tcpdump);
#  2. speed against `tshark -q -z rpc,srt,100003,3` on an NFS-like capture (NFSv3 READ calls and 8 KiB replies
#     over TCP, written by a generator below), same file, same run.
# Rounds are interleaved; medians are reported. The big files are deleted at the end.
#
# Usage: bench/rpc.sh [ROUNDS] (run as root for tcpdump; needs redis-server, redis-benchmark, tcpdump, tshark,
# python3). Set MIN_MB to change the size of the Redis capture (default 550).
set -euo pipefail
ROUNDS=${1:-5}
MIN_MB=${MIN_MB:-550}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
WORK=$(mktemp -d /tmp/rt-rpc-bench.XXXXXX)
REDIS_PID=""
TCPDUMP_PID=""
cleanup() {
    [ -n "$TCPDUMP_PID" ] && kill "$TCPDUMP_PID" 2>/dev/null || true
    [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
secs() { # run a command, print its wall time in seconds; its CPU time (user+sys) goes to $WORK/cpu.$1tag
    local tag=$1
    shift
    /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$@" >/dev/null 2>&1 || true
    read -r e u s <"$WORK/time"
    echo "$u + $s" | bc -l >>"$WORK/cpu.$tag"
    echo "$e"
}

# ---- 1. a Redis capture of at least MIN_MB ----
PORT=$((20000 + $$ % 20000))
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS_PCAP=$WORK/redis.pcap
tcpdump -i lo -s 0 -B 262144 -w "$REDIS_PCAP" "tcp port $PORT" 2>"$WORK/tcpdump.log" &
TCPDUMP_PID=$!
sleep 1
while :; do
    redis-benchmark -p "$PORT" -c 50 -n 1000000 -P 8 -d 100 -t set,get -q >/dev/null
    size=$(stat -c %s "$REDIS_PCAP")
    [ "$size" -ge $((MIN_MB * 1000000)) ] && break
done
sleep 1
kill -INT "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2>/dev/null || true; TCPDUMP_PID=""
kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""
grep -E "captured|dropped" "$WORK/tcpdump.log" || true
REDIS_MB=$(echo "$(stat -c %s "$REDIS_PCAP") / 1000000" | bc -l)
cat "$REDIS_PCAP" >/dev/null # page cache

# ---- 2. an NFS-like capture ----
NFS_PCAP=$WORK/nfs.pcap
python3 - "$NFS_PCAP" <<'PY'
import struct, sys
out = open(sys.argv[1], "wb")
out.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
def frame(ts, src, dst, sport, dport, seq, ack, flags, payload):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xffffffff, ack & 0xffffffff, 5 << 4, flags, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0x4000, 64, 6, 0, src, dst)
    eth = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00"
    data = eth + ip + tcp + payload
    sec, usec = divmod(ts, 1_000_000)
    out.write(struct.pack("<IIII", sec, usec, len(data), len(data)))
    out.write(data)
cli, srv = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
ts = 1_700_000_000_000_000
conns = 8
cseq = [1000 * (i + 1) for i in range(conns)]
sseq = [9000000 * (i + 1) for i in range(conns)]
reply_body = b"\x5a" * 8192
for n in range(20000):
    c = n % conns
    xid = 0x10000000 + n
    call = struct.pack("!IIIIIIIIIII", xid, 0, 2, 100003, 3, 6, 0, 0, 0, 0, 32) + b"\x01" * 32 + struct.pack("!QI", n * 8192, 8192)
    rec = struct.pack("!I", 0x80000000 | len(call)) + call
    ts += 50
    frame(ts, cli, srv, 50000 + c, 2049, cseq[c], sseq[c], 0x18, rec)
    cseq[c] += len(rec)
    reply = struct.pack("!IIIIIII", xid, 1, 0, 0, 0, 0, 0) + b"\x00" * 84 + struct.pack("!III", 8192, 1, 8192) + reply_body
    rrec = struct.pack("!I", 0x80000000 | len(reply)) + reply
    ts += 300 + (n * 7919) % 700
    for off in range(0, len(rrec), 1448):
        seg = rrec[off:off + 1448]
        frame(ts, srv, cli, 2049, 50000 + c, sseq[c], cseq[c], 0x18 if off + 1448 >= len(rrec) else 0x10, seg)
        sseq[c] += len(seg)
        ts += 12
out.close()
PY
NFS_MB=$(echo "$(stat -c %s "$NFS_PCAP") / 1000000" | bc -l)
cat "$NFS_PCAP" >/dev/null

printf 'Redis capture: %.0f MB; NFS-like capture: %.0f MB; %d rounds, interleaved; machine shared with other builds\n' "$REDIS_MB" "$NFS_MB" "$ROUNDS"
"$RT" capture rpc "$NFS_PCAP" --top 0 | head -4
"$RT" capture rpc "$REDIS_PCAP" --top 0 | head -6
tshark -q -z rpc,srt,100003,3 -r "$NFS_PCAP" 2>/dev/null | grep -E "READ|Procedure"

: >"$WORK/rt_redis"; : >"$WORK/rt_nfs"; : >"$WORK/ts_nfs"; : >"$WORK/rss"
for r in $(seq "$ROUNDS"); do
    secs redis "$RT" capture rpc "$REDIS_PCAP" --json >>"$WORK/rt_redis"
    secs nfs "$RT" capture rpc "$NFS_PCAP" --json >>"$WORK/rt_nfs"
    secs tshark tshark -q -z rpc,srt,100003,3 -r "$NFS_PCAP" >>"$WORK/ts_nfs"
done
/usr/bin/time -f "%M" -o "$WORK/rss" "$RT" capture rpc "$REDIS_PCAP" --json >/dev/null
t_redis=$(median <"$WORK/rt_redis")
t_nfs=$(median <"$WORK/rt_nfs")
t_ts=$(median <"$WORK/ts_nfs")
c_redis=$(median <"$WORK/cpu.redis")
printf 'capture rpc, Redis %.0f MB:          median %.3f s = %.0f MB/s (target >= 300 MB/s); CPU time %.3f s = %.0f MB/s; peak RSS %s KiB\n' \
    "$REDIS_MB" "$t_redis" "$(echo "$REDIS_MB / $t_redis" | bc -l)" "$c_redis" "$(echo "$REDIS_MB / $c_redis" | bc -l)" "$(cat "$WORK/rss")"
printf 'capture rpc, NFS-like %.0f MB:       median %.3f s = %.0f MB/s\n' "$NFS_MB" "$t_nfs" "$(echo "$NFS_MB / $t_nfs" | bc -l)"
printf 'tshark -q -z rpc,srt, same file:   median %.3f s = %.0f MB/s\n' "$t_ts" "$(echo "$NFS_MB / $t_ts" | bc -l)"
uptime
printf 'speed-up over tshark: %.1fx (target >= 20x)\n' "$(echo "$t_ts / $t_nfs" | bc -l)"
