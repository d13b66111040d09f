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

use super::config::{Config, ProbeName};
use super::{DEFAULT_PORT, ProbeKind, TargetSpec};
use crate::db::DbUrl;
use crate::db::link::LinkTarget;
use crate::probe::target::Target;
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

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

/// Resolves names: host, port -> every address.
pub type Lookup = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// The system resolver (getaddrinfo): every A/AAAA record of `host`, without duplicates.
pub fn system_lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let mut seen = HashSet::new();
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()?
        .filter(|a| seen.insert(*a))
        .collect();
    if addrs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no address"));
    }
    Ok(addrs)
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Which targets are this agent itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelfFilter {
    /// This host's (network namespace's) addresses ([`local_addresses`]).
    pub local: Vec<IpAddr>,
    /// The responder's bind address (None or unspecified: every address).
    pub bind: Option<IpAddr>,
    /// The responder's port (None: no responder).
    pub port: Option<u16>,
}

impl SelfFilter {
    /// True when probing `t` would probe this agent: a TCP/UDP/connect target at our responder's port on one
    /// of our addresses (or on the bind address), or an ICMP target on one of our addresses.
    pub fn is_self(&self, t: &TargetSpec) -> bool {
        let ip = canonical(t.addr.ip());
        let ours = ip.is_loopback()
            || ip.is_unspecified()
            || self.local.iter().any(|l| canonical(*l) == ip);
        match t.probe {
            ProbeKind::Db { .. } | ProbeKind::DbLink { .. } => false,
            ProbeKind::Icmp { .. } => ours,
            _ => {
                if self.port != Some(t.addr.port()) {
                    return false;
                }
                match self.bind.map(canonical) {
                    None => ours,
                    Some(b) if b.is_unspecified() => ours,
                    Some(b) => b == ip || ip.is_unspecified(),
                }
            }
        }
    }
}

/// This host's addresses (every interface of this network namespace), from getifaddrs.
pub fn local_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list and stores its head in ifap; it is freed below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return out;
    }
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: p is a node of the list returned by getifaddrs, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: ifap came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(ifap) };
    out.sort();
    out.dedup();
    out
}

/// The local address the kernel would use toward `to` (a connected UDP socket; nothing is sent).
pub fn local_address_toward(to: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if to.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(to).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// This host's name (empty when it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length; gethostname NUL-terminates within it (or truncates).
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The default `source` label: the local address toward the first target, else the host name.
pub fn default_source(first: Option<SocketAddr>) -> String {
    if let Some(ip) = first.and_then(local_address_toward) {
        return ip.to_string();
    }
    let h = hostname();
    if h.is_empty() { "localhost".into() } else { h }
}

/// What a [`Collector::collect`] found.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// The targets, without duplicates and without this agent.
    pub targets: Vec<TargetSpec>,
    /// Problems to log on stderr (unreadable or bad peers files, names that did not resolve).
    pub errors: Vec<String>,
    /// `target` labels whose name failed to resolve in this round (their last good addresses are kept):
    /// pass each to [`super::engine::Engine::count_dns_error`].
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

/// How a new target list differs from the previous one, by [`TargetSpec::key`].
pub fn diff(old: &[TargetSpec], new: &[TargetSpec]) -> (usize, usize) {
    let o: HashSet<_> = old.iter().map(TargetSpec::key).collect();
    let n: HashSet<_> = new.iter().map(TargetSpec::key).collect();
    (n.difference(&o).count(), o.difference(&n).count())
}

#[cfg(test)]
mod tests {
    use super::super::config;
    use super::*;
    use std::sync::{Arc, Mutex};

    fn template() -> Template {
        Template {
            probe: ProbeKind::Tcp { size: 64 },
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            labels: vec![],
        }
    }

    fn no_lookup() -> Box<Lookup> {
        Box::new(|h, _| Err(io::Error::other(format!("no lookups in this test ({h})"))))
    }

    #[test]
    fn labels_follow_the_rules() {
        let tcp = ProbeKind::Tcp { size: 64 };
        assert_eq!(target_label("10.0.0.2", 11111, &tcp), "10.0.0.2");
        assert_eq!(target_label("10.0.0.2", 2000, &tcp), "10.0.0.2:2000");
        assert_eq!(target_label("fe80::1", 2000, &tcp), "[fe80::1]:2000");
        assert_eq!(target_label("db1", 5432, &ProbeKind::Connect), "db1:5432");
        assert_eq!(target_label("h", 11111, &ProbeKind::Icmp { size: 64 }), "h");
    }

    #[test]
    fn peers_file_syntax() {
        let p = parse_peers("# fleet\n10.0.0.2\n\n  10.0.0.3:2000  # second\n[::1]:5\n").unwrap();
        assert_eq!(p, vec!["10.0.0.2", "10.0.0.3:2000", "[::1]:5"]);
        assert_eq!(parse_peers("a\nb:c:d\n").unwrap_err().0, 2);
        assert_eq!(parse_peers("h:0").unwrap_err().0, 1);
    }

    #[test]
    fn plan_precedence() {
        let cfg = config::parse(
            r#"
interval = "2s"
probe = "udp"
peers = ["10.0.0.9"]
[labels]
zone = "a"
[[target]]
address = "10.0.0.5:22"
probe = "connect"
labels = { role = "ssh" }
[[target]]
address = "10.0.0.6"
[[target]]
probe = "db"
url = "postgres://app@10.0.0.7/app"
"#,
            Path::new("a.toml"),
        )
        .unwrap();
        let cli = CliTargets {
            peers: vec!["10.0.0.2".into()],
            size: Some(100),
            timeout: Some(Duration::from_millis(300)),
            labels: vec![("zone".into(), "b".into()), ("dc".into(), "x".into())],
            ..CliTargets::default()
        };
        let env = |k: &str| (k == "PGPASSWORD").then(|| "pw-from-env".to_string());
        let plan = Plan::build(&cli, Some(&cfg), &env);
        let mut c = Collector::new(no_lookup(), Duration::from_secs(60), SelfFilter::default());
        let got = c.collect(&plan, Instant::now());
        assert!(got.errors.is_empty(), "{:?}", got.errors);
        let t = &got.targets;
        assert_eq!(t.len(), 5);
        // CLI peer: CLI size and timeout, config interval and probe, CLI labels over config labels.
        assert_eq!(t[0].target, "10.0.0.2");
        assert_eq!(t[0].probe, ProbeKind::Udp { size: 100 });
        assert_eq!(t[0].interval, Duration::from_secs(2));
        assert_eq!(t[0].timeout, Duration::from_millis(300));
        let labels = vec![
            ("dc".to_string(), "x".to_string()),
            ("zone".into(), "b".into()),
        ];
        assert_eq!(t[0].labels, labels);
        assert_eq!(t[1].target, "10.0.0.9");
        assert_eq!(t[2].target, "10.0.0.5:22");
        assert_eq!(t[2].probe, ProbeKind::Connect);
        assert_eq!(t[2].labels.len(), 3);
        assert_eq!(t[3].probe, ProbeKind::Udp { size: 100 });
        assert_eq!(t[4].target, "10.0.0.7:5432");
        assert_eq!(t[4].addr, "10.0.0.7:5432".parse().unwrap());
        match &t[4].probe {
            ProbeKind::Db { url } => {
                assert_eq!(url.password.as_ref().unwrap().expose(), "pw-from-env")
            }
            p => panic!("{p:?}"),
        }
        assert!(!format!("{:?}", t[4].target).contains("pw-from-env"));
    }

    #[test]
    fn dns_peers_labelled_by_ip_and_last_good_list_kept() {
        let answers: Arc<Mutex<io::Result<Vec<SocketAddr>>>> = Arc::new(Mutex::new(Ok(vec![
            "10.1.0.2:11111".parse().unwrap(),
            "10.1.0.3:11111".parse().unwrap(),
        ])));
        let a = answers.clone();
        let lookup: Box<Lookup> = Box::new(move |_, _| match &*a.lock().unwrap() {
            Ok(v) => Ok(v.clone()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        });
        let plan = Plan {
            sources: vec![Source::Dns {
                text: "svc.local".into(),
                template: template(),
            }],
        };
        let mut c = Collector::new(lookup, Duration::from_secs(60), SelfFilter::default());
        let t0 = Instant::now();
        let got = c.collect(&plan, t0);
        let names: Vec<_> = got.targets.iter().map(|t| t.target.as_str()).collect();
        assert_eq!(names, ["10.1.0.2", "10.1.0.3"]);
        // Not looked up again within the interval.
        *answers.lock().unwrap() = Err(io::Error::other("SERVFAIL"));
        let got = c.collect(&plan, t0 + Duration::from_secs(30));
        assert_eq!(got.targets.len(), 2);
        assert!(got.dns_errors.is_empty());
        // Looked up after the interval: failure keeps the list and reports each label.
        let got = c.collect(&plan, t0 + Duration::from_secs(61));
        assert_eq!(got.targets.len(), 2);
        assert_eq!(got.dns_errors, ["10.1.0.2", "10.1.0.3"]);
        assert!(got.errors[0].contains("SERVFAIL"), "{:?}", got.errors);
        // A new answer replaces it.
        *answers.lock().unwrap() = Ok(vec!["10.1.0.4:11111".parse().unwrap()]);
        let got = c.collect(&plan, t0 + Duration::from_secs(122));
        assert_eq!(got.targets[0].target, "10.1.0.4");
        assert_eq!(got.targets.len(), 1);
    }

    #[test]
    fn unresolvable_name_left_out_until_it_resolves() {
        let plan = Plan {
            sources: vec![Source::Host {
                text: "db.example:5432".into(),
                template: template(),
            }],
        };
        let mut c = Collector::new(no_lookup(), Duration::from_secs(60), SelfFilter::default());
        let got = c.collect(&plan, Instant::now());
        assert!(got.targets.is_empty());
        assert_eq!(got.dns_errors, ["db.example:5432"]);
        assert_eq!(got.errors.len(), 1);
    }

    #[test]
    fn peers_file_reread_on_change_and_kept_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers");
        std::fs::write(&path, "10.0.0.2\n10.0.0.3\n").unwrap();
        let plan = Plan {
            sources: vec![Source::File {
                path: path.clone(),
                template: template(),
            }],
        };
        let mut c = Collector::new(no_lookup(), Duration::from_secs(60), SelfFilter::default());
        let now = Instant::now();
        assert_eq!(c.collect(&plan, now).targets.len(), 2);
        std::fs::write(&path, "10.0.0.2\n10.0.0.3\n10.0.0.4:9\n").unwrap();
        let got = c.collect(&plan, now);
        assert_eq!(got.targets.len(), 3);
        assert_eq!(got.targets[2].target, "10.0.0.4:9");
        std::fs::write(&path, "10.0.0.2\nnot a:host:x\n").unwrap();
        let got = c.collect(&plan, now);
        assert_eq!(got.targets.len(), 3);
        assert!(got.errors[0].contains(":2:"), "{:?}", got.errors);
        std::fs::remove_file(&path).unwrap();
        let got = c.collect(&plan, now);
        assert_eq!(got.targets.len(), 3);
        assert!(got.errors[0].contains("cannot read"), "{:?}", got.errors);
        // Reported once, not at every check.
        assert!(c.collect(&plan, now).errors.is_empty());
        std::fs::write(&path, "10.0.0.8\n").unwrap();
        assert_eq!(c.collect(&plan, now).targets[0].target, "10.0.0.8");
    }

    #[test]
    fn unchanged_inputs_are_not_collected_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers");
        std::fs::write(&path, "10.0.0.2\n").unwrap();
        let answers: Arc<Mutex<Vec<SocketAddr>>> =
            Arc::new(Mutex::new(vec!["10.1.0.2:11111".parse().unwrap()]));
        let a = answers.clone();
        let lookup: Box<Lookup> = Box::new(move |_, _| Ok(a.lock().unwrap().clone()));
        let plan = Plan {
            sources: vec![
                Source::File {
                    path: path.clone(),
                    template: template(),
                },
                Source::Dns {
                    text: "svc.local".into(),
                    template: template(),
                },
            ],
        };
        let mut c = Collector::new(lookup, Duration::from_secs(60), SelfFilter::default());
        let t0 = Instant::now();
        assert_eq!(c.collect_if_changed(&plan, t0).unwrap().targets.len(), 2);
        assert!(
            c.collect_if_changed(&plan, t0 + Duration::from_secs(1))
                .is_none()
        );
        // The file changes: collected again.
        std::fs::write(&path, "10.0.0.2\n10.0.0.3\n").unwrap();
        let got = c
            .collect_if_changed(&plan, t0 + Duration::from_secs(2))
            .unwrap();
        assert_eq!(got.targets.len(), 3);
        assert!(
            c.collect_if_changed(&plan, t0 + Duration::from_secs(3))
                .is_none()
        );
        // The name is due again: collected again, with the new answer.
        *answers.lock().unwrap() = vec!["10.1.0.9:11111".parse().unwrap()];
        let got = c
            .collect_if_changed(&plan, t0 + Duration::from_secs(61))
            .unwrap();
        assert!(got.targets.iter().any(|t| t.target == "10.1.0.9"));
        // Another plan or self filter: collected again.
        let one = Plan {
            sources: plan.sources[..1].to_vec(),
        };
        assert_eq!(
            c.collect_if_changed(&one, t0 + Duration::from_secs(62))
                .unwrap()
                .targets
                .len(),
            2
        );
        c.self_filter.local = vec!["10.0.0.3".parse().unwrap()];
        assert!(
            c.collect_if_changed(&one, t0 + Duration::from_secs(63))
                .is_some()
        );
    }

    #[test]
    fn never_itself() {
        let f = SelfFilter {
            local: vec!["10.0.0.1".parse().unwrap(), "127.0.0.1".parse().unwrap()],
            bind: None,
            port: Some(11111),
        };
        let spec = |addr: &str, probe: ProbeKind| TargetSpec {
            target: addr.into(),
            addr: addr.parse().unwrap(),
            probe,
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            labels: vec![],
        };
        let tcp = ProbeKind::Tcp { size: 64 };
        assert!(f.is_self(&spec("10.0.0.1:11111", tcp.clone())));
        assert!(f.is_self(&spec("127.0.0.5:11111", tcp.clone())));
        assert!(f.is_self(&spec("[::ffff:10.0.0.1]:11111", tcp.clone())));
        assert!(!f.is_self(&spec("10.0.0.1:2000", tcp.clone())));
        assert!(!f.is_self(&spec("10.0.0.2:11111", tcp.clone())));
        assert!(f.is_self(&spec("10.0.0.1:0", ProbeKind::Icmp { size: 64 })));
        let bound = SelfFilter {
            bind: Some("127.0.0.1".parse().unwrap()),
            ..f.clone()
        };
        assert!(bound.is_self(&spec("127.0.0.1:11111", tcp.clone())));
        assert!(!bound.is_self(&spec("10.0.0.1:11111", tcp.clone())));
        let none = SelfFilter {
            port: None,
            ..f.clone()
        };
        assert!(!none.is_self(&spec("10.0.0.1:11111", tcp.clone())));

        let plan = Plan {
            sources: vec![
                Source::Host {
                    text: "10.0.0.1".into(),
                    template: template(),
                },
                Source::Host {
                    text: "10.0.0.2".into(),
                    template: template(),
                },
                Source::Host {
                    text: "10.0.0.2".into(),
                    template: template(),
                },
            ],
        };
        let mut c = Collector::new(no_lookup(), Duration::from_secs(60), f);
        let got = c.collect(&plan, Instant::now());
        assert_eq!(got.targets.len(), 1);
        assert_eq!(got.left_out_self, 1);
    }

    #[test]
    fn host_facts() {
        assert!(local_addresses().iter().any(|a| a.is_loopback()));
        assert_eq!(
            local_address_toward("127.0.0.1:9".parse().unwrap()),
            Some("127.0.0.1".parse().unwrap())
        );
        assert!(!default_source(None).is_empty());
        let (add, remove) = diff(&[], &[]);
        assert_eq!((add, remove), (0, 0));
    }
}
