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

pub mod doc;
pub mod link;
pub mod mysql;
pub mod oracle;
pub mod postgres;
pub mod redis;
mod tls;

use crate::probe::target::{Family, Target, TargetError};
use crate::stats::LatencyHistogram;
use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};
use thiserror::Error;

/// Which database protocol a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// `postgres://`, `postgresql://`.
    Postgres,
    /// `mysql://`, `mariadb://`.
    Mysql,
    /// `redis://`, `rediss://` (TLS).
    Redis,
    /// `oracle://`: listener ping only.
    Oracle,
}

impl Scheme {
    /// The protocol's usual port.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Postgres => 5432,
            Scheme::Mysql => 3306,
            Scheme::Redis => 6379,
            Scheme::Oracle => 1521,
        }
    }
    /// A display name.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Postgres => "PostgreSQL",
            Scheme::Mysql => "MySQL/MariaDB",
            Scheme::Redis => "Redis",
            Scheme::Oracle => "Oracle listener",
        }
    }

    /// The product that answered, when its version says it (MariaDB or MySQL), else [`Scheme::name`].
    pub fn product(self, server_version: Option<&str>) -> &'static str {
        match (self, server_version) {
            (Scheme::Mysql, Some(v)) if v.contains("MariaDB") => "MariaDB",
            (Scheme::Mysql, Some(_)) => "MySQL",
            _ => self.name(),
        }
    }
    /// Where a password can come from, for error hints.
    pub fn password_hint(self) -> &'static str {
        match self {
            Scheme::Postgres => "give it in the URL, in PGPASSWORD, or with -W to be prompted",
            Scheme::Mysql => "give it in the URL, in MYSQL_PWD, or with -W to be prompted",
            Scheme::Redis => "give it in the URL, in REDISCLI_AUTH, or with -W to be prompted",
            Scheme::Oracle => "an Oracle listener ping needs no password",
        }
    }
}

/// A password. It cannot be printed: `Debug` shows `***` and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a password.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The password itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// How hard to insist on TLS (libpq's `sslmode`, MySQL's `ssl-mode`, `rediss://`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// Never use TLS.
    Disable,
    /// Use TLS when the server offers it, without checking the certificate (libpq's default).
    Prefer,
    /// TLS or nothing, without checking the certificate (`require`, MySQL `REQUIRED`).
    Require,
    /// TLS with the certificate checked against the platform's roots and the host name (`verify-ca`,
    /// `verify-full`, MySQL `VERIFY_CA` / `VERIFY_IDENTITY`; `rediss://` by default).
    Verify,
}

impl SslMode {
    /// Parses libpq and MySQL spellings (`disable`, `allow`, `prefer`, `require`, `verify-ca`, `verify-full`,
    /// `DISABLED`, `PREFERRED`, `REQUIRED`, `VERIFY_CA`, `VERIFY_IDENTITY`).
    pub fn parse(s: &str) -> Option<SslMode> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "disable" | "disabled" | "false" | "0" => Some(SslMode::Disable),
            "allow" | "prefer" | "preferred" => Some(SslMode::Prefer),
            "require" | "required" | "true" | "1" => Some(SslMode::Require),
            "verify-ca" | "verify-full" | "verify-identity" => Some(SslMode::Verify),
            _ => None,
        }
    }

    /// True when the connection must be encrypted.
    pub fn required(self) -> bool {
        matches!(self, SslMode::Require | SslMode::Verify)
    }
}

/// A database URL, parsed: `SCHEME://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE][?sslmode=...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbUrl {
    /// Protocol.
    pub scheme: Scheme,
    /// Host name or address (empty: take it from the environment, else localhost).
    pub host: String,
    /// Port (None: from the environment, else the protocol's default).
    pub port: Option<u16>,
    /// User name.
    pub user: Option<String>,
    /// Password.
    pub password: Option<Secret>,
    /// Database (PostgreSQL, MySQL), database number (Redis) or service name (Oracle).
    pub database: Option<String>,
    /// TLS setting from the URL (`sslmode`, `ssl-mode`, `rediss://`).
    pub ssl_mode: Option<SslMode>,
    /// MySQL: a PEM file with the server's RSA public key (`server-public-key-path`, as the mysql client's
    /// `--server-public-key-path`): used instead of asking the server for its key.
    pub server_public_key: Option<std::path::PathBuf>,
    /// MySQL: whether the server may be asked for its RSA public key when a password must be sent without
    /// TLS (`get-server-public-key`, default true).
    pub get_server_public_key: bool,
}

pub(crate) fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a '%' is not followed by two hex digits".to_string())?;
            out.push(h);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent-encoding is not UTF-8".to_string())
}

impl DbUrl {
    /// Parses a URL. Errors never contain the password.
    pub fn parse(text: &str) -> Result<DbUrl, DbError> {
        let err = |detail: &str| DbError::Url {
            url: redact_text(text),
            detail: detail.to_string(),
        };
        let (scheme_s, rest) = text
            .split_once("://")
            .ok_or_else(|| err("no 'SCHEME://'"))?;
        let (scheme, tls) = match scheme_s.to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => (Scheme::Postgres, None),
            "mysql" | "mariadb" => (Scheme::Mysql, None),
            "redis" => (Scheme::Redis, None),
            "rediss" => (Scheme::Redis, Some(SslMode::Verify)),
            "oracle" => (Scheme::Oracle, None),
            _ => return Err(err("unknown scheme")),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (name, pw) = match u.split_once(':') {
                    Some((n, p)) => (n, Some(p)),
                    None => (u, None),
                };
                let name = percent_decode(name).map_err(|d| err(&format!("user name: {d}")))?;
                let pw = match pw {
                    Some(p) => Some(Secret::new(
                        percent_decode(p).map_err(|d| err(&format!("password: {d}")))?,
                    )),
                    None => None,
                };
                ((!name.is_empty()).then_some(name), pw)
            }
        };
        let (host, port) = if hostport.is_empty() {
            (String::new(), None)
        } else {
            let has_port = if hostport.starts_with('[') {
                hostport.contains("]:")
            } else {
                hostport.parse::<std::net::IpAddr>().is_err() && hostport.contains(':')
            };
            let t = Target::parse(hostport, 1).map_err(|e| err(&e.to_string()))?;
            (t.host, has_port.then_some(t.port))
        };
        let database = match path {
            Some(p) if !p.is_empty() => {
                Some(percent_decode(p).map_err(|d| err(&format!("database: {d}")))?)
            }
            _ => None,
        };
        let mut ssl_mode = tls;
        let mut server_public_key = None;
        let mut get_server_public_key = true;
        let known = if scheme == Scheme::Mysql {
            "sslmode, server-public-key-path, get-server-public-key"
        } else {
            "sslmode"
        };
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k.to_ascii_lowercase().replace('_', "-").as_str() {
                "server-public-key-path" if scheme == Scheme::Mysql => {
                    let path = percent_decode(v).map_err(|d| err(&format!("{k}: {d}")))?;
                    if path.is_empty() {
                        return Err(err(&format!("{k} needs a file name")));
                    }
                    server_public_key = Some(std::path::PathBuf::from(path));
                }
                "get-server-public-key" if scheme == Scheme::Mysql => {
                    get_server_public_key = match v.to_ascii_lowercase().as_str() {
                        "true" | "1" | "on" | "yes" => true,
                        "false" | "0" | "off" | "no" => false,
                        _ => return Err(err(&format!("{k} is true or false, not '{v}'"))),
                    };
                }
                "sslmode" | "ssl-mode" | "ssl" => {
                    let m = SslMode::parse(v).ok_or_else(|| err(&format!("unknown {k} '{v}'")))?;
                    if tls.is_some() && !m.required() {
                        return Err(err("rediss:// always uses TLS"));
                    }
                    ssl_mode = Some(m);
                }
                _ => return Err(err(&format!("unknown parameter '{k}' (known: {known})"))),
            }
        }
        if scheme == Scheme::Redis && database.as_ref().is_some_and(|d| d.parse::<u32>().is_err()) {
            return Err(err("a Redis database is a number, as in redis://host/2"));
        }
        Ok(DbUrl {
            scheme,
            host,
            port,
            user,
            password,
            database,
            ssl_mode,
            server_public_key,
            get_server_public_key,
        })
    }

    /// Fills what the URL left out from the ecosystem's environment variables, as its own clients do:
    /// PostgreSQL `PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE PGSSLMODE`; MySQL `MYSQL_HOST MYSQL_TCP_PORT
    /// MYSQL_PWD`; Redis `REDISCLI_AUTH`; `USER` for a missing user name. `get` reads one variable.
    pub fn apply_env(&mut self, get: &dyn Fn(&str) -> Option<String>) {
        let get = |k: &str| get(k).filter(|v| !v.is_empty());
        let (host, port, user, pass, db, ssl) = match self.scheme {
            Scheme::Postgres => (
                "PGHOST",
                "PGPORT",
                "PGUSER",
                "PGPASSWORD",
                "PGDATABASE",
                "PGSSLMODE",
            ),
            Scheme::Mysql => ("MYSQL_HOST", "MYSQL_TCP_PORT", "", "MYSQL_PWD", "", ""),
            Scheme::Redis => ("", "", "", "REDISCLI_AUTH", "", ""),
            Scheme::Oracle => ("", "", "", "", "", ""),
        };
        let var = |k: &str| if k.is_empty() { None } else { get(k) };
        if self.host.is_empty() {
            self.host = var(host)
                .filter(|h| !h.starts_with('/'))
                .unwrap_or_else(|| "localhost".into());
        }
        if self.port.is_none() {
            self.port = var(port).and_then(|p| p.parse().ok());
        }
        if self.user.is_none() && matches!(self.scheme, Scheme::Postgres | Scheme::Mysql) {
            self.user = var(user).or_else(|| get("USER")).or_else(|| get("LOGNAME"));
        }
        if self.password.is_none() {
            self.password = var(pass).map(Secret::new);
        }
        if self.database.is_none() {
            self.database = var(db);
        }
        if self.ssl_mode.is_none() {
            self.ssl_mode = var(ssl).and_then(|s| SslMode::parse(&s));
        }
    }

    /// The host, `localhost` when none was given.
    pub fn host_or_localhost(&self) -> &str {
        if self.host.is_empty() {
            "localhost"
        } else {
            &self.host
        }
    }

    /// The port to use.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(self.scheme.default_port())
    }

    /// The user name to log in as (PostgreSQL and MySQL fall back on `root` when nothing gave one).
    pub fn user(&self) -> &str {
        self.user.as_deref().unwrap_or(match self.scheme {
            Scheme::Postgres | Scheme::Mysql => "root",
            _ => "",
        })
    }

    /// The URL without its password: what every output shows.
    pub fn redacted(&self) -> String {
        let scheme = match (self.scheme, self.ssl_mode) {
            (Scheme::Postgres, _) => "postgres",
            (Scheme::Mysql, _) => "mysql",
            (Scheme::Redis, Some(SslMode::Require | SslMode::Verify)) => "rediss",
            (Scheme::Redis, _) => "redis",
            (Scheme::Oracle, _) => "oracle",
        };
        let mut s = format!("{scheme}://");
        if let Some(u) = &self.user {
            s.push_str(u);
            if self.password.is_some() {
                s.push_str(":***");
            }
            s.push('@');
        } else if self.password.is_some() {
            s.push_str(":***@");
        }
        let host = if self.host.is_empty() {
            "localhost"
        } else {
            &self.host
        };
        s.push_str(
            &Target {
                host: host.to_string(),
                port: self.port(),
            }
            .to_string(),
        );
        if let Some(d) = &self.database {
            s.push('/');
            s.push_str(d);
        }
        s
    }
}

/// A URL as typed with any `user:password@` password replaced by `***` (for errors about unparsable URLs).
pub fn redact_text(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (auth, tail) = rest.split_at(end);
    match auth.rfind('@') {
        Some(at) => match auth[..at].split_once(':') {
            Some((u, _)) => format!("{scheme}://{u}:***{}{tail}", &auth[at..]),
            None => text.to_string(),
        },
        None => text.to_string(),
    }
}

/// What went wrong. Every message names the operation, the address and what to try; none contains a password.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DbError {
    /// The URL cannot be understood.
    #[error(
        "invalid database URL '{url}': {detail} (expected SCHEME://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE] with SCHEME postgres, mysql, mariadb, redis, rediss or oracle)"
    )]
    Url {
        /// The URL, password replaced by `***`.
        url: String,
        /// What is wrong.
        detail: String,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
    /// The host cannot be resolved.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// TCP connect failed.
    #[error(
        "cannot connect to {proto} at {addr}: {detail} (is the server running and listening on that port?)"
    )]
    Connect {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The system's message.
        detail: String,
    },
    /// No answer in time.
    #[error(
        "{proto} at {addr} did not answer within {timeout_ms} ms during {during} (raise --timeout, or check the server)"
    )]
    Timeout {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// The timeout.
        timeout_ms: u128,
    },
    /// The server closed the connection.
    #[error(
        "{proto} at {addr} closed the connection during {during}{detail} (was the session killed, or the server restarted? see the server log)"
    )]
    Closed {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// The server's last words, if any (": terminating connection ...").
        detail: String,
    },
    /// Authentication failed.
    #[error(
        "{proto} at {addr} rejected user '{user}': {message} (check the user name and password: {hint})"
    )]
    Auth {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// User name.
        user: String,
        /// The server's message.
        message: String,
        /// Where passwords come from.
        hint: &'static str,
    },
    /// The server wants a password and none was given.
    #[error("{proto} at {addr} wants a password for user '{user}' and none was given ({hint})")]
    NoPassword {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// User name.
        user: String,
        /// Where passwords come from.
        hint: &'static str,
    },
    /// The database does not exist.
    #[error(
        "{proto} at {addr} has no database '{database}': {message} (check the database part of the URL)"
    )]
    UnknownDatabase {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The database asked for.
        database: String,
        /// The server's message.
        message: String,
    },
    /// The server answered a statement with an error.
    #[error("{proto} at {addr} answered {during} with an error: {message}")]
    Server {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// The server's message.
        message: String,
    },
    /// TLS is required and the server does not offer it.
    #[error(
        "{proto} at {addr} does not offer TLS, but {setting} requires it (enable TLS on the server, or use sslmode=prefer or disable)"
    )]
    TlsNotOffered {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The setting that asked for TLS.
        setting: &'static str,
    },
    /// The TLS handshake failed.
    #[error(
        "TLS with {proto} at {addr} failed: {detail} (check the server certificate; sslmode=require encrypts without verifying it)"
    )]
    Tls {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What went wrong.
        detail: String,
    },
    /// The server insists on an encrypted connection and this one is not.
    #[error(
        "{proto} at {addr} requires an encrypted connection: {message} (use ssl-mode=REQUIRED, or leave ssl-mode at PREFERRED, the default)"
    )]
    TlsRequired {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The server's message.
        message: String,
    },
    /// The password must go to the server encrypted with its RSA key, and that cannot be done safely.
    #[error(
        "{proto} at {addr} wants the password for {plugin} encrypted with its RSA public key, but {detail} (use TLS: ssl-mode=REQUIRED, or give the key with server-public-key-path=FILE)"
    )]
    RsaKey {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// The authentication plugin.
        plugin: String,
        /// Why not.
        detail: String,
    },
    /// The peer said something this protocol does not allow.
    #[error(
        "unexpected answer from {addr} during {during}: {detail} (is this really a {proto} server on that port?)"
    )]
    Protocol {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What was going on.
        during: String,
        /// What was wrong.
        detail: String,
    },
    /// A database link cannot be used (extension or engine missing, the link's rule); never a password.
    #[error("{proto} at {addr}: {message}")]
    Link {
        /// Protocol name.
        proto: &'static str,
        /// Address of the local database.
        addr: SocketAddr,
        /// What is wrong and what to do.
        message: String,
    },
    /// The server asks for something roundtrip does not implement.
    #[error("{proto} at {addr} asks for {what}, which roundtrip does not support ({hint})")]
    Unsupported {
        /// Protocol name.
        proto: &'static str,
        /// Address.
        addr: SocketAddr,
        /// What it asked for.
        what: String,
        /// What to do.
        hint: &'static str,
    },
}

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
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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

/// A buffered blocking connection with timeouts and error mapping shared by the protocols.
/// A plain or TLS byte stream.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    /// Only while switching to TLS.
    Switching,
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
            Stream::Switching => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
            Stream::Switching => Err(io::ErrorKind::NotConnected.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Switching => Ok(()),
        }
    }
}

pub(crate) struct Conn {
    stream: Stream,
    /// Protocol version, cipher suite and verification, once TLS is on.
    pub tls_info: Option<String>,
    buf: Vec<u8>,
    pos: usize,
    /// Protocol name for errors.
    pub proto: &'static str,
    /// Peer address.
    pub addr: SocketAddr,
    timeout: Duration,
}

impl Conn {
    fn new(
        stream: TcpStream,
        proto: &'static str,
        addr: SocketAddr,
        timeout: Duration,
    ) -> io::Result<Conn> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream: Stream::Plain(stream),
            tls_info: None,
            buf: Vec::with_capacity(64 * 1024),
            pos: 0,
            proto,
            addr,
            timeout,
        })
    }

    fn io_error(&self, e: &io::Error, during: &str) -> DbError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => DbError::Timeout {
                proto: self.proto,
                addr: self.addr,
                during: during.to_string(),
                timeout_ms: self.timeout.as_millis(),
            },
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => self.closed(during, ""),
            _ => DbError::Protocol {
                proto: self.proto,
                addr: self.addr,
                during: during.to_string(),
                detail: e.to_string(),
            },
        }
    }

    /// Runs a TLS handshake on the connection (host names the server for SNI and verification) and returns
    /// how long it took.
    pub fn start_tls(&mut self, host: &str, mode: SslMode) -> Result<Duration, DbError> {
        let t0 = Instant::now();
        let tls_err = |detail: String| DbError::Tls {
            proto: self.proto,
            addr: self.addr,
            detail,
        };
        if self.pos < self.buf.len() {
            // Bytes that arrived before the handshake could have been injected by someone in the middle.
            return Err(tls_err(
                "the server sent unencrypted data before the TLS handshake".into(),
            ));
        }
        let config = tls::client_config(mode).map_err(tls_err)?;
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|_| {
            DbError::Tls {
                proto: self.proto,
                addr: self.addr,
                detail: format!("'{host}' is not a valid server name"),
            }
        })?;
        let mut client = rustls::ClientConnection::new(config, name).map_err(|e| DbError::Tls {
            proto: self.proto,
            addr: self.addr,
            detail: e.to_string(),
        })?;
        let Stream::Plain(mut tcp) = std::mem::replace(&mut self.stream, Stream::Switching) else {
            return Err(DbError::Tls {
                proto: self.proto,
                addr: self.addr,
                detail: "TLS is already on".into(),
            });
        };
        while client.is_handshaking() {
            if let Err(e) = client.complete_io(&mut tcp) {
                let is_tls = e
                    .get_ref()
                    .is_some_and(|i| i.downcast_ref::<rustls::Error>().is_some());
                return Err(if is_tls || e.kind() == io::ErrorKind::InvalidData {
                    DbError::Tls {
                        proto: self.proto,
                        addr: self.addr,
                        detail: e.to_string(),
                    }
                } else {
                    self.io_error(&e, "the TLS handshake")
                });
            }
        }
        let took = t0.elapsed();
        self.tls_info = Some(format!(
            "TLS {} {}, certificate {}",
            client
                .protocol_version()
                .map(|v| format!("{v:?}"))
                .unwrap_or_default(),
            client
                .negotiated_cipher_suite()
                .map(|c| format!("{:?}", c.suite()))
                .unwrap_or_default(),
            if mode == SslMode::Verify {
                "verified (platform roots, host name)"
            } else {
                "not verified (only verify-full, VERIFY_IDENTITY and rediss:// verify)"
            }
        ));
        self.stream = Stream::Tls(Box::new(rustls::StreamOwned::new(client, tcp)));
        Ok(took)
    }

    /// A [`DbError::Closed`] with the server's last words.
    pub fn closed(&self, during: &str, detail: &str) -> DbError {
        DbError::Closed {
            proto: self.proto,
            addr: self.addr,
            during: during.to_string(),
            detail: if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            },
        }
    }

    /// A [`DbError::Protocol`].
    pub fn protocol(&self, during: &str, detail: impl std::fmt::Display) -> DbError {
        DbError::Protocol {
            proto: self.proto,
            addr: self.addr,
            during: during.to_string(),
            detail: detail.to_string(),
        }
    }

    /// A [`DbError::Server`].
    pub fn server(&self, during: &str, message: impl Into<String>) -> DbError {
        DbError::Server {
            proto: self.proto,
            addr: self.addr,
            during: during.to_string(),
            message: message.into(),
        }
    }

    /// Sends bytes.
    pub fn send(&mut self, b: &[u8], during: &str) -> Result<(), DbError> {
        self.stream
            .write_all(b)
            .map_err(|e| self.io_error(&e, during))
    }

    /// Reads more bytes into the buffer.
    fn fill(&mut self, during: &str) -> Result<(), DbError> {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let old = self.buf.len();
        self.buf.resize(old + 64 * 1024, 0);
        let r = loop {
            match self.stream.read(&mut self.buf[old..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        match r {
            Ok(0) => {
                self.buf.truncate(old);
                Err(self.closed(during, ""))
            }
            Ok(n) => {
                self.buf.truncate(old + n);
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(old);
                Err(self.io_error(&e, during))
            }
        }
    }

    /// Reads one message with `parse` (None: need more bytes; Err: not this protocol).
    pub fn next<T, E: std::fmt::Display>(
        &mut self,
        during: &str,
        parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, E>,
    ) -> Result<T, DbError> {
        loop {
            match parse(&self.buf[self.pos..]) {
                Ok(Some((v, used))) => {
                    self.pos += used;
                    return Ok(v);
                }
                Ok(None) => self.fill(during)?,
                Err(e) => return Err(self.protocol(during, e)),
            }
        }
    }
}

/// A short random hex string for names of temporary keys.
pub(crate) fn random_tag() -> String {
    let mut b = [0u8; 6];
    let _ = getrandom::fill(&mut b);
    crate::wire::pg::hex(&b)
}

fn now_since(start: Instant) -> Duration {
    start.elapsed()
}

/// Opens a TCP connection, timing the handshake.
pub(crate) fn tcp_connect(
    addr: SocketAddr,
    proto: &'static str,
    timeout: Duration,
) -> Result<(Conn, Duration), DbError> {
    let t0 = Instant::now();
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => DbError::Timeout {
            proto,
            addr,
            during: "the TCP handshake".into(),
            timeout_ms: timeout.as_millis(),
        },
        _ => DbError::Connect {
            proto,
            addr,
            detail: e.to_string(),
        },
    })?;
    let hs = t0.elapsed();
    let c = Conn::new(s, proto, addr, timeout).map_err(|e| DbError::Connect {
        proto,
        addr,
        detail: e.to_string(),
    })?;
    Ok((c, hs))
}

fn record(
    h: &mut LatencyHistogram,
    obs: &mut dyn Observer,
    op: Op,
    seq: u64,
    at: Duration,
    d: Duration,
    f: Fetched,
) {
    h.record(d);
    obs.sample(&DbSample {
        op,
        seq,
        at,
        duration: d,
        rows: f.rows,
        bytes: f.bytes,
        db_span: None,
    });
}

/// The singleton statement used when none was given.
pub fn default_query(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Redis => "GET roundtrip:db:probe",
        _ => "SELECT 1",
    }
}

/// Runs the measurement. Errors before anything was measured (bad settings, DNS) are returned as `Err`;
/// later errors end the run and are kept in [`DbResult::error`] with everything measured so far.
pub fn run(config: &DbConfig, obs: &mut dyn Observer) -> Result<DbResult, DbError> {
    config.validate()?;
    let url = &config.url;
    let scheme = url.scheme;
    let target = Target {
        host: if url.host.is_empty() {
            "localhost".into()
        } else {
            url.host.clone()
        },
        port: url.port(),
    };
    let query_text = config
        .query
        .clone()
        .unwrap_or_else(|| default_query(scheme).to_string());
    let start = Instant::now();
    let mut r = DbResult {
        scheme,
        target: url.redacted(),
        address: None,
        server_version: None,
        ssl_mode: url.ssl_mode.unwrap_or(match scheme {
            Scheme::Postgres | Scheme::Mysql => SslMode::Prefer,
            _ => SslMode::Disable,
        }),
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
        fetch_rows: if scheme == Scheme::Oracle || config.link.is_some() {
            0
        } else {
            config.rows
        },
        fetch_bytes_total: 0,
        fetch_rows_total: 0,
        query_text: if scheme == Scheme::Oracle || config.link.is_some() {
            String::new()
        } else {
            query_text.clone()
        },
        error: None,
        cancelled: false,
        link: None,
    };
    // The first resolution is fatal when it fails: nothing can be measured.
    let (addr, dns) = target.resolve(config.family)?;
    r.address = Some(addr);
    record(
        &mut r.dns,
        obs,
        Op::Dns,
        0,
        Duration::ZERO,
        dns,
        Fetched::default(),
    );
    let outcome = if scheme == Scheme::Oracle {
        oracle::run_pings(config, &target, addr, &mut r, obs, start)
    } else {
        run_sql(config, &target, addr, &query_text, &mut r, obs, start)
    };
    if let Err(e) = outcome {
        r.error = Some(e);
    }
    r.cancelled = config.cancel.load(Ordering::SeqCst);
    r.elapsed = start.elapsed();
    Ok(r)
}

fn open_session(
    config: &DbConfig,
    conn: Conn,
    r: &mut DbResult,
) -> Result<(Box<dyn Session + Send>, Setup), DbError> {
    let url = &config.url;
    match url.scheme {
        Scheme::Postgres => postgres::connect(conn, url, r.ssl_mode)
            .map(|(s, st)| (Box::new(s) as Box<dyn Session + Send>, st)),
        Scheme::Mysql => mysql::connect(conn, url, r.ssl_mode)
            .map(|(s, st)| (Box::new(s) as Box<dyn Session + Send>, st)),
        Scheme::Redis => redis::connect(conn, url, r.ssl_mode)
            .map(|(s, st)| (Box::new(s) as Box<dyn Session + Send>, st)),
        Scheme::Oracle => Err(DbError::Config(
            "an Oracle listener ping opens no database session".into(),
        )),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_sql(
    config: &DbConfig,
    target: &Target,
    mut addr: SocketAddr,
    query_text: &str,
    r: &mut DbResult,
    obs: &mut dyn Observer,
    start: Instant,
) -> Result<(), DbError> {
    let proto = r.scheme.name();
    let mut session: Option<Box<dyn Session + Send>> = None;
    for i in 0..u64::from(config.connects) {
        if config.cancel.load(Ordering::SeqCst) {
            return Ok(());
        }
        if i > 0 {
            let at = now_since(start);
            let (a, dns) = target.resolve(config.family)?;
            addr = a;
            record(&mut r.dns, obs, Op::Dns, i, at, dns, Fetched::default());
        }
        let at = now_since(start);
        let (conn, hs) = tcp_connect(addr, proto, config.timeout)?;
        record(
            &mut r.tcp_handshake,
            obs,
            Op::TcpHandshake,
            i,
            at,
            hs,
            Fetched::default(),
        );
        let at = now_since(start);
        let t0 = Instant::now();
        let (mut s, setup) = open_session(config, conn, r)?;
        let total = t0.elapsed();
        if let Some(tls) = setup.tls {
            record(&mut r.tls, obs, Op::Tls, i, at, tls, Fetched::default());
        }
        let startup = total
            .saturating_sub(setup.tls.unwrap_or_default())
            .saturating_sub(setup.uncounted);
        let at = at + setup.tls.unwrap_or_default();
        record(
            &mut r.startup,
            obs,
            Op::Startup,
            i,
            at,
            startup,
            Fetched::default(),
        );
        if r.server_version.is_none() {
            r.server_version = setup.server_version;
        }
        for n in setup.notes {
            if !r.notes.contains(&n) {
                r.notes.push(n);
            }
        }
        let at = now_since(start);
        let t0 = Instant::now();
        let f = s.query(query_text)?;
        record(
            &mut r.first_query,
            obs,
            Op::FirstQuery,
            i,
            at,
            t0.elapsed(),
            f,
        );
        r.connects_ok += 1;
        if i + 1 < u64::from(config.connects) {
            s.close();
        } else {
            session = Some(s);
        }
    }
    let Some(mut s) = session else { return Ok(()) };
    if config.link.is_some() {
        return link::measure(config, s, r, obs, start);
    }
    let result = measure_loop(config, query_text, s.as_mut(), r, obs, start);
    s.cleanup();
    s.close();
    result
}

fn measure_loop(
    config: &DbConfig,
    query_text: &str,
    s: &mut dyn Session,
    r: &mut DbResult,
    obs: &mut dyn Observer,
    start: Instant,
) -> Result<(), DbError> {
    let fetch_sql = if config.rows > 0 {
        Some(s.prepare_fetch(config.rows, config.row_bytes)?)
    } else {
        None
    };
    for i in 0..config.count {
        if config.cancel.load(Ordering::SeqCst) {
            return Ok(());
        }
        if let (true, Some(iv)) = (i > 0, config.interval) {
            std::thread::sleep(iv);
        }
        let at = now_since(start);
        let t0 = Instant::now();
        s.ping()?;
        record(
            &mut r.ping,
            obs,
            Op::Ping,
            i,
            at,
            t0.elapsed(),
            Fetched::default(),
        );

        let at = now_since(start);
        let t0 = Instant::now();
        let f = s.query(query_text)?;
        record(&mut r.query, obs, Op::Query, i, at, t0.elapsed(), f);

        if let Some(sql) = &fetch_sql {
            let at = now_since(start);
            let t0 = Instant::now();
            let f = s.query(sql)?;
            let d = t0.elapsed();
            if f.rows != config.rows {
                return Err(DbError::Server {
                    proto: r.scheme.name(),
                    addr: r
                        .address
                        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
                    during: "the multi-row fetch".into(),
                    message: format!("{} rows came back, {} were asked for", f.rows, config.rows),
                });
            }
            r.fetch_rows_total += f.rows;
            r.fetch_bytes_total += f.bytes;
            record(&mut r.fetch, obs, Op::Fetch, i, at, d, f);
        }
    }
    Ok(())
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
        let mut r = DbResult {
            scheme: Scheme::Postgres,
            target: String::new(),
            address: None,
            server_version: None,
            ssl_mode: SslMode::Disable,
            notes: vec![],
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
            fetch_rows: 10,
            fetch_bytes_total: 0,
            fetch_rows_total: 0,
            query_text: String::new(),
            error: None,
            cancelled: false,
            link: None,
        };
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
