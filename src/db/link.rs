//! `roundtrip db URL --link TARGET`: the round trip from a database to a remote database through a database
//! link, timed inside the local database (the method of seed 001, `select systimestamp from dual@LINK` in a
//! PL/SQL block, carried over to PostgreSQL and MariaDB).
//!
//! - PostgreSQL: the `dblink` extension. A temporary (`pg_temp`) function takes `clock_timestamp()` before
//!   and after `dblink(name, 'SELECT clock_timestamp(), ...')` and returns both; the client calls it in one
//!   statement per round trip, so the client -> local-database network is not in the figure. The first call
//!   opens the link (`dblink_connect`) and is kept apart. TARGET is a libpq connection string (it contains
//!   `=`, or is a `postgresql://` URI) or the name of a foreign server with a user mapping.
//! - MySQL/MariaDB: a scratch FEDERATED(X) table pointing at a scratch table on the remote server, read by
//!   a scratch procedure between two `SYSDATE(6)` (`NOW()` is fixed for the whole statement). roundtrip
//!   creates the remote table over its own connection to TARGET (a `mysql://` URL) and drops all three
//!   afterwards.
//! - Oracle (`dual@LINK`) needs SQL over TNS, which roundtrip does not speak: refused.
//!
//! A password in TARGET is a [`Secret`](super::Secret): [`LinkTarget::redacted`] is what outputs show, and
//! [`LinkTarget::scrub`] removes it from any server message before it leaves this module.
//!
//! Here: the `--link` loop and what it measured. TARGET parsing and redaction are in `target`, the
//! prepared local session (per database) in `session`.

use super::{DbConfig, DbError, DbResult, DbSample, Fetched, Observer, Op, Session, record};
use crate::stats::LatencyHistogram;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Rows of the multi-row call under `--link` unless given (seed 001: 10 rows).
pub const DEFAULT_ROWS: u64 = 10;
/// Bytes per row under `--link` unless given (seed 001: `rpad('X', 1500-35-28)`, a row per packet).
pub const DEFAULT_ROW_BYTES: u64 = 1500 - 35 - 28;

mod session;
mod target;

pub use session::{LinkSession, link_connect_timeout};
pub use target::LinkTarget;

/// One call through the link, as the local database's clock saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkCall {
    /// The local database's clock before the remote call, microseconds since the Unix epoch.
    pub began_unix_us: i64,
    /// The local database's clock after it.
    pub ended_unix_us: i64,
    /// Rows the remote call returned.
    pub rows: u64,
    /// Bytes of the filler column the remote call returned.
    pub bytes: u64,
    /// The whole statement as the client saw it (client -> local -> remote -> local -> client).
    pub client: Duration,
}

impl LinkCall {
    /// The link round trip: end - begin on the local database's clock.
    pub fn round_trip(&self) -> Duration {
        Duration::from_micros(self.ended_unix_us.saturating_sub(self.began_unix_us).max(0) as u64)
    }
}

/// What `--link` measured, beside the ordinary phases of [`DbResult`] (whose `ping` is the client -> local
/// database round trip of the same run).
#[derive(Debug, Clone)]
pub struct LinkResult {
    /// TARGET without password.
    pub target: String,
    /// How the link was made (`dblink 1.2 (schema public)`, `FEDERATEDX table`).
    pub method: String,
    /// The statement sent through the link for a single-row call.
    pub remote_sql: String,
    /// The statement sent through the link for a multi-row call (None: `--rows 0`).
    pub remote_multi_sql: Option<String>,
    /// The first call, which opened the link; not in the statistics.
    pub open: Option<LinkCall>,
    /// Single-row round trips through the link, from the local database's clock.
    pub single: LatencyHistogram,
    /// Multi-row calls through the link.
    pub multi: LatencyHistogram,
    /// The single-row call statement as the client saw it.
    pub statement: LatencyHistogram,
    /// Rows per multi-row call.
    pub rows: u64,
    /// Bytes per row of the multi-row call.
    pub row_bytes: u64,
    /// Requests each call sends through the link: 1 for dblink; 2 for FEDERATEDX, which asks the remote
    /// server `SHOW TABLE STATUS` before every statement's `SELECT` (seen in the remote's general log).
    pub requests_per_call: u32,
}

impl LinkResult {
    /// Median call divided by the requests each call makes: the median network round trip.
    pub fn per_request_p50_ns(&self) -> Option<f64> {
        (!self.single.is_empty()).then(|| {
            self.single.percentile_ns(50.0) as f64 / f64::from(self.requests_per_call.max(1))
        })
    }

    /// Network time per row: (median multi-row call - median single-row call) / (rows - 1).
    pub fn per_row_ns(&self) -> Option<f64> {
        (self.rows >= 2 && !self.multi.is_empty() && !self.single.is_empty()).then(|| {
            (self.multi.percentile_ns(50.0) as f64 - self.single.percentile_ns(50.0) as f64)
                / (self.rows - 1) as f64
        })
    }
}

fn sample(obs: &mut dyn Observer, op: Op, seq: u64, at: Duration, c: &LinkCall) {
    obs.sample(&DbSample {
        op,
        seq,
        at,
        duration: c.round_trip(),
        rows: c.rows,
        bytes: c.bytes,
        db_span: Some((c.began_unix_us, c.ended_unix_us)),
    });
}

/// The `--link` loop on the session [`super::run`] opened: prepare, open the link (kept apart), then
/// `count` iterations of a client -> local protocol ping, a single-row call and a multi-row call.
pub(crate) fn measure(
    config: &DbConfig,
    session: Box<dyn Session + Send>,
    r: &mut DbResult,
    obs: &mut dyn Observer,
    start: Instant,
) -> Result<(), DbError> {
    let Some(link) = &config.link else {
        return Ok(());
    };
    let addr = r
        .address
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut ls = LinkSession::prepare(
        session,
        r.scheme,
        r.server_version.as_deref(),
        &config.url,
        &link.target,
        addr,
        config.rows,
        config.row_bytes,
        link.create_extension,
        config.timeout,
        config.cancel.clone(),
        Default::default(),
    )?;
    let mut lr = LinkResult {
        target: link.target.redacted().to_string(),
        method: ls.method.clone(),
        remote_sql: ls.remote_sql(),
        remote_multi_sql: ls.remote_multi_sql(),
        open: None,
        single: LatencyHistogram::new(),
        multi: LatencyHistogram::new(),
        statement: LatencyHistogram::new(),
        rows: config.rows,
        row_bytes: config.row_bytes,
        requests_per_call: ls.requests_per_call,
    };
    if ls.requests_per_call > 1 {
        ls.notes.push(format!(
            "FEDERATEDX asks the remote server SHOW TABLE STATUS before the SELECT of every statement: each call is {} round trips through the link",
            ls.requests_per_call
        ));
    }
    r.notes.append(&mut ls.notes);
    let outcome = (|| -> Result<(), DbError> {
        let at = start.elapsed();
        let open = ls.open_link()?;
        sample(obs, Op::LinkOpen, 0, at, &open);
        lr.open = Some(open);
        for i in 0..config.count {
            if !config.next_round(i) {
                return Ok(());
            }
            let at = start.elapsed();
            let d = ls.ping()?;
            record(&mut r.ping, obs, Op::Ping, i, at, d, Fetched::default());
            // The single-row and multi-row calls take turns going first, so neither always pays for the
            // wake-up after the interval.
            for multi in [i % 2 == 1, i % 2 == 0] {
                let at = start.elapsed();
                if !multi {
                    let c = ls.call()?;
                    lr.single.record(c.round_trip());
                    lr.statement.record(c.client);
                    sample(obs, Op::Link, i, at, &c);
                } else if let Some(m) = ls.call_multi() {
                    let m = m?;
                    if m.rows != config.rows {
                        return Err(DbError::Link {
                            proto: r.scheme.name(),
                            addr,
                            message: format!(
                                "the multi-row call through the link returned {} rows, {} were asked for",
                                m.rows, config.rows
                            ),
                        });
                    }
                    lr.multi.record(m.round_trip());
                    sample(obs, Op::LinkMulti, i, at, &m);
                }
            }
        }
        Ok(())
    })();
    ls.close();
    r.link = Some(lr);
    // A Ctrl-C that gave up on a call is a stop, not a failure: what was measured is printed.
    match outcome {
        Err(_) if config.cancel.load(Ordering::SeqCst) => Ok(()),
        o => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Scheme;

    #[test]
    fn connection_strings_are_redacted() {
        let t = LinkTarget::parse(
            "host=db2 port=6543 dbname=app user=app password='s3 cr\\'et' sslmode=require",
            Scheme::Postgres,
        )
        .unwrap();
        assert_eq!(
            t.redacted(),
            "host=db2 port=6543 dbname=app user=app password=*** sslmode=require"
        );
        assert_eq!(t.label(), "db2:6543/app");
        assert!(!format!("{t:?}").contains("s3 cr"));
        assert_eq!(t.scrub("oops s3 cr'et here"), "oops *** here");
        let u = LinkTarget::parse(
            "postgresql://app:pw%21x@db2/app?password=other",
            Scheme::Postgres,
        )
        .unwrap();
        assert!(!u.redacted().contains("pw%21x") && !u.redacted().contains("other"));
        assert_eq!(u.scrub("a pw!x b other c pw%21x"), "a *** b *** c ***");
        let s = LinkTarget::parse("remote_srv", Scheme::Postgres).unwrap();
        assert!(s.is_server_name());
        assert_eq!(s.label(), "server:remote_srv");
    }

    #[test]
    fn targets_are_read_as_libpq_reads_them() {
        // Only ASCII whitespace separates: U+00A0 and U+2003 are part of the password.
        let t = LinkTarget::parse(
            "host=db2 password=a\u{a0}b\u{2003}c dbname=app",
            Scheme::Postgres,
        )
        .unwrap();
        assert_eq!(t.redacted(), "host=db2 password=*** dbname=app");
        assert_eq!(t.scrub("x a\u{a0}b\u{2003}c y"), "x *** y");
        // A password ending in U+00A0 keeps it (no Unicode trim).
        let t = LinkTarget::parse("host=db2 password=ab\u{a0}", Scheme::Postgres).unwrap();
        assert_eq!(t.scrub("ab\u{a0}"), "***");
        // sslpassword, in both forms.
        let t = LinkTarget::parse("host=db2 sslpassword=k3y sslmode=require", Scheme::Postgres)
            .unwrap();
        assert_eq!(t.redacted(), "host=db2 sslpassword=*** sslmode=require");
        assert_eq!(t.scrub("k3y"), "***");
        let u = LinkTarget::parse(
            "postgresql://app@db2/app?sslpassword=k%33y&sslmode=require",
            Scheme::Postgres,
        )
        .unwrap();
        assert_eq!(
            u.redacted(),
            "postgresql://app@db2/app?sslpassword=***&sslmode=require"
        );
        assert_eq!(u.scrub("k3y k%33y"), "*** ***");
        // libpq ends the user part at the first '@': a second one is refused, not echoed.
        for bad in [
            "postgresql://u:p@hunter2@db2/app",
            "postgresql://u:p/hunter2@db2/app",
        ] {
            let e = LinkTarget::parse(bad, Scheme::Postgres)
                .unwrap_err()
                .to_string();
            assert!(e.contains("%40") && !e.contains("hunter2"), "{e}");
        }
        // A '?' in the password is the password's (libpq looks for '@' or '/', not '?').
        let q = LinkTarget::parse("postgresql://u:p?w@db2:6432/app", Scheme::Postgres).unwrap();
        assert_eq!(q.label(), "db2:6432/app");
        assert_eq!(q.scrub("p?w"), "***");
    }

    #[test]
    fn link_strings_get_a_connect_timeout() {
        let t = LinkTarget::parse("host=db2 password=x\\", Scheme::Postgres).unwrap();
        // Every value quoted: a trailing backslash (an escape of nothing, for libpq) cannot swallow what is
        // appended.
        assert_eq!(
            t.pg_text_with_connect_timeout(2).unwrap().expose(),
            "host='db2' password='x' connect_timeout=2"
        );
        let k = LinkTarget::parse("host=db2 connect_timeout=7", Scheme::Postgres).unwrap();
        assert_eq!(
            k.pg_text_with_connect_timeout(2).unwrap().expose(),
            "host='db2' connect_timeout='7'"
        );
        let u = LinkTarget::parse("postgresql://db2/app", Scheme::Postgres).unwrap();
        assert_eq!(
            u.pg_text_with_connect_timeout(5).unwrap().expose(),
            "postgresql://db2/app?connect_timeout=5"
        );
        let v =
            LinkTarget::parse("postgresql://db2/app?sslmode=require", Scheme::Postgres).unwrap();
        assert_eq!(
            v.pg_text_with_connect_timeout(5).unwrap().expose(),
            "postgresql://db2/app?sslmode=require&connect_timeout=5"
        );
        let s = LinkTarget::parse("srv", Scheme::Postgres).unwrap();
        assert!(s.pg_text_with_connect_timeout(5).is_none());
        assert_eq!(link_connect_timeout(Duration::from_millis(500)), 2);
        assert_eq!(link_connect_timeout(Duration::from_millis(2500)), 3);
        assert_eq!(link_connect_timeout(Duration::from_secs(10)), 10);
    }

    #[test]
    fn mariadb_targets_name_a_server_or_warn_about_an_inline_password() {
        let s = LinkTarget::parse("remote_db2", Scheme::Mysql).unwrap();
        assert_eq!(s.label(), "server:remote_db2");
        assert!(s.warning().is_none());
        assert!(LinkTarget::parse("bad name", Scheme::Mysql).is_err());
        let u = LinkTarget::parse("mysql://u:pw@h/db", Scheme::Mysql).unwrap();
        assert!(u.warning().unwrap().contains("CREATE SERVER"));
        assert!(
            LinkTarget::parse("mysql://u@h/db", Scheme::Mysql)
                .unwrap()
                .warning()
                .is_none()
        );
    }

    #[test]
    fn bad_targets_fail_without_the_password() {
        for bad in [
            "host=db2 password='hunter2",
            "host=db2 =hunter2",
            "two words",
        ] {
            let e = LinkTarget::parse(bad, Scheme::Postgres)
                .unwrap_err()
                .to_string();
            assert!(!e.contains("hunter2"), "{e}");
        }
        let e = LinkTarget::parse("x", Scheme::Oracle)
            .unwrap_err()
            .to_string();
        assert!(e.contains("SQL over TNS"), "{e}");
        let e = LinkTarget::parse("mysql://u:hunter2@h", Scheme::Mysql)
            .unwrap_err()
            .to_string();
        assert!(e.contains("database") && !e.contains("hunter2"), "{e}");
        let m = LinkTarget::parse("mysql://u:hunter2@h:3307/db", Scheme::Mysql).unwrap();
        assert_eq!(m.label(), "h:3307/db");
        assert_eq!(m.redacted(), "mysql://u:***@h:3307/db");
    }

    #[test]
    fn per_row_time_is_the_difference_over_rows_minus_one() {
        let mut r = LinkResult {
            target: String::new(),
            method: String::new(),
            remote_sql: String::new(),
            remote_multi_sql: None,
            open: None,
            single: LatencyHistogram::new(),
            multi: LatencyHistogram::new(),
            statement: LatencyHistogram::new(),
            rows: 10,
            row_bytes: 1437,
            requests_per_call: 2,
        };
        assert_eq!(r.per_row_ns(), None);
        r.single.record(Duration::from_micros(1000));
        r.multi.record(Duration::from_micros(10_000));
        let p = r.per_row_ns().unwrap();
        assert!((990_000.0..=1_010_000.0).contains(&p), "{p}");
        let q = r.per_request_p50_ns().unwrap();
        assert!((495_000.0..=505_000.0).contains(&q), "{q}");
    }
}
