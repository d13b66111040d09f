//! `roundtrip agent`: the responder and a prober in one process, probing its targets until stopped and
//! serving `/metrics`, `/api/results` and `/`.

use super::args;
use super::output::{Exit, note};
use super::server::{EventLog, GuardArgs, exposure, raise_fd_limit};
use anyhow::Context;
use clap::Args;
use roundtrip::agent::buckets::Buckets;
use roundtrip::agent::config::{self, ProbeName};
use roundtrip::agent::engine::{Engine, EngineConfig};
use roundtrip::agent::http::{Handler, HttpServer, Request, Site};
use roundtrip::agent::metrics::AgentInfo;
use roundtrip::agent::targets::{self, CliTargets, Collector, Plan, SelfFilter};
use roundtrip::agent::watch;
use roundtrip::agent::{DEFAULT_PORT, SERIES_PER_TARGET, TargetSpec};
use roundtrip::probe::target::Target;
use roundtrip::server::{self, ServerConfig};
use roundtrip::units;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

/// Arguments of `roundtrip agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Address the responder listens on (default: every address).
    #[arg(long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// The responder's TCP and UDP port (0: a free one); targets given without a port use 11111.
    #[arg(long, short = 'p', default_value_t = DEFAULT_PORT, value_parser = args::port)]
    port: u16,
    /// Only probe: run no responder.
    #[arg(long)]
    no_responder: bool,
    /// A target, HOST[:PORT] (repeatable).
    #[arg(long = "peer", value_name = "HOST[:PORT]", value_parser = host_port)]
    peers: Vec<String>,
    /// A file of targets, one HOST[:PORT] per line (`#` comments); read again when it changes.
    #[arg(long, value_parser = args::input_file, value_name = "FILE")]
    peers_file: Option<PathBuf>,
    /// Every A/AAAA record of NAME is a target (a Kubernetes headless Service gives every pod), resolved
    /// again every --dns-interval.
    #[arg(long, value_name = "NAME[:PORT]", value_parser = host_port)]
    peers_dns: Option<String>,
    /// How often names are resolved again.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = args::positive_duration)]
    dns_interval: Duration,
    /// A TOML configuration file: defaults, peers, labels and [[target]] entries with their own probe (see
    /// the README); reloaded when it changes and on SIGHUP.
    #[arg(long, value_parser = args::input_file, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Probe for the peers: tcp or udp (application ping), connect (handshake), icmp [default: tcp].
    #[arg(long, value_name = "KIND", value_parser = probe_name)]
    probe: Option<ProbeName>,
    /// Message size in bytes, header included (tcp, udp; payload for icmp) [default: 64].
    #[arg(long, short = 's', visible_short_alias = 'm', value_name = "BYTES", value_parser = message_size)]
    size: Option<u32>,
    /// Time between probes of each target [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = args::positive_duration)]
    interval: Option<Duration>,
    /// Time an answer may take before the probe counts as a timeout [default: 1s].
    #[arg(long, value_name = "DURATION", value_parser = args::positive_duration)]
    timeout: Option<Duration>,
    /// A label added to every target's series, NAME=VALUE (repeatable).
    #[arg(long = "label", value_name = "NAME=VALUE", value_parser = label)]
    labels: Vec<(String, String)>,
    /// The `source` label (default: this host's address toward its first target, else its name).
    #[arg(long, value_name = "NAME", value_parser = source_name)]
    source: Option<String>,
    /// Where /metrics, /api/results and / are served (port 0: a free one). Loopback by default: give
    /// 0.0.0.0:9911 for a Prometheus on another host.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9911", value_parser = args::listen_addr)]
    metrics: SocketAddr,
    /// The span of recent results behind /api/results and / (percentiles, loss) [default: the configuration
    /// file's `span`, else 60s].
    #[arg(long, alias = "window", value_name = "DURATION", value_parser = args::positive_duration)]
    span: Option<Duration>,
    /// Histogram buckets per doubling: 1, 2, 4 or 8 (1 = the layout of older agents; every layout keeps its
    /// bounds) [default: the configuration file's `buckets`, else 4]. Fewer when the targets' series would
    /// pass --max-series.
    #[arg(long, value_name = "N", value_parser = buckets)]
    buckets: Option<Buckets>,
    /// Refuse to start (and refuse a reload) with more series than this (38 per target at --buckets 1, 110
    /// at 4).
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    max_series: usize,
    /// Threads for connect, ICMP and database probes.
    #[arg(long, value_name = "N", default_value_t = 4)]
    workers: usize,
    /// Also turn the live traffic of this interface (or `any`) into request-latency metrics: every request
    /// the rpc decoders recognise (PostgreSQL, MySQL, Redis, NFS, HTTP/1, ...), split into network and server
    /// time. Needs CAP_NET_RAW.
    #[arg(long, value_name = "IFACE")]
    watch: Option<String>,
    /// A tcpdump filter expression for --watch, run in the kernel (e.g. 'tcp port 5432').
    #[arg(long, value_name = "EXPR", requires = "watch")]
    watch_filter: Option<String>,
    /// Add a `client` label (the client's address) to the watch series: one series per client.
    #[arg(long, requires = "watch")]
    watch_client_label: bool,
    /// Connections tracked at once by --watch; past it the longest silent are dropped (counted).
    #[arg(long, value_name = "N", default_value_t = roundtrip::agent::watch::DEFAULT_MAX_CONNECTIONS, requires = "watch")]
    watch_max_connections: usize,
    #[command(flatten)]
    guard: GuardArgs,
}

fn host_port(s: &str) -> Result<String, String> {
    Target::parse(s, DEFAULT_PORT).map_err(|e| e.to_string())?;
    Ok(s.trim().to_string())
}

fn buckets(s: &str) -> Result<Buckets, String> {
    let n = s
        .parse::<u32>()
        .map_err(|_| format!("'{s}' is not a number: give 1, 2, 4 or 8 buckets per doubling"))?;
    Buckets::new(n)
}

fn probe_name(s: &str) -> Result<ProbeName, String> {
    match ProbeName::parse(s) {
        Some(ProbeName::Db) => Err(
            "db targets are given in --config, as a [[target]] with probe = \"db\" and a url"
                .into(),
        ),
        Some(p) => Ok(p),
        None => Err(format!(
            "unknown probe '{s}' (known: tcp, udp, connect, icmp)"
        )),
    }
}

fn message_size(s: &str) -> Result<u32, String> {
    config::check_size(args::size(s)?)
}

fn label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not NAME=VALUE, e.g. --label zone=a"))?;
    config::check_label_name(k)?;
    Ok((k.to_string(), v.to_string()))
}

fn source_name(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("the source name is empty".into());
    }
    Ok(s.to_string())
}

/// Makes SIGHUP ask for a reload (installed after ctrlc's handler, which would take it as a stop); the flag
/// SIGHUP sets.
fn catch_hup() -> &'static AtomicBool {
    roundtrip::sys::sighup_flag()
}

/// A file's modification time and size, to notice changes.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
}

/// Prints a line on stdout at once (tests and supervisors read it).
fn say(line: String) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{}", super::output::escape_lines(&line));
    let _ = o.flush();
}

fn series_line(n: usize, buckets: Buckets, max: usize) -> String {
    roundtrip::report::text::agent::series_line(
        n,
        buckets.series_per_target(),
        max,
        buckets.get() as usize,
    )
}

/// What the targets thread needs.
struct Watch {
    cli: CliTargets,
    config_path: Option<PathBuf>,
    config_stamp: Option<(SystemTime, u64)>,
    plan: Plan,
    collector: Collector,
    current: Vec<TargetSpec>,
    /// The last list refused for --max-series (refused once, logged once).
    refused: Option<Vec<TargetSpec>>,
    max_series: usize,
    source: String,
    /// The span the agent runs with (a reload does not change it).
    span: Duration,
    /// The histograms' resolution the agent runs with (a reload does not change it).
    buckets: Buckets,
}

impl Watch {
    /// One round: reload the configuration when asked or changed, collect, apply.
    fn tick(&mut self, engine: &Engine) {
        if let Some(path) = self.config_path.clone() {
            let now_stamp = stamp(&path);
            let asked = roundtrip::sys::sighup_flag().swap(false, Ordering::SeqCst);
            if asked || now_stamp != self.config_stamp {
                self.config_stamp = now_stamp;
                match config::load(&path) {
                    Ok(c) => {
                        if c.source.is_some() && c.source.as_ref() != Some(&self.source) {
                            note(format!(
                                "roundtrip agent: config {}: the source stays {} until the agent restarts",
                                path.display(),
                                self.source
                            ));
                        }
                        if c.buckets.is_some_and(|b| b != self.buckets) {
                            note(format!(
                                "roundtrip agent: config {}: the histograms keep --buckets {} until the agent restarts",
                                path.display(),
                                self.buckets.get()
                            ));
                        }
                        if c.span.is_some_and(|s| s != self.span) {
                            note(format!(
                                "roundtrip agent: config {}: the span stays {} until the agent restarts",
                                path.display(),
                                units::fmt_duration(self.span)
                            ));
                        }
                        self.plan = Plan::build(&self.cli, Some(&c), &|k| std::env::var(k).ok());
                        note(format!(
                            "roundtrip agent: config {} reloaded",
                            path.display()
                        ));
                    }
                    Err(e) => note(format!(
                        "roundtrip agent: {e}; keeping the previous configuration"
                    )),
                }
            }
        }
        let Some(got) = self
            .collector
            .collect_if_changed(&self.plan, Instant::now())
        else {
            return;
        };
        for e in &got.errors {
            note(config::scrub(e));
        }
        for label in &got.dns_errors {
            engine.count_dns_error(label);
        }
        if got.targets == self.current || self.refused.as_ref() == Some(&got.targets) {
            return;
        }
        let n = got.targets.len();
        if n * self.buckets.series_per_target() > self.max_series {
            self.refused = Some(got.targets.clone());
            note(format!(
                "roundtrip agent: the new target list has {}, over --max-series; keeping the previous {} targets",
                series_line(n, self.buckets, self.max_series),
                self.current.len()
            ));
            return;
        }
        let (added, removed) = targets::diff(&self.current, &got.targets);
        engine.set_targets(got.targets.clone());
        self.current = got.targets;
        if added > 0 || removed > 0 {
            say(format!(
                "roundtrip agent: targets: +{added} -{removed} (now {n})"
            ));
        }
    }
}

/// Runs the agent until SIGTERM or Ctrl-C.
/// Label names the watch series set themselves.
const WATCH_LABELS: [&str; 7] = [
    "server",
    "proto",
    "op",
    "client",
    "outcome",
    "interface",
    "oriented_by",
];

/// The watched interfaces of `--watch` and the config's `[[watch]]` tables, checked (interface exists,
/// filter compiles, no label named like a watch label); refused (exit 2) otherwise.
fn watch_specs(
    a: &AgentArgs,
    cfg: Option<&config::Config>,
) -> anyhow::Result<Vec<watch::WatchSpec>> {
    let mut specs = Vec::new();
    if let Some(i) = &a.watch {
        let mut w = watch::WatchSpec::new(i);
        if let Some(f) = &a.watch_filter {
            let e = roundtrip::capture::bpf::Expr::parse(f).map_err(|e| {
                super::output::refused(format!(
                    "--watch-filter '{}': {e}",
                    roundtrip::capture::bpf::excerpt(f, None)
                ))
            })?;
            w.filter = (!e.is_empty()).then_some(e);
        }
        w.client_label = a.watch_client_label;
        if a.watch_max_connections == 0 {
            return Err(super::output::refused(
                "--watch-max-connections must be at least 1",
            ));
        }
        w.max_connections = a.watch_max_connections;
        let mut labels = cfg.map(|c| c.labels.clone()).unwrap_or_default();
        for (k, v) in &a.labels {
            labels.retain(|(n, _)| n != k);
            labels.push((k.clone(), v.clone()));
        }
        labels.sort();
        w.labels = labels;
        specs.push(w);
    }
    if let Some(c) = cfg {
        for w in &c.watch {
            let mut w = w.clone();
            let mut labels = c.labels.clone();
            labels.retain(|(n, _)| !w.labels.iter().any(|(m, _)| m == n));
            labels.extend(w.labels.iter().cloned());
            labels.sort();
            w.labels = labels;
            specs.push(w);
        }
    }
    for w in &specs {
        if let Some((k, _)) = w
            .labels
            .iter()
            .find(|(k, _)| WATCH_LABELS.contains(&k.as_str()))
        {
            return Err(super::output::refused(format!(
                "label '{k}' is set by --watch itself (its labels: {}): rename it",
                WATCH_LABELS.join(", ")
            )));
        }
        watch::check(w).map_err(|e| super::output::refused(e.to_string()))?;
    }
    Ok(specs)
}

pub fn run(a: AgentArgs) -> anyhow::Result<Exit> {
    // Arguments first: nothing is read or opened before they are all checked.
    let start = Start::check(&a)?;
    // The watchers: interfaces and filters checked before any I/O.
    let watch_specs = watch_specs(&a, start.cfg.as_ref())?;
    let n = start.first.targets.len();
    let watch_shared = (!watch_specs.is_empty()).then(|| {
        let fixed = watch::expose::HEALTH_SERIES_ONCE
            + watch_specs.len() * watch::expose::HEALTH_SERIES_PER_WATCHER;
        watch::Shared::new(
            a.max_series
                .saturating_sub(n * start.buckets.series_per_target())
                .saturating_sub(fixed),
            start.span,
            start.buckets,
        )
    });
    let log = EventLog::new();
    let responder = start_responder(&a, &start, &log)?;
    // The pages' port, before the engine starts (a port in use stops everything at once).
    let listener = std::net::TcpListener::bind(a.metrics).map_err(|e| {
        anyhow::anyhow!(
            "cannot serve --metrics on {}: {e} ({})",
            a.metrics,
            roundtrip::sys::bind_hint(a.metrics, &e)
        )
    })?;
    let placed = Placed::new(&a, start, responder.as_ref());
    let engine = Arc::new(
        Engine::start(EngineConfig {
            psk: placed.start.psk.clone(),
            window: placed.start.span,
            workers: a.workers,
            buckets: placed.start.buckets,
        })
        .context("starting the probe engine")?,
    );
    engine.set_targets(placed.targets.clone());
    let http = serve_pages(&placed, &engine, listener, watch_shared.clone())?;
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the SIGTERM/Ctrl-C handler")?;
    let _ = catch_hup();
    announce(&a, &placed, responder.as_ref(), http.local_addr());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = spawn_watcher(&a, placed, &engine, &stop)?;
    let watchers = start_watchers(watch_specs, watch_shared.as_ref())?;
    while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(1)) {
        log.flush();
        if let Some(w) = &watch_shared {
            for line in w.take_log() {
                note(line);
            }
        }
    }
    if let Some(w) = watchers {
        w.shutdown();
    }
    // Stop: pages, targets thread, engine, responder.
    stop.store(true, Ordering::SeqCst);
    http.shutdown();
    stop_engine(engine, &watcher);
    if let Some(h) = responder {
        h.shutdown();
    }
    log.flush();
    note("roundtrip agent: stopped");
    Ok(Exit::Ok)
}

/// What the arguments, the configuration and the first collection of targets give, all checked.
struct Start {
    limits: roundtrip::server::Limits,
    psk: Option<roundtrip::wire::auth::Psk>,
    cfg: Option<config::Config>,
    /// `--span`, else the file's `span`, else 60 s.
    span: Duration,
    /// `--buckets`, else the file's `buckets`, else 4; made coarser when the first targets' series would pass
    /// --max-series at that resolution.
    buckets: Buckets,
    cli: CliTargets,
    plan: Plan,
    filter: SelfFilter,
    collector: Collector,
    first: targets::Collected,
}

impl Start {
    /// Checks the arguments, the configuration and the peers files, and collects the first targets; a
    /// problem refuses to start (exit 2).
    fn check(a: &AgentArgs) -> anyhow::Result<Start> {
        let limits = a.guard.limits()?;
        if a.workers == 0 {
            return Err(super::output::refused("--workers must be at least 1"));
        }
        if a.max_series == 0 {
            return Err(super::output::refused("--max-series must be at least 1"));
        }
        let psk = a.guard.psk()?;
        let cfg = match &a.config {
            Some(p) => match config::load(p) {
                Ok(c) => Some(c),
                Err(e) => return Err(super::output::refused(e)),
            },
            None => None,
        };
        let cli = CliTargets {
            peers: a.peers.clone(),
            peers_file: a.peers_file.clone(),
            peers_dns: a.peers_dns.clone(),
            probe: a.probe,
            size: a.size,
            interval: a.interval,
            timeout: a.timeout,
            labels: a.labels.clone(),
        };
        // A peers file given at start must be readable and correct (later changes that are not keep the
        // previous list).
        for path in cli
            .peers_file
            .iter()
            .chain(cfg.as_ref().and_then(|c| c.peers_file.as_ref()))
        {
            check_peers_file(path)?;
        }
        let plan = Plan::build(&cli, cfg.as_ref(), &|k| std::env::var(k).ok());
        let filter = SelfFilter {
            local: targets::local_addresses(),
            bind: a.bind,
            port: (!a.no_responder && a.port != 0).then_some(a.port),
        };
        let mut collector = Collector::new(
            Box::new(targets::system_lookup),
            a.dns_interval,
            filter.clone(),
        );
        let first = collector.collect(&plan, Instant::now());
        for e in &first.errors {
            note(config::scrub(e));
        }
        let n = first.targets.len();
        let asked = a
            .buckets
            .or(cfg.as_ref().and_then(|c| c.buckets))
            .unwrap_or_default();
        let Some(buckets) = asked.fit(n, a.max_series) else {
            return Err(super::output::refused(format!(
                "{n} targets x {SERIES_PER_TARGET} series = {} series, over --max-series {}: probe fewer targets, \
                 or raise --max-series if your Prometheus can hold them",
                n * SERIES_PER_TARGET,
                a.max_series
            )));
        };
        if buckets != asked {
            note(format!(
                "roundtrip agent: --buckets {} would give {}, past --max-series: using --buckets {}",
                asked.get(),
                series_line(n, asked, a.max_series),
                buckets.get()
            ));
        }
        let span = a
            .span
            .or(cfg.as_ref().and_then(|c| c.span))
            .unwrap_or(Duration::from_secs(60));
        Ok(Start {
            limits,
            psk,
            span,
            buckets,
            cfg,
            cli,
            plan,
            filter,
            collector,
            first,
        })
    }
}

/// Refuses to start (exit 2) when a peers file cannot be read or has a bad line.
fn check_peers_file(path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        super::output::refused(format!(
            "peers file {}: cannot read it: {e} (check the path)",
            path.display()
        ))
    })?;
    if let Err((line, what)) = targets::parse_peers(&text) {
        return Err(super::output::refused(config::scrub(&format!(
            "peers file {}:{line}: {what}",
            path.display()
        ))));
    }
    Ok(())
}

/// Starts the responder, unless `--no-responder`.
fn start_responder(
    a: &AgentArgs,
    start: &Start,
    log: &Arc<EventLog>,
) -> anyhow::Result<Option<server::ServerHandle>> {
    if a.no_responder {
        return Ok(None);
    }
    let config = ServerConfig {
        bind: a.bind,
        port: a.port,
        tcp: true,
        udp: true,
        psk: start.psk.clone(),
        allow_replay: false,
        limits: start.limits.clone(),
    };
    raise_fd_limit(config.limits.max_clients);
    let sink = log.clone();
    let handle =
        server::start(&config, move |ev| sink.event(&ev)).context("starting the responder")?;
    Ok(Some(handle))
}

/// The checked start, with the responder's port known: the first targets (without this agent), this
/// agent's source name and the address it is reached at.
struct Placed {
    start: Start,
    targets: Vec<TargetSpec>,
    source: String,
    address: String,
}

impl Placed {
    fn new(a: &AgentArgs, mut start: Start, responder: Option<&server::ServerHandle>) -> Placed {
        let mut targets_now = std::mem::take(&mut start.first.targets);
        if let Some(h) = responder {
            start.filter.port = h.tcp_addr().map(|a| a.port());
            start.collector.self_filter = start.filter.clone();
            targets_now.retain(|t| !start.filter.is_self(t));
        }
        let first_addr = targets_now.first().map(|t| t.addr);
        let responder_addr = responder.and_then(|h| h.tcp_addr());
        let source = a
            .source
            .clone()
            .or_else(|| start.cfg.as_ref().and_then(|c| c.source.clone()))
            .unwrap_or_else(|| {
                // Two agents on one host (different ports) must not share a source: with a responder on
                // another port than the default, the default source is ADDRESS:PORT, as other agents name it
                // as a target.
                let s = targets::default_source(first_addr);
                match responder_addr {
                    Some(addr) if addr.port() != DEFAULT_PORT => match s.parse::<IpAddr>() {
                        Ok(ip) => SocketAddr::new(ip, addr.port()).to_string(),
                        Err(_) => format!("{s}:{}", addr.port()),
                    },
                    _ => s,
                }
            });
        let address = match responder_addr {
            Some(addr) if addr.ip().is_unspecified() => {
                let ip = source
                    .parse::<IpAddr>()
                    .ok()
                    .or_else(|| source.parse::<SocketAddr>().ok().map(|a| a.ip()))
                    .or_else(|| first_addr.and_then(targets::local_address_toward));
                ip.map_or(addr, |ip| SocketAddr::new(ip, addr.port()))
                    .to_string()
            }
            Some(addr) => addr.to_string(),
            None => String::new(),
        };
        Placed {
            start,
            targets: targets_now,
            source,
            address,
        }
    }
}

/// Serves `/metrics`, `/api/results` and `/` on `listener`.
fn serve_pages(
    placed: &Placed,
    engine: &Arc<Engine>,
    listener: std::net::TcpListener,
    watch_shared: Option<Arc<watch::Shared>>,
) -> anyhow::Result<HttpServer> {
    let info = AgentInfo {
        source: placed.source.clone(),
        address: placed.address.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let site = {
        let engine = engine.clone();
        Arc::new(Site {
            info,
            window: placed.start.span,
            snapshot: Box::new(move || engine.snapshot()),
            watch: watch_shared.clone(),
        })
    };
    let handler: Arc<Handler> = {
        let site = site.clone();
        Arc::new(move |r: &Request| site.handle(r))
    };
    HttpServer::serve(listener, 4, handler).context("starting the pages' threads")
}

/// Says what runs where: the responder, the pages, the source and the number of series.
fn announce(
    a: &AgentArgs,
    placed: &Placed,
    responder: Option<&server::ServerHandle>,
    maddr: SocketAddr,
) {
    match responder {
        Some(h) => {
            let addr = h.tcp_addr().map_or("?".into(), |a| a.to_string());
            say(format!(
                "roundtrip agent: responder on tcp+udp {addr} ({})",
                exposure(h, a.guard.psk_path())
            ));
        }
        None => say("roundtrip agent: no responder".into()),
    }
    if server::is_loopback(maddr.ip()) {
        say(format!(
            "roundtrip agent: metrics on http://{maddr}/metrics (loopback only: give --metrics 0.0.0.0:{} for a \
             Prometheus on another host)",
            maddr.port()
        ));
    } else {
        say(format!(
            "roundtrip agent: metrics on http://{maddr}/metrics (exposed: anyone who can reach this address \
             reads the targets and their results)"
        ));
        note(format!(
            "warning: --metrics {maddr} is reachable from other hosts: /metrics, /api/results and / show every \
             target; bind 127.0.0.1 or firewall it if that is not wanted"
        ));
    }
    for t in &placed.targets {
        if let roundtrip::agent::ProbeKind::DbLink { link, .. } = &t.probe
            && let Some(w) = link.warning()
        {
            note(format!("roundtrip agent: target {}: {w}", t.target));
        }
    }
    let psk_note = a.guard.psk_path().map_or(String::new(), |p| {
        format!("; probes prove the key in {}", p.display())
    });
    say(format!(
        "roundtrip agent: source {}, {}{psk_note}",
        placed.source,
        series_line(placed.targets.len(), placed.start.buckets, a.max_series)
    ));
    if placed.start.first.left_out_self > 0 {
        note(format!(
            "roundtrip agent: {} target(s) left out: they are this agent",
            placed.start.first.left_out_self
        ));
    }
    note(format!(
        "roundtrip agent: probing every target on its own schedule (span {}); SIGTERM or Ctrl-C to stop",
        units::fmt_duration(placed.start.span)
    ));
}

/// Starts the targets thread: it reloads and re-resolves every second until `stop`.
fn spawn_watcher(
    a: &AgentArgs,
    placed: Placed,
    engine: &Arc<Engine>,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut w = Watch {
        cli: placed.start.cli,
        config_stamp: a.config.as_deref().and_then(stamp),
        config_path: a.config.clone(),
        plan: placed.start.plan,
        collector: placed.start.collector,
        current: placed.targets,
        refused: None,
        max_series: a.max_series,
        source: placed.source,
        span: placed.start.span,
        buckets: placed.start.buckets,
    };
    let engine = engine.clone();
    let stop = stop.clone();
    std::thread::Builder::new()
        .name("agent-targets".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(500));
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                w.tick(&engine);
            }
        })
        .context("starting the targets thread")
}

/// Starts a thread per watched interface, saying what each watches.
fn start_watchers(
    specs: Vec<watch::WatchSpec>,
    shared: Option<&Arc<watch::Shared>>,
) -> anyhow::Result<Option<watch::Watchers>> {
    let Some(shared) = shared else {
        return Ok(None);
    };
    for w in &specs {
        say(format!(
            "roundtrip agent: watching {}{} for requests ({}), series budget {}",
            w.interface,
            w.filter
                .as_ref()
                .map(|e| format!(", filter '{}' in the kernel", e.text()))
                .unwrap_or_default(),
            match &w.protocols {
                watch::Protocols::Auto => "protocols by port, then by content".to_string(),
                watch::Protocols::Only(v) =>
                    v.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            },
            shared.lock().budget
        ));
    }
    Ok(Some(
        watch::Watchers::start(specs, shared.clone()).context("starting the watch threads")?,
    ))
}

/// Shuts the engine down once the targets thread and the pages let go of it (at most 1.5 s; past that the
/// process exit ends it).
fn stop_engine(engine: Arc<Engine>, watcher: &std::thread::JoinHandle<()>) {
    let deadline = Instant::now() + Duration::from_millis(1500);
    while !watcher.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut engine = Some(engine);
    while let Some(e) = engine.take() {
        match Arc::try_unwrap(e) {
            Ok(e) => e.shutdown(),
            Err(e) if Instant::now() < deadline => {
                engine = Some(e);
                std::thread::sleep(Duration::from_millis(20));
            }
            // A page or a lookup still holds it: the process exit ends it.
            Err(_) => {}
        }
    }
}
