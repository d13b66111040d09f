//! One-way streaming throughput (sockperf throughput, oratcptest async and sync modes, iperf3-like).
//!
//! The client sends messages of a given size as fast as the connection takes them, over `streams` parallel
//! TCP connections or UDP sockets, for a fixed time, and reports messages/s, MB/s and Mbit/s per interval and
//! in total. With `reverse` a roundtrip server sends and the client counts (negotiated extension). With
//! `sync` every message is answered before the next goes out (oratcptest `-mode=sync`): the rate is then
//! one message per round trip. Several sizes run one after the other.
//!
//! What the receiver saw: against a roundtrip server the client asks, at the end, how many messages the
//! server received ([`Feature::COUNTS`]), which gives the UDP loss and the exact TCP delivery. sockperf's
//! protocol has no such report (sockperf throughput prints sender rates only), so against a sockperf server
//! the UDP loss is reported as not measured.

mod modes;

use modes::{receive_reverse, send_async, sync_tcp, sync_udp};

use super::link::{Conn, LinkConfig, PeerKind, Transport};
use super::stream::{self, Counter, StreamError};
use crate::stats::LatencyHistogram;
use crate::wire::sockperf::{self, Feature};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Most parallel streams.
pub const MAX_STREAMS: usize = 256;

/// Most message sizes one run measures (`-m` with a list: one run of `--duration` per size).
pub const MAX_SIZES: usize = 100;
/// How often blocked reads and writes wake up to check for the end of the run.
const POLL: Duration = Duration::from_millis(100);

/// Settings of a throughput run. Build with [`ThroughputConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct ThroughputConfig {
    /// Where to connect and how to greet the server (address, transport, key, extensions, timeout).
    pub link: LinkConfig,
    /// Whole message sizes in bytes, header included; each is a separate run, in this order.
    pub sizes: Vec<usize>,
    /// Parallel connections (TCP) or sockets (UDP).
    pub streams: usize,
    /// Measuring time per size.
    pub duration: Duration,
    /// The server sends and the client receives (needs a roundtrip server).
    pub reverse: bool,
    /// Every message is answered before the next is sent (oratcptest sync mode).
    pub sync: bool,
    /// Period of the per-interval rows.
    pub report_interval: Duration,
    /// Set from outside (Ctrl-C) to end the run early; results so far are kept.
    pub cancel: Arc<AtomicBool>,
}

impl ThroughputConfig {
    /// Defaults: TCP, one stream of 64-byte messages for 10 s, async, 1 s rows, 2 s timeout.
    pub fn new(addr: SocketAddr) -> Self {
        ThroughputConfig {
            link: LinkConfig::new(addr),
            sizes: vec![64],
            streams: 1,
            duration: Duration::from_secs(10),
            reverse: false,
            sync: false,
            report_interval: Duration::from_secs(1),
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Checks the settings before any I/O.
    pub fn validate(&self) -> Result<(), StreamError> {
        if self.sizes.is_empty() {
            return Err(StreamError::Invalid("no message size given".into()));
        }
        if self.sizes.len() > MAX_SIZES {
            return Err(StreamError::Invalid(format!(
                "--size lists {} sizes, more than the {MAX_SIZES} one run measures (one run per size); split it into several runs",
                self.sizes.len()
            )));
        }
        for &s in &self.sizes {
            stream::check_size(s, self.link.transport)?;
        }
        if self.streams == 0 || self.streams > MAX_STREAMS {
            return Err(StreamError::Invalid(format!(
                "--streams {} is not between 1 and {MAX_STREAMS}",
                self.streams
            )));
        }
        if self.duration.is_zero() {
            return Err(StreamError::Invalid("duration must be more than 0".into()));
        }
        if self.duration > sockperf::MAX_REVERSE_DURATION && self.reverse {
            return Err(StreamError::Invalid(
                "a reverse run lasts at most 1h per size".into(),
            ));
        }
        if self.report_interval.is_zero() || self.link.timeout.is_zero() {
            return Err(StreamError::Invalid(
                "report interval and timeout must be more than 0".into(),
            ));
        }
        if self.reverse && self.sync {
            return Err(StreamError::Invalid(
                "--reverse and --sync do not go together (sync mode is a client's ping-pong)"
                    .into(),
            ));
        }
        self.link.validate()?;
        if self.reverse && !self.link.extensions {
            return Err(StreamError::Invalid(
                "--reverse needs roundtrip's extension; drop --no-extensions".into(),
            ));
        }
        Ok(())
    }
}

/// Which way the data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends (the default, as sockperf throughput and iperf3).
    ClientToServer,
    /// The server sends (`--reverse`, as iperf3 -R).
    ServerToClient,
}

/// Messages and bytes over a time span, with the rates they make.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateRow {
    /// End of the span since the start of the run, seconds.
    pub end_s: f64,
    /// Length of the span, seconds.
    pub length_s: f64,
    /// Messages in the span (sent by the sender; in sync mode, acknowledged).
    pub messages: u64,
    /// Bytes of those messages.
    pub bytes: u64,
    /// Messages per second.
    pub messages_per_s: f64,
    /// 10^6 bytes per second.
    pub mb_per_s: f64,
    /// 10^6 bits per second.
    pub mbit_per_s: f64,
}

impl RateRow {
    fn new(end: Duration, length: Duration, messages: u64, bytes: u64) -> Self {
        let secs = length.as_secs_f64().max(1e-9);
        RateRow {
            end_s: end.as_secs_f64(),
            length_s: length.as_secs_f64(),
            messages,
            bytes,
            messages_per_s: messages as f64 / secs,
            mb_per_s: bytes as f64 / secs / 1e6,
            mbit_per_s: bytes as f64 * 8.0 / secs / 1e6,
        }
    }
}

/// UDP loss as counted by the receiving side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Loss {
    /// Messages the sender sent (whole run, including after the measuring window closed).
    pub sent: u64,
    /// Messages the receiver got.
    pub received: u64,
    /// `sent - received`.
    pub lost: u64,
    /// Lost share in percent.
    pub lost_pct: f64,
    /// Who counted the received messages.
    pub counted_by: CountedBy,
}

/// Who counted the messages received, for [`Loss`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CountedBy {
    /// The roundtrip server's counts.
    Server,
    /// The client (reverse and sync modes).
    Client,
}

impl Loss {
    fn new(sent: u64, received: u64, counted_by: CountedBy) -> Self {
        let lost = sent.saturating_sub(received);
        Loss {
            sent,
            received,
            lost,
            lost_pct: if sent > 0 {
                100.0 * lost as f64 / sent as f64
            } else {
                0.0
            },
            counted_by,
        }
    }
}

/// Totals of one stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamTotal {
    /// Stream number, from 1.
    pub stream: usize,
    /// Rates over the measuring window.
    pub rate: RateRow,
    /// What the receiving side counted for this stream over the whole run, when known.
    pub received_messages: Option<u64>,
    /// Why this stream ended early, if it did.
    pub error: Option<String>,
}

/// The result for one message size.
#[derive(Debug, Clone)]
pub struct SizeRun {
    /// Message size in bytes.
    pub size: usize,
    /// Per-interval rows, all streams together.
    pub intervals: Vec<RateRow>,
    /// Over the whole measuring window, all streams together.
    pub total: RateRow,
    /// Per stream.
    pub streams: Vec<StreamTotal>,
    /// Messages and bytes the receiving side counted over the whole run, when known (roundtrip server, or
    /// the client itself in reverse mode).
    pub received: Option<(u64, u64)>,
    /// UDP loss, when it could be counted.
    pub loss: Option<Loss>,
    /// Why the loss or receiver count is missing, when it is.
    pub receiver_note: Option<&'static str>,
    /// Round-trip times in sync mode.
    pub rtt: LatencyHistogram,
    /// The first error of a stream, if any stream ended early.
    pub error: Option<Arc<StreamError>>,
}

/// The result of a throughput run, complete or cut short.
#[derive(Debug, Clone)]
pub struct ThroughputResult {
    /// The server address.
    pub addr: SocketAddr,
    /// TCP or UDP.
    pub transport: Transport,
    /// Who answered the hello.
    pub peer: PeerKind,
    /// Which way the data flowed.
    pub direction: Direction,
    /// Sync mode.
    pub sync: bool,
    /// Number of streams.
    pub streams: usize,
    /// Wall-clock time the first size started.
    pub started: SystemTime,
    /// One entry per size that ran.
    pub runs: Vec<SizeRun>,
    /// True when cancelled from outside (Ctrl-C).
    pub cancelled: bool,
}

impl ThroughputResult {
    /// The first error of any size.
    pub fn error(&self) -> Option<&Arc<StreamError>> {
        self.runs.iter().find_map(|r| r.error.as_ref())
    }
}

/// Receives progress from a running throughput probe.
pub trait Observer {
    /// Called when a size starts.
    fn size_started(&mut self, _size: usize) {}
    /// Called at the end of every report interval.
    fn interval(&mut self, _size: usize, _row: &RateRow) {}
}

/// An observer that ignores everything.
pub struct NoObserver;
impl Observer for NoObserver {}

/// What one stream's thread returns.
#[derive(Default)]
struct Outcome {
    /// What the receiving side counted (server counts, or the client in reverse mode).
    received: Option<(u64, u64)>,
    /// What the sending side sent over the whole run, when the client is not the sender.
    sent_by_server: Option<u64>,
    rtt: LatencyHistogram,
    /// In sync mode: messages sent (answered ones are in the counter).
    sync_sent: u64,
    error: Option<StreamError>,
}

/// Runs every size in turn. `Err` only when nothing could be measured (bad settings, no connection for the
/// first size); later failures are kept in the results.
pub fn run(
    config: &ThroughputConfig,
    observer: &mut dyn Observer,
) -> Result<ThroughputResult, StreamError> {
    config.validate()?;
    let mut result = ThroughputResult {
        addr: config.link.addr,
        transport: config.link.transport,
        peer: PeerKind::Unknown,
        direction: if config.reverse {
            Direction::ServerToClient
        } else {
            Direction::ClientToServer
        },
        sync: config.sync,
        streams: config.streams,
        started: SystemTime::now(),
        runs: Vec::new(),
        cancelled: false,
    };
    for &size in &config.sizes {
        if config.cancel.load(Ordering::Relaxed) {
            break;
        }
        observer.size_started(size);
        match run_size(config, size, observer) {
            Ok((peer, run)) => {
                result.peer = peer;
                let failed = run.error.is_some();
                result.runs.push(run);
                if failed {
                    break;
                }
            }
            Err(e) if result.runs.is_empty() => return Err(e),
            Err(e) => {
                result.runs.push(SizeRun {
                    size,
                    intervals: Vec::new(),
                    total: RateRow::new(Duration::ZERO, Duration::ZERO, 0, 0),
                    streams: Vec::new(),
                    received: None,
                    loss: None,
                    receiver_note: None,
                    rtt: LatencyHistogram::new(),
                    error: Some(Arc::new(e)),
                });
                break;
            }
        }
    }
    result.cancelled = config.cancel.load(Ordering::Relaxed);
    Ok(result)
}

fn run_size(
    config: &ThroughputConfig,
    size: usize,
    observer: &mut dyn Observer,
) -> Result<(PeerKind, SizeRun), StreamError> {
    let addr = config.link.addr;
    let nodelay = config.sync;
    let wanted = if config.reverse {
        Feature::REVERSE
    } else {
        Feature::COUNTS
    };
    // Connect and negotiate every stream before the clock starts.
    let mut conns = Vec::with_capacity(config.streams);
    let mut peer = PeerKind::Unknown;
    let mut features = Feature::default();
    let link = &config.link;
    for _ in 0..config.streams {
        let c;
        (c, peer, features) = link.open(stream::socket_setup(nodelay, POLL), wanted)?;
        conns.push(c);
    }
    if config.reverse && !features.contains(Feature::REVERSE) {
        return Err(StreamError::Unsupported {
            addr,
            what: "does not offer reverse streaming (--reverse)",
        });
    }
    let counts = features.contains(Feature::COUNTS);
    let counters: Vec<Arc<Counter>> = (0..config.streams)
        .map(|_| Arc::new(Counter::default()))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let mut workers = Vec::with_capacity(config.streams);
    for (i, conn) in conns.into_iter().enumerate() {
        let counter = counters[i].clone();
        let stop = stop.clone();
        let (duration, timeout, sync, reverse) = (
            config.duration,
            config.link.timeout,
            config.sync,
            config.reverse,
        );
        workers.push(
            std::thread::Builder::new()
                .name(format!("tp-stream-{}", i + 1))
                .spawn(move || {
                    let mut out = Outcome::default();
                    let r = match (conn, reverse, sync) {
                        (mut c, true, _) => receive_reverse(
                            &mut c, addr, size, duration, timeout, &counter, &stop, &mut out,
                        ),
                        (Conn::Tcp(mut s), false, true) => {
                            sync_tcp(&mut s, addr, size, timeout, &counter, &stop, &mut out)
                        }
                        (Conn::Udp(s), false, true) => {
                            sync_udp(&s, addr, size, timeout, &counter, &stop, &mut out)
                        }
                        (mut c, false, false) => send_async(
                            &mut c, addr, size, timeout, counts, &counter, &stop, &mut out,
                        ),
                    };
                    if let Err(e) = r {
                        out.error = Some(e);
                    }
                    out
                })
                .expect("spawn stream thread"),
        );
    }

    // Report intervals from this thread while the streams run.
    let end = t0 + config.duration;
    let mut intervals = Vec::new();
    let mut last = (Duration::ZERO, 0u64, 0u64);
    let mut next = t0 + config.report_interval;
    let sum = |counters: &[Arc<Counter>]| {
        counters
            .iter()
            .map(|c| c.get())
            .fold((0u64, 0u64), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    loop {
        let now = Instant::now();
        if now >= end
            || config.cancel.load(Ordering::Relaxed)
            || workers.iter().all(|w| w.is_finished())
        {
            break;
        }
        if now >= next {
            let at = now - t0;
            let (m, b) = sum(&counters);
            let row = RateRow::new(at, at - last.0, m - last.1, b - last.2);
            observer.interval(size, &row);
            intervals.push(row);
            last = (at, m, b);
            while next <= now {
                next += config.report_interval;
            }
        }
        std::thread::sleep((next.min(end) - now).min(Duration::from_millis(20)));
    }
    let elapsed = t0.elapsed();
    let snapshot: Vec<(u64, u64)> = counters.iter().map(|c| c.get()).collect();
    let (m, b) = snapshot.iter().fold((0, 0), |a, s| (a.0 + s.0, a.1 + s.1));
    if elapsed > last.0 + Duration::from_millis(1) && m > last.1 {
        let row = RateRow::new(elapsed, elapsed - last.0, m - last.1, b - last.2);
        observer.interval(size, &row);
        intervals.push(row);
    }
    stop.store(true, Ordering::SeqCst);
    let outcomes: Vec<Outcome> = workers
        .into_iter()
        .map(|w| w.join().unwrap_or_else(|_| Outcome::default()))
        .collect();

    let mut rtt = LatencyHistogram::new();
    let mut streams = Vec::new();
    let mut error = None;
    let mut received_all: Option<(u64, u64)> = Some((0, 0));
    let mut sent_all = 0u64;
    let mut sent_by_server: Option<u64> = Some(0);
    for (i, o) in outcomes.into_iter().enumerate() {
        rtt.merge(&o.rtt);
        let (sm, sb) = snapshot[i];
        let final_sent = if config.sync {
            o.sync_sent
        } else {
            counters[i].get().0
        };
        sent_all += final_sent;
        received_all = match (received_all, o.received) {
            (Some(a), Some(r)) => Some((a.0 + r.0, a.1 + r.1)),
            _ => None,
        };
        sent_by_server = match (sent_by_server, o.sent_by_server) {
            (Some(a), Some(s)) => Some(a + s),
            _ => None,
        };
        streams.push(StreamTotal {
            stream: i + 1,
            rate: RateRow::new(elapsed, elapsed, sm, sb),
            received_messages: o.received.map(|r| r.0),
            error: o.error.as_ref().map(|e| e.to_string()),
        });
        if error.is_none()
            && let Some(e) = o.error
        {
            error = Some(Arc::new(e));
        }
    }
    let mut receiver_note = None;
    let loss = if config.sync {
        // The client counts answers itself.
        (config.link.transport == Transport::Udp).then(|| Loss::new(sent_all, m, CountedBy::Client))
    } else if config.reverse {
        match (sent_by_server, received_all) {
            (Some(s), Some(r)) if config.link.transport == Transport::Udp => {
                Some(Loss::new(s, r.0, CountedBy::Client))
            }
            _ => None,
        }
    } else {
        match received_all {
            Some(r) if config.link.transport == Transport::Udp => {
                Some(Loss::new(sent_all, r.0, CountedBy::Server))
            }
            Some(_) => None,
            None => {
                receiver_note = Some(match peer {
                    PeerKind::Roundtrip if error.is_some() => {
                        "no server receive count: the run ended with an error"
                    }
                    PeerKind::Roundtrip => {
                        "no server receive count: the server did not answer the count request"
                    }
                    _ if !config.link.extensions => {
                        "no server receive count (so no UDP loss): extensions are off (--no-extensions)"
                    }
                    _ => {
                        "no server receive count (so no UDP loss): a sockperf server does not report what it received; sockperf throughput reports sender rates only"
                    }
                });
                None
            }
        }
    };
    if config.reverse && sent_by_server.is_none() && error.is_none() {
        receiver_note = Some(
            "the server's end-of-stream report never arrived, so its total (and the UDP loss) is unknown",
        );
    }
    let run = SizeRun {
        size,
        intervals,
        total: RateRow::new(elapsed, elapsed, m, b),
        streams,
        received: if config.sync { None } else { received_all },
        loss,
        receiver_note,
        rtt,
        error,
    };
    Ok((peer, run))
}
