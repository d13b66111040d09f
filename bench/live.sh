#!/usr/bin/env bash
# Live capture, measured side by side (issue 21):
#  1. one UDP packet stream on loopback (sockperf, 64-byte messages at a fixed rate), watched in turn by
#     `roundtrip capture stats --live lo`, `tcpdump -i lo -w /dev/null`, `tcpstat -i lo` and `tshark -i lo -q`
#     (all with the filter `udp port P`): packets seen, kernel drops, CPU (user+sys) per packet;
#  2. pgbench -S through a relay port (so only this traffic passes the filter): `roundtrip capture rpc --live lo`
#     vs `tcpdump -w /dev/null`: requests counted (against pgbench's own count), CPU per request;
#  3. the application's cost: pgbench -S at a fixed rate (-R, half of its unwatched maximum): TPS and p99 latency
#     unwatched, watched by roundtrip rpc, watched by tcpdump; and at saturation, TPS for each.
#  4. the highest packet rate with 0 kernel drops: the UDP stream at rising rates (RATES), watched by
#     `capture stats --live` and by `capture rpc --live --proto sockperf` (one thread), and by tcpdump for
#     reference: packets sent, seen and dropped at each rate;
#  6. the highest packet rate with 0 kernel drops, one reader thread against two (--threads 2, PACKET_FANOUT by
#     flow hash): STREAMS sockperf senders (distinct source ports, so the flows spread over both rings) share
#     each rate of RATES6, watched in turn by `capture stats --live` and `capture rpc --live --proto sockperf`
#     with --threads 1 and 2 (order rotating per round); per round the highest rate sent with 0 drops, medians
#     over the rounds side by side (BUFFER=SIZE sets --buffer; default the 16 MiB ring per thread);
#  5. memory under a SYN flood: hping3 SYNs from 127.0.0.2 and 127.0.0.3 to a closed port (FLOOD SYNs from
#     each, source ports counting up: distinct connections), watched by `capture rpc --live` and
#     `capture flows --live` at the default --max-connections (100,000): peak RSS, connections, evictions.
# CPU (parts 1 and 2) counts from when an observer is ready to when it is stopped: what it took to start (the
# kernel zeroing its ring: ~40 ms for a 16 MiB ring on this VM) is printed apart as start-up.
# Rounds are interleaved (observer order rotates); medians are printed. Parts: PARTS="1 2 4 5 6" (default all).
#
# Usage: bench/live.sh [ROUNDS=3] [RATE=50000] [SECONDS=5]   (root; sockperf, tcpdump, tcpstat, tshark,
# pgbench, psql, socat, hping3, PostgreSQL on 127.0.0.1:5432; RATES="..." RATES6="..." STREAMS=N BUFFER=SIZE FLOOD=N
# PARTS="..." in the environment; RT_BASE=/path/to/another/roundtrip adds it to part 2 as `roundtrip-base`, in the
# same rounds, to compare two builds side by side)
set -euo pipefail
ROUNDS=${1:-3}; RATE=${2:-50000}; SECS=${3:-5}
cd "$(dirname "$0")/.."
# RT=/path/to/roundtrip measures that binary instead of building this tree.
if [ -z "${RT:-}" ]; then
    cargo build --release -q
    RT=$PWD/target/release/roundtrip
fi
WORK=$(mktemp -d /tmp/rt-live-bench.XXXXXX)
pids=()
DB=rt_live_bench_$$
cleanup() {
    kill "${pids[@]}" 2>/dev/null || true
    psql -h 127.0.0.1 -U postgres -d test -qc "drop database if exists $DB" >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# CPU seconds (ns precision, /proc/PID/task/*/schedstat) of a process, its threads and its children (tshark's
# dumpcap does the capturing).
cpu_s() {
    local p all=$1
    for p in $(pgrep -P "$1" 2>/dev/null || true); do all="$all $p"; done
    for p in $all; do cat /proc/"$p"/task/*/schedstat 2>/dev/null || true; done | awk '{s+=$1} END{printf "%.4f", s/1e9}'
}
# start OBSERVER-NAME FILTER: starts the observer in the background, sets OBS_PID, waits until it captures.
start() {
    local name=$1 filter=$2
    case $name in
    roundtrip) $RT capture stats --live lo --report-interval 1s "$filter" >"$WORK/$name.out" 2>"$WORK/$name.err" & ;;
    roundtrip-rpc) $RT capture rpc --live lo --proto pgsql "$filter" >"$WORK/$name.out" 2>"$WORK/$name.err" & ;;
    roundtrip-base) $RT_BASE capture rpc --live lo --proto pgsql "$filter" >"$WORK/$name.out" 2>"$WORK/$name.err" & ;;
    tcpdump) tcpdump -i lo -n -w /dev/null "$filter" >"$WORK/$name.out" 2>"$WORK/$name.err" & ;;
    tcpstat) tcpstat -i lo -F -o "%n\n" -f "$filter" 1 >"$WORK/$name.out" 2>"$WORK/$name.err" & ;;
    tshark) tshark -i lo -q -f "$filter" >"$WORK/$name.out" 2>"$WORK/$name.err" & ;;
    none) OBS_PID=""; return ;;
    esac
    OBS_PID=$!
    pids+=("$OBS_PID")
    for _ in $(seq 100); do
        grep -qE "capturing on|listening on|Capturing on" "$WORK/$name.err" 2>/dev/null && break
        [ "$name" = tcpstat ] && { sleep 1; break; }
        sleep 0.1
    done
    sleep 0.3
    # What it took to start (the kernel zeroing its ring, say) is counted apart: CPU per packet or request is
    # what the observer spends while the traffic passes.
    OBS_CPU0=$(cpu_s "$OBS_PID")
}
# stop NAME: CPU seconds since it was ready (start's OBS_CPU0), then SIGINT and wait; prints "cpu packets
# drops setup_cpu".
stop() {
    local name=$1
    [ -z "$OBS_PID" ] && { echo "0 0 0"; return; }
    sleep 1
    local cpu; cpu=$(awk -v a="$(cpu_s "$OBS_PID")" -v b="$OBS_CPU0" 'BEGIN {printf "%.4f", a - b}')
    # tcpstat ignores SIGINT (its lines are flushed per interval: -F).
    if [ "$name" = tcpstat ]; then kill -TERM "$OBS_PID"; else kill -INT "$OBS_PID"; fi
    wait "$OBS_PID" 2>/dev/null || true
    local pk=0 dr=0
    set +o pipefail
    case $name in
    roundtrip|roundtrip-rpc|roundtrip-base)
        pk=$(grep -oE '[0-9]+ packets captured' "$WORK/$name.out" | awk '{print $1}')
        dr=$(grep -oE '[0-9]+ dropped by the kernel' "$WORK/$name.out" | awk '{print $1}') ;;
    tcpdump)
        pk=$(grep -oE '^[0-9]+ packets captured' "$WORK/$name.err" | awk '{print $1}')
        dr=$(grep -oE '^[0-9]+ packets dropped by kernel' "$WORK/$name.err" | awk '{print $1}') ;;
    tcpstat) pk=$(awk '{s+=$1} END{print s+0}' "$WORK/$name.out"); dr=NA ;;
    tshark)
        pk=$(grep -oE '[0-9]+ packets captured' "$WORK/$name.err" | awk '{print $1}')
        dr=$(grep -oE '[0-9]+ packets dropped' "$WORK/$name.err" | awk '{print $1}' || true); dr=${dr:-0} ;;
    esac
    set -o pipefail
    echo "$cpu ${pk:-0} ${dr:-0} $OBS_CPU0"
}

PARTS=${PARTS:-1 2 4 5 6}
part() { [[ " $PARTS " == *" $1 "* ]]; }

if part 1; then
echo "== 1. UDP stream on lo: $RATE msg/s of 64 bytes for ${SECS}s, $ROUNDS rounds"
SP=$(free_port)
sockperf sr -i 127.0.0.1 -p "$SP" >/dev/null 2>&1 & pids+=($!)
sleep 1
OBSERVERS=(roundtrip tcpdump tcpstat tshark)
for r in $(seq "$ROUNDS"); do
    n=${#OBSERVERS[@]}
    for i in $(seq 0 $((n - 1))); do
        o=${OBSERVERS[$(((i + r) % n))]}
        start "$o" "udp port $SP"
        sockperf tp -i 127.0.0.1 -p "$SP" -m 64 --mps "$RATE" -t "$SECS" >/dev/null 2>&1 || true
        stop "$o" >"$WORK/stop"; read -r cpu pk dr _ <"$WORK/stop"
        echo "$o round $r: packets $pk drops $dr cpu ${cpu}s"
        echo "$cpu $pk $dr" >>"$WORK/s1.$o"
    done
done
printf '%-10s %10s %8s %12s %10s\n' observer packets drops "cpu/pkt(ns)" "vs tcpdump"
base=$(awk '$2>0{print $1/$2*1e9}' "$WORK/s1.tcpdump" | median)
for o in "${OBSERVERS[@]}"; do
    pk=$(awk '{print $2}' "$WORK/s1.$o" | median)
    dr=$(awk '{print $3}' "$WORK/s1.$o" | sort | tail -1)
    c=$(awk '$2>0{print $1/$2*1e9}' "$WORK/s1.$o" | median)
    printf '%-10s %10s %8s %12.0f %10.2f\n' "$o" "$pk" "$dr" "$c" "$(echo "$c / $base" | bc -l)"
done

fi

if part 2; then
echo "== 2-3. pgbench -S through a relay port"
psql -h 127.0.0.1 -U postgres -d test -qc "create database $DB" >/dev/null
pgbench -h 127.0.0.1 -U postgres -i -q "$DB" >/dev/null 2>&1
RP=$(free_port)
socat TCP-LISTEN:"$RP",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:5432 & pids+=($!)
sleep 0.5
pgb() { PGSSLMODE=disable pgbench -h 127.0.0.1 -p "$RP" -U postgres -n -S -c 4 -j 2 -T "$SECS" "$@" "$DB" 2>/dev/null; }
# TPS at saturation, unwatched, to choose the fixed rate.
max=$(pgb | awk '/^tps/{print int($3)}' | head -1)
R=$((max / 2))
echo "saturation unwatched: $max tps; fixed rate -R $R"
OBS2=(none roundtrip-rpc tcpdump)
[ -n "${RT_BASE:-}" ] && OBS2+=(roundtrip-base)
for r in $(seq "$ROUNDS"); do
    for o in "${OBS2[@]}"; do
        # saturation
        start "$o" "tcp port $RP"
        out=$(pgb)
        stop "$o" >"$WORK/stop"; read -r cpu pk _ setup <"$WORK/stop"
        tps=$(echo "$out" | awk '/^tps/{print $3}' | head -1)
        tx=$(echo "$out" | awk '/number of transactions actually processed/{print $6}' | cut -d/ -f1)
        req=""
        [[ "$o" = roundtrip-rpc || "$o" = roundtrip-base ]] && req=$(grep -oE '[0-9]+ requests answered' "$WORK/$o.out" | awk '{print $1}')
        echo "$o round $r saturation: tps $tps transactions $tx packets $pk requests ${req:-NA} cpu ${cpu}s (start-up ${setup}s)"
        echo "$tps $tx $pk $cpu ${req:-0}" >>"$WORK/sat.$o"
        # fixed rate, per-transaction log for the p99
        rm -f "$WORK"/pgbench_log.*
        start "$o" "tcp port $RP"
        (cd "$WORK" && pgb -R "$R" -l >"$WORK/fixed.out")
        stop "$o" >/dev/null
        tps=$(awk '/^tps/{print $3}' "$WORK/fixed.out" | head -1)
        p99=$(cat "$WORK"/pgbench_log.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END{print a[int(NR*0.99)]}')
        echo "$o round $r fixed: tps $tps p99 ${p99}us"
        echo "$tps $p99" >>"$WORK/fix.$o"
    done
done
printf '%-14s %10s %10s %12s %12s %14s\n' observer "sat tps" "fixed tps" "fixed p99us" "requests" "cpu/req(ns)"
for o in "${OBS2[@]}"; do
    st=$(awk '{print $1}' "$WORK/sat.$o" | median)
    ft=$(awk '{print $1}' "$WORK/fix.$o" | median)
    fp=$(awk '{print $2}' "$WORK/fix.$o" | median)
    rq=$(awk '{print $5 "/" $2}' "$WORK/sat.$o" | tail -1)
    c=$(awk '$2>0{print $4/$2*1e9}' "$WORK/sat.$o" | median)
    printf '%-14s %10s %10s %12s %12s %14.0f\n' "$o" "$st" "$ft" "$fp" "$rq" "$c"
done
fi

if part 4; then
RATES=${RATES:-100000 200000 400000 max}
echo "== 4. highest rate with 0 drops (UDP 64-byte messages for ${SECS}s at each rate; one reader thread)"
SP=$(free_port)
sockperf sr -i 127.0.0.1 -p "$SP" >/dev/null 2>&1 & pids+=($!)
sleep 1
start_rate() {
    case $1 in
    stats) $RT capture stats --live lo --report-interval 1s "udp port $SP" >"$WORK/$1.out" 2>"$WORK/$1.err" & ;;
    rpc) $RT capture rpc --live lo --proto sockperf "udp port $SP" >"$WORK/$1.out" 2>"$WORK/$1.err" & ;;
    tcpdump) tcpdump -i lo -n -w /dev/null "udp port $SP" >"$WORK/$1.out" 2>"$WORK/$1.err" & ;;
    esac
    OBS_PID=$!
    pids+=("$OBS_PID")
    for _ in $(seq 100); do grep -qE "capturing on|listening on" "$WORK/$1.err" 2>/dev/null && break; sleep 0.1; done
    sleep 0.3
}
printf '%-8s %10s %12s %10s %10s %10s\n' observer "asked/s" "sent" "sent/s" seen drops
for rate in $RATES; do
    for o in stats rpc tcpdump; do
        start_rate "$o"
        set +o pipefail
        # sockperf says how many it sent (below the asked rate when the sender is the limit).
        sent=$(sockperf tp -i 127.0.0.1 -p "$SP" -m 64 --mps "$rate" -t "$SECS" 2>&1 |
            grep -oE 'Total of [0-9]+ messages sent' | awk '{print $3}')
        sleep 1
        kill -INT "$OBS_PID"; wait "$OBS_PID" 2>/dev/null || true
        if [ "$o" = tcpdump ]; then
            pk=$(grep -oE '^[0-9]+ packets captured' "$WORK/$o.err" | awk '{print $1}')
            dr=$(grep -oE '^[0-9]+ packets dropped by kernel' "$WORK/$o.err" | awk '{print $1}')
        else
            pk=$(grep -oE '[0-9]+ packets captured' "$WORK/$o.out" | awk '{print $1}')
            dr=$(grep -oE '[0-9]+ dropped by the kernel' "$WORK/$o.out" | awk '{print $1}')
        fi
        set -o pipefail
        printf '%-8s %10s %12s %10s %10s %10s\n' "$o" "$rate" "${sent:-0}" "$((${sent:-0} / SECS))" "${pk:-0}" "${dr:-?}"
    done
done
fi

if part 5; then
FLOOD=${FLOOD:-60000}
echo "== 5. SYN flood: $FLOOD SYNs from each of 127.0.0.2 and 127.0.0.3 (distinct source ports) to a closed port"
FP=$(free_port)
for o in rpc flows; do
    # The kernel answers each SYN with a RST, which would end each connection at once: the filter leaves
    # the RSTs out, so every SYN stays a connection that never ends (the worst case for the table).
    $RT capture "$o" --live lo "tcp port $FP and tcp[tcpflags] & tcp-rst == 0" \
        >"$WORK/flood.$o.out" 2>"$WORK/flood.$o.err" &
    OBS_PID=$!
    pids+=("$OBS_PID")
    for _ in $(seq 100); do grep -q "capturing on" "$WORK/flood.$o.err" 2>/dev/null && break; sleep 0.1; done
    rss0=$(awk '/VmRSS/{print $2}' /proc/"$OBS_PID"/status)
    hp=()
    for src in 127.0.0.2 127.0.0.3; do
        hping3 -q -S -p "$FP" -s 1024 -i u1 -c "$FLOOD" -a "$src" 127.0.0.1 >/dev/null 2>&1 &
        hp+=($!)
    done
    wait "${hp[@]}" 2>/dev/null || true
    sleep 2
    hwm=$(awk '/VmHWM/{print $2}' /proc/"$OBS_PID"/status)
    kill -INT "$OBS_PID"; wait "$OBS_PID" 2>/dev/null || true
    set +o pipefail
    pk=$(grep -oE '[0-9]+ packets captured' "$WORK/flood.$o.out" | awk '{print $1}')
    dr=$(grep -oE '[0-9]+ dropped by the kernel' "$WORK/flood.$o.out" | awk '{print $1}')
    conns=$(grep -oE '[0-9]+ (TCP )?connections' "$WORK/flood.$o.out" | head -1 | awk '{print $1}')
    ev=$(grep -oE '[0-9]+ (finished|connections closed) early[^;)]*' "$WORK/flood.$o.out" | head -1)
    set -o pipefail
    echo "$o: packets $pk drops $dr connections $conns; RSS ${rss0} kB before, peak ${hwm} kB; ${ev:-no evictions reported}"
done
fi

if part 6; then
RATES6=${RATES6:-100000 200000 400000 max}
STREAMS=${STREAMS:-4}
echo "== 6. highest rate with 0 drops, --threads 1 vs 2: $STREAMS UDP streams of 64-byte messages sharing each rate" \
    "($RATES6) for ${SECS}s, $ROUNDS rounds${BUFFER:+, --buffer $BUFFER}"
SP=$(free_port)
sockperf sr -i 127.0.0.1 -p "$SP" >/dev/null 2>&1 & pids+=($!)
sleep 1
# start6 OBSERVER: stats1, stats2, rpc1, rpc2 (the command and its --threads).
start6() {
    local cmd=${1%[0-9]} th=${1##*[a-z]}
    local extra=(--threads "$th")
    [ -n "${BUFFER:-}" ] && extra+=(--buffer "$BUFFER")
    case $cmd in
    stats) $RT capture stats --live lo "${extra[@]}" --report-interval 1s "udp port $SP" >"$WORK/$1.out" 2>"$WORK/$1.err" & ;;
    rpc) $RT capture rpc --live lo "${extra[@]}" --proto sockperf "udp port $SP" >"$WORK/$1.out" 2>"$WORK/$1.err" & ;;
    esac
    OBS_PID=$!
    pids+=("$OBS_PID")
    for _ in $(seq 100); do grep -q "capturing on" "$WORK/$1.err" 2>/dev/null && break; sleep 0.1; done
    sleep 0.3
}
# streams RATE: STREAMS senders sharing RATE (or each at max); prints the messages sent in all.
streams() {
    local per tp=() i
    if [ "$1" = max ]; then per=max; else per=$(($1 / STREAMS)); fi
    for i in $(seq "$STREAMS"); do
        sockperf tp -i 127.0.0.1 -p "$SP" -m 64 --mps "$per" -t "$SECS" >"$WORK/tp.$i" 2>&1 &
        tp+=($!)
    done
    wait "${tp[@]}" 2>/dev/null || true
    cat "$WORK"/tp.* | grep -oE 'Total of [0-9]+ messages sent' | awk '{s+=$3} END{print s+0}'
    rm -f "$WORK"/tp.*
}
OBS6=(stats1 stats2 rpc1 rpc2)
printf '%-7s %-7s %10s %10s %10s %10s\n' round observer "asked/s" "sent/s" seen drops
for r in $(seq "$ROUNDS"); do
    for rate in $RATES6; do
        n=${#OBS6[@]}
        for i in $(seq 0 $((n - 1))); do
            o=${OBS6[$(((i + r) % n))]}
            start6 "$o"
            sent=$(streams "$rate")
            sleep 1
            kill -INT "$OBS_PID"; wait "$OBS_PID" 2>/dev/null || true
            set +o pipefail
            pk=$(grep -oE '[0-9]+ packets captured' "$WORK/$o.out" | awk '{print $1}')
            dr=$(grep -oE '[0-9]+ dropped by the kernel' "$WORK/$o.out" | awk '{print $1}')
            set -o pipefail
            printf '%-7s %-7s %10s %10s %10s %10s\n' "$r" "$o" "$rate" "$((${sent:-0} / SECS))" "${pk:-0}" "${dr:-?}"
            echo "$r $rate $((${sent:-0} / SECS)) ${pk:-0} ${dr:-1}" >>"$WORK/s6.$o"
        done
    done
done
echo "highest rate sent with 0 kernel drops (messages/s; one per round, then the median):"
printf '%-8s %-8s %-12s %s\n' command threads median rounds
for o in "${OBS6[@]}"; do
    per=()
    for r in $(seq "$ROUNDS"); do
        per+=("$(awk -v r="$r" '$1==r && $5==0 && $3>m {m=$3} END{print m+0}' "$WORK/s6.$o")")
    done
    med=$(printf '%s\n' "${per[@]}" | median)
    printf '%-8s %-8s %-12s %s\n' "${o%[0-9]}" "${o##*[a-z]}" "$med" "${per[*]}"
done
fi
