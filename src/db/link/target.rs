//! The far end of a database link as the user wrote it ([`LinkTarget`]): a libpq connection string or URI,
//! a foreign server name, or a `mysql://` URL, parsed once and kept with its password redacted.

use crate::db::{DbError, DbUrl, Scheme, Secret};

/// What TARGET names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// A libpq connection string (`host=... dbname=...`) or URI.
    ConnString,
    /// A PostgreSQL foreign server with a user mapping.
    Server,
    /// A MySQL/MariaDB server as a URL.
    Url(Box<DbUrl>),
    /// A MySQL/MariaDB `CREATE SERVER` entry (mysql.servers): FEDERATEDX's `CONNECTION='NAME/table'`.
    MyServer,
}

/// libpq's `isspace` in the C locale: ASCII only (U+00A0 and other Unicode spaces are part of a value).
fn libpq_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Connection keywords whose values are secrets.
fn secret_keyword(k: &str) -> bool {
    matches!(k, "password" | "sslpassword")
}

/// The far end of a database link. Its password never prints: `Debug` and [`LinkTarget::redacted`] show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkTarget {
    pub(super) text: Secret,
    pub(super) kind: Kind,
    secrets: Vec<Secret>,
    redacted: String,
    label: String,
    /// What to append to a PostgreSQL link string before the seconds of a `connect_timeout` it lacks (None:
    /// it has one, or TARGET is a foreign server).
    connect_suffix: Option<&'static str>,
    /// A connection string rebuilt from its pairs, every value quoted (so that a value ending in a backslash
    /// cannot swallow what is appended); None: TARGET as given.
    rebuilt: Option<Secret>,
}

impl std::fmt::Debug for LinkTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LinkTarget({})", self.redacted)
    }
}

/// Splits a libpq `keyword=value` string (values bare or single-quoted, backslash escapes) into pairs, as
/// libpq's `conninfo_parse` does: only ASCII whitespace separates.
fn conninfo_pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    loop {
        while it.peek().is_some_and(|&c| libpq_space(c)) {
            it.next();
        }
        if it.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || libpq_space(c) {
                break;
            }
            key.push(c);
            it.next();
        }
        while it.peek().is_some_and(|&c| libpq_space(c)) {
            it.next();
        }
        if it.next() != Some('=') {
            return Err(format!("missing '=' after keyword '{key}'"));
        }
        while it.peek().is_some_and(|&c| libpq_space(c)) {
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
                if libpq_space(c) {
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
            Scheme::Mysql if !text.contains("://") => {
                let t = text.trim();
                if t.is_empty()
                    || t.len() > 64
                    || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    return Err(DbError::Config(
                        "--link from MySQL/MariaDB is mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE of the remote server, or the name of a CREATE SERVER entry (letters, digits, _)".into(),
                    ));
                }
                Ok(LinkTarget {
                    text: Secret::new(t),
                    kind: Kind::MyServer,
                    secrets: Vec::new(),
                    redacted: t.to_string(),
                    label: format!("server:{t}"),
                    connect_suffix: None,
                    rebuilt: None,
                })
            }
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
                    connect_suffix: None,
                    rebuilt: None,
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
        let t = text.trim_matches(libpq_space);
        if t.is_empty() {
            return Err(bad_target("", "it is empty"));
        }
        if t.chars().any(char::is_control) {
            return Err(bad_target("?", "it contains control characters"));
        }
        let lower = t.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            return Self::parse_pg_uri(t);
        }
        if t.contains('=') {
            // Parse errors must not echo a value: they name keywords only.
            let pairs = conninfo_pairs(t).map_err(|d| bad_target("(not shown)", &d))?;
            let mut secrets = Vec::new();
            let mut shown = Vec::new();
            let (mut host, mut port, mut dbname) = (None, None, None);
            let mut has_connect_timeout = false;
            for (k, v) in &pairs {
                if k.is_empty() {
                    return Err(bad_target("(not shown)", "a '=' has no keyword before it"));
                }
                match k.as_str() {
                    k if secret_keyword(k) => {
                        if !v.is_empty() {
                            secrets.push(Secret::new(v.clone()));
                        }
                        shown.push(format!("{k}=***"));
                        continue;
                    }
                    "host" | "hostaddr" => host = Some(v.clone()),
                    "port" => port = Some(v.clone()),
                    "dbname" => dbname = Some(v.clone()),
                    "connect_timeout" => has_connect_timeout = true,
                    _ => {}
                }
                if v.is_empty() || v.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\')
                {
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
                connect_suffix: (!has_connect_timeout).then_some(" connect_timeout="),
                rebuilt: Some(Secret::new(
                    pairs
                        .iter()
                        .map(|(k, v)| {
                            format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
                        })
                        .collect::<Vec<_>>()
                        .join(" "),
                )),
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
            connect_suffix: None,
            rebuilt: None,
        })
    }

    /// A libpq URI, split as libpq's `conninfo_uri_parse_options` does: the user part ends at the FIRST '@'
    /// met before any '/'; a second '@' (an unencoded one in the password, or a '/' in it) would make libpq
    /// send the rest of the password as a host name, and echo it in its error: refused.
    fn parse_pg_uri(t: &str) -> Result<LinkTarget, DbError> {
        let (scheme, rest) = t.split_once("://").unwrap_or((t, ""));
        let (userinfo, after) = match rest.find(['@', '/']) {
            Some(i) if rest.as_bytes()[i] == b'@' => (Some(&rest[..i]), &rest[i + 1..]),
            _ => (None, rest),
        };
        let (path, query) = match after.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (after, None),
        };
        if path.contains('@') {
            return Err(bad_target(
                "(not shown)",
                "percent-encode '@' and '/' in the user name, password and database name (%40, %2F): libpq ends the user part at the first '@' and would take the rest of the password for a host name",
            ));
        }
        let mut secrets = Vec::new();
        let mut redacted = format!("{scheme}://");
        if let Some(ui) = userinfo {
            match ui.split_once(':') {
                Some((u, pw)) => {
                    secrets.push(Secret::new(pw));
                    if let Ok(d) = crate::db::percent_decode(pw) {
                        secrets.push(Secret::new(d));
                    }
                    redacted.push_str(&format!("{u}:***@"));
                }
                None => redacted.push_str(&format!("{ui}@")),
            }
        }
        redacted.push_str(path);
        let mut has_connect_timeout = false;
        if let Some(q) = query {
            let mut shown = Vec::new();
            for pair in q.split('&') {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let key = crate::db::percent_decode(k).unwrap_or_else(|_| k.to_string());
                if secret_keyword(&key) {
                    secrets.push(Secret::new(v));
                    if let Ok(d) = crate::db::percent_decode(v) {
                        secrets.push(Secret::new(d));
                    }
                    shown.push(format!("{k}=***"));
                } else {
                    has_connect_timeout |= key == "connect_timeout";
                    shown.push(pair.to_string());
                }
            }
            redacted.push('?');
            redacted.push_str(&shown.join("&"));
        }
        let label = {
            let hostport = path.split('/').next().unwrap_or("");
            let db = path.split_once('/').map(|(_, d)| d).unwrap_or("");
            let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
                let (h, p) = h.split_once(']').unwrap_or((h, ""));
                (format!("[{h}]"), p.trim_start_matches(':').to_string())
            } else {
                let first = hostport.split(',').next().unwrap_or("");
                let (h, p) = first.split_once(':').unwrap_or((first, ""));
                (h.to_string(), p.to_string())
            };
            format!(
                "{}:{}/{}",
                if host.is_empty() { "localhost" } else { &host },
                if port.is_empty() { "5432" } else { &port },
                crate::db::percent_decode(db).unwrap_or_else(|_| db.to_string())
            )
        };
        let connect_suffix = match query {
            _ if has_connect_timeout => None,
            None => Some("?connect_timeout="),
            Some("") => Some("connect_timeout="),
            Some(_) => Some("&connect_timeout="),
        };
        Ok(LinkTarget {
            text: Secret::new(t),
            kind: Kind::ConnString,
            secrets: secrets
                .into_iter()
                .filter(|s| !s.expose().is_empty())
                .collect(),
            redacted,
            label,
            connect_suffix,
            rebuilt: None,
        })
    }

    /// TARGET as dblink gets it: with ` connect_timeout=SECS` (or the URI parameter) added when it has none.
    /// None for a foreign server name (its OPTIONS hold the timeout).
    pub(super) fn pg_text_with_connect_timeout(&self, secs: u64) -> Option<Secret> {
        let base = self.rebuilt.as_ref().unwrap_or(&self.text);
        match (&self.kind, self.connect_suffix) {
            (Kind::ConnString, Some(suffix)) => {
                Some(Secret::new(format!("{}{suffix}{secs}", base.expose())))
            }
            (Kind::ConnString, None) => Some(base.clone()),
            _ => None,
        }
    }

    /// A one-line warning about TARGET itself: a MySQL/MariaDB password given inline goes into the scratch
    /// FEDERATEDX table's `CONNECTION` (DDL takes no parameters).
    pub fn warning(&self) -> Option<String> {
        match &self.kind {
            Kind::Url(u) if u.password.is_some() => Some(
                "warning: the --link password goes into the scratch FEDERATEDX table's CONNECTION='mysql://...' (DDL takes no parameters): the local server's process list, general log and binary log can show it; name a CREATE SERVER entry as TARGET to keep it out (docs/db-link.md)".into(),
            ),
            _ => None,
        }
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
