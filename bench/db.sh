#!/usr/bin/env bash
# roundtrip db against the reference clients, same run, interleaved rounds, medians of the rounds:
#   PostgreSQL: `roundtrip db` SELECT 1 median/mean vs pgbench -c1 -j1 -f select1.sql median (-l) / per-statement (-r)
#   Redis:      `roundtrip db` protocol ping (PING every 10 ms) vs redis-cli --latency (PING every 10 ms) average,
#               and back to back: roundtrip db PING median vs redis-benchmark -c 1 -t ping_mbulk p50
# Usage: bench/db.sh [ROUNDS] [SECONDS_PER_RUN]      (needs PostgreSQL, Redis on 127.0.0.1, pgbench, redis-cli, jq)
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-5}
cd "$(dirname "$0")/.."
cargo build --release --quiet
RT=target/release/roundtrip
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
PGBENCH_ARGS=(-h 127.0.0.1 -p 5432 -U postgres test)
REDIS_HOST=127.0.0.1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "SELECT 1;" >"$work/select1.sql"
unset PGPASSWORD REDISCLI_AUTH || true
# Plain TCP on both sides: libpq (pgbench) would otherwise use TLS, since the server offers it.
export PGSSLMODE=disable
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

pg_rt() { # median and mean of SELECT 1 in microseconds
    "$RT" db "$PGURL?sslmode=disable" --connects 1 --rows 0 -c "$((SECS * 1500))" --json |
        jq -r '"\(.query.p50_ns / 1000) \(.query.mean_ns / 1000) \(.query.count)"'
}
pg_bench() { # pgbench per-transaction latency median (from its -l log's end times), per-statement latency average, microseconds
    rm -f "$work"/pgb.*
    pgbench -n -r -l --log-prefix="$work/pgb" -c1 -j1 -f "$work/select1.sql" -T "$SECS" "${PGBENCH_ARGS[@]}" \
        2>/dev/null >"$work/pgbench.out"
    local med
    # The median time between successive transaction ends in the -l log (one client, nothing between
    # transactions): the log's own latency field ($3) reads 0 for most transactions of pgbench 15 on a loaded
    # machine (its clock is read lazily), so it cannot be used.
    med=$(awk '{t = $5 * 1000000 + $6; if (NR > 1) print t - p; p = t}' "$work"/pgb.* | median)
    awk -v med="$med" '/SELECT 1;/ {stmt=$1*1000} /actually processed/ {n=$NF} END {print med, stmt, n}' \
        "$work/pgbench.out"
}
redis_rt() { # PING every 10 ms like redis-cli --latency: median and mean, microseconds
    "$RT" db "redis://$REDIS_HOST:6379" --connects 1 --rows 0 -i 10ms -c "$((SECS * 100))" --json |
        jq -r '"\(.ping.p50_ns / 1000) \(.ping.mean_ns / 1000) \(.ping.count)"'
}
redis_rt_b2b() { # PING back to back: median, microseconds
    "$RT" db "redis://$REDIS_HOST:6379" --connects 1 --rows 0 -c "$((SECS * 2000))" --json | jq -r '.ping.p50_ns / 1000'
}
redis_bench() { # redis-benchmark one client, PING as a multi-bulk command like roundtrip sends it: p50, microseconds
    redis-benchmark -h "$REDIS_HOST" -c 1 -n "$((SECS * 4000))" -t ping_mbulk 2>/dev/null |
        awk '/latency summary/ {getline; getline; print $3*1000}'
}
redis_ref() { # redis-cli --latency average; it times each PING with a millisecond clock, microseconds
    timeout -s INT "$SECS" redis-cli -h "$REDIS_HOST" --latency 2>/dev/null | tail -1 |
        awk '{print $3*1000, $4}' || true
}

printf '%-6s %13s %13s %14s %15s | %15s %16s %15s | %14s %14s\n' round rt_pg_p50_us rt_pg_mean_us pgbench_p50_us \
    pgbench_stmt_us rt_redis_p50_us rt_redis_mean_us rediscli_avg_us rt_b2b_p50_us rbench_p50_us
for r in $(seq 1 "$ROUNDS"); do
    # Alternate which tool goes first so drift on this shared machine hits both alike.
    if ((r % 2)); then
        a=$(pg_rt); b=$(pg_bench); c=$(redis_rt); d=$(redis_ref); e=$(redis_rt_b2b); f=$(redis_bench)
    else
        b=$(pg_bench); a=$(pg_rt); d=$(redis_ref); c=$(redis_rt); f=$(redis_bench); e=$(redis_rt_b2b)
    fi
    read -r a50 amean _ <<<"$a"
    read -r b50 bstmt _ <<<"$b"
    read -r c50 cmean _ <<<"$c"
    read -r davg _ <<<"$d"
    printf '%-6s %13.1f %13.1f %14.1f %15.1f | %15.1f %16.1f %15.1f | %14.1f %14.1f\n' "$r" "$a50" "$amean" "$b50" "$bstmt" \
        "$c50" "$cmean" "$davg" "$e" "$f"
    echo "$a50 $amean $b50 $bstmt $c50 $cmean $davg $e $f" >>"$work/rows"
done
col() { awk -v c="$1" '{print $c}' "$work/rows" | median; }
m_rt_pg=$(col 1); m_rt_pg_mean=$(col 2); m_pgb=$(col 3); m_pgb_stmt=$(col 4)
m_rt_redis=$(col 5); m_rt_redis_mean=$(col 6); m_cli=$(col 7); m_b2b=$(col 8); m_rbench=$(col 9)
printf '%-6s %13.1f %13.1f %14.1f %15.1f | %15.1f %16.1f %15.1f | %14.1f %14.1f\n' median "$m_rt_pg" "$m_rt_pg_mean" \
    "$m_pgb" "$m_pgb_stmt" "$m_rt_redis" "$m_rt_redis_mean" "$m_cli" "$m_b2b" "$m_rbench"
awk -v a="$m_rt_pg" -v b="$m_pgb" -v s="$m_pgb_stmt" -v m="$m_rt_pg_mean" -v c="$m_rt_redis_mean" -v d="$m_cli" -v e="$m_rt_redis" -v f="$m_b2b" -v g="$m_rbench" 'BEGIN {
    printf "PostgreSQL: roundtrip SELECT 1 median %.1f us vs pgbench median (-l log) %.1f us: %+.1f%%\n", a, b, 100*(a-b)/b
    printf "PostgreSQL: roundtrip SELECT 1 mean %.1f us vs pgbench per-statement average (-r) %.1f us: %+.1f%%\n", m, s, 100*(m-s)/s
    printf "Redis: roundtrip PING mean %.1f us (median %.1f us) vs redis-cli --latency avg %.1f us: %+.1f%% (redis-cli times each PING in whole milliseconds, so its average is a coarse estimate)\n", c, e, d, 100*(c-d)/d
    printf "Redis back to back: roundtrip PING median %.1f us vs redis-benchmark -c 1 ping_mbulk p50 %.1f us: %+.1f%%\n", f, g, 100*(f-g)/g
}'
