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
}

/// The far end of a database link. Its password never prints: `Debug` and [`LinkTarget::redacted`] show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkTarget {
    pub(super) text: Secret,
    pub(super) kind: Kind,
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
            let mut redacted = crate::db::redact_text(t);
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
                        if let Ok(d) = crate::db::percent_decode(v) {
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
