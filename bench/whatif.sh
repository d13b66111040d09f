#!/usr/bin/env bash
# bench/whatif.sh: `capture whatif` predictions against real runs through `roundtrip proxy --rtt`.
#
# Samba (a private smbd on a free port, generated smb.conf, temp share): a get of 20 MB at 5 and 20 ms and of
# 100 MB at 40 ms (seed 002); PostgreSQL (127.0.0.1:5432, trust; scratch database created and dropped):
# pgbench -c 1 select-only (-S) and TPC-B-like at 5 and 20 ms. Each round captures the run directly (tcpdump on
# lo), predicts with `capture whatif --path relay` (the proxy terminates TCP) and measures the same run
# through the proxy (Samba: the client-side capture's duration; pgbench: its TPS). Rounds are interleaved;
# medians and the ratio predicted/measured are printed.
#
# Usage: bench/whatif.sh [ROUNDS]   (default 3; run as root on an otherwise idle machine)
set -euo pipefail
ROUNDS=${1:-3}
cd "$(dirname "$0")/.."
cargo build --release -q
RT=$PWD/target/release/roundtrip
W=$(mktemp -d)
PIDS=()
DB=whatif_bench_$$
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  psql -h 127.0.0.1 -U postgres -d test -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

. "$(dirname "$0")/lib.sh"

# --- smbd ---
SMB_PORT=$(free_port)
samba_conf "$W" "$SMB_PORT"
setsid smbd --foreground --no-process-group --debug-stdout -s "$W/smb.conf" >"$W/smbd.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$SMB_PORT) 2>/dev/null && break; sleep 0.2; done
head -c 20M /dev/urandom > "$W/share/f20"
head -c 100M /dev/urandom > "$W/share/f100"

capture() { # FILE PORT CMD...
  local f=$1 port=$2; shift 2
  tcpdump -i lo -U -n -B 65536 -w "$f" tcp port "$port" 2>"$f.log" &
  local td=$!
  for _ in $(seq 50); do grep -q "listening on" "$f.log" 2>/dev/null && break; sleep 0.1; done
  "$@"
  sleep 0.2
  kill -INT "$td"; wait "$td" 2>/dev/null || true
}

PROXY_PID=
PP=
proxy() { # PORT RTT -> sets PP (its port) and PROXY_PID
  local out=$W/proxy.$RANDOM
  "$RT" proxy --listen 127.0.0.1:0 --upstream "127.0.0.1:$1" --rtt "$2" >"$out" 2>/dev/null &
  PROXY_PID=$!
  PIDS+=($PROXY_PID)
  for _ in $(seq 100); do grep -q "listening on" "$out" 2>/dev/null && break; sleep 0.05; done
  PP=$(grep -o "127.0.0.1:[0-9]*" "$out" | head -1 | cut -d: -f2)
}

predict_s() { # FILE RTT -> predicted seconds (whole capture)
  "$RT" capture whatif "$1" --rtt "$2" --path relay --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["predictions"][0]["predicted_s"])'
}
today_s() { "$RT" capture whatif "$1" --rtt 1ms --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["capture_duration_s"])'; }

RES=$W/results
: > "$RES"
smb_case() { # SIZE FILE RTT ROUND
  local d=$W/smb_direct.pcap v=$W/smb_via.pcap pp
  capture "$d" "$SMB_PORT" smbclient //127.0.0.1/share -p "$SMB_PORT" -N -c "get $2 /dev/null" >"$W/smbclient.out" 2>&1 || { cat "$W/smbclient.out" "$W/smbd.out" >&2; exit 1; }
  proxy "$SMB_PORT" "$3"; pp=$PP
  capture "$v" "$pp" smbclient //127.0.0.1/share -p "$pp" -N -c "get $2 /dev/null" >/dev/null 2>&1
  kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
  echo "samba-get-$1 $3 $(predict_s "$d" "$3") $(today_s "$v")" >> "$RES"
}

psql -h 127.0.0.1 -U postgres -d test -qc "CREATE DATABASE $DB" >/dev/null
pgbench -h 127.0.0.1 -U postgres -i -q "$DB" >/dev/null 2>&1
tps() { grep -o "^tps = [0-9.]*" | cut -d' ' -f3; }
pg_case() { # NAME RTT OPTS
  local d=$W/pg_direct.pcap pp today pred
  capture "$d" 5432 sh -c "pgbench -h 127.0.0.1 -U postgres -c 1 -T 3 -n $3 $DB > $W/pg.out 2>&1"
  today=$(tps < "$W/pg.out")
  # TPS at the new RTT: today's TPS times the benchmark connection's duration over its predicted duration.
  pred=$("$RT" capture whatif "$d" --rtt "$2" --path relay --json | python3 -c '
import json,sys
r=json.load(sys.stdin); c=r["predictions"][0]["connections"]
b=max(range(len(c)), key=lambda i: r["connections"][i]["turns"])
print(float(sys.argv[1])*r["connections"][b]["duration_s"]/c[b]["predicted_s"])' "$today")
  proxy 5432 "$2"; pp=$PP
  meas=$(pgbench -h 127.0.0.1 -p "$pp" -U postgres -c 1 -T 3 -n $3 "$DB" 2>&1 | tps)
  kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
  echo "pgbench-$1 $2 $pred $meas" >> "$RES"
}

for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS" >&2
  smb_case 20MB f20 5ms "$r"
  smb_case 20MB f20 20ms "$r"
  smb_case 100MB f100 40ms "$r"
  pg_case select-only 5ms -S
  pg_case select-only 20ms -S
  pg_case tpc-b 5ms ""
  pg_case tpc-b 20ms ""
done

python3 - "$RES" <<'PY'
import sys, statistics as st
rows = {}
for l in open(sys.argv[1]):
    case, rtt, p, m = l.split()
    rows.setdefault((case, rtt), []).append((float(p), float(m)))
print(f"{'case':22} {'rtt':>5} {'n':>2} {'predicted':>10} {'measured':>10} {'ratio':>6}   (samba: seconds; pgbench: TPS; medians)")
for (case, rtt), v in rows.items():
    p = st.median(x for x, _ in v); m = st.median(y for _, y in v)
    print(f"{case:22} {rtt:>5} {len(v):>2} {p:10.3f} {m:10.3f} {p/m:6.2f}")
PY
