//! Database URLs: the scheme, the password kept out of every output ([`Secret`]), the TLS mode, parsing
//! with the environment's defaults, and redacting URLs in free text.

use super::DbError;
use crate::probe::target::Target;
use serde::{Deserialize, Serialize};

/// Which database protocol a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
