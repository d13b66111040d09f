//! `roundtrip db`: round trips to database services where ICMP ping is impossible (managed PostgreSQL,
//! MySQL/MariaDB, Redis, an Oracle listener), split into network, protocol and server time.
//!
//! roundtrip speaks each protocol itself ([`crate::wire`]) so that every phase is timed where it happens:
//! DNS, TCP handshake, TLS (rustls; see [`SslMode`]), startup and authentication, first query. Then, on one
//! connection, `count` iterations of a protocol ping (PostgreSQL empty query, MySQL `COM_PING`, Redis `PING`),
//! a singleton query (`SELECT 1` or the user's) and a multi-row fetch. An Oracle listener gets a TNS ping on a
//! fresh connection per iteration and nothing else (no credentials are involved).
//!
//! A password is a [`Secret`]: it has no `Display`, its `Debug` is `***`, and [`DbUrl::redacted`] is what
//! every result, document and error carries.

mod conn;
mod error;
pub mod link;
pub mod mysql;
pub mod oracle;
pub mod postgres;
pub mod redis;
mod run;
mod tls;
mod url;

pub(crate) use conn::{Conn, random_tag, tcp_connect};
pub use error::DbError;
pub(crate) use run::record;
pub use run::{default_query, run};
pub(crate) use url::percent_decode;
pub use url::{DbUrl, Scheme, Secret, SslMode, redact_text};

use crate::probe::target::{Family, Target};
use crate::stats::LatencyHistogram;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Settings of a `roundtrip db` run.
#[derive(Debug, Clone)]
pub struct DbConfig {
    /// The database.
    pub url: DbUrl,
    /// Address family.
    pub family: Family,
    /// Fresh connections to time phase by phase (at least 1; the last one stays open for the loop).
    pub connects: u32,
    /// Iterations on the open connection (each: protocol ping, singleton query, multi-row fetch).
    pub count: u64,
    /// Pause between iterations.
    pub interval: Option<Duration>,
    /// The singleton statement (None: `SELECT 1`, Redis `GET roundtrip:db:probe`).
    pub query: Option<String>,
    /// Rows per multi-row fetch (0: no fetch).
    pub rows: u64,
    /// Bytes per row of the fetch.
    pub row_bytes: u64,
    /// Longest wait for any answer.
    pub timeout: Duration,
    /// Set to stop early; results so far are kept.
    pub cancel: Arc<AtomicBool>,
    /// `--link`: measure through a database link instead of the ping/query/fetch loop.
    pub link: Option<LinkConfig>,
}

/// `--link TARGET [--create-extension]`.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// The far end of the link.
    pub target: link::LinkTarget,
    /// Whether roundtrip may create the dblink extension / load FEDERATEDX when missing.
    pub create_extension: bool,
}

/// Largest `--rows`.
pub const MAX_ROWS: u64 = 10_000_000;
/// Largest `--row-bytes`.
pub const MAX_ROW_BYTES: u64 = 1024 * 1024;
/// Largest `--rows` x `--row-bytes`: what one fetch moves.
pub const MAX_FETCH_BYTES: u64 = 1 << 30;

impl DbConfig {
    /// Before round `i` (from 0): false when Ctrl-C ended the run, else true after the interval (none before
    /// the first round).
    pub(crate) fn next_round(&self, i: u64) -> bool {
        if self.cancel.load(Ordering::SeqCst) {
            return false;
        }
        if let (true, Some(iv)) = (i > 0, self.interval) {
            std::thread::sleep(iv);
        }
        true
    }

    /// Defaults: 5 connects, 100 iterations back to back, 100 rows of 1000 bytes, 5 s timeout.
    pub fn new(url: DbUrl) -> Self {
        DbConfig {
            url,
            family: Family::Any,
            connects: 5,
            count: 100,
            interval: None,
            query: None,
            rows: 100,
            row_bytes: 1000,
            timeout: Duration::from_secs(5),
            cancel: Arc::new(AtomicBool::new(false)),
            link: None,
        }
    }

    /// Checks ranges before any I/O.
    pub fn validate(&self) -> Result<(), DbError> {
        if self.connects == 0 {
            return Err(DbError::Config("--connects must be at least 1".into()));
        }
        if self.count == 0 {
            return Err(DbError::Config("--count must be at least 1".into()));
        }
        if self.rows > MAX_ROWS {
            return Err(DbError::Config(format!(
                "--rows {} is more than {MAX_ROWS}",
                self.rows
            )));
        }
        if self.rows > 0 && (self.row_bytes == 0 || self.row_bytes > MAX_ROW_BYTES) {
            return Err(DbError::Config(format!(
                "--row-bytes must be from 1 to {MAX_ROW_BYTES} (1MiB)"
            )));
        }
        if self.rows.saturating_mul(self.row_bytes) > MAX_FETCH_BYTES {
            return Err(DbError::Config(format!(
                "--rows {} x --row-bytes {} is {} MiB per fetch, more than the {} MiB one fetch may move (the server builds it and the client reads it, every iteration); fewer rows or smaller rows",
                self.rows,
                self.row_bytes,
                self.rows.saturating_mul(self.row_bytes) >> 20,
                MAX_FETCH_BYTES >> 20
            )));
        }
        if self.timeout.is_zero() {
            return Err(DbError::Config("--timeout must be more than 0".into()));
        }
        if matches!(&self.query, Some(q) if q.trim().is_empty()) {
            return Err(DbError::Config("--query must not be empty".into()));
        }
        if self.link.is_some() && !matches!(self.url.scheme, Scheme::Postgres | Scheme::Mysql) {
            return Err(DbError::Config(match self.url.scheme {
                Scheme::Oracle => "--link from Oracle (select ... from dual@LINK) needs SQL over TNS, which roundtrip does not speak yet: it can only ping an Oracle listener (roundtrip db oracle://HOST without --link)".into(),
                _ => "--link needs a SQL database at URL (postgres:// with dblink, or mysql:// with FEDERATEDX); Redis has no database links".into(),
            }));
        }
        if let Some(path) = &self.url.server_public_key {
            mysql::load_public_key(path)?;
        }
        Ok(())
    }
}

/// What one timed sample measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Name resolution.
    Dns,
    /// TCP three-way handshake (connect()).
    TcpHandshake,
    /// TLS negotiation.
    Tls,
    /// Startup and authentication until the server is ready for queries.
    Startup,
    /// The first singleton query on a fresh connection.
    FirstQuery,
    /// Protocol ping on the open connection (Oracle: TNS ping on a fresh connection).
    Ping,
    /// Singleton query on the open connection.
    Query,
    /// Multi-row fetch on the open connection.
    Fetch,
    /// `--link`: the first call, which opened the link.
    LinkOpen,
    /// `--link`: a single-row round trip through the link, timed inside the local database.
    Link,
    /// `--link`: a multi-row call through the link.
    LinkMulti,
}

impl Op {
    /// Stable name, as in the JSON and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Op::Dns => "dns",
            Op::TcpHandshake => "tcp_handshake",
            Op::Tls => "tls",
            Op::Startup => "startup",
            Op::FirstQuery => "first_query",
            Op::Ping => "ping",
            Op::Query => "query",
            Op::Fetch => "fetch",
            Op::LinkOpen => "link_open",
            Op::Link => "link",
            Op::LinkMulti => "link_multi",
        }
    }
}

/// One timed operation, for the full log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbSample {
    /// What was timed.
    pub op: Op,
    /// Sequence number within its kind, from 0.
    pub seq: u64,
    /// When it started, since the run started.
    pub at: Duration,
    /// How long it took.
    pub duration: Duration,
    /// Rows received (queries and fetches).
    pub rows: u64,
    /// Value bytes received (queries and fetches).
    pub bytes: u64,
    /// Link calls: the local database's clock before and after the remote call (µs since the Unix epoch).
    pub db_span: Option<(i64, i64)>,
}

/// Receives samples as they are measured.
pub trait Observer {
    /// Called once per timed operation.
    fn sample(&mut self, _s: &DbSample) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;
impl Observer for NoObserver {}

/// The values of one row: text per column, `None` for NULL.
pub(crate) type Row = Vec<Option<String>>;

/// Rows and value bytes a statement returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fetched {
    /// Rows.
    pub rows: u64,
    /// Sum of the value lengths.
    pub bytes: u64,
}

/// How to interrupt a statement from another connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// A PostgreSQL CancelRequest to the server at `addr` for backend `pid` with its secret `key`.
    PgCancel {
        /// The server.
        addr: std::net::SocketAddr,
        /// The backend's process id.
        pid: u32,
        /// Its cancel secret.
        key: u32,
    },
    /// MySQL/MariaDB `KILL QUERY id` over another session.
    MyKill {
        /// The connection (thread) id.
        id: u32,
    },
}

/// What a protocol connection offers once it is ready.
pub(crate) trait Session {
    /// The cheapest request the protocol has.
    fn ping(&mut self) -> Result<(), DbError>;
    /// Runs a statement and reads all its rows.
    fn query(&mut self, q: &str) -> Result<Fetched, DbError>;
    /// Runs a statement, reads all its rows and returns the values of the first one (empty: no row).
    fn query_row(&mut self, q: &str, during: &str) -> Result<(Fetched, Row), DbError> {
        let _ = (q, during);
        Err(DbError::Config(
            "this protocol returns no rows to read values from".into(),
        ))
    }
    /// Runs a statement whose parameters travel apart from its text (`$1`, `$2`, ... with PostgreSQL's
    /// extended query protocol: they are not in the statement that logs and `pg_stat_activity` show) and
    /// returns the values of its first row.
    fn query_row_params(
        &mut self,
        q: &str,
        params: &[&str],
        during: &str,
    ) -> Result<(Fetched, Row), DbError> {
        let _ = (q, params, during);
        Err(DbError::Config(
            "this protocol has no statement parameters".into(),
        ))
    }
    /// How another connection can interrupt the statement this session is running (None: it cannot).
    fn interrupt(&self) -> Option<Interrupt> {
        None
    }
    /// How long one read may wait from now on (the connection's timeout until then).
    fn set_read_timeout(&mut self, d: Duration) {
        let _ = d;
    }
    /// Untimed preparation of the multi-row fetch; returns the statement to time.
    fn prepare_fetch(&mut self, rows: u64, row_bytes: u64) -> Result<String, DbError>;
    /// Untimed cleanup after the fetches.
    fn cleanup(&mut self) {}
    /// Polite goodbye (Terminate, COM_QUIT, QUIT), ignoring errors.
    fn close(&mut self);
}

/// Timings of one connection setup, as the protocol modules report them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Setup {
    /// Time spent negotiating TLS (None when TLS was not used).
    pub tls: Option<Duration>,
    /// Server version, if the protocol tells it.
    pub server_version: Option<String>,
    /// Remarks for the report.
    pub notes: Vec<String>,
    /// Time spent on work that is roundtrip's, not the protocol's (the rediss:// TLS probe), left out of
    /// the startup phase.
    pub uncounted: Duration,
}

/// The attribution of the round trip, from medians.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Attribution {
    /// Network: the TCP handshake RTT.
    pub network_ns: u64,
    /// Protocol and server: protocol ping minus handshake.
    pub protocol_server_ns: i64,
    /// Statement execution: singleton query minus protocol ping.
    pub statement_ns: Option<i64>,
}

/// Everything a run measured; partial when `error` is set.
#[derive(Debug, Clone)]
pub struct DbResult {
    /// Protocol.
    pub scheme: Scheme,
    /// The URL without password.
    pub target: String,
    /// The address used.
    pub address: Option<SocketAddr>,
    /// Server version, when the protocol tells it.
    pub server_version: Option<String>,
    /// TLS setting in force.
    pub ssl_mode: SslMode,
    /// Remarks (TLS offered but not used, ...).
    pub notes: Vec<String>,
    /// Wall clock at the start.
    pub started: SystemTime,
    /// Length of the run.
    pub elapsed: Duration,
    /// Fresh connections that reached "ready".
    pub connects_ok: u32,
    /// DNS per connect.
    pub dns: LatencyHistogram,
    /// TCP handshake per connect: the baseline network RTT.
    pub tcp_handshake: LatencyHistogram,
    /// TLS per connect (empty without TLS).
    pub tls: LatencyHistogram,
    /// Startup and authentication per connect.
    pub startup: LatencyHistogram,
    /// First query per connect.
    pub first_query: LatencyHistogram,
    /// Protocol ping.
    pub ping: LatencyHistogram,
    /// Singleton query.
    pub query: LatencyHistogram,
    /// Multi-row fetch.
    pub fetch: LatencyHistogram,
    /// Rows per fetch asked for.
    pub fetch_rows: u64,
    /// Value bytes received by all fetches.
    pub fetch_bytes_total: u64,
    /// Rows received by all fetches.
    pub fetch_rows_total: u64,
    /// The statement timed as the singleton query.
    pub query_text: String,
    /// Why the run stopped early.
    pub error: Option<DbError>,
    /// Stopped by the user.
    pub cancelled: bool,
    /// `--link`: the round trips through the database link.
    pub link: Option<link::LinkResult>,
}

impl DbResult {
    /// A result with nothing measured yet, started now.
    pub(crate) fn new(
        scheme: Scheme,
        target: String,
        ssl_mode: SslMode,
        fetch_rows: u64,
        query_text: String,
    ) -> DbResult {
        DbResult {
            scheme,
            target,
            address: None,
            server_version: None,
            ssl_mode,
            notes: Vec::new(),
            started: SystemTime::now(),
            elapsed: Duration::ZERO,
            connects_ok: 0,
            dns: LatencyHistogram::new(),
            tcp_handshake: LatencyHistogram::new(),
            tls: LatencyHistogram::new(),
            startup: LatencyHistogram::new(),
            first_query: LatencyHistogram::new(),
            ping: LatencyHistogram::new(),
            query: LatencyHistogram::new(),
            fetch: LatencyHistogram::new(),
            fetch_rows,
            fetch_bytes_total: 0,
            fetch_rows_total: 0,
            query_text,
            error: None,
            cancelled: false,
            link: None,
        }
    }

    /// Network / protocol+server / statement attribution from medians (None without handshake and ping).
    pub fn attribution(&self) -> Option<Attribution> {
        if self.tcp_handshake.is_empty() || self.ping.is_empty() {
            return None;
        }
        let hs = self.tcp_handshake.percentile_ns(50.0);
        let ping = self.ping.percentile_ns(50.0);
        Some(Attribution {
            network_ns: hs,
            protocol_server_ns: ping as i64 - hs as i64,
            statement_ns: (!self.query.is_empty())
                .then(|| self.query.percentile_ns(50.0) as i64 - ping as i64),
        })
    }

    /// Median fetch time divided by rows per fetch.
    pub fn per_row_ns(&self) -> Option<f64> {
        (self.fetch_rows > 0 && !self.fetch.is_empty())
            .then(|| self.fetch.percentile_ns(50.0) as f64 / self.fetch_rows as f64)
    }

    /// Value bytes per second over all fetches.
    pub fn fetch_throughput_bytes_per_s(&self) -> Option<f64> {
        let total_ns = self.fetch.summary().mean_ns * self.fetch.len() as f64;
        (total_ns > 0.0).then(|| self.fetch_bytes_total as f64 / (total_ns / 1e9))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_of_every_scheme() {
        let u = DbUrl::parse("postgresql://alice:s%40cret@db.example:6543/sales?sslmode=require")
            .unwrap();
        assert_eq!(u.scheme, Scheme::Postgres);
        assert_eq!((u.host.as_str(), u.port), ("db.example", Some(6543)));
        assert_eq!(u.user.as_deref(), Some("alice"));
        assert_eq!(u.password.as_ref().map(|p| p.expose()), Some("s@cret"));
        assert_eq!(u.database.as_deref(), Some("sales"));
        assert_eq!(u.ssl_mode, Some(SslMode::Require));
        assert_eq!(u.redacted(), "postgres://alice:***@db.example:6543/sales");
        assert!(!format!("{u:?}").contains("s@cret"));

        let m = DbUrl::parse("mariadb://root@[::1]:3307/test").unwrap();
        assert_eq!(
            (m.scheme, m.host.as_str(), m.port()),
            (Scheme::Mysql, "::1", 3307)
        );
        let r = DbUrl::parse("rediss://:pw@cache/2").unwrap();
        assert_eq!(
            (r.scheme, r.ssl_mode, r.port()),
            (Scheme::Redis, Some(SslMode::Verify), 6379)
        );
        assert_eq!(r.redacted(), "rediss://:***@cache:6379/2");
        let o = DbUrl::parse("oracle://db1/ORCLPDB1").unwrap();
        assert_eq!(
            (o.scheme, o.port(), o.database.as_deref()),
            (Scheme::Oracle, 1521, Some("ORCLPDB1"))
        );
        let bare = DbUrl::parse("postgres://").unwrap();
        assert_eq!((bare.host.as_str(), bare.port), ("", None));
        assert!(bare.get_server_public_key && bare.server_public_key.is_none());
    }

    #[test]
    fn mysql_public_key_parameters() {
        let m = DbUrl::parse(
            "mysql://u@h/db?server_public_key_path=/etc/my%20key.pem&get-server-public-key=false",
        )
        .unwrap();
        assert_eq!(
            m.server_public_key.as_deref(),
            Some(std::path::Path::new("/etc/my key.pem"))
        );
        assert!(!m.get_server_public_key);
        assert!(
            DbUrl::parse("mysql://u@h/db?get-server-public-key=1")
                .unwrap()
                .get_server_public_key
        );
        for (bad, want) in [
            (
                "mysql://u@h/db?get-server-public-key=maybe",
                "is true or false",
            ),
            (
                "mysql://u@h/db?server-public-key-path=",
                "needs a file name",
            ),
            (
                "postgres://u@h/db?server-public-key-path=/k.pem",
                "(known: sslmode)",
            ),
            (
                "mysql://u@h/db?ssl-ca=x",
                "(known: sslmode, server-public-key-path, get-server-public-key)",
            ),
        ] {
            let e = DbUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_urls_fail_without_showing_the_password() {
        for bad in [
            "http://x",
            "postgres:/x",
            "postgres://u:hunter2@h:99999/db",
            "postgres://u:hunter2@h/db?sslmode=sometimes",
            "postgres://u:hunter2@h/db?color=red",
            "redis://u:hunter2@h/abc",
            "rediss://u:hunter2@h/1?sslmode=disable",
            "mysql://u:hunter2%zz@h/db",
        ] {
            let e = DbUrl::parse(bad).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{bad}: {e}");
            assert!(e.contains("invalid database URL"), "{e}");
        }
    }

    #[test]
    fn environment_fills_what_the_url_left_out() {
        let env = |k: &str| -> Option<String> {
            match k {
                "PGHOST" => Some("pg.internal".into()),
                "PGPORT" => Some("6000".into()),
                "PGUSER" => Some("app".into()),
                "PGPASSWORD" => Some("envpw".into()),
                "PGDATABASE" => Some("appdb".into()),
                "PGSSLMODE" => Some("disable".into()),
                "MYSQL_PWD" => Some("mypw".into()),
                "REDISCLI_AUTH" => Some("redispw".into()),
                "USER" => Some("osuser".into()),
                _ => None,
            }
        };
        let mut u = DbUrl::parse("postgres://").unwrap();
        u.apply_env(&env);
        assert_eq!(u.redacted(), "postgres://app:***@pg.internal:6000/appdb");
        assert_eq!(u.ssl_mode, Some(SslMode::Disable));
        // The URL wins over the environment.
        let mut u = DbUrl::parse("postgres://bob:urlpw@h:1/d?sslmode=require").unwrap();
        u.apply_env(&env);
        assert_eq!(u.password.as_ref().unwrap().expose(), "urlpw");
        assert_eq!(
            (u.user(), u.port(), u.ssl_mode),
            ("bob", 1, Some(SslMode::Require))
        );
        let mut m = DbUrl::parse("mysql://h").unwrap();
        m.apply_env(&env);
        assert_eq!(
            (m.user(), m.password.as_ref().unwrap().expose()),
            ("osuser", "mypw")
        );
        let mut r = DbUrl::parse("redis://h").unwrap();
        r.apply_env(&env);
        assert_eq!(r.password.as_ref().unwrap().expose(), "redispw");
        assert_eq!(r.user, None);
    }

    #[test]
    fn validates_settings() {
        let mut c = DbConfig::new(DbUrl::parse("postgres://h").unwrap());
        c.validate().unwrap();
        c.rows = 10;
        c.row_bytes = 0;
        assert!(c.validate().is_err());
        c.row_bytes = 10;
        c.query = Some("  ".into());
        assert!(c.validate().is_err());
        c.query = None;
        c.connects = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn attribution_comes_from_medians() {
        let mut r = DbResult::new(
            Scheme::Postgres,
            String::new(),
            SslMode::Disable,
            10,
            String::new(),
        );
        assert_eq!(r.attribution(), None);
        r.tcp_handshake.record(Duration::from_micros(100));
        r.ping.record(Duration::from_micros(300));
        r.query.record(Duration::from_micros(500));
        r.fetch.record(Duration::from_micros(1000));
        let a = r.attribution().unwrap();
        assert!((99_000..=101_000).contains(&a.network_ns));
        assert!((199_000..=201_000).contains(&a.protocol_server_ns));
        assert!((199_000..=201_000).contains(&a.statement_ns.unwrap()));
        let per_row = r.per_row_ns().unwrap();
        assert!((99_000.0..=101_000.0).contains(&per_row));
    }
}
