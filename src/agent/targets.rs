//! Where the agent's targets come from, merged into one list of [`TargetSpec`]s:
//!
//! - `--peer HOST[:PORT]` and the configuration's `peers`: resolved to their first address (IPv4 first),
//!   labelled as given;
//! - `--peers-file FILE` (and `peers_file`): one HOST\[:PORT\] per line, `#` comments and blank lines
//!   ignored, re-read when its modification time or size changes; a file with a bad line keeps its previous
//!   list (the error is logged);
//! - `--peers-dns NAME[:PORT]` (and `peers_dns`): every A/AAAA record, each labelled by its IP (a pod IP in
//!   Kubernetes);
//! - the configuration's `[[target]]` entries, each with its own probe, interval, timeout and labels.
//!
//! Names are resolved again every DNS interval (60 s by default); when a resolution fails the last good
//! addresses are kept and the failure is reported ([`Collected::dns_errors`]) so it can be counted. Targets
//! that are this agent itself ([`SelfFilter`]) are left out, and duplicates (same [`TargetSpec::key`]) are
//! kept once.
//!
//! Here: the plan (which sources, with which template) and labels. Resolving a plan into targets is in
//! `collect`, facts about this host (resolver, own addresses and name, [`SelfFilter`]) in `host`.

use super::config::{Config, ProbeName};
use super::{DEFAULT_PORT, ProbeKind, TargetSpec};
use crate::db::DbUrl;
use crate::db::link::LinkTarget;
use crate::probe::target::Target;
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

mod collect;
mod host;

pub use collect::{Collected, Collector};
pub use host::{
    Lookup, SelfFilter, default_source, hostname, local_address_toward, local_addresses,
    system_lookup,
};

/// How one source's targets are probed.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The probe (for `db`, the URL holds host and port).
    pub probe: ProbeKind,
    /// Time between probes.
    pub interval: Duration,
    /// Time an answer may take.
    pub timeout: Duration,
    /// The user's labels, sorted by name.
    pub labels: Vec<(String, String)>,
}

/// One place targets come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// One HOST\[:PORT\] (its syntax checked).
    Host {
        /// As given.
        text: String,
        /// How it is probed.
        template: Template,
    },
    /// A file of HOST\[:PORT\] lines.
    File {
        /// The file.
        path: PathBuf,
        /// How its peers are probed.
        template: Template,
    },
    /// Every address of NAME\[:PORT\].
    Dns {
        /// As given.
        text: String,
        /// How its peers are probed.
        template: Template,
    },
}

/// The command line's part: peers and the defaults they (and the configuration's targets, last) use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CliTargets {
    /// `--peer`, each HOST\[:PORT\].
    pub peers: Vec<String>,
    /// `--peers-file`.
    pub peers_file: Option<PathBuf>,
    /// `--peers-dns`.
    pub peers_dns: Option<String>,
    /// `--probe` when given.
    pub probe: Option<ProbeName>,
    /// `--size` when given.
    pub size: Option<u32>,
    /// `--interval` when given.
    pub interval: Option<Duration>,
    /// `--timeout` when given.
    pub timeout: Option<Duration>,
    /// `--label NAME=VALUE` (checked names).
    pub labels: Vec<(String, String)>,
}

/// Built-in defaults: TCP ping of 64 bytes every second, 1 s timeout.
pub const DEFAULT_PROBE: ProbeName = ProbeName::Tcp;
/// Default message size.
pub const DEFAULT_SIZE: u32 = 64;
/// Default interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Default timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// Every source, in order (command line first, then the configuration's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The sources.
    pub sources: Vec<Source>,
}

fn merge_labels(base: &[(String, String)], over: &[(String, String)]) -> Vec<(String, String)> {
    let mut m: std::collections::BTreeMap<String, String> = base.iter().cloned().collect();
    m.extend(over.iter().cloned());
    m.into_iter().collect()
}

fn probe_kind(
    name: ProbeName,
    size: u32,
    url: Option<&DbUrl>,
    link: Option<&LinkTarget>,
) -> Option<ProbeKind> {
    Some(match name {
        ProbeName::Tcp => ProbeKind::Tcp { size },
        ProbeName::Udp => ProbeKind::Udp { size },
        ProbeName::Connect => ProbeKind::Connect,
        ProbeName::Icmp => ProbeKind::Icmp { size },
        ProbeName::Db => match link {
            Some(l) => ProbeKind::DbLink {
                url: Box::new(url?.clone()),
                link: Box::new(l.clone()),
            },
            None => ProbeKind::Db {
                url: Box::new(url?.clone()),
            },
        },
    })
}

impl Plan {
    /// Merges the command line and the configuration. CLI peers use the command line's settings, then the
    /// file's defaults, then the built-in ones; `[[target]]` entries use their own, then the file's, then the
    /// command line's. `env` reads environment variables (database passwords, as `roundtrip db`).
    pub fn build(
        cli: &CliTargets,
        config: Option<&Config>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Plan {
        let empty = Config::default();
        let c = config.unwrap_or(&empty);
        let base_labels = merge_labels(&c.labels, &cli.labels);
        let cli_template = Template {
            probe: probe_kind(
                cli.probe.or(c.probe).unwrap_or(DEFAULT_PROBE),
                cli.size.or(c.size).unwrap_or(DEFAULT_SIZE),
                None,
                None,
            )
            .unwrap_or(ProbeKind::Tcp { size: DEFAULT_SIZE }),
            interval: cli.interval.or(c.interval).unwrap_or(DEFAULT_INTERVAL),
            timeout: cli.timeout.or(c.timeout).unwrap_or(DEFAULT_TIMEOUT),
            labels: base_labels.clone(),
        };
        let mut sources = Vec::new();
        for p in cli.peers.iter().chain(&c.peers) {
            sources.push(Source::Host {
                text: p.clone(),
                template: cli_template.clone(),
            });
        }
        for path in cli.peers_file.iter().chain(&c.peers_file) {
            sources.push(Source::File {
                path: path.clone(),
                template: cli_template.clone(),
            });
        }
        for name in cli.peers_dns.iter().chain(&c.peers_dns) {
            sources.push(Source::Dns {
                text: name.clone(),
                template: cli_template.clone(),
            });
        }
        for t in &c.targets {
            let name = t.probe.or(c.probe).or(cli.probe).unwrap_or(DEFAULT_PROBE);
            let url = t.url.as_ref().map(|u| {
                let mut u = (**u).clone();
                u.apply_env(env);
                u
            });
            let Some(probe) = probe_kind(
                name,
                t.size.or(c.size).or(cli.size).unwrap_or(DEFAULT_SIZE),
                url.as_ref(),
                t.link.as_deref(),
            ) else {
                continue;
            };
            let text = match &url {
                Some(u) => Target {
                    host: u.host_or_localhost().to_string(),
                    port: u.port(),
                }
                .to_string(),
                None => t.address.clone().unwrap_or_default(),
            };
            sources.push(Source::Host {
                text,
                template: Template {
                    probe,
                    interval: t
                        .interval
                        .or(c.interval)
                        .or(cli.interval)
                        .unwrap_or(DEFAULT_INTERVAL),
                    timeout: t
                        .timeout
                        .or(c.timeout)
                        .or(cli.timeout)
                        .unwrap_or(DEFAULT_TIMEOUT),
                    labels: merge_labels(&base_labels, &t.labels),
                },
            });
        }
        Plan { sources }
    }
}

/// The `target` label of `host` (as given) and `port` for `probe`: the host alone for ICMP and when the
/// port is [`DEFAULT_PORT`], `host:port` otherwise (IPv6 in brackets); always `host:port` for `db`.
pub fn target_label(host: &str, port: u16, probe: &ProbeKind) -> String {
    let with_port = match probe {
        ProbeKind::Icmp { .. } => false,
        ProbeKind::Db { .. } => true,
        // Two links from one database are two series: the label names the far end (never its password).
        ProbeKind::DbLink { link, .. } => {
            return format!(
                "{}->{}",
                Target {
                    host: host.to_string(),
                    port,
                },
                link.label()
            );
        }
        _ => port != DEFAULT_PORT,
    };
    if !with_port {
        return host.to_string();
    }
    Target {
        host: host.to_string(),
        port,
    }
    .to_string()
}

/// Parses a peers file: one HOST\[:PORT\] per line, `#` starts a comment, blank lines are skipped. An error
/// gives the 1-based line and what is wrong.
pub fn parse_peers(text: &str) -> Result<Vec<String>, (usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        Target::parse(l, DEFAULT_PORT).map_err(|e| (i + 1, e.to_string()))?;
        out.push(l.to_string());
    }
    Ok(out)
}

/// How a new target list differs from the previous one, by [`TargetSpec::key`].
pub fn diff(old: &[TargetSpec], new: &[TargetSpec]) -> (usize, usize) {
    let o: HashSet<_> = old.iter().map(TargetSpec::key).collect();
    let n: HashSet<_> = new.iter().map(TargetSpec::key).collect();
    (n.difference(&o).count(), o.difference(&n).count())
}

#[cfg(test)]
mod tests;
