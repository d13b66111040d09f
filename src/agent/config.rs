//! The agent's TOML configuration file (`--config FILE`).
//!
//! ```toml
//! source = "app1"            # optional: the `source` label (default: this host's address toward its targets)
//! interval = "1s"            # defaults for the targets below and for the command line's peers
//! span = "60s"               # the span of recent results behind /api/results (the agent's --span wins)
//! buckets = 4                # histogram buckets per doubling: 1, 2, 4 or 8 (the agent's --buckets wins)
//! timeout = "1s"
//! probe = "tcp"              # tcp | udp | connect | icmp
//! size = 64
//! peers = ["10.0.0.2", "10.0.0.3:11111"]
//! peers_file = "/etc/roundtrip/peers"
//! peers_dns = "roundtrip.default.svc.cluster.local"
//! [labels]                   # added to every target
//! zone = "a"
//! [[target]]
//! address = "db1:5432"       # HOST[:PORT]
//! probe = "connect"          # tcp | udp | connect | icmp | db
//! interval = "5s"
//! labels = { role = "db" }
//! [[target]]
//! probe = "db"
//! url = "postgres://app@db1:5432/app"
//! [[target]]                 # the round trip from db1 to db2 through a database link (probe="db-link")
//! probe = "db"
//! url = "postgres://app@db1:5432/app"
//! link = "host=db2 dbname=app user=app password=..."   # or a foreign server name; mysql:// for FEDERATEDX
//! ```
//!
//! Every error names the file, the line and the key ([`ConfigError`]); unknown keys are errors. Database
//! passwords (in a `url`) never appear in errors: URLs are shown redacted.

use crate::db::link::LinkTarget;
use crate::db::{DbError, DbUrl};
use crate::probe::target::Target;
use crate::units;
use crate::wire::sockperf::MAX_UDP_MESSAGE_LEN;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::de::{DeTable, DeValue};

/// Label names the agent sets itself; a user label may not use them.
pub const RESERVED_LABELS: [&str; 6] = ["source", "target", "probe", "size", "le", "reason"];

/// Smallest message size (the sockperf header).
pub const MIN_SIZE: u32 = 14;
/// Largest message size (the largest UDP payload).
pub const MAX_SIZE: u32 = MAX_UDP_MESSAGE_LEN as u32;

/// A probe kind by name, before its size or URL is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeName {
    /// Application-level ping over TCP.
    Tcp,
    /// Application-level ping over UDP.
    Udp,
    /// TCP handshake.
    Connect,
    /// ICMP echo.
    Icmp,
    /// Database round trip (config `[[target]]` with a `url` only).
    Db,
}

impl ProbeName {
    /// Parses `tcp`, `udp`, `connect`, `icmp` or `db`.
    pub fn parse(s: &str) -> Option<ProbeName> {
        Some(match s {
            "tcp" => ProbeName::Tcp,
            "udp" => ProbeName::Udp,
            "connect" => ProbeName::Connect,
            "icmp" => ProbeName::Icmp,
            "db" => ProbeName::Db,
            _ => return None,
        })
    }

    /// The name, as the `probe` label spells it.
    pub fn name(self) -> &'static str {
        match self {
            ProbeName::Tcp => "tcp",
            ProbeName::Udp => "udp",
            ProbeName::Connect => "connect",
            ProbeName::Icmp => "icmp",
            ProbeName::Db => "db",
        }
    }
}

/// A configuration error: `config FILE:LINE: key `K`: what`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, as given.
    pub file: String,
    /// 1-based line (0 when the file could not be read at all).
    pub line: usize,
    /// The key at fault (empty when the file could not be read).
    pub key: String,
    /// What is wrong and what to do, one line.
    pub what: String,
}

impl fmt::Display for ConfigError {
    /// One line; any `SCHEME://USER:PASSWORD@` the key or the message quotes is shown without its password, and
    /// a line break inside a quoted value (a multi-line TOML string) is shown as a blank.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = one_line(&scrub(&self.what));
        if self.line == 0 {
            write!(f, "config {}: {what}", self.file)
        } else {
            write!(
                f,
                "config {}:{}: key `{}`: {what}",
                self.file,
                self.line,
                one_line(&scrub(&self.key))
            )
        }
    }
}

impl std::error::Error for ConfigError {}

/// One `[[target]]` entry, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetEntry {
    /// The line of its `[[target]]` header.
    pub line: usize,
    /// `address = "HOST[:PORT]"` (checked syntax), absent for `db` targets.
    pub address: Option<String>,
    /// `probe` (default: the file's, then the command line's).
    pub probe: Option<ProbeName>,
    /// `size`.
    pub size: Option<u32>,
    /// `interval`.
    pub interval: Option<Duration>,
    /// `timeout`.
    pub timeout: Option<Duration>,
    /// `url` of a `db` target (parsed; its password stays inside).
    pub url: Option<Box<DbUrl>>,
    /// `link` of a `db` target: measure through this database link instead (probe label `db-link`).
    pub link: Option<Box<LinkTarget>>,
    /// `labels`, sorted by name.
    pub labels: Vec<(String, String)>,
}

/// The configuration file, checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// The file it was read from.
    pub path: PathBuf,
    /// `source`.
    pub source: Option<String>,
    /// `interval`: default for every target.
    pub interval: Option<Duration>,
    /// `timeout`: default for every target.
    pub timeout: Option<Duration>,
    /// `span`: the span of recent results behind `/api/results` (the command line's `--span` wins; read at
    /// start, a reload keeps the running one).
    pub span: Option<Duration>,
    /// `buckets`: the histograms' resolution (the command line's `--buckets` wins; read at start, a reload
    /// keeps the running one).
    pub buckets: Option<crate::agent::buckets::Buckets>,
    /// `probe`: default for every target (not `db`).
    pub probe: Option<ProbeName>,
    /// `size`: default for every target.
    pub size: Option<u32>,
    /// `peers`: HOST[:PORT] each (checked syntax).
    pub peers: Vec<String>,
    /// `peers_file` (relative names are relative to the configuration file's folder).
    pub peers_file: Option<PathBuf>,
    /// `peers_dns`: NAME[:PORT].
    pub peers_dns: Option<String>,
    /// `[labels]`, sorted by name.
    pub labels: Vec<(String, String)>,
    /// `[[target]]` entries in file order.
    pub targets: Vec<TargetEntry>,
    /// `[[watch]]` entries in file order (interfaces whose traffic is turned into request metrics).
    pub watch: Vec<super::watch::WatchSpec>,
}

/// Checks a user label name: a Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__`) and
/// none of [`RESERVED_LABELS`].
pub fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "label name '{name}' is not a Prometheus label name (letters, digits and _, not starting with a digit)"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "label name '{name}' starts with __, which Prometheus reserves"
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!(
            "label name '{name}' is set by the agent itself (reserved: {})",
            RESERVED_LABELS.join(", ")
        ));
    }
    Ok(())
}

/// Checks a message size: [`MIN_SIZE`] to [`MAX_SIZE`] bytes.
pub fn check_size(size: u64) -> Result<u32, String> {
    if size < u64::from(MIN_SIZE) || size > u64::from(MAX_SIZE) {
        return Err(format!(
            "size {size} is out of range: give {MIN_SIZE} to {MAX_SIZE} bytes"
        ));
    }
    Ok(size as u32)
}

/// Reads and checks the file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.display().to_string(),
        line: 0,
        key: String::new(),
        what: format!("cannot read it: {e} (check the path given to --config)"),
    })?;
    parse(&text, path)
}

/// The 1-based line holding byte `offset` of `text`, for one look-up (it scans the text).
fn line_of(text: &str, offset: usize) -> usize {
    Lines::new(text).line_of(offset)
}

/// Where each line of a text starts: built once per file, so the line of each of 20,000 `[[target]]` entries
/// is a binary search, not a scan of the file (loading stays linear in the file's size).
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        Lines(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        )
    }

    /// The 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        // Newlines before `offset`, plus one.
        self.0.partition_point(|&nl| nl < offset) + 1
    }
}

/// Parses and checks configuration `text`, read from `path` (named in errors; relative `peers_file` names
/// are taken relative to its folder).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let doc = match DeTable::parse(text) {
        Ok(d) => d,
        Err(e) => {
            let offset = e.span().map_or(0, |s| s.start);
            let line = line_of(text, offset);
            let line_text = text.lines().nth(line - 1).unwrap_or("").trim();
            return Err(ConfigError {
                file,
                line,
                key: key_on_line(line_text),
                what: format!(
                    "not valid TOML: {} (see https://toml.io)",
                    scrub(e.message().trim()).replace(['\n', '\r'], " ")
                ),
            });
        }
    };
    let cx = Cx {
        lines: Lines::new(text),
        file: &file,
    };
    let mut c = Config {
        path: path.to_path_buf(),
        ..Config::default()
    };
    for (k, v) in doc.get_ref().iter() {
        let key = k.get_ref().as_ref();
        match key {
            "source" => {
                let s = cx.string(key, v)?;
                if s.trim().is_empty() {
                    return Err(cx.err(key, v, "is empty: give a name, e.g. source = \"app1\""));
                }
                c.source = Some(s.to_string());
            }
            "interval" => c.interval = Some(cx.duration(key, v)?),
            "timeout" => c.timeout = Some(cx.duration(key, v)?),
            "span" => {
                let d = cx.duration(key, v)?;
                if d.is_zero() {
                    return Err(cx.err(key, v, "must be more than 0, e.g. span = \"60s\""));
                }
                c.span = Some(d);
            }
            "buckets" => {
                let b = match v.get_ref() {
                    DeValue::Integer(i) => u32::from_str_radix(i.as_str(), i.radix()).ok(),
                    _ => None,
                };
                let b = b.map_or_else(
                    || {
                        Err(
                            "must be 1, 2, 4 or 8 (buckets per doubling), e.g. buckets = 4"
                                .to_string(),
                        )
                    },
                    crate::agent::buckets::Buckets::new,
                );
                c.buckets = Some(b.map_err(|e| cx.err(key, v, &e))?);
            }
            "probe" => {
                let p = cx.probe(key, v)?;
                if p == ProbeName::Db {
                    return Err(cx.err(
                        key,
                        v,
                        "db is per target: give it in a [[target]] with a url",
                    ));
                }
                c.probe = Some(p);
            }
            "size" => c.size = Some(cx.size(key, v)?),
            "peers" => {
                let DeValue::Array(items) = v.get_ref() else {
                    return Err(cx.err(
                        key,
                        v,
                        "must be a list of HOST[:PORT] strings, e.g. [\"10.0.0.2\", \"db1:11111\"]",
                    ));
                };
                for item in items.iter() {
                    c.peers.push(cx.host_port(key, item)?);
                }
            }
            "peers_file" => {
                let s = cx.string(key, v)?;
                if s.is_empty() {
                    return Err(cx.err(key, v, "is empty: give a file name"));
                }
                let p = PathBuf::from(s);
                c.peers_file = Some(if p.is_relative() {
                    path.parent().map_or(p.clone(), |d| d.join(&p))
                } else {
                    p
                });
            }
            "peers_dns" => c.peers_dns = Some(cx.host_port(key, v)?),
            "labels" => c.labels = cx.labels(key, v)?,
            "target" => {
                let DeValue::Array(items) = v.get_ref() else {
                    return Err(cx.err(
                        key,
                        v,
                        "must be a list of tables: write each as [[target]]",
                    ));
                };
                for item in items.iter() {
                    c.targets.push(cx.target(item)?);
                }
            }
            "watch" => {
                let DeValue::Array(items) = v.get_ref() else {
                    return Err(cx.err(
                        key,
                        v,
                        "must be a list of tables: write each as [[watch]]",
                    ));
                };
                for item in items.iter() {
                    c.watch.push(cx.watch(item)?);
                }
            }
            _ => {
                return Err(ConfigError {
                    file: file.clone(),
                    line: cx.lines.line_of(k.span().start),
                    key: key.to_string(),
                    what: "unknown key (known: source, interval, timeout, span, buckets, probe, size, peers, peers_file, \
                           peers_dns, [labels], [[target]], [[watch]])"
                        .into(),
                });
            }
        }
    }
    Ok(c)
}

/// The key a line starts with, for an error on a line TOML could not read: its leading key characters
/// (letters, digits, `_ - . " '`, spaces, brackets), or `?` when it starts with none.
fn key_on_line(line: &str) -> String {
    let k: String = line
        .chars()
        .take_while(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | '\'' | ' ' | '[' | ']')
        })
        .take(60)
        .collect();
    let k = k.trim();
    if k.is_empty() {
        "?".into()
    } else {
        k.to_string()
    }
}

/// `text` with every control character (line breaks, tabs) shown as a blank, so an error stays one line.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `text` with the password of every `SCHEME://USER:PASSWORD@` in it replaced by `***` (up to the last `@`
/// before the next blank or quote, so a password holding `/`, `?` or `@` is hidden whole).
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
                rest = &rest[end..];
            }
            _ => {}
        }
    }
    out.push_str(rest);
    out
}

/// The password of a URL as typed: between the first `:` after `SCHEME://` and the last `@`.
fn typed_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = &rest[..rest.rfind('@')?];
    let (_, pw) = userinfo.split_once(':')?;
    (!pw.is_empty()).then_some(pw)
}

/// Whether `text` holds any 4 consecutive characters of `secret` (all of it when shorter).
fn shows_part_of(text: &str, secret: &str) -> bool {
    let chars: Vec<char> = secret.chars().collect();
    let n = chars.len().min(4);
    chars
        .windows(n)
        .any(|w| text.contains(&w.iter().collect::<String>()))
}

/// The error of a `url` that does not parse, without any part of its password.
fn url_error(url: &str, e: &DbError) -> String {
    let detail = match e {
        DbError::Url { detail, .. } => detail.clone(),
        other => other.to_string(),
    };
    let shown = scrub(url);
    match typed_password(url) {
        Some(pw) if shows_part_of(&detail, pw) || shows_part_of(&shown, pw) => {
            "invalid database URL (not shown: it holds a password); check its syntax: \
             SCHEME://USER[:PASSWORD]@HOST[:PORT]/DB, with special characters in the password percent-encoded"
                .to_string()
        }
        _ => format!(
            "invalid database URL '{shown}': {detail} (expected SCHEME://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE], \
             SCHEME postgres, mysql, mariadb, redis, rediss or oracle)"
        ),
    }
}

type Val<'a> = toml::Spanned<DeValue<'a>>;

/// Context for building errors.
struct Cx<'t> {
    lines: Lines,
    file: &'t str,
}

impl Cx<'_> {
    fn err(&self, key: &str, v: &Val<'_>, what: &str) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            line: self.lines.line_of(v.span().start),
            key: key.to_string(),
            what: what.to_string(),
        }
    }

    fn string<'v>(&self, key: &str, v: &'v Val<'_>) -> Result<&'v str, ConfigError> {
        match v.get_ref() {
            DeValue::String(s) => Ok(s.as_ref()),
            other => Err(self.err(
                key,
                v,
                &format!("must be a string in quotes, not {}", other.type_str()),
            )),
        }
    }

    fn duration(&self, key: &str, v: &Val<'_>) -> Result<Duration, ConfigError> {
        let s = self.string(key, v).map_err(|mut e| {
            e.what = "must be a duration in quotes, e.g. \"1s\" or \"500ms\"".into();
            e
        })?;
        match units::parse_duration(s) {
            Ok(d) if d.is_zero() => Err(self.err(key, v, "must be more than 0")),
            Ok(d) => Ok(d),
            Err(e) => Err(self.err(key, v, &e.to_string())),
        }
    }

    fn probe(&self, key: &str, v: &Val<'_>) -> Result<ProbeName, ConfigError> {
        let s = self.string(key, v)?;
        ProbeName::parse(s).ok_or_else(|| {
            self.err(
                key,
                v,
                &format!("unknown probe '{s}' (known: tcp, udp, connect, icmp, db)"),
            )
        })
    }

    fn size(&self, key: &str, v: &Val<'_>) -> Result<u32, ConfigError> {
        let n = match v.get_ref() {
            DeValue::Integer(i) => u64::from_str_radix(i.as_str(), i.radix()).map_err(|_| {
                self.err(key, v, &format!("must be {MIN_SIZE} to {MAX_SIZE} bytes"))
            })?,
            DeValue::String(s) => {
                units::parse_size(s).map_err(|e| self.err(key, v, &e.to_string()))?
            }
            other => {
                return Err(self.err(
                    key,
                    v,
                    &format!("must be a number of bytes, not {}", other.type_str()),
                ));
            }
        };
        check_size(n).map_err(|e| self.err(key, v, &e))
    }

    fn host_port(&self, key: &str, v: &Val<'_>) -> Result<String, ConfigError> {
        let s = self.string(key, v)?;
        Target::parse(s, super::DEFAULT_PORT).map_err(|e| self.err(key, v, &e.to_string()))?;
        Ok(s.trim().to_string())
    }

    fn labels(&self, key: &str, v: &Val<'_>) -> Result<Vec<(String, String)>, ConfigError> {
        let DeValue::Table(t) = v.get_ref() else {
            return Err(self.err(
                key,
                v,
                "must be a table of NAME = \"VALUE\", e.g. labels = { zone = \"a\" }",
            ));
        };
        let mut out = Vec::new();
        for (k, lv) in t.iter() {
            let name = k.get_ref().as_ref();
            let full = format!("{key}.{name}");
            check_label_name(name).map_err(|e| ConfigError {
                file: self.file.to_string(),
                line: self.lines.line_of(k.span().start),
                key: full.clone(),
                what: e,
            })?;
            let value = self.string(&full, lv)?;
            out.push((name.to_string(), value.to_string()));
        }
        out.sort();
        Ok(out)
    }

    fn watch(&self, v: &Val<'_>) -> Result<super::watch::WatchSpec, ConfigError> {
        use super::watch::{Protocols, WatchSpec};
        use crate::capture::rpc::Proto;
        let DeValue::Table(t) = v.get_ref() else {
            return Err(self.err("watch", v, "must be a table: write each as [[watch]]"));
        };
        let mut w = WatchSpec::new("");
        for (k, tv) in t.iter() {
            let name = k.get_ref().as_ref();
            let full = format!("watch.{name}");
            match name {
                "interface" => {
                    let s = self.string(&full, tv)?;
                    if s.trim().is_empty() {
                        return Err(self.err(&full, tv, "is empty: give an interface name or any"));
                    }
                    w.interface = s.trim().to_string();
                }
                "filter" => {
                    let s = self.string(&full, tv)?;
                    let e = crate::capture::bpf::Expr::parse(s)
                        .map_err(|e| self.err(&full, tv, &e.to_string()))?;
                    w.filter = (!e.is_empty()).then_some(e);
                }
                "protocols" => {
                    let known = "known: auto, pgsql, mysql, redis, tns, nfs, dns, http, smb2, sockperf, tls";
                    w.protocols = match tv.get_ref() {
                        DeValue::String(s) if s.as_ref() == "auto" => Protocols::Auto,
                        DeValue::Array(items) => {
                            let mut v = Vec::new();
                            for item in items.iter() {
                                let s = self.string(&full, item)?;
                                v.push(Proto::parse(s).ok_or_else(|| {
                                    self.err(
                                        &full,
                                        item,
                                        &format!("unknown protocol '{s}' ({known})"),
                                    )
                                })?);
                            }
                            if v.is_empty() {
                                return Err(self.err(
                                    &full,
                                    tv,
                                    "is empty: give \"auto\" or a list",
                                ));
                            }
                            Protocols::Only(v)
                        }
                        _ => {
                            return Err(self.err(
                                &full,
                                tv,
                                "must be \"auto\" or a list such as [\"pgsql\", \"redis\"]",
                            ));
                        }
                    };
                }
                "labels" => w.labels = self.labels(&full, tv)?,
                "client_label" => match tv.get_ref() {
                    DeValue::Boolean(b) => w.client_label = *b,
                    _ => return Err(self.err(&full, tv, "must be true or false")),
                },
                "max_connections" => {
                    let n = match tv.get_ref() {
                        DeValue::Integer(i) => u64::from_str_radix(i.as_str(), i.radix()).ok(),
                        _ => None,
                    };
                    match n {
                        Some(n) if (1..=10_000_000).contains(&n) => w.max_connections = n as usize,
                        _ => {
                            return Err(self.err(
                                &full,
                                tv,
                                "must be a number of connections from 1 to 10000000",
                            ));
                        }
                    }
                }
                _ => {
                    return Err(ConfigError {
                        file: self.file.to_string(),
                        line: self.lines.line_of(k.span().start),
                        key: full,
                        what: "unknown key (known in [[watch]]: interface, filter, protocols, labels, \
                               client_label, max_connections)"
                            .into(),
                    });
                }
            }
        }
        if w.interface.is_empty() {
            return Err(self.err(
                "watch",
                v,
                "has no interface: add interface = \"eth0\" (or \"any\")",
            ));
        }
        Ok(w)
    }

    fn target(&self, v: &Val<'_>) -> Result<TargetEntry, ConfigError> {
        let DeValue::Table(t) = v.get_ref() else {
            return Err(self.err(
                "target",
                v,
                "must be a table: write each target as [[target]]",
            ));
        };
        let mut e = TargetEntry {
            line: self.lines.line_of(v.span().start),
            address: None,
            probe: None,
            size: None,
            interval: None,
            timeout: None,
            url: None,
            link: None,
            labels: Vec::new(),
        };
        let mut url_val = None;
        let mut link_val = None;
        let mut address_val = None;
        let mut probe_val = None;
        for (k, tv) in t.iter() {
            let name = k.get_ref().as_ref();
            let full = format!("target.{name}");
            match name {
                "address" => {
                    e.address = Some(self.host_port(&full, tv)?);
                    address_val = Some(tv);
                }
                "probe" => {
                    e.probe = Some(self.probe(&full, tv)?);
                    probe_val = Some(tv);
                }
                "size" => e.size = Some(self.size(&full, tv)?),
                "interval" => e.interval = Some(self.duration(&full, tv)?),
                "timeout" => e.timeout = Some(self.duration(&full, tv)?),
                "labels" => e.labels = self.labels(&full, tv)?,
                "url" => {
                    let s = self.string(&full, tv)?;
                    let url =
                        DbUrl::parse(s).map_err(|err| self.err(&full, tv, &url_error(s, &err)))?;
                    e.url = Some(Box::new(url));
                    url_val = Some(tv);
                }
                "link" => link_val = Some((self.string(&full, tv)?, tv)),
                _ => {
                    return Err(ConfigError {
                        file: self.file.to_string(),
                        line: self.lines.line_of(k.span().start),
                        key: full,
                        what: "unknown key (known in [[target]]: address, probe, size, interval, timeout, \
                               labels, url, link)"
                            .into(),
                    });
                }
            }
        }
        if let Some((text, tv)) = link_val {
            let Some(url) = &e.url else {
                return Err(self.err(
                    "target.link",
                    tv,
                    "a link goes with probe = \"db\" and the url of the local database it starts from",
                ));
            };
            let t = LinkTarget::parse(text, url.scheme)
                .map_err(|err| self.err("target.link", tv, &err.to_string()))?;
            e.link = Some(Box::new(t));
        }
        match (e.probe == Some(ProbeName::Db), e.url.is_some()) {
            (true, false) => {
                return Err(self.err(
                    "target.url",
                    probe_val.unwrap_or(v),
                    "a db target needs url = \"postgres://USER@HOST:PORT/DB\" (or mysql://, redis://, oracle://)",
                ));
            }
            (false, true) => {
                return Err(self.err(
                    "target.probe",
                    url_val.unwrap_or(v),
                    "a target with a url needs probe = \"db\"",
                ));
            }
            (true, true) => {
                if let Some(a) = address_val {
                    return Err(self.err(
                        "target.address",
                        a,
                        "a db target takes its host and port from its url: leave address out",
                    ));
                }
            }
            (false, false) => {
                if e.address.is_none() {
                    return Err(self.err(
                        "target.address",
                        v,
                        "this [[target]] has no address: give address = \"HOST[:PORT]\"",
                    ));
                }
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests;
