//! `roundtrip agent --watch IFACE`: the real application's requests, read from live packets, as latency
//! metrics split into network and server time.
//!
//! One thread per watched interface reads a live capture ([`crate::capture::live`], the filter in the kernel)
//! and feeds the request/response decoders of `capture rpc` ([`crate::capture::rpc::Driver`]); its sink
//! ([`track`]) turns every answered request into a sample of `roundtrip_request_duration_seconds{server,proto,op}`
//! (from the end of the request to the first byte of the response, at the capture point), and follows the TCP
//! handshakes and sequence numbers of the same connections for `roundtrip_network_rtt_seconds{server}` and the
//! retransmissions. The series live in one [`Shared`] table that `/metrics`, `/api/results` and `/` read
//! ([`expose`]).
//!
//! # Bounds
//! - Connections: at most [`WatchSpec::max_connections`] tracked per interface (the decoders' table and the
//!   watcher's own have the same cap); past it the eighth silent longest is dropped and counted
//!   (`roundtrip_watch_evictions_total`). The watcher's own state is [`track::CONN_BYTES`] bytes per
//!   connection; the decoders' state is about [`DECODER_CONN_BYTES`] more while nothing is held back for
//!   reassembly (out-of-order bytes are bounded per direction by the driver).
//! - Series: every series counts against a budget (the agent's `--max-series` less its probe series); a
//!   histogram counts its buckets + 2. Past the budget a new (server, proto, op) is folded into `op="other"`,
//!   then into `server="other"` (a port scan cannot create servers), and its requests are counted in
//!   `roundtrip_watch_folded_requests_total`.
//! - The `op` label comes from a fixed vocabulary per protocol ([`ops`]); query text, keys and values never
//!   leave the decoders.

pub mod expose;
pub mod ops;
pub mod track;

use crate::agent::buckets::Buckets;
use crate::agent::stats::bucket_in;
use crate::capture::Filter;
use crate::capture::Packets;
use crate::capture::bpf;
use crate::capture::live::{self, LiveCapture, LiveConfig};
pub use crate::capture::rpc::driver::Oriented;
use crate::capture::rpc::driver::ProtoChoice;
use crate::capture::rpc::{Driver, Proto};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::agent::buckets::{HIST_SERIES, WATCH_BUCKETS as BUCKETS};
/// Series of one (server, proto, op) at `--buckets 1`: the request histogram, requests by outcome (ok, error),
/// response bytes.
pub const OP_SERIES: usize = HIST_SERIES + 2 + 1;
/// Series of one server at `--buckets 1`: the network RTT histogram and the retransmissions.
pub const SERVER_SERIES: usize = HIST_SERIES + 1;

/// Series of one (server, proto, op) at `buckets`.
pub fn op_series(buckets: Buckets) -> usize {
    buckets.watch_hist_series() + 2 + 1
}

/// Series of one server at `buckets`.
pub fn server_series(buckets: Buckets) -> usize {
    buckets.watch_hist_series() + 1
}
/// Default cap of tracked connections per watched interface.
pub const DEFAULT_MAX_CONNECTIONS: usize = 65_536;
/// Approximate bytes the decoders keep per connection (the driver's entry, its two half-streams and a
/// protocol matcher with an empty queue, hash-table slack included): measured with `PARTS=2
/// bench/agent_watch.sh`, 1,208 bytes per connection in all at 10,000, less the watcher's own
/// [`track::CONN_BYTES`].
pub const DECODER_CONN_BYTES: usize = 1000;
/// Time between two attempts to open an interface that is gone or refused.
pub const RETRY: Duration = Duration::from_secs(5);
/// A window snapshot is taken this often (the recent figures of `/api/results` are differences of them).
pub const SNAP_EVERY: Duration = Duration::from_secs(5);

/// Which protocols a watcher reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Protocols {
    /// Every protocol the decoders recognise (by port, then by content).
    #[default]
    Auto,
    /// Only these.
    Only(Vec<Proto>),
}

/// One watched interface (`--watch`, or a `[[watch]]` table).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchSpec {
    /// Interface name or `any`.
    pub interface: String,
    /// A tcpdump filter expression run in the kernel (`None`: every packet).
    pub filter: Option<bpf::Expr>,
    /// Protocols reported.
    pub protocols: Protocols,
    /// The user's labels on every series of this watcher, sorted by name.
    pub labels: Vec<(String, String)>,
    /// Add a `client` label (the client's address): one series per client, so it is off by default.
    pub client_label: bool,
    /// Cap of tracked connections.
    pub max_connections: usize,
}

impl WatchSpec {
    /// The filter the watch's kernel runs (its expression alone).
    pub fn kernel_filter(&self) -> Filter {
        Filter {
            expr: self.filter.clone(),
            ..Filter::default()
        }
    }

    /// Watches `interface` with the defaults (all protocols, no filter, no labels).
    pub fn new(interface: &str) -> WatchSpec {
        WatchSpec {
            interface: interface.to_string(),
            filter: None,
            protocols: Protocols::Auto,
            labels: Vec::new(),
            client_label: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// The decoders' protocol choice: forced when one protocol is asked for, else by port and content.
    pub fn choice(&self) -> ProtoChoice {
        match &self.protocols {
            Protocols::Only(v) if v.len() == 1 => ProtoChoice::Force(v[0]),
            _ => ProtoChoice::Auto,
        }
    }
}

/// A histogram in the bounds of one [`Buckets`] resolution (the number of counts tells which).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hist {
    /// Counts per bucket (not cumulative), `+Inf` last; empty until the first value (the exposition writes
    /// zeros in the watchers' resolution then).
    pub counts: Vec<u64>,
    /// Sum of the values, seconds.
    pub sum_s: f64,
    /// Values.
    pub count: u64,
}

impl Hist {
    /// The bucket of `seconds` among [`BUCKETS`].
    pub fn bucket(seconds: f64) -> usize {
        BUCKETS.partition_point(|b| *b < seconds)
    }

    /// Its resolution (`None` before the first value).
    pub fn buckets(&self) -> Option<Buckets> {
        (!self.counts.is_empty()).then(|| Buckets::of_watch_len(self.counts.len()))
    }

    /// Adds one value; the first one fixes the resolution to `buckets`.
    pub fn record(&mut self, d: Duration, buckets: Buckets) {
        let s = d.as_secs_f64();
        if self.counts.is_empty() {
            self.counts = vec![0; buckets.watch_bounds().len() + 1];
        }
        let bounds = Buckets::of_watch_len(self.counts.len()).watch_bounds();
        let last = self.counts.len() - 1;
        self.counts[bucket_in(bounds, s).min(last)] += 1;
        self.sum_s += s;
        self.count += 1;
    }

    /// Adds every value of `o`.
    pub fn add(&mut self, o: &Hist) {
        if self.counts.len() < o.counts.len() {
            self.counts.resize(o.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.sum_s += o.sum_s;
        self.count += o.count;
    }

    /// The values added since `older` (a copy of this histogram taken earlier).
    pub fn since(&self, older: &Hist) -> Hist {
        let mut h = self.clone();
        for (a, b) in h.counts.iter_mut().zip(&older.counts) {
            *a = a.saturating_sub(*b);
        }
        h.sum_s = (h.sum_s - older.sum_s).max(0.0);
        h.count = h.count.saturating_sub(older.count);
        h
    }

    /// The `q` quantile (0..=1), interpolated geometrically inside its bucket (linearly in the first); `None`
    /// when empty. Values above the last bound report the last bound.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).max(1.0);
        let bounds = Buckets::of_watch_len(self.counts.len()).watch_bounds();
        let mut seen = 0.0;
        for (k, &n) in self.counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if seen + n as f64 >= rank {
                let Some(&hi) = bounds.get(k) else {
                    return Some(Duration::from_secs_f64(bounds[bounds.len() - 1]));
                };
                let frac = (rank - seen) / n as f64;
                let v = if k == 0 {
                    hi * frac
                } else {
                    let lo = bounds[k - 1];
                    lo * (hi / lo).powf(frac)
                };
                return Some(Duration::from_secs_f64(v));
            }
            seen += n as f64;
        }
        None
    }
}

/// Labels that make a (server, proto, op) series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpKey {
    /// The watcher's labels.
    pub labels: Arc<[(String, String)]>,
    /// `server`: ADDR:PORT of the listening side, or `other`.
    pub server: String,
    /// `proto`.
    pub proto: &'static str,
    /// `op`.
    pub op: &'static str,
    /// `client` (its address), when asked for.
    pub client: Option<String>,
}

/// Labels that make a server's series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerKey {
    /// The watcher's labels.
    pub labels: Arc<[(String, String)]>,
    /// ADDR:PORT, or `other`.
    pub server: String,
}

/// The figures of one (server, proto, op).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpStats {
    /// Request durations.
    pub duration: Hist,
    /// Requests answered without an error.
    pub ok: u64,
    /// Requests answered with an error.
    pub error: u64,
    /// Bytes of the responses (TCP payload from the server on the connection, up to the response).
    pub response_bytes: u64,
}

/// The totals of one server, for the recent window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerTotals {
    /// Request durations, every op.
    pub duration: Hist,
    /// Network round trips.
    pub rtt: Hist,
    /// The client's time between a response and its next request on the same connection (gaps of more than
    /// [`track::MAX_CLIENT_GAP`] are idle time, left out).
    pub client_gap: Hist,
    /// Requests with an error.
    pub errors: u64,
    /// Retransmitted segments.
    pub retransmissions: u64,
}

/// The figures of one server.
#[derive(Debug, Clone, Default)]
pub struct ServerStats {
    /// Since the watcher started.
    pub total: ServerTotals,
    /// Copies of `total` taken every [`SNAP_EVERY`] over the window.
    pub history: VecDeque<(Instant, ServerTotals)>,
}

impl ServerStats {
    /// A server first seen now: its window starts empty now.
    pub fn starting_now() -> ServerStats {
        let mut s = ServerStats::default();
        s.history
            .push_back((Instant::now(), ServerTotals::default()));
        s
    }
}

/// The health of one watcher.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// The interface.
    pub interface: String,
    /// The kernel filter, as given.
    pub filter: Option<String>,
    /// 1 while the capture is open.
    pub up: bool,
    /// Packets that passed the kernel filter.
    pub packets: u64,
    /// Packets the kernel dropped (ring full).
    pub kernel_drops: u64,
    /// Connections tracked now.
    pub connections: u64,
    /// Connections dropped at the cap.
    pub evictions: u64,
    /// Connections seen, by how they were oriented, in the order of [`Oriented::ALL`] (handshake, protocol,
    /// port).
    pub oriented: [u64; 3],
    /// CPU time of the watcher's thread, seconds.
    pub cpu_s: f64,
    /// Failed attempts to open or read the interface.
    pub failures: u64,
    /// The last failure, in words.
    pub last_error: Option<String>,
}

/// Everything the watchers found, shared with the pages.
#[derive(Debug, Default)]
pub struct State {
    /// Per (server, proto, op).
    pub ops: HashMap<OpKey, OpStats>,
    /// Per server.
    pub servers: HashMap<ServerKey, ServerStats>,
    /// Per watcher, in the order given.
    pub health: Vec<Health>,
    /// Requests whose series were folded into `other` by the series budget.
    pub folded: u64,
    /// Series in use.
    pub series: usize,
    /// Series allowed (the `other` series of a full budget are made anyway: at most one per protocol and
    /// label set).
    pub budget: usize,
    /// The histograms' resolution.
    pub buckets: Buckets,
    /// The recent window of `/api/results`.
    pub window: Duration,
    /// Lines for the agent's log (taken by [`Shared::take_log`]).
    pub log: Vec<String>,
    last_snap: Option<Instant>,
}

impl State {
    /// The series of (server, proto, op), made if the budget allows, else folded. Returns the key used and
    /// whether it was folded.
    pub fn op_key(&mut self, key: OpKey) -> (OpKey, bool) {
        if self.ops.contains_key(&key) {
            return (key, false);
        }
        let mut k = key;
        let mut folded = false;
        loop {
            let skey = ServerKey {
                labels: k.labels.clone(),
                server: k.server.clone(),
            };
            let cost = op_series(self.buckets)
                + if self.servers.contains_key(&skey) {
                    0
                } else {
                    server_series(self.buckets)
                };
            let overflow = k.server == "other" && k.op == "other" && k.client.is_none();
            if self.ops.contains_key(&k) {
                return (k, folded);
            }
            if self.series + cost <= self.budget || overflow {
                self.series += cost;
                self.servers
                    .entry(skey)
                    .or_insert_with(ServerStats::starting_now);
                self.ops.insert(k.clone(), OpStats::default());
                return (k, folded);
            }
            folded = true;
            if k.op != "other" {
                k.op = "other";
            } else if k.client.is_some() {
                k.client = None;
            } else {
                k.server = "other".into();
            }
        }
    }

    /// The series of a server (for RTT and retransmissions), made if the budget allows, else `other`.
    pub fn server_key(&mut self, key: ServerKey) -> ServerKey {
        if self.servers.contains_key(&key) {
            return key;
        }
        let cost = server_series(self.buckets);
        if self.series + cost <= self.budget || key.server == "other" {
            self.series += cost;
            self.servers
                .insert(key.clone(), ServerStats::starting_now());
            return key;
        }
        self.server_key(ServerKey {
            labels: key.labels,
            server: "other".into(),
        })
    }

    /// Takes a window snapshot of every server when [`SNAP_EVERY`] has passed.
    pub fn maybe_snapshot(&mut self, now: Instant) {
        if self
            .last_snap
            .is_some_and(|t| now.duration_since(t) < SNAP_EVERY)
        {
            return;
        }
        self.last_snap = Some(now);
        let keep = self.window + SNAP_EVERY;
        for s in self.servers.values_mut() {
            s.history.push_back((now, s.total.clone()));
            while s
                .history
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > keep)
            {
                s.history.pop_front();
            }
        }
    }
}

/// The watchers' shared state.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<State>,
}

impl Shared {
    /// An empty state with a series budget, the recent window and the histograms' resolution.
    pub fn new(budget: usize, window: Duration, buckets: Buckets) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                budget,
                buckets,
                window,
                ..State::default()
            }),
        })
    }

    /// Locks the state (a panic elsewhere leaves it usable: the figures are counters).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lines the watchers want in the agent's log (taken once).
    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().log)
    }
}

/// Refusals of a watch before any I/O.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The interface does not exist.
    #[error("--watch: {0}")]
    Interface(#[from] live::LiveError),
    /// The filter does not compile for the interface's link type.
    #[error("--watch-filter '{expr}' on {interface}: {source}")]
    Filter {
        /// The expression.
        expr: String,
        /// The interface.
        interface: String,
        /// Why.
        source: bpf::CompileError,
    },
}

/// Checks a watch before anything starts: the interface exists and the filter compiles for it.
pub fn check(spec: &WatchSpec) -> Result<(), WatchError> {
    live::check_interface(&spec.interface)?;
    live::kernel::check(&spec.interface, &spec.kernel_filter(), SNAPLEN)
        .map(|_| ())
        .map_err(|e| WatchError::Filter {
            expr: e.expr,
            interface: spec.interface.clone(),
            source: e.source,
        })
}

/// Running watchers.
pub struct Watchers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchers")
            .field("threads", &self.threads.len())
            .finish()
    }
}

/// Bytes of snapshot buffer per packet: the whole packet up to this many bytes is read by the decoders.
pub const SNAPLEN: u32 = live::DEFAULT_SNAPLEN;

impl Watchers {
    /// Starts one thread per spec. Each opens its interface (retrying every [`RETRY`] while it is gone or
    /// refused: logged, counted in `failures`) and feeds the shared state until [`Watchers::shutdown`].
    pub fn start(specs: Vec<WatchSpec>, shared: Arc<Shared>) -> std::io::Result<Watchers> {
        let stop = Arc::new(AtomicBool::new(false));
        {
            let mut st = shared.lock();
            for s in &specs {
                st.health.push(Health {
                    interface: s.interface.clone(),
                    filter: s.filter.as_ref().map(|e| e.text().to_string()),
                    ..Health::default()
                });
            }
        }
        let mut threads = Vec::new();
        for (i, spec) in specs.into_iter().enumerate() {
            let (stop, shared) = (stop.clone(), shared.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("agent-watch-{i}"))
                    .spawn(move || run(i, spec, &shared, &stop))?,
            );
        }
        Ok(Watchers {
            stop,
            threads,
            shared,
        })
    }

    /// The shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops the captures and joins the threads (a capture ends within its drain time).
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(idx: usize, spec: WatchSpec, shared: &Arc<Shared>, stop: &Arc<AtomicBool>) {
    let labels: Arc<[(String, String)]> = spec.labels.clone().into();
    let mut sink = track::Tracker::new(idx, &spec, labels, shared.clone());
    while !stop.load(Ordering::SeqCst) {
        let failed = |shared: &Shared, what: String| {
            let mut st = shared.lock();
            let h = &mut st.health[idx];
            h.up = false;
            h.failures += 1;
            h.last_error = Some(what.clone());
            st.log.push(format!(
                "roundtrip agent: watch {}: {what}; retrying every {}s",
                spec.interface,
                RETRY.as_secs()
            ));
        };
        let cfg = LiveConfig {
            interface: spec.interface.clone(),
            snaplen: SNAPLEN,
            buffer: live::DEFAULT_BUFFER,
            promisc: false,
            duration: None,
            count: None,
            filter: spec.kernel_filter(),
        };
        let cap = match LiveCapture::open(cfg, stop.clone()) {
            Ok(c) => c,
            Err(live::LiveError::Filter { interface, source }) => {
                let e = WatchError::Filter {
                    expr: source.expr,
                    interface,
                    source: source.source,
                };
                failed(shared, e.to_string());
                sleep_unless(stop, RETRY);
                continue;
            }
            Err(e) => {
                failed(shared, e.to_string());
                sleep_unless(stop, RETRY);
                continue;
            }
        };
        {
            let mut st = shared.lock();
            st.health[idx].up = true;
            st.health[idx].last_error = None;
        }
        sink.set_counters(Some(cap.counters()));
        let pk = Packets::live(cap, spec.filter.as_ref().map(|e| e.text()));
        let mut driver = Driver::new(spec.choice());
        driver.set_max_connections(spec.max_connections);
        let (info, _) =
            crate::capture::rpc::run::feed_on(pk, &Filter::default(), driver, &mut sink);
        sink.end_capture();
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let why = info
            .source
            .and_then(|s| s.stop_reason)
            .map_or("the capture ended".to_string(), |r| r.to_string());
        failed(shared, why);
        sleep_unless(stop, RETRY);
    }
    shared.lock().health[idx].up = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_from_25us() {
        assert_eq!(BUCKETS[0], 25e-6);
        assert!((BUCKETS[19] - 25e-6 * f64::from(1u32 << 19)).abs() < 1e-9);
        assert_eq!(Hist::bucket(25e-6), 0);
        assert_eq!(Hist::bucket(26e-6), 1);
        assert_eq!(Hist::bucket(100.0), 20);
    }

    #[test]
    fn quantiles_stay_in_their_bucket() {
        let mut h = Hist::default();
        for _ in 0..100 {
            h.record(Duration::from_micros(70), Buckets::ONE);
        }
        let q = h.quantile(0.5).unwrap().as_secs_f64();
        assert!(q > 50e-6 && q <= 100e-6, "{q}");
        // At 4 per doubling the bucket is (59.5, 70.7] us.
        let mut h = Hist::default();
        for _ in 0..100 {
            h.record(Duration::from_micros(70), Buckets::DEFAULT);
        }
        assert_eq!(h.buckets(), Some(Buckets::DEFAULT));
        let q = h.quantile(0.5).unwrap().as_secs_f64();
        assert!(q > 59e-6 && q <= 70.8e-6, "{q}");
        assert_eq!(Hist::default().quantile(0.5), None);
    }

    fn key(st: &mut State, server: &str, op: &'static str) -> (OpKey, bool) {
        st.op_key(OpKey {
            labels: Arc::from(Vec::new()),
            server: server.into(),
            proto: "pgsql",
            op,
            client: None,
        })
    }

    #[test]
    fn the_budget_folds_into_other() {
        let mut st = State {
            budget: OP_SERIES * 3 + SERVER_SERIES,
            buckets: Buckets::ONE,
            ..State::default()
        };
        assert!(!key(&mut st, "a:1", "SELECT").1);
        assert!(!key(&mut st, "a:1", "INSERT").1);
        assert!(!key(&mut st, "a:1", "other").1);
        let (k, folded) = key(&mut st, "a:1", "UPDATE");
        assert!(folded);
        assert_eq!((k.server.as_str(), k.op), ("a:1", "other"));
        let (k, folded) = key(&mut st, "b:1", "SELECT");
        assert!(folded);
        assert_eq!((k.server.as_str(), k.op), ("other", "other"));
        // Many more servers: still one overflow series.
        for i in 0..100 {
            key(&mut st, &format!("c:{i}"), "SELECT");
        }
        assert_eq!(st.ops.len(), 4);
    }
}
