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
//! A password in TARGET is a [`Secret`]: [`LinkTarget::redacted`] is what outputs show, and
//! [`LinkTarget::scrub`] removes it from any server message before it leaves this module.

use super::{
    DbConfig, DbError, DbResult, DbSample, DbUrl, Fetched, Observer, Op, Scheme, Secret, Session,
    random_tag, record,
};
use crate::stats::LatencyHistogram;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Rows of the multi-row call under `--link` unless given (seed 001: 10 rows).
pub const DEFAULT_ROWS: u64 = 10;
/// Bytes per row under `--link` unless given (seed 001: `rpad('X', 1500-35-28)`, a row per packet).
pub const DEFAULT_ROW_BYTES: u64 = 1500 - 35 - 28;

/// What TARGET names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A libpq connection string (`host=... dbname=...`) or URI.
    ConnString,
    /// A PostgreSQL foreign server with a user mapping.
    Server,
    /// A MySQL/MariaDB server as a URL.
    Url(Box<DbUrl>),
}

/// The far end of a database link. Its password never prints: `Debug` and [`LinkTarget::redacted`] show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkTarget {
    text: Secret,
    kind: Kind,
    secrets: Vec<Secret>,
    redacted: String,
    label: String,
}

impl std::fmt::Debug for LinkTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LinkTarget({})", self.redacted)
    }
}

/// Splits a libpq `keyword=value` string (values bare or single-quoted, backslash escapes) into pairs.
fn conninfo_pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    loop {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            it.next();
        }
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.next() != Some('=') {
            return Err(format!("missing '=' after keyword '{key}'"));
        }
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        let mut value = String::new();
        if it.peek() == Some(&'\'') {
            it.next();
            loop {
                match it.next() {
                    None => return Err(format!("the quoted value of '{key}' is not closed")),
                    Some('\\') => value.extend(it.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = it.peek() {
                if c.is_whitespace() {
                    break;
                }
                it.next();
                if c == '\\' {
                    value.extend(it.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

fn bad_target(redacted: &str, detail: &str) -> DbError {
    DbError::Config(format!(
        "--link '{redacted}': {detail} (give a connection string such as 'host=db2 port=5432 dbname=app user=app password=...', or the name of a foreign server with a user mapping)"
    ))
}

impl LinkTarget {
    /// Parses TARGET for a local database of protocol `scheme`. Errors show it redacted.
    pub fn parse(text: &str, scheme: Scheme) -> Result<LinkTarget, DbError> {
        match scheme {
            Scheme::Postgres => Self::parse_pg(text),
            Scheme::Mysql => {
                let url = DbUrl::parse(text).map_err(|e| match e {
                    DbError::Url { url, detail } => DbError::Config(format!(
                        "--link '{url}': {detail} (a MySQL/MariaDB link is mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE of the remote server)"
                    )),
                    other => other,
                })?;
                let redacted = url.redacted();
                if url.scheme != Scheme::Mysql {
                    return Err(DbError::Config(format!(
                        "--link '{redacted}': a FEDERATEDX link from MySQL/MariaDB reaches another MySQL/MariaDB server: give mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
                    )));
                }
                if url.database.is_none() || url.host.is_empty() {
                    return Err(DbError::Config(format!(
                        "--link '{redacted}': give the remote host and database, as mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
                    )));
                }
                if let Some(pw) = &url.password
                    && pw.expose().contains(['@', '/', ':', '\''])
                {
                    return Err(DbError::Config(format!(
                        "--link '{redacted}': a FEDERATEDX connection cannot carry a password with '@', '/', ':' or a quote (use a CREATE SERVER definition's password instead, or another password)"
                    )));
                }
                let label = format!(
                    "{}/{}",
                    crate::probe::target::Target {
                        host: url.host.clone(),
                        port: url.port()
                    },
                    url.database.clone().unwrap_or_default()
                );
                Ok(LinkTarget {
                    text: Secret::new(text),
                    secrets: url.password.iter().cloned().collect(),
                    kind: Kind::Url(Box::new(url)),
                    redacted,
                    label,
                })
            }
            Scheme::Oracle => Err(DbError::Config(
                "--link to or from Oracle (select ... from dual@LINK) needs SQL over TNS, which roundtrip does not speak yet: it can only ping an Oracle listener (roundtrip db oracle://HOST)".into(),
            )),
            Scheme::Redis => Err(DbError::Config(
                "--link needs a SQL database at URL (postgres:// with dblink, or mysql:// with FEDERATEDX); Redis has no database links".into(),
            )),
        }
    }

    fn parse_pg(text: &str) -> Result<LinkTarget, DbError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(bad_target("", "it is empty"));
        }
        if t.chars().any(char::is_control) {
            return Err(bad_target("?", "it contains control characters"));
        }
        let lower = t.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            // A libpq URI: the password is in the user part or a password= parameter.
            let mut secrets = Vec::new();
            let mut redacted = super::redact_text(t);
            if let Ok(u) = DbUrl::parse(
                &t.split('?')
                    .next()
                    .unwrap_or(t)
                    .replace("postgresql://", "postgres://"),
            ) {
                secrets.extend(u.password.clone());
            }
            if let Some((_, q)) = t.split_once('?') {
                for pair in q.split('&') {
                    if let Some(("password", v)) = pair.split_once('=') {
                        secrets.push(Secret::new(v));
                        if let Ok(d) = super::percent_decode(v) {
                            secrets.push(Secret::new(d));
                        }
                        redacted = redacted.replace(pair, "password=***");
                    }
                }
            }
            // The raw (percent-encoded) user-part password too.
            if let Some((_, rest)) = t.split_once("://") {
                let auth = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
                if let Some(at) = auth.rfind('@')
                    && let Some((_, pw)) = auth[..at].split_once(':')
                {
                    secrets.push(Secret::new(pw));
                }
            }
            let label = DbUrl::parse(&redacted.replace("postgresql://", "postgres://"))
                .map(|u| {
                    format!(
                        "{}:{}/{}",
                        u.host_or_localhost(),
                        u.port(),
                        u.database.clone().unwrap_or_default()
                    )
                })
                .unwrap_or_else(|_| "uri".into());
            return Ok(LinkTarget {
                text: Secret::new(t),
                kind: Kind::ConnString,
                secrets: secrets
                    .into_iter()
                    .filter(|s| !s.expose().is_empty())
                    .collect(),
                redacted,
                label,
            });
        }
        if t.contains('=') {
            // Parse errors must not echo a value: they name keywords only.
            let pairs = conninfo_pairs(t).map_err(|d| bad_target("(not shown)", &d))?;
            let mut secrets = Vec::new();
            let mut shown = Vec::new();
            let (mut host, mut port, mut dbname) = (None, None, None);
            for (k, v) in &pairs {
                if k.is_empty() {
                    return Err(bad_target("(not shown)", "a '=' has no keyword before it"));
                }
                match k.as_str() {
                    "password" => {
                        if !v.is_empty() {
                            secrets.push(Secret::new(v.clone()));
                        }
                        shown.push("password=***".to_string());
                        continue;
                    }
                    "host" | "hostaddr" => host = Some(v.clone()),
                    "port" => port = Some(v.clone()),
                    "dbname" => dbname = Some(v.clone()),
                    _ => {}
                }
                if v.is_empty() || v.contains([' ', '\'', '\\']) {
                    shown.push(format!(
                        "{k}='{}'",
                        v.replace('\\', "\\\\").replace('\'', "\\'")
                    ));
                } else {
                    shown.push(format!("{k}={v}"));
                }
            }
            let label = format!(
                "{}:{}/{}",
                host.unwrap_or_else(|| "local".into()),
                port.unwrap_or_else(|| "5432".into()),
                dbname.unwrap_or_default()
            );
            return Ok(LinkTarget {
                text: Secret::new(t),
                kind: Kind::ConnString,
                secrets,
                redacted: shown.join(" "),
                label,
            });
        }
        if t.contains(char::is_whitespace) {
            return Err(bad_target(
                t,
                "a foreign server name has no spaces, and a connection string has keyword=value pairs",
            ));
        }
        Ok(LinkTarget {
            text: Secret::new(t),
            kind: Kind::Server,
            secrets: Vec::new(),
            redacted: t.to_string(),
            label: format!("server:{t}"),
        })
    }

    /// TARGET without its password: what every output, document, log and label shows.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// A short name for the `target` label: `HOST:PORT/DB` or `server:NAME`, never a password.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// True when TARGET names a foreign server (PostgreSQL) rather than a connection string.
    pub fn is_server_name(&self) -> bool {
        self.kind == Kind::Server
    }

    /// `s` with every password of TARGET replaced by `***`.
    pub fn scrub(&self, s: &str) -> String {
        let mut out = s.to_string();
        let mut secrets: Vec<&str> = self.secrets.iter().map(|s| s.expose()).collect();
        // Longest first, so a password containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for p in secrets {
            if !p.is_empty() {
                out = out.replace(p, "***");
            }
        }
        out
    }

    /// A [`DbError`] with every password of TARGET scrubbed from its text.
    pub fn scrub_error(&self, e: DbError) -> DbError {
        if self.secrets.is_empty() {
            return e;
        }
        let text = e.to_string();
        let clean = self.scrub(&text);
        if clean == text {
            e
        } else {
            DbError::Config(clean)
        }
    }
}

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

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// A dollar-quoted PostgreSQL literal whose tag does not occur in `s`.
fn dollar(s: &str) -> String {
    let mut tag = "rt".to_string();
    while s.contains(&format!("${tag}$")) {
        tag.push('x');
    }
    format!("${tag}${s}${tag}$")
}

fn mysql_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

enum Backend {
    Pg {
        /// The dblink connection name.
        name: String,
        /// The dblink extension's schema, quoted.
        schema: String,
    },
    My {
        /// Local FEDERATED table and procedure names.
        table: String,
        proc_name: String,
        /// The remote scratch table, dropped over a direct connection.
        remote_table: String,
        remote: Box<DbUrl>,
    },
}

/// An open session prepared for link calls: the temporary function (PostgreSQL) or the scratch table and
/// procedure (MySQL) exist; [`LinkSession::open_link`] makes the first call.
pub struct LinkSession {
    session: Box<dyn Session + Send>,
    backend: Backend,
    target: LinkTarget,
    addr: SocketAddr,
    proto: &'static str,
    single_sql: String,
    multi_sql: Option<String>,
    timeout: Duration,
    /// How the link is made.
    pub method: String,
    /// Remarks for the report.
    pub notes: Vec<String>,
    rows: u64,
    /// Requests each call sends through the link.
    pub requests_per_call: u32,
}

fn parse_call(
    values: &[Option<String>],
    target: &LinkTarget,
    proto: &'static str,
    addr: SocketAddr,
    client: Duration,
) -> Result<LinkCall, DbError> {
    let num = |i: usize| -> Option<i64> {
        values
            .get(i)?
            .as_deref()?
            .split('.')
            .next()?
            .trim()
            .parse()
            .ok()
    };
    match (num(0), num(1), num(2), num(3)) {
        (Some(b), Some(e), Some(n), Some(nb)) => Ok(LinkCall {
            began_unix_us: b,
            ended_unix_us: e,
            rows: n.max(0) as u64,
            bytes: nb.max(0) as u64,
            client,
        }),
        _ => Err(DbError::Protocol {
            proto,
            addr,
            during: "a link call".into(),
            detail: target.scrub(&format!(
                "expected began_us, ended_us, rows, bytes; got {values:?}"
            )),
        }),
    }
}

impl LinkSession {
    /// Prepares `session` (connected to `addr`) for calls through `target`: checks the extension or engine
    /// (creating or loading it only when `create_extension`), creates the temporary objects. Untimed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare(
        mut session: Box<dyn Session + Send>,
        scheme: Scheme,
        server_version: Option<&str>,
        local: &DbUrl,
        target: &LinkTarget,
        addr: SocketAddr,
        rows: u64,
        row_bytes: u64,
        create_extension: bool,
        timeout: Duration,
    ) -> Result<LinkSession, DbError> {
        let proto = scheme.name();
        let tag = random_tag();
        let link_err = |message: String| DbError::Link {
            proto,
            addr,
            message,
        };
        let mut notes = Vec::new();
        match scheme {
            Scheme::Postgres => {
                let during = "looking for the dblink extension";
                let (_, row) = session.query_row(
                    "SELECT n.nspname, e.extversion FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink'",
                    during,
                )?;
                let (schema, version) = if let [Some(s), Some(v)] = row.as_slice() {
                    (s.clone(), v.clone())
                } else {
                    let (_, db) = session.query_row("SELECT current_database()", during)?;
                    let db = db.first().cloned().flatten().unwrap_or_default();
                    let (_, avail) = session.query_row(
                        "SELECT count(*) FROM pg_available_extensions WHERE name = 'dblink'",
                        during,
                    )?;
                    let available = avail.first().cloned().flatten().as_deref() == Some("1");
                    if !available {
                        return Err(link_err(format!(
                            "the dblink extension is not installed in database '{db}' and this server has none to install (install the server's contrib package, e.g. postgresql-contrib, then CREATE EXTENSION dblink as a superuser)"
                        )));
                    }
                    if !create_extension {
                        return Err(link_err(format!(
                            "the dblink extension is not installed in database '{db}': a superuser can add it with CREATE EXTENSION dblink; (or run again with --create-extension to let roundtrip do it)"
                        )));
                    }
                    session
                        .query_row("CREATE EXTENSION dblink", "CREATE EXTENSION dblink")
                        .map_err(|e| target.scrub_error(e))?;
                    notes.push(format!(
                        "--create-extension: created the dblink extension in database '{db}' (left in place; DROP EXTENSION dblink removes it)"
                    ));
                    let (_, row) = session.query_row(
                        "SELECT n.nspname, e.extversion FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink'",
                        during,
                    )?;
                    match row.as_slice() {
                        [Some(s), Some(v)] => (s.clone(), v.clone()),
                        _ => {
                            return Err(link_err(
                                "CREATE EXTENSION dblink did not create it".into(),
                            ));
                        }
                    }
                };
                let s = quote_ident(&schema);
                let body = |open: bool| {
                    format!(
                        "CREATE FUNCTION pg_temp.roundtrip_link_{kind}({args}conn text, q text, OUT began_us bigint, OUT ended_us bigint, OUT nrows bigint, OUT nbytes bigint) LANGUAGE plpgsql AS $rtf$
BEGIN
  began_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  {connect}SELECT count(*), coalesce(sum(octet_length(r.f)), 0) INTO nrows, nbytes FROM {s}.dblink(conn, q) AS r(t timestamptz, f text);
  ended_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
END
$rtf$",
                        kind = if open { "open" } else { "call" },
                        args = if open { "target text, " } else { "" },
                        connect = if open {
                            format!("PERFORM {s}.dblink_connect(conn, target);\n  ")
                        } else {
                            String::new()
                        },
                    )
                };
                for open in [true, false] {
                    session.query_row(&body(open), "creating the temporary link function")?;
                }
                let name = format!("roundtrip_{tag}");
                let remote_single = "SELECT clock_timestamp(), NULL::text".to_string();
                let remote_multi = format!(
                    "SELECT clock_timestamp(), rpad('X', {row_bytes}, 'X') FROM generate_series(1, {rows})"
                );
                Ok(LinkSession {
                    session,
                    single_sql: remote_single,
                    multi_sql: (rows > 0).then_some(remote_multi),
                    backend: Backend::Pg {
                        name,
                        schema: s.clone(),
                    },
                    target: target.clone(),
                    addr,
                    proto,
                    timeout,
                    method: format!(
                        "dblink {version} (schema {schema}), timed with clock_timestamp() in a pg_temp function"
                    ),
                    notes,
                    rows,
                    requests_per_call: 1,
                })
            }
            Scheme::Mysql => {
                let Kind::Url(remote) = &target.kind else {
                    return Err(link_err("a MySQL link needs a mysql:// TARGET".into()));
                };
                let Some(local_db) = local.database.as_ref().map(|d| d.replace('`', "``")) else {
                    return Err(DbError::Config(
                        "--link from MySQL/MariaDB needs the local database in the URL (mysql://USER@HOST/DATABASE): the scratch FEDERATED table goes there".into(),
                    ));
                };
                let during = "looking for the FEDERATED engine";
                let mariadb = server_version.is_some_and(|v| v.contains("MariaDB"));
                let support = |s: &mut Box<dyn Session + Send>| -> Result<Option<String>, DbError> {
                    let (_, row) = s.query_row(
                        "SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = 'FEDERATED'",
                        during,
                    )?;
                    Ok(row.first().cloned().flatten())
                };
                let loaded = |v: &Option<String>| matches!(v.as_deref(), Some("YES" | "DEFAULT"));
                let mut engine = support(&mut session)?;
                if !loaded(&engine) {
                    let how = if mariadb {
                        "INSTALL SONAME 'ha_federatedx'"
                    } else {
                        "start mysqld with --federated (MySQL's FEDERATED engine is built in but disabled)"
                    };
                    if !create_extension || !mariadb {
                        return Err(link_err(format!(
                            "the FEDERATED{} engine is not loaded ({}): an administrator can {how}{}",
                            if mariadb { "X" } else { "" },
                            match engine.as_deref() {
                                None => "not in information_schema.ENGINES".to_string(),
                                Some(s) => format!("SUPPORT {s}"),
                            },
                            if mariadb && !create_extension {
                                "; (or run again with --create-extension to let roundtrip load it)"
                            } else {
                                ""
                            }
                        )));
                    }
                    session
                        .query_row(
                            "INSTALL SONAME 'ha_federatedx'",
                            "INSTALL SONAME 'ha_federatedx'",
                        )
                        .map_err(|e| link_err(format!("loading FEDERATEDX failed: {e}")))?;
                    engine = support(&mut session)?;
                    if !loaded(&engine) {
                        return Err(link_err(
                            "INSTALL SONAME 'ha_federatedx' succeeded but the FEDERATED engine is still not available".into(),
                        ));
                    }
                    notes.push(
                        "--create-extension: loaded FEDERATEDX (INSTALL SONAME 'ha_federatedx'; left loaded, UNINSTALL SONAME 'ha_federatedx' removes it)".into(),
                    );
                }
                // FEDERATEDX sends SHOW TABLE STATUS before each statement's SELECT (two round trips) unless
                // federated_pushdown hands the whole query over.
                let (_, pd) = session.query_row("SELECT @@global.federated_pushdown", during)?;
                let pushdown = matches!(pd.first().cloned().flatten().as_deref(), Some("1" | "ON"));
                if pushdown {
                    notes.push("federated_pushdown is ON: the requests per call were measured with it OFF (two), so the per-request figure assumes one".into());
                }
                let remote_table = format!("roundtrip_link_{tag}_remote");
                let table = format!("roundtrip_link_{tag}");
                let proc_name = format!("roundtrip_link_{tag}_call");
                // The remote scratch table, over roundtrip's own connection to TARGET.
                let mut rs = open_direct(remote, timeout).map_err(|e| {
                    link_err(format!(
                        "roundtrip needs its own connection to {} to create the remote scratch table, and it failed: {}",
                        target.redacted(),
                        target.scrub(&e.to_string())
                    ))
                })?;
                let made = (|| -> Result<(), DbError> {
                    rs.query(&format!(
                        "CREATE TABLE `{remote_table}` (id INT NOT NULL PRIMARY KEY, f LONGTEXT) ENGINE=InnoDB"
                    ))?;
                    rs.query(&format!("INSERT INTO `{remote_table}` VALUES (0, '')"))?;
                    if rows > 0 {
                        if rows > 1000 {
                            let _ = rs.query(&format!(
                                "SET SESSION cte_max_recursion_depth = {}",
                                rows + 1
                            ));
                        }
                        rs.query(&format!(
                            "INSERT INTO `{remote_table}` WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {rows}) SELECT n, REPEAT('X', {row_bytes}) FROM s"
                        ))?;
                    }
                    Ok(())
                })();
                rs.close();
                let remote_url = remote.clone();
                let mut ls = LinkSession {
                    session,
                    single_sql: format!("CALL `{proc_name}`(0, 0)"),
                    multi_sql: (rows > 0).then(|| format!("CALL `{proc_name}`(1, {rows})")),
                    backend: Backend::My {
                        table: table.clone(),
                        proc_name: proc_name.clone(),
                        remote_table: remote_table.clone(),
                        remote: remote_url,
                    },
                    target: target.clone(),
                    addr,
                    proto,
                    timeout,
                    method: format!(
                        "FEDERATED{} table -> {}/{remote_table}, timed with SYSDATE(6) in a scratch procedure",
                        if mariadb { "X" } else { "" },
                        target.label()
                    ),
                    notes,
                    rows,
                    requests_per_call: if pushdown { 1 } else { 2 },
                };
                if let Err(e) = made {
                    ls.cleanup();
                    return Err(link_err(format!(
                        "creating the remote scratch table {remote_table} at {} failed: {}",
                        target.redacted(),
                        target.scrub(&e.to_string())
                    )));
                }
                let conn = format!(
                    "mysql://{}{}@{}:{}/{}/{remote_table}",
                    remote.user(),
                    remote
                        .password
                        .as_ref()
                        .map(|p| format!(":{}", p.expose()))
                        .unwrap_or_default(),
                    remote.host,
                    remote.port(),
                    remote.database.clone().unwrap_or_default()
                );
                let steps = [
                    format!(
                        "CREATE TABLE `{local_db}`.`{table}` (id INT NOT NULL, f LONGTEXT, PRIMARY KEY (id)) ENGINE=FEDERATED CONNECTION={}",
                        mysql_string(&conn)
                    ),
                    format!(
                        "CREATE PROCEDURE `{local_db}`.`{proc_name}`(IN lo INT, IN hi INT) BEGIN
  DECLARE b DATETIME(6); DECLARE e DATETIME(6); DECLARE n BIGINT; DECLARE nb BIGINT;
  SET b = SYSDATE(6);
  SELECT COUNT(*), COALESCE(SUM(LENGTH(f)), 0) INTO n, nb FROM `{local_db}`.`{table}` WHERE id BETWEEN lo AND hi;
  SET e = SYSDATE(6);
  SELECT CAST(UNIX_TIMESTAMP(b) * 1000000 AS SIGNED), CAST(UNIX_TIMESTAMP(e) * 1000000 AS SIGNED), n, nb;
END"
                    ),
                ];
                for sql in &steps {
                    if let Err(e) = ls.session.query(sql) {
                        ls.cleanup();
                        return Err(link_err(format!(
                            "creating the scratch FEDERATED table and procedure failed: {}",
                            target.scrub(&e.to_string())
                        )));
                    }
                }
                ls.single_sql = format!("CALL `{local_db}`.`{proc_name}`(0, 0)");
                ls.multi_sql =
                    (rows > 0).then(|| format!("CALL `{local_db}`.`{proc_name}`(1, {rows})"));
                Ok(ls)
            }
            _ => Err(DbError::Config(
                "--link needs a PostgreSQL or MySQL/MariaDB database at URL".into(),
            )),
        }
    }

    /// The statement a single-row call runs through the link.
    pub fn remote_sql(&self) -> String {
        match &self.backend {
            Backend::Pg { .. } => self.single_sql.clone(),
            Backend::My { remote_table, .. } => {
                format!("SELECT id, f FROM {remote_table} WHERE id = 0 (FEDERATEDX)")
            }
        }
    }

    /// The statement a multi-row call runs through the link.
    pub fn remote_multi_sql(&self) -> Option<String> {
        match &self.backend {
            Backend::Pg { .. } => self.multi_sql.clone(),
            Backend::My { remote_table, .. } => self.multi_sql.as_ref().map(|_| {
                format!(
                    "SELECT id, f FROM {remote_table} WHERE id BETWEEN 1 AND {} (FEDERATEDX)",
                    self.rows
                )
            }),
        }
    }

    fn run_call(&mut self, sql: &str, during: &str) -> Result<LinkCall, DbError> {
        let t0 = Instant::now();
        let (_f, row) = self
            .session
            .query_row(sql, during)
            .map_err(|e| self.explain(e))?;
        let client = t0.elapsed();
        parse_call(&row, &self.target, self.proto, self.addr, client)
    }

    /// Adds PostgreSQL's rule to a "password is required" error and scrubs the password.
    fn explain(&self, e: DbError) -> DbError {
        let text = self.target.scrub(&e.to_string());
        if text.contains("2F003") {
            return DbError::Link {
                proto: self.proto,
                addr: self.addr,
                message: format!(
                    "{text} (PostgreSQL's rule for dblink: a non-superuser's link must authenticate with a password the remote server asks for: put password=... in TARGET or in the foreign server's user mapping, and make the remote pg_hba.conf ask for it (scram-sha-256 or md5); or run as a superuser)"
                ),
            };
        }
        if text != e.to_string() {
            return DbError::Config(text);
        }
        e
    }

    /// The first call: opens the link, then one single-row round trip through it.
    pub fn open_link(&mut self) -> Result<LinkCall, DbError> {
        let sql = match &self.backend {
            Backend::Pg { name, .. } => format!(
                "SELECT * FROM pg_temp.roundtrip_link_open({}, {}, {})",
                dollar(self.target.text.expose()),
                dollar(name),
                dollar(&self.single_sql)
            ),
            Backend::My { .. } => self.single_sql.clone(),
        };
        self.run_call(&sql, "opening the link (first call)")
    }

    /// One single-row round trip through the open link.
    pub fn call(&mut self) -> Result<LinkCall, DbError> {
        let sql = self.call_sql(false);
        self.run_call(&sql, "a call through the link")
    }

    /// One multi-row call through the open link (None when there are no rows to fetch).
    pub fn call_multi(&mut self) -> Option<Result<LinkCall, DbError>> {
        self.multi_sql.as_ref()?;
        let sql = self.call_sql(true);
        Some(self.run_call(&sql, "a multi-row call through the link"))
    }

    fn call_sql(&self, multi: bool) -> String {
        let q = if multi {
            self.multi_sql.clone().unwrap_or_default()
        } else {
            self.single_sql.clone()
        };
        match &self.backend {
            Backend::Pg { name, .. } => format!(
                "SELECT * FROM pg_temp.roundtrip_link_call({}, {})",
                dollar(name),
                dollar(&q)
            ),
            Backend::My { .. } => q,
        }
    }

    /// The client -> local database protocol ping on the same session.
    pub fn ping(&mut self) -> Result<Duration, DbError> {
        let t0 = Instant::now();
        self.session.ping()?;
        Ok(t0.elapsed())
    }

    /// Closes the link and removes the scratch objects (errors ignored; a temporary function goes with the
    /// session anyway).
    pub fn cleanup(&mut self) {
        match &self.backend {
            Backend::Pg { name, schema } => {
                let _ = self.session.query(&format!(
                    "SELECT {schema}.dblink_disconnect({n}) WHERE {n} = ANY ({schema}.dblink_get_connections())",
                    n = dollar(name)
                ));
            }
            Backend::My {
                table,
                proc_name,
                remote_table,
                remote,
            } => {
                let _ = self
                    .session
                    .query(&format!("DROP PROCEDURE IF EXISTS `{proc_name}`"));
                let _ = self
                    .session
                    .query(&format!("DROP TABLE IF EXISTS `{table}`"));
                if let Ok(mut rs) = open_direct(remote, self.timeout) {
                    let _ = rs.query(&format!("DROP TABLE IF EXISTS `{remote_table}`"));
                    rs.close();
                }
            }
        }
    }

    /// Cleans up and says goodbye.
    pub fn close(mut self) {
        self.cleanup();
        self.session.close();
    }
}

/// A direct session to a MySQL server (the remote end, to create and drop its scratch table).
fn open_direct(url: &DbUrl, timeout: Duration) -> Result<Box<dyn Session + Send>, DbError> {
    let target = crate::probe::target::Target {
        host: url.host_or_localhost().to_string(),
        port: url.port(),
    };
    let (addr, _) = target.resolve(crate::probe::target::Family::Any)?;
    let (conn, _) = super::tcp_connect(addr, Scheme::Mysql.name(), timeout)?;
    let ssl = url.ssl_mode.unwrap_or(super::SslMode::Prefer);
    Ok(Box::new(super::mysql::connect(conn, url, ssl)?.0))
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
            if config.cancel.load(Ordering::SeqCst) {
                return Ok(());
            }
            if let (true, Some(iv)) = (i > 0, config.interval) {
                std::thread::sleep(iv);
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
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

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
