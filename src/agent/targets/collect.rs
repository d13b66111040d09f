//! Resolving a [`Plan`] into targets ([`Collector`]): names looked up again every DNS interval with the last
//! good addresses kept, peers files read again when they change, this agent and duplicates left out.

use super::{
    DEFAULT_PORT, Lookup, Plan, SelfFilter, Source, TargetSpec, Template, parse_peers, target_label,
};
use crate::probe::target::Target;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// What a [`Collector::collect`] found.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// The targets, without duplicates and without this agent.
    pub targets: Vec<TargetSpec>,
    /// Problems to log on stderr (unreadable or bad peers files, names that did not resolve).
    pub errors: Vec<String>,
    /// `target` labels whose name failed to resolve in this round (their last good addresses are kept):
    /// pass each to [`crate::agent::engine::Engine::count_dns_error`].
    pub dns_errors: Vec<String>,
    /// Targets left out because they are this agent.
    pub left_out_self: usize,
}

#[derive(Debug, Clone)]
struct NameState {
    /// Last good addresses.
    addrs: Option<Vec<SocketAddr>>,
    /// When it was last looked up.
    at: Instant,
}

#[derive(Debug, Clone)]
struct FileState {
    stamp: Option<(SystemTime, u64)>,
    peers: Vec<String>,
    /// The last read failed (its error was reported once).
    failed: bool,
}

/// Resolves a [`Plan`] into targets, keeping what it learnt between calls: the last good addresses of each
/// name (looked up again every `dns_interval`) and each peers file's list (read again when it changes).
pub struct Collector {
    lookup: Box<Lookup>,
    dns_interval: Duration,
    names: HashMap<(String, u16), NameState>,
    files: HashMap<PathBuf, FileState>,
    /// Which targets are this agent (set once the responder's port is known).
    pub self_filter: SelfFilter,
    /// What the last [`Collector::collect_if_changed`] that found nothing wrong was computed from.
    memo: Option<Memo>,
}

/// The inputs of a collection that found nothing wrong: the same plan, self filter and peers files (by
/// modification time and size) before `dns_due` give the same targets.
#[derive(Debug)]
struct Memo {
    plan: Plan,
    self_filter: SelfFilter,
    stamps: Vec<Option<(SystemTime, u64)>>,
    /// When the oldest cached name is due to be resolved again (None: no names).
    dns_due: Option<Instant>,
}

/// The modification time and size of every peers file of `plan`, in order.
fn file_stamps(plan: &Plan) -> Vec<Option<(SystemTime, u64)>> {
    plan.sources
        .iter()
        .filter_map(|s| match s {
            Source::File { path, .. } => Some(
                std::fs::metadata(path)
                    .ok()
                    .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len())),
            ),
            _ => None,
        })
        .collect()
}

impl Collector {
    /// A collector resolving with `lookup` every `dns_interval`.
    pub fn new(lookup: Box<Lookup>, dns_interval: Duration, self_filter: SelfFilter) -> Collector {
        Collector {
            lookup,
            dns_interval,
            names: HashMap::new(),
            files: HashMap::new(),
            self_filter,
            memo: None,
        }
    }

    /// Like [`Collector::collect`], but None when nothing it depends on can have changed since the last call
    /// (same plan and self filter, peers files unchanged, no name due to be resolved again, and that call
    /// found nothing wrong): the agent asks twice a second, and building thousands of targets to find them
    /// unchanged was most of its CPU outside the probe loop.
    pub fn collect_if_changed(&mut self, plan: &Plan, now: Instant) -> Option<Collected> {
        let stamps = file_stamps(plan);
        if let Some(m) = &self.memo
            && m.plan == *plan
            && m.self_filter == self.self_filter
            && m.stamps == stamps
            && m.dns_due.is_none_or(|due| now < due)
        {
            return None;
        }
        let got = self.collect(plan, now);
        self.memo = (got.errors.is_empty() && got.dns_errors.is_empty()).then(|| Memo {
            plan: plan.clone(),
            self_filter: self.self_filter.clone(),
            stamps,
            dns_due: self.names.values().map(|n| n.at + self.dns_interval).min(),
        });
        Some(got)
    }

    /// The addresses of `host`:`port`, looked up when never done or older than the DNS interval; on failure
    /// the last good ones (and `Err` with the message when this round's lookup failed).
    fn resolve(
        &mut self,
        host: &str,
        port: u16,
        now: Instant,
    ) -> (Option<Vec<SocketAddr>>, Option<String>) {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return (Some(vec![SocketAddr::new(ip, port)]), None);
        }
        let key = (host.to_string(), port);
        if let Some(s) = self.names.get(&key)
            && now.saturating_duration_since(s.at) < self.dns_interval
        {
            return (s.addrs.clone(), None);
        }
        let result = (self.lookup)(host, port);
        let prev = self.names.get(&key).and_then(|s| s.addrs.clone());
        match result {
            Ok(addrs) if !addrs.is_empty() => {
                self.names.insert(
                    key,
                    NameState {
                        addrs: Some(addrs.clone()),
                        at: now,
                    },
                );
                (Some(addrs), None)
            }
            other => {
                let why = match other {
                    Err(e) => e.to_string(),
                    Ok(_) => "no address".into(),
                };
                self.names.insert(
                    key,
                    NameState {
                        addrs: prev.clone(),
                        at: now,
                    },
                );
                let kept = match &prev {
                    Some(a) => format!("keeping its last {} address(es)", a.len()),
                    None => "left out until it resolves".into(),
                };
                (
                    prev,
                    Some(format!(
                        "roundtrip agent: cannot resolve {host}: {why}; {kept} (tried again in {}s)",
                        self.dns_interval.as_secs()
                    )),
                )
            }
        }
    }

    /// The peers of `path`: read again when its time or size changed; a file that cannot be read or has a
    /// bad line keeps its previous list (and the error is returned).
    fn file_peers(&mut self, path: &Path) -> (Vec<String>, Option<String>) {
        let meta = std::fs::metadata(path);
        let stamp = meta
            .as_ref()
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        let prev = self.files.get(path).cloned();
        if let Some(p) = &prev
            && p.stamp == stamp
            && (p.stamp.is_some() || p.failed)
        {
            return (p.peers.clone(), None);
        }
        let keep = prev.map(|p| p.peers).unwrap_or_default();
        let read = match meta {
            Err(e) => Err(format!("cannot read it: {e}")),
            Ok(_) => std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}")),
        };
        let parsed = read.and_then(|text| {
            parse_peers(&text).map_err(|(line, what)| format!("line {line}: {what}"))
        });
        match parsed {
            Ok(peers) => {
                self.files.insert(
                    path.to_path_buf(),
                    FileState {
                        stamp,
                        peers: peers.clone(),
                        failed: false,
                    },
                );
                (peers, None)
            }
            Err(what) => {
                self.files.insert(
                    path.to_path_buf(),
                    FileState {
                        stamp,
                        peers: keep.clone(),
                        failed: true,
                    },
                );
                let what = match what.strip_prefix("line ") {
                    Some(rest) => {
                        let (n, w) = rest.split_once(": ").unwrap_or((rest, ""));
                        format!("peers file {}:{n}: {w}", path.display())
                    }
                    None => format!("peers file {}: {what}", path.display()),
                };
                (
                    keep.clone(),
                    Some(format!(
                        "{what}; keeping its previous {} peer(s)",
                        keep.len()
                    )),
                )
            }
        }
    }

    fn host_targets(&mut self, text: &str, template: &Template, now: Instant, out: &mut Collected) {
        let Ok(t) = Target::parse(text, DEFAULT_PORT) else {
            out.errors.push(format!(
                "roundtrip agent: target '{text}' is not HOST[:PORT]; left out"
            ));
            return;
        };
        let label = target_label(&t.host, t.port, &template.probe);
        let (addrs, err) = self.resolve(&t.host, t.port, now);
        if let Some(e) = err {
            out.errors.push(e);
            out.dns_errors.push(label.clone());
        }
        let Some(mut addrs) = addrs else { return };
        addrs.sort_by_key(|a| a.is_ipv6());
        out.targets.push(TargetSpec {
            target: label,
            addr: addrs[0],
            probe: template.probe.clone(),
            interval: template.interval,
            timeout: template.timeout,
            labels: template.labels.clone(),
        });
    }

    /// Resolves every source of `plan` at `now` into targets.
    pub fn collect(&mut self, plan: &Plan, now: Instant) -> Collected {
        let mut out = Collected::default();
        for s in &plan.sources {
            match s {
                Source::Host { text, template } => {
                    self.host_targets(text, template, now, &mut out);
                }
                Source::File { path, template } => {
                    let (peers, err) = self.file_peers(path);
                    if let Some(e) = err {
                        out.errors.push(format!("roundtrip agent: {e}"));
                    }
                    for p in peers {
                        self.host_targets(&p, template, now, &mut out);
                    }
                }
                Source::Dns { text, template } => {
                    let Ok(t) = Target::parse(text, DEFAULT_PORT) else {
                        out.errors.push(format!(
                            "roundtrip agent: --peers-dns '{text}' is not NAME[:PORT]; left out"
                        ));
                        continue;
                    };
                    let (addrs, err) = self.resolve(&t.host, t.port, now);
                    let mut addrs = addrs.unwrap_or_default();
                    addrs.sort();
                    if let Some(e) = err {
                        out.errors.push(e);
                        for a in &addrs {
                            out.dns_errors.push(target_label(
                                &a.ip().to_string(),
                                a.port(),
                                &template.probe,
                            ));
                        }
                    }
                    for a in addrs {
                        out.targets.push(TargetSpec {
                            target: target_label(&a.ip().to_string(), a.port(), &template.probe),
                            addr: a,
                            probe: template.probe.clone(),
                            interval: template.interval,
                            timeout: template.timeout,
                            labels: template.labels.clone(),
                        });
                    }
                }
            }
        }
        let mut seen = HashSet::new();
        let before = out.targets.len();
        let filter = &self.self_filter;
        out.targets.retain(|t| !filter.is_self(t));
        out.left_out_self = before - out.targets.len();
        out.targets.retain(|t| seen.insert(t.key()));
        out
    }
}
