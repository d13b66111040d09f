//! Application-level ping-pong over TCP or UDP (sockperf ping-pong, oratcptest -mode=sync).
//!
//! One message of `size` bytes goes out, the client waits for its echo, and repeats (closed loop). With an
//! interval and [`PingConfig::open_loop`], messages leave on the open-loop schedule of
//! [`load`](super::load::Schedule) instead, one every interval whether or not the earlier ones were answered
//! (several in flight, as ping(8) sends), and answers are matched by sequence number. Works against
//! `roundtrip server` and against an unmodified `sockperf server`. Against a roundtrip server the client also
//! gets the server's turnaround time per message (the negotiated timestamp extension), so the round trip can
//! be split into "server" and "network + both stacks".

use crate::probe::link::{self, Conn, LinkConfig, LinkError, SocketSetup, is_timeout, wait_until};
pub use crate::probe::link::{PeerKind, Transport};
use crate::probe::load::Schedule;
use crate::probe::tcpinfo::TcpRtt;
use crate::stats::LatencyHistogram;
use crate::wire::sockperf::{
    self, Feature, Flags, HEADER_LEN, Header, MAX_MESSAGE_LEN, MAX_UDP_MESSAGE_LEN,
};
use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// After this long (measured phase only).
    Duration(#[serde(with = "crate::units::ser::secs")] Duration),
    /// After this many round trips.
    Count(u64),
}

/// Settings of a ping-pong run. Build with [`PingConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct PingConfig {
    /// Where to connect and how to greet the server (address, transport, key, extensions, timeout; a UDP
    /// message unanswered for the timeout counts as lost, a TCP connection silent that long ends the run).
    pub link: LinkConfig,
    /// Whole message size in bytes, header included (sockperf -m).
    pub size: usize,
    /// When to stop.
    pub stop: Stop,
    /// Time between sends; `None` sends the next message as soon as the answer arrives.
    pub interval: Option<Duration>,
    /// With an [`interval`](Self::interval): send one message every interval whether or not the answers came
    /// (several in flight; loss and reordering counted by sequence number; the run ends when the last answer
    /// came or its timeout passed). Off: each send also waits for the previous answer (closed loop), what
    /// `compare` and the demo use.
    pub open_loop: bool,
    /// Unmeasured warm-up before the measured phase.
    pub warmup: Duration,
    /// Period of the per-interval rows.
    pub report_interval: Duration,
    /// Set from outside (Ctrl-C) to end the run early; results so far are kept.
    pub cancel: Arc<AtomicBool>,
    /// TCP only: read the kernel's `TCP_INFO` after every measured answer into
    /// [`PingResult::kernel_srtt`] (one extra system call per round trip, outside the timed part).
    pub tcp_info: bool,
}

impl PingConfig {
    /// Defaults: TCP, 64-byte messages, 10 s, back to back, 1 s warm-up, 1 s rows, 2 s timeout.
    pub fn new(addr: SocketAddr) -> Self {
        PingConfig {
            link: LinkConfig::new(addr),
            size: 64,
            stop: Stop::Duration(Duration::from_secs(10)),
            interval: None,
            open_loop: false,
            warmup: Duration::from_secs(1),
            report_interval: Duration::from_secs(1),
            cancel: Arc::new(AtomicBool::new(false)),
            tcp_info: false,
        }
    }

    /// Checks the settings before any I/O.
    pub fn validate(&self) -> Result<(), PingError> {
        let max = match self.link.transport {
            Transport::Tcp => MAX_MESSAGE_LEN,
            Transport::Udp => MAX_UDP_MESSAGE_LEN,
        };
        if self.size < HEADER_LEN || self.size > max {
            return Err(PingError::Invalid(format!(
                "message size {} is not between {} and {} for {} (the size includes the 14-byte sockperf header)",
                self.size,
                crate::units::fmt_bytes_exact(HEADER_LEN as u64),
                crate::units::fmt_bytes_exact(max as u64),
                self.link.transport
            )));
        }
        match self.stop {
            Stop::Count(0) => return Err(PingError::Invalid("count must be at least 1".into())),
            Stop::Duration(d) if d.is_zero() => {
                return Err(PingError::Invalid("duration must be more than 0".into()));
            }
            _ => {}
        }
        self.link.validate()?;
        if self.interval.is_some_and(|i| i.is_zero()) {
            return Err(PingError::Invalid("interval must be more than 0".into()));
        }
        if self.report_interval.is_zero() {
            return Err(PingError::Invalid(
                "report interval must be more than 0".into(),
            ));
        }
        Ok(())
    }
}

/// A ping-pong run failed: the client link layer's error.
pub type PingError = LinkError;

/// One measured round trip, as passed to the observer and written to the full log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Sequence number of the message.
    pub seq: u64,
    /// Send time since the start of the measured phase.
    pub sent: Duration,
    /// Receive time since the start of the measured phase.
    pub received: Duration,
    /// Server turnaround (its send time minus its receive time), when the server reports it.
    pub server: Option<Duration>,
}

impl Sample {
    /// The round-trip time.
    pub fn rtt(&self) -> Duration {
        self.received.saturating_sub(self.sent)
    }
}

/// One row per report interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct IntervalRow {
    /// End of the interval since the start of the measured phase, seconds.
    pub end_s: f64,
    /// Length of the interval, seconds.
    pub length_s: f64,
    /// Round trips completed in the interval.
    pub round_trips: u64,
    /// Messages sent in the interval.
    pub sent: u64,
    /// Payload throughput both ways (bytes sent plus bytes received), MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Median RTT in the interval.
    pub p50_ns: u64,
    /// 99th percentile RTT in the interval.
    pub p99_ns: u64,
    /// Largest RTT in the interval.
    pub max_ns: u64,
}

/// Receives progress from a running probe. Every method has an empty default.
pub trait Observer {
    /// Called for every measured round trip.
    fn sample(&mut self, _sample: &Sample) {}
    /// Called at the end of every report interval.
    fn interval(&mut self, _row: &IntervalRow) {}
}

/// An observer that ignores everything.
pub struct NoObserver;
impl Observer for NoObserver {}

/// The result of a ping-pong run, complete or cut short.
#[derive(Debug, Clone)]
pub struct PingResult {
    /// The server address.
    pub addr: SocketAddr,
    /// TCP or UDP.
    pub transport: Transport,
    /// Message size in bytes.
    pub size: usize,
    /// Who answered.
    pub peer: PeerKind,
    /// Wall-clock time the measured phase started.
    pub started: SystemTime,
    /// Length of the measured phase.
    pub elapsed: Duration,
    /// Measured messages sent.
    pub sent: u64,
    /// Distinct measured messages answered.
    pub received: u64,
    /// Answers to a message that was already answered.
    pub duplicated: u64,
    /// Answers that arrived after an answer to a later message (UDP).
    pub out_of_order: u64,
    /// Answers that arrived after the timeout, when the next message had gone out (UDP).
    pub late: u64,
    /// Round-trip times.
    pub rtt: LatencyHistogram,
    /// Server turnaround times, when the server reported them.
    pub server: LatencyHistogram,
    /// Per-interval rows.
    pub intervals: Vec<IntervalRow>,
    /// Why the run ended early, if it did.
    pub error: Option<Arc<PingError>>,
    /// True when cancelled from outside (Ctrl-C).
    pub cancelled: bool,
    /// The kernel's smoothed RTT (`tcpi_rtt`) read after every measured answer, when
    /// [`PingConfig::tcp_info`] was set; empty otherwise.
    pub kernel_srtt: LatencyHistogram,
    /// The last `TCP_INFO` reading, when [`PingConfig::tcp_info`] was set.
    pub tcp_info: Option<TcpRtt>,
}

impl PingResult {
    /// Messages that never got an answer.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

fn io_error(op: &'static str, config: &PingConfig, source: io::Error) -> PingError {
    link::io_error_unanswered(op, config.link.transport, config.link.addr, source)
}

/// The header of `answer`, which must be the echo of message `seq` of `size` bytes (a TCP stream keeps the order:
/// anything else is a peer that does not echo).
fn echo_of(answer: &[u8], seq: u64, size: usize, config: &PingConfig) -> Result<Header, PingError> {
    let h = Header::parse(answer, MAX_MESSAGE_LEN).map_err(|e| PingError::InvalidAnswer {
        addr: config.link.addr,
        detail: e.to_string(),
    })?;
    if h.seq != seq || h.len as usize != size {
        return Err(PingError::InvalidAnswer {
            addr: config.link.addr,
            detail: format!(
                "expected the echo of message {seq} ({size} bytes), got sequence {} announcing {} bytes",
                h.seq, h.len
            ),
        });
    }
    Ok(h)
}

/// Reads exactly `buf.len()` bytes of a TCP answer.
fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    config: &PingConfig,
    answered: u64,
) -> Result<(), PingError> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(PingError::ClosedAfter {
                    addr: config.link.addr,
                    answered,
                });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => {
                return Err(PingError::Timeout {
                    addr: config.link.addr,
                    timeout: config.link.timeout,
                });
            }
            Err(e) => return Err(io_error("receiving from", config, e)),
        }
    }
    Ok(())
}

/// Sequence numbers tracked by the closed loop (one message in flight, a few late answers).
const WINDOW: usize = 4096;
/// Most sequence numbers an open-loop run tracks: enough for its timeout at its interval, within this bound;
/// an answer to an older message is not matched (and that message counts as lost).
const MAX_WINDOW: usize = 1 << 18;

/// Tracks which of the last `len` sequence numbers were answered, and when each was sent.
struct SeqWindow {
    sent_at: Vec<Option<Duration>>,
    answered: Vec<bool>,
}

impl SeqWindow {
    fn new(len: usize) -> Self {
        SeqWindow {
            sent_at: vec![None; len],
            answered: vec![false; len],
        }
    }
    /// A window for messages `interval` apart, each awaited `timeout`: all that can be in flight, twice over.
    fn for_pace(interval: Duration, timeout: Duration) -> Self {
        let in_flight = timeout.as_nanos() / interval.as_nanos().max(1) + 2;
        let len = usize::try_from(in_flight.saturating_mul(2)).unwrap_or(MAX_WINDOW);
        Self::new(len.next_power_of_two().clamp(WINDOW, MAX_WINDOW))
    }
    fn len(&self) -> u64 {
        self.sent_at.len() as u64
    }
    fn slot(&self, seq: u64) -> usize {
        (seq % self.len()) as usize
    }
    fn on_send(&mut self, seq: u64, at: Duration) {
        let i = self.slot(seq);
        self.sent_at[i] = Some(at);
        self.answered[i] = false;
    }
    fn is_answered(&self, seq: u64) -> bool {
        self.answered[self.slot(seq)]
    }
    fn sent_at(&self, seq: u64) -> Option<Duration> {
        self.sent_at[self.slot(seq)]
    }
}

/// What the measured loop does with one answer.
enum Answer {
    /// The answer to the message just sent.
    Current,
    /// An answer to an earlier message (late in the closed loop).
    Late,
    /// Seen before.
    Duplicate,
    /// Too old to track, or a warm-up answer.
    Ignored,
}

struct Run<'a> {
    config: &'a PingConfig,
    observer: &'a mut dyn Observer,
    result: PingResult,
    features: Feature,
    t0: Instant,
    interval_hist: LatencyHistogram,
    interval_start: Duration,
    interval_sent: u64,
    next_report: Duration,
    highest_answered: Option<u64>,
    /// The outgoing message; its header is rewritten for every send.
    out: Vec<u8>,
    /// Receive buffer, one byte larger than a message so oversized datagrams are seen.
    inbuf: Vec<u8>,
    /// Last sequence number used.
    seq: u64,
    /// Flags of measured messages.
    flags: Flags,
    /// Time of the next paced send.
    next_send: Instant,
}

impl Run<'_> {
    /// Waits for the next send time and prepares the next message; `None` when the run is over.
    fn next_message(&mut self) -> Option<u64> {
        let config = self.config;
        if config.cancel.load(Ordering::Relaxed) {
            return None;
        }
        match config.stop {
            Stop::Count(n) if self.result.sent >= n => return None,
            Stop::Duration(d) if self.result.sent > 0 && self.t0.elapsed() >= d => return None,
            _ => {}
        }
        if let Some(i) = config.interval {
            wait_until(self.next_send);
            self.next_send += i;
        }
        self.seq += 1;
        Header {
            seq: self.seq,
            flags: self.flags,
            len: config.size as u32,
        }
        .write(&mut self.out);
        Some(self.seq)
    }

    fn record(&mut self, sample: Sample) {
        self.result.rtt.record(sample.rtt());
        if let Some(s) = sample.server {
            self.result.server.record(s);
        }
        self.interval_hist.record(sample.rtt());
        self.observer.sample(&sample);
    }

    fn maybe_report(&mut self, now: Duration, force: bool) {
        if now < self.next_report && !force {
            return;
        }
        let length = now.saturating_sub(self.interval_start);
        if length.is_zero() {
            return;
        }
        let s = self.interval_hist.summary();
        if force && s.count == 0 && self.interval_sent == 0 {
            return;
        }
        let row = IntervalRow {
            end_s: now.as_secs_f64(),
            length_s: length.as_secs_f64(),
            round_trips: s.count,
            sent: self.interval_sent,
            mb_per_s: (2 * s.count * self.config.size as u64) as f64 / length.as_secs_f64() / 1e6,
            p50_ns: s.p50_ns,
            p99_ns: s.p99_ns,
            max_ns: s.max_ns,
        };
        self.observer.interval(&row);
        self.result.intervals.push(row);
        self.interval_hist.reset();
        self.interval_sent = 0;
        self.interval_start = now;
        while self.next_report <= now {
            self.next_report += self.config.report_interval;
        }
    }

    fn server_time(&self, msg: &[u8]) -> Option<Duration> {
        if !self.features.contains(Feature::SERVER_TIMESTAMPS)
            || msg.len() < sockperf::TIMESTAMPED_MIN_LEN
        {
            return None;
        }
        let (recv, send) = sockperf::read_server_timestamps(msg)?;
        send.checked_sub(recv).map(Duration::from_nanos)
    }
}

/// Runs ping-pong. `Err` only when nothing could be measured at all (bad settings, no connection); a
/// failure mid-run returns the results so far with [`PingResult::error`] set.
pub fn run(config: &PingConfig, observer: &mut dyn Observer) -> Result<PingResult, PingError> {
    config.validate()?;
    let setup = SocketSetup {
        nodelay: true,
        read_timeout: config.link.timeout,
        write_timeout: None,
        udp_recv_buffer: 1 << 20,
    };
    let (mut conn, peer, features) = config.link.open(setup, Feature::MEASURE)?;
    let timestamps = features.contains(Feature::SERVER_TIMESTAMPS)
        && config.size >= sockperf::TIMESTAMPED_MIN_LEN;
    let base_flags = Flags::CLIENT.with(Flags::PONG_REQUEST);
    let measured_flags = if timestamps {
        base_flags.with(Flags::RT_TIMESTAMPS)
    } else {
        base_flags
    };

    let mut out = vec![0u8; config.size];
    // Payload pattern: recognisable bytes, not zeros (compressing links would flatter zeros).
    for (i, b) in out.iter_mut().enumerate().skip(HEADER_LEN) {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    let mut inbuf = vec![0u8; config.size.max(sockperf::HELLO_LEN) + 1];
    let mut seq: u64 = 0;

    // Open loop: the warm-up and the measured messages on one schedule; measuring starts when the first
    // measured message is due.
    let plan = config.interval.filter(|_| config.open_loop).map(|i| {
        let plan = Schedule::new(Instant::now(), i);
        (plan, plan.count_in(config.warmup))
    });

    // Warm-up (closed loop): the same traffic, not measured. It is not flagged WARMUP: sockperf servers do
    // not answer those.
    let warm_end = Instant::now() + config.warmup;
    let mut warm_window = SeqWindow::new(WINDOW);
    let warm_t0 = Instant::now();
    while plan.is_none() && Instant::now() < warm_end && !config.cancel.load(Ordering::Relaxed) {
        seq += 1;
        Header {
            seq,
            flags: base_flags,
            len: config.size as u32,
        }
        .write(&mut out);
        warm_window.on_send(seq, warm_t0.elapsed());
        match &mut conn {
            Conn::Tcp(s) => {
                s.write_all(&out)
                    .map_err(|e| io_error("sending to", config, e))?;
                read_full(s, &mut inbuf[..config.size], config, 0)?;
            }
            Conn::Udp(s) => {
                s.send(&out)
                    .map_err(|e| io_error("sending to", config, e))?;
                match s.recv(&mut inbuf) {
                    Ok(_) => {}
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => return Err(io_error("receiving from", config, e)),
                }
            }
        }
        if let Some(i) = config.interval {
            wait_until(Instant::now() + i);
        }
    }

    let (started, t0) = match plan {
        Some((plan, warm_n)) => {
            let t0 = plan.due(warm_n);
            let wait = t0.saturating_duration_since(Instant::now());
            (SystemTime::now() + wait, t0)
        }
        None => (SystemTime::now(), Instant::now()),
    };
    let mut run = Run {
        config,
        observer,
        result: PingResult {
            addr: config.link.addr,
            transport: config.link.transport,
            size: config.size,
            peer,
            started,
            elapsed: Duration::ZERO,
            sent: 0,
            received: 0,
            duplicated: 0,
            out_of_order: 0,
            late: 0,
            rtt: LatencyHistogram::new(),
            server: LatencyHistogram::new(),
            intervals: Vec::new(),
            error: None,
            cancelled: false,
            kernel_srtt: LatencyHistogram::new(),
            tcp_info: None,
        },
        features,
        t0,
        interval_hist: LatencyHistogram::new(),
        interval_start: Duration::ZERO,
        interval_sent: 0,
        next_report: config.report_interval,
        highest_answered: None,
        out,
        inbuf,
        seq,
        flags: measured_flags,
        next_send: t0,
    };
    let outcome = match (plan, &mut conn) {
        (Some((plan, warm_n)), conn) => paced_loop(conn, &mut run, plan, warm_n, base_flags),
        (None, Conn::Tcp(s)) => tcp_loop(s, &mut run),
        (None, Conn::Udp(s)) => udp_loop(s, &mut run, seq + 1),
    };
    let now = t0.elapsed();
    run.maybe_report(now, true);
    run.result.elapsed = now;
    run.result.cancelled = config.cancel.load(Ordering::Relaxed);
    if let Err(e) = outcome {
        run.result.error = Some(Arc::new(e));
    }
    Ok(run.result)
}

fn tcp_loop(s: &mut TcpStream, run: &mut Run<'_>) -> Result<(), PingError> {
    let config = run.config;
    let size = config.size;
    while let Some(seq) = run.next_message() {
        let sent = run.t0.elapsed();
        s.write_all(&run.out)
            .map_err(|e| io_error("sending to", config, e))?;
        run.result.sent += 1;
        run.interval_sent += 1;
        read_full(s, &mut run.inbuf[..size], config, run.result.received)?;
        let received = run.t0.elapsed();
        let answer = &run.inbuf[..size];
        echo_of(answer, seq, size, config)?;
        run.result.received += 1;
        let server = run.server_time(answer);
        run.record(Sample {
            seq,
            sent,
            received,
            server,
        });
        if config.tcp_info
            && let Ok(info) = crate::probe::tcpinfo::read(s)
        {
            run.result.kernel_srtt.record(info.srtt);
            run.result.tcp_info = Some(info);
        }
        run.maybe_report(received, false);
    }
    Ok(())
}

fn udp_loop(s: &mut UdpSocket, run: &mut Run<'_>, first_measured: u64) -> Result<(), PingError> {
    let config = run.config;
    let mut window = SeqWindow::new(WINDOW);
    // The socket's receive timeout is `config.link.timeout` except while waiting out a shortened deadline.
    let mut timeout_shortened = false;
    while let Some(this) = run.next_message() {
        if timeout_shortened {
            let _ = s.set_read_timeout(Some(config.link.timeout));
            timeout_shortened = false;
        }
        let sent = run.t0.elapsed();
        window.on_send(this, sent);
        s.send(&run.out)
            .map_err(|e| io_error("sending to", config, e))?;
        run.result.sent += 1;
        run.interval_sent += 1;
        let deadline = sent + config.link.timeout;
        loop {
            let n = match s.recv(&mut run.inbuf) {
                Ok(n) => n,
                Err(e) if is_timeout(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error("receiving from", config, e)),
            };
            let received = run.t0.elapsed();
            match classify_udp(run, &mut window, n, this, first_measured, received, None) {
                Answer::Current => break,
                Answer::Late | Answer::Duplicate | Answer::Ignored => {
                    let left = deadline.saturating_sub(run.t0.elapsed());
                    if left.is_zero() {
                        break;
                    }
                    let _ = s.set_read_timeout(Some(left));
                    timeout_shortened = true;
                }
            }
        }
        run.maybe_report(run.t0.elapsed(), false);
    }
    Ok(())
}

/// Matches one datagram of `n` bytes in `run.inbuf` to its message. `current` is the last sequence number
/// sent. An answer is counted late when it came after its message's timeout: `late_after` (the open loop),
/// or in the closed loop (`None`) when it answers an earlier message than the current one.
/// The open loop: message `i` (sequence number `i + 1`) leaves at `plan.due(i)` whatever became of the
/// earlier ones; the first `warm_n` are the warm-up (sent with `warm_flags`, answers not measured). Between
/// sends the loop reads answers and matches them by sequence number. After the last send it waits for the
/// answers still due: UDP until the last unanswered message's timeout (it is then lost), TCP until the
/// oldest unanswered message has waited `timeout`, which ends the run with an error as in the closed loop
/// (TCP delivers in order: a retransmission holds every later answer back).
fn paced_loop(
    conn: &mut Conn,
    run: &mut Run<'_>,
    plan: Schedule,
    warm_n: u64,
    warm_flags: Flags,
) -> Result<(), PingError> {
    let config = run.config;
    let size = config.size;
    let measured = match config.stop {
        Stop::Count(n) => n,
        Stop::Duration(d) => plan.count_in(d).max(1),
    };
    let total = warm_n.saturating_add(measured);
    let first_measured = warm_n + 1;
    let mut window = SeqWindow::for_pace(config.interval.unwrap_or_default(), config.link.timeout);
    // Last sequence number sent.
    let mut last = 0u64;
    // UDP, after the last send: the highest measured message that may still be unanswered.
    let mut latest_unanswered = total;
    // TCP: bytes of answers not yet whole, and the sequence number the next answer must carry.
    let mut stream: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut expect = 1u64;
    if let Conn::Tcp(s) = conn {
        s.set_write_timeout(Some(config.link.timeout))
            .map_err(|e| io_error("setting up", config, e))?;
    }
    let t0 = run.t0;
    // When message `seq` left (`last` the last one sent): as recorded for a measured one still in the window,
    // else when it was due.
    let sent_instant = |window: &SeqWindow, seq: u64, last: u64| match window.sent_at(seq) {
        Some(d) if seq >= first_measured && last - seq < window.len() => t0 + d,
        _ => plan.due(seq - 1),
    };
    loop {
        if config.cancel.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Everything due leaves now, back to back when behind.
        while last < total && plan.due(last) <= Instant::now() {
            let seq = last + 1;
            let flags = if seq >= first_measured {
                run.flags
            } else {
                warm_flags
            };
            Header {
                seq,
                flags,
                len: size as u32,
            }
            .write(&mut run.out);
            if seq >= first_measured {
                window.on_send(seq, run.t0.elapsed());
            }
            send_paced(conn, &run.out, config)?;
            last = seq;
            if seq >= first_measured {
                run.result.sent += 1;
                run.interval_sent += 1;
            }
        }
        let now = Instant::now();
        let mut wake = if last < total {
            plan.due(last)
        } else {
            now + config.link.timeout
        };
        match conn {
            Conn::Tcp(_) => {
                if expect <= last {
                    let deadline = sent_instant(&window, expect, last) + config.link.timeout;
                    if now >= deadline {
                        return Err(PingError::Timeout {
                            addr: config.link.addr,
                            timeout: config.link.timeout,
                        });
                    }
                    wake = wake.min(deadline);
                } else if last == total {
                    return Ok(());
                }
            }
            Conn::Udp(_) if last == total => {
                let oldest = last.saturating_sub(window.len() - 1).max(first_measured);
                while latest_unanswered >= oldest && window.is_answered(latest_unanswered) {
                    latest_unanswered -= 1;
                }
                if latest_unanswered < oldest {
                    return Ok(());
                }
                let deadline = sent_instant(&window, latest_unanswered, last) + config.link.timeout;
                if now >= deadline {
                    return Ok(());
                }
                wake = wake.min(deadline);
            }
            Conn::Udp(_) => {}
        }
        wake = wake.min(run.t0 + run.next_report);
        let readable = {
            let fd = match &*conn {
                Conn::Tcp(s) => s.as_fd(),
                Conn::Udp(s) => s.as_fd(),
            };
            match crate::sys::wait_readable(fd, wake.saturating_duration_since(now)) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
                Err(e) => return Err(io_error("receiving from", config, e)),
            }
        };
        if readable {
            match conn {
                Conn::Udp(s) => match s.recv(&mut run.inbuf) {
                    Ok(n) => {
                        let received = run.t0.elapsed();
                        classify_udp(
                            run,
                            &mut window,
                            n,
                            last,
                            first_measured,
                            received,
                            Some(config.link.timeout),
                        );
                    }
                    Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_error("receiving from", config, e)),
                },
                Conn::Tcp(s) => {
                    match s.read(&mut chunk) {
                        Ok(0) => {
                            return Err(PingError::ClosedAfter {
                                addr: config.link.addr,
                                answered: run.result.received,
                            });
                        }
                        Ok(n) => stream.extend_from_slice(&chunk[..n]),
                        Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_error("receiving from", config, e)),
                    }
                    let received = run.t0.elapsed();
                    let mut used = 0;
                    while stream.len() - used >= size {
                        let answer = &stream[used..used + size];
                        used += size;
                        let h = echo_of(answer, expect, size, config)?;
                        expect += 1;
                        if h.seq < first_measured || last - h.seq >= window.len() {
                            continue;
                        }
                        let Some(sent) = window.sent_at(h.seq) else {
                            continue;
                        };
                        let server = run.server_time(answer);
                        run.result.received += 1;
                        if received.saturating_sub(sent) > config.link.timeout {
                            run.result.late += 1;
                        }
                        run.record(Sample {
                            seq: h.seq,
                            sent,
                            received,
                            server,
                        });
                        if config.tcp_info
                            && let Ok(info) = crate::probe::tcpinfo::read(s)
                        {
                            run.result.kernel_srtt.record(info.srtt);
                            run.result.tcp_info = Some(info);
                        }
                    }
                    stream.drain(..used);
                }
            }
        }
        run.maybe_report(run.t0.elapsed(), false);
    }
}

/// Sends one message of the open loop. A UDP datagram the kernel has no buffer for (`ENOBUFS`) is dropped,
/// and counts as lost; a TCP send blocked for the timeout ends the run.
fn send_paced(conn: &mut Conn, msg: &[u8], config: &PingConfig) -> Result<(), PingError> {
    match conn {
        Conn::Tcp(s) => s.write_all(msg).map_err(|e| {
            if is_timeout(&e) {
                PingError::Timeout {
                    addr: config.link.addr,
                    timeout: config.link.timeout,
                }
            } else {
                io_error("sending to", config, e)
            }
        }),
        Conn::Udp(s) => loop {
            match s.send(msg) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => return Ok(()),
                Err(e) => return Err(io_error("sending to", config, e)),
            }
        },
    }
}

fn classify_udp(
    run: &mut Run<'_>,
    window: &mut SeqWindow,
    n: usize,
    current: u64,
    first_measured: u64,
    received: Duration,
    late_after: Option<Duration>,
) -> Answer {
    let msg = &run.inbuf[..n];
    let Ok(h) = Header::parse(msg, MAX_UDP_MESSAGE_LEN) else {
        return Answer::Ignored;
    };
    if h.len as usize != msg.len() || h.len as usize != run.config.size || h.seq > current {
        return Answer::Ignored;
    }
    if h.seq < first_measured || current - h.seq >= window.len() {
        return Answer::Ignored;
    }
    let i = window.slot(h.seq);
    if window.answered[i] {
        run.result.duplicated += 1;
        return Answer::Duplicate;
    }
    let Some(sent) = window.sent_at[i] else {
        return Answer::Ignored;
    };
    window.answered[i] = true;
    run.result.received += 1;
    if run.highest_answered.is_some_and(|hi| h.seq < hi) {
        run.result.out_of_order += 1;
    }
    run.highest_answered = Some(run.highest_answered.map_or(h.seq, |hi| hi.max(h.seq)));
    let server = run.server_time(msg);
    run.record(Sample {
        seq: h.seq,
        sent,
        received,
        server,
    });
    let late = match late_after {
        None => h.seq != current,
        Some(t) => received.saturating_sub(sent) > t,
    };
    if late {
        run.result.late += 1;
    }
    if h.seq == current {
        Answer::Current
    } else {
        Answer::Late
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_loop_window_holds_every_message_in_flight() {
        // 2 s of 10 ms sends: 202 in flight at most; the floor is the closed loop's window.
        let w = SeqWindow::for_pace(Duration::from_millis(10), Duration::from_secs(2));
        assert_eq!(w.len(), WINDOW as u64);
        // 2 s of 10 us sends: 200,002 in flight, twice over, capped.
        let w = SeqWindow::for_pace(Duration::from_micros(10), Duration::from_secs(2));
        assert_eq!(w.len(), MAX_WINDOW as u64);
        let w = SeqWindow::for_pace(Duration::from_micros(100), Duration::from_secs(2));
        assert_eq!(w.len(), 1 << 16);
        let mut w = SeqWindow::new(8);
        w.on_send(3, Duration::from_millis(1));
        assert_eq!(w.sent_at(3), Some(Duration::from_millis(1)));
        assert!(!w.is_answered(3));
        // Sequence 11 takes 3's slot.
        w.on_send(11, Duration::from_millis(2));
        assert_eq!(w.sent_at(3), Some(Duration::from_millis(2)));
    }
}
