#!/usr/bin/env bash
# Benchmark of `roundtrip capture rpc` on SMB2 against `tshark -q -z smb2,srt`, same file, same run.
# Records a Samba capture here: smbd (Debian `samba`) on a free loopback port with a generated smb.conf and a
# temp share, tcpdump on that port, one smbclient session that lists the share LS times, gets a SIZE_MB file
# GETS times and puts it back once. Then times both tools on the capture, interleaved, medians, and prints
# their per-command counts and means side by side (tshark's SRT is our time to the last byte), and the bytes we
# count for READ and WRITE (each should be GETS x SIZE_MB and SIZE_MB: the check on READ/WRITE counts where
# tshark reports Malformed packets, which it does on 8 MiB messages over loopback).
#
# Usage: bench/rpc_smb2.sh [ROUNDS] [SIZE_MB] [GETS] [LS] (run as root: smbd and tcpdump; needs smbd,
# smbclient, tcpdump, tshark, python3). The files are deleted at the end.
set -euo pipefail
ROUNDS=${1:-5}
SIZE_MB=${2:-100}
GETS=${3:-3}
LS=${4:-2000}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=$PWD/target/release/roundtrip
WORK=$(mktemp -d /tmp/rt-smb2-bench.XXXXXX)
SMBD_PID=""
TCPDUMP_PID=""
cleanup() {
    [ -n "$TCPDUMP_PID" ] && kill -INT "$TCPDUMP_PID" 2>/dev/null || true
    [ -n "$SMBD_PID" ] && kill "$SMBD_PID" 2>/dev/null || true
    sleep 0.5
    rm -rf "$WORK"
}
trap cleanup EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
secs() { # run a command, print its wall time in seconds (nanosecond clock: /usr/bin/time has 10 ms steps)
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1 || true
    t1=$(date +%s%N)
    echo "($t1 - $t0) / 1000000000" | bc -l
}

. "$(dirname "$0")/lib.sh"
PORT=$(free_port)
samba_conf "$WORK" "$PORT"
head -c $((SIZE_MB * 1000000)) /dev/urandom >"$WORK/share/big"
# setsid: smbd signals its process group when it stops
setsid smbd --foreground --no-process-group --debug-stdout -s "$WORK/smb.conf" >"$WORK/smbd.out" 2>&1 &
SMBD_PID=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
done
PCAP=$WORK/smb.pcap
tcpdump -i lo -s 0 -B 262144 -U -w "$PCAP" "tcp port $PORT" 2>"$WORK/tcpdump.log" &
TCPDUMP_PID=$!
sleep 1
CMDS=$(python3 -c "print('; '.join(['ls'] * $LS + ['get big /dev/null'] * $GETS + ['put $WORK/share/big back']))")
smbclient "//127.0.0.1/share" -p "$PORT" -N -c "$CMDS" >/dev/null 2>&1
sleep 1
kill -INT "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2>/dev/null || true; TCPDUMP_PID=""
grep -E "captured|dropped" "$WORK/tcpdump.log" || true
MB=$(echo "$(stat -c %s "$PCAP") / 1000000" | bc -l)
cat "$PCAP" >/dev/null # page cache

printf 'SMB2 capture: %.0f MB (%d x ls, %d x get of %d MB, 1 put); %d rounds, interleaved; machine shared with other builds\n' \
    "$MB" "$LS" "$GETS" "$SIZE_MB" "$ROUNDS"
"$RT" capture rpc "$PCAP" --json >"$WORK/rt.json"
tshark -r "$PCAP" -d "tcp.port==$PORT,nbss" -q -z smb2,srt 2>/dev/null >"$WORK/ts.txt"
python3 - "$WORK/rt.json" "$WORK/ts.txt" <<'PY'
import json, sys
ops = {o["op"]: o for o in json.load(open(sys.argv[1]))["report"]["ops"]}
names = ["NEGOTIATE", "SESSION_SETUP", "LOGOFF", "TREE_CONNECT", "TREE_DISCONNECT", "CREATE", "CLOSE", "FLUSH",
         "READ", "WRITE", "LOCK", "IOCTL", "CANCEL", "ECHO", "FIND", "CHANGE_NOTIFY", "QUERY_INFO", "SET_INFO",
         "OPLOCK_BREAK"]
print(f"{'command':<16} {'tshark calls':>12} {'ours':>8} {'tshark avg':>11} {'ours last':>11} {'ours first':>11}")
for line in open(sys.argv[2]):
    w = line.split()
    if len(w) < 7 or not w[0].isdigit():
        continue
    name = names[int(w[0])] if int(w[0]) < len(names) else w[0]
    o = ops.get(name, {"last_byte": {"count": 0, "mean_ns": 0}, "first_byte": {"mean_ns": 0}})
    print(f"{name:<16} {w[-5]:>12} {o['last_byte']['count']:>8} {float(w[-2]):>11.6f} "
          f"{o['last_byte']['mean_ns'] / 1e9:>11.6f} {o['first_byte']['mean_ns'] / 1e9:>11.6f}")
for name in ("READ", "WRITE"):
    if name in ops:
        print(f"{name} bytes (ours): {ops[name].get('bytes')}")
PY
echo "tshark expert errors (reassembly of the large READ/WRITE messages):"
tshark -r "$PCAP" -d "tcp.port==$PORT,nbss" -q -z expert 2>/dev/null | grep -E "Malformed" || echo "  none"

: >"$WORK/rt"; : >"$WORK/ts"
for _ in $(seq "$ROUNDS"); do
    secs "$RT" capture rpc "$PCAP" --json >>"$WORK/rt"
    secs tshark -r "$PCAP" -d "tcp.port==$PORT,nbss" -q -z smb2,srt >>"$WORK/ts"
done
t_rt=$(median <"$WORK/rt")
t_ts=$(median <"$WORK/ts")
printf 'capture rpc:            median %.3f s = %.0f MB/s\n' "$t_rt" "$(echo "$MB / $t_rt" | bc -l)"
printf 'tshark -z smb2,srt:     median %.3f s = %.0f MB/s\n' "$t_ts" "$(echo "$MB / $t_ts" | bc -l)"
uptime
printf 'speed-up over tshark: %.1fx\n' "$(echo "$t_ts / $t_rt" | bc -l)"
