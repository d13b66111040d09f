//! The bounded `op` vocabulary of the watch metrics: what a decoder calls an operation is kept only when it is
//! one of a fixed list for its protocol, else it becomes `other`. Query text never reaches a label: SQL gives its
//! first keyword only (from [`SQL`]), Redis a command name from [`REDIS`], HTTP a method from [`HTTP`]; the other
//! protocols' decoders name operations from their own fixed tables (NFS procedures, SMB2 commands, DNS types),
//! which are kept when they are short words of letters, digits and `_`.

use crate::capture::rpc::Proto;

/// SQL statements' first keywords kept as `op` (PostgreSQL, MySQL/MariaDB, TNS); `END` is counted as `COMMIT`
/// and `ABORT` as `ROLLBACK` (pgbench's TPC-B script ends with `END`). Protocol-level operations (start-up,
/// extended-protocol executes, pings) are kept as well.
pub const SQL: [&str; 52] = [
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "MERGE",
    "UPSERT",
    "REPLACE",
    "WITH",
    "VALUES",
    "TABLE",
    "BEGIN",
    "START",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT",
    "RELEASE",
    "SET",
    "SHOW",
    "RESET",
    "DISCARD",
    "PREPARE",
    "EXECUTE",
    "DEALLOCATE",
    "DECLARE",
    "FETCH",
    "CLOSE",
    "MOVE",
    "CALL",
    "DO",
    "COPY",
    "LOCK",
    "CREATE",
    "ALTER",
    "DROP",
    "TRUNCATE",
    "GRANT",
    "REVOKE",
    "COMMENT",
    "VACUUM",
    "ANALYZE",
    "EXPLAIN",
    "LISTEN",
    "NOTIFY",
    "UNLISTEN",
    "CHECKPOINT",
    "REFRESH",
    "USE",
    "DESCRIBE",
    "STARTUP",
    "CONNECT",
    "PING",
    "QUIT",
];

/// Redis commands kept as `op`.
pub const REDIS: [&str; 96] = [
    "GET",
    "SET",
    "SETEX",
    "PSETEX",
    "SETNX",
    "GETSET",
    "GETDEL",
    "GETEX",
    "MGET",
    "MSET",
    "MSETNX",
    "DEL",
    "UNLINK",
    "EXISTS",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "TTL",
    "PTTL",
    "PERSIST",
    "TYPE",
    "KEYS",
    "SCAN",
    "RENAME",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "DECR",
    "DECRBY",
    "APPEND",
    "STRLEN",
    "GETRANGE",
    "SETRANGE",
    "HGET",
    "HSET",
    "HSETNX",
    "HMGET",
    "HMSET",
    "HDEL",
    "HGETALL",
    "HKEYS",
    "HVALS",
    "HLEN",
    "HEXISTS",
    "HINCRBY",
    "HSCAN",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LRANGE",
    "LLEN",
    "LINDEX",
    "LSET",
    "LREM",
    "LTRIM",
    "BLPOP",
    "BRPOP",
    "LMOVE",
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SCARD",
    "SPOP",
    "SSCAN",
    "ZADD",
    "ZREM",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREVRANGE",
    "ZSCORE",
    "ZINCRBY",
    "ZCARD",
    "ZRANK",
    "ZSCAN",
    "XADD",
    "XREAD",
    "XRANGE",
    "XLEN",
    "PUBLISH",
    "SUBSCRIBE",
    "PING",
    "ECHO",
    "AUTH",
    "HELLO",
    "SELECT",
    "INFO",
    "CONFIG",
    "CLIENT",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "EVAL",
    "EVALSHA",
];

/// HTTP methods kept as `op`.
pub const HTTP: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
];

/// Longest operation name kept from the protocols without a list here.
pub const MAX_OP_LEN: usize = 24;

/// The `op` label of an operation `op` of protocol `proto`.
pub fn label(proto: Proto, op: &str) -> &'static str {
    let first = op.split_whitespace().next().unwrap_or("");
    let upper = first.to_ascii_uppercase();
    let pick = |list: &[&'static str], w: &str| list.iter().copied().find(|k| *k == w);
    let found = match proto {
        Proto::Pgsql | Proto::Mysql | Proto::Tns => match upper.as_str() {
            "END" => Some("COMMIT"),
            "ABORT" => Some("ROLLBACK"),
            w => pick(&SQL, w),
        },
        Proto::Redis => pick(&REDIS, &upper),
        Proto::Http => pick(&HTTP, first),
        Proto::Nfs | Proto::Smb2 | Proto::Dns | Proto::Sockperf | Proto::Generic | Proto::Tls => {
            return intern(op);
        }
    };
    found.unwrap_or("other")
}

/// Names the decoders of the protocols without a list give, kept once each (a bounded set: they come from the
/// decoders' tables), or `other` for anything else.
fn intern(op: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    /// At most this many distinct names are kept for the whole process.
    const MAX_NAMES: usize = 512;
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let ok = !op.is_empty()
        && op.len() <= MAX_OP_LEN
        && op
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b' ');
    if !ok {
        return "other";
    }
    let Ok(mut set) = NAMES.get_or_init(|| Mutex::new(HashSet::new())).lock() else {
        return "other";
    };
    if let Some(s) = set.get(op) {
        return s;
    }
    if set.len() >= MAX_NAMES {
        return "other";
    }
    let s: &'static str = Box::leak(op.to_string().into_boxed_str());
    set.insert(s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_keeps_the_keyword_only() {
        assert_eq!(label(Proto::Pgsql, "SELECT"), "SELECT");
        assert_eq!(label(Proto::Pgsql, "END"), "COMMIT");
        assert_eq!(label(Proto::Mysql, "PREPARE SELECT"), "PREPARE");
        assert_eq!(label(Proto::Pgsql, "SECRETWORD"), "other");
        assert_eq!(label(Proto::Pgsql, "OTHER"), "other");
    }

    #[test]
    fn redis_and_http_lists() {
        assert_eq!(label(Proto::Redis, "get"), "GET");
        assert_eq!(label(Proto::Redis, "MYMODULE.CMD"), "other");
        assert_eq!(label(Proto::Http, "GET"), "GET");
        assert_eq!(label(Proto::Http, "BREW"), "other");
    }

    #[test]
    fn table_names_are_kept_odd_ones_not() {
        assert_eq!(label(Proto::Nfs, "GETATTR"), "GETATTR");
        assert_eq!(label(Proto::Generic, "turn"), "turn");
        assert_eq!(label(Proto::Nfs, "a\"b"), "other");
        assert_eq!(label(Proto::Nfs, &"X".repeat(40)), "other");
    }
}
