//! Latency under load (sockperf under-load) on an open-loop schedule, corrected for coordinated omission.
//!
//! Message `i` is due at `t0 + i / rate`, whatever happened to the messages before it; the sender never waits
//! for answers (a separate thread receives them). As in sockperf under-load, a message asks for an answer
//! (`PONG_REQUEST`) when `seq % reply_every == 0`, so the server's answers are a sample of the load. Each
//! answered message gives two latencies:
//!
//! - from its **scheduled** send time: what a client that wanted to send at that moment waited, including the
//!   time the sender fell behind (the coordinated-omission correction of wrk2);
//! - from its **actual** send time: what sockperf reports.
//!
//! The sender also records how far behind its schedule each message left (the schedule lag), and the run says
//! whether the rate was held, with the rate achieved. When the sender falls behind it sends the late messages
//! back to back to catch up, and stops at the end of the measuring time whatever is still due.

use super::link::{self, Conn, LinkConfig, PeerKind, Transport, io_error, is_timeout};
use super::stream::{self, Framer, Sent, StreamError};
use crate::stats::LatencyHistogram;
use crate::wire::sockperf::{self, Feature, Flags, Header, MAX_UDP_MESSAGE_LEN};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Highest rate accepted, messages per second.
pub const MAX_RATE: f64 = 10_000_000.0;
/// Answers tracked at once; an answer more than this many requests late is not matched.
const SLOTS: usize = 1 << 16;
const POLL: Duration = Duration::from_millis(100);

/// An open-loop send schedule: message `i` (counted from 0) is due at `start + i * period`, whatever happened
/// to the messages before it. `load` sends on it, and so does `ping` with an interval
/// ([`PingConfig::open_loop`](super::ping::PingConfig::open_loop)); a sender that falls behind sends what is
/// due back to back to catch up.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    start: Instant,
    period_ns: f64,
}

impl Schedule {
    /// One message every `period` from `start`.
    pub fn new(start: Instant, period: Duration) -> Self {
        Schedule {
            start,
            period_ns: period.as_nanos() as f64,
        }
    }

    /// `rate` messages per second from `start`.
    pub fn at_rate(start: Instant, rate: f64) -> Self {
        Schedule {
            start,
            period_ns: 1e9 / rate,
        }
    }

    /// When message `i` is due.
    pub fn due(&self, i: u64) -> Instant {
        self.start + Duration::from_nanos((i as f64 * self.period_ns) as u64)
    }

    /// When message 0 is due.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// How many messages fall due within `span` of the start (the ones due before `start + span`).
    pub fn count_in(&self, span: Duration) -> u64 {
        (span.as_nanos() as f64 / self.period_ns).ceil() as u64
    }
}

/// Settings of a load run. Build with [`LoadConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Where to connect and how to greet the server (address, transport, key, extensions, timeout).
    pub link: LinkConfig,
    /// Whole message size in bytes, header included.
    pub size: usize,
    /// Offered rate, messages per second.
    pub rate: f64,
    /// Ask for an answer when `seq % reply_every == 0` (sockperf --reply-every).
    pub reply_every: u64,
    /// Measuring time.
    pub duration: Duration,
    /// Time on the same schedule before measuring; its answers are not measured.
    pub warmup: Duration,
    /// Run the sender as a real-time thread (SCHED_FIFO priority 1) so other processes cannot delay it;
    /// needs root or CAP_SYS_NICE. It pauses 300 us after every 2 ms of busy sending.
    pub realtime: bool,
    /// Set from outside (Ctrl-C) to end the run early; results so far are kept.
    pub cancel: Arc<AtomicBool>,
}

impl LoadConfig {
    /// Defaults: TCP, 64-byte messages, 10000/s (sockperf under-load's default), every 100th answered, 10 s,
    /// 1 s warm-up, 2 s timeout.
    pub fn new(addr: SocketAddr) -> Self {
        LoadConfig {
            link: LinkConfig::new(addr),
            size: 64,
            rate: 10_000.0,
            reply_every: 100,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            realtime: false,
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Checks the settings before any I/O.
    pub fn validate(&self) -> Result<(), StreamError> {
        stream::check_size(self.size, self.link.transport)?;
        if !(self.rate.is_finite() && self.rate > 0.0 && self.rate <= MAX_RATE) {
            return Err(StreamError::Invalid(format!(
                "rate {} must be more than 0 and at most {MAX_RATE} messages per second",
                self.rate
            )));
        }
        if self.reply_every == 0 {
            return Err(StreamError::Invalid(
                "--reply-every must be at least 1".into(),
            ));
        }
        if self.duration.is_zero() || self.link.timeout.is_zero() {
            return Err(StreamError::Invalid(
                "duration and timeout must be more than 0".into(),
            ));
        }
        self.link.validate()?;
        if self.duration.as_secs_f64() * self.rate < 1.0 {
            return Err(StreamError::Invalid(format!(
                "at {}/s a run of {:?} sends no message: lengthen --duration",
                self.rate, self.duration
            )));
        }
        Ok(())
    }
}

/// The result of a load run, complete or cut short.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// The server address.
    pub addr: SocketAddr,
    /// TCP or UDP.
    pub transport: Transport,
    /// Message size in bytes.
    pub size: usize,
    /// Offered rate, messages per second.
    pub rate: f64,
    /// One answer per this many messages.
    pub reply_every: u64,
    /// Who answered the hello.
    pub peer: PeerKind,
    /// Wall-clock time the measuring window started.
    pub started: SystemTime,
    /// Length of the measuring window as run (shorter when cancelled or failed).
    pub elapsed: Duration,
    /// Messages the schedule called for in the measuring window.
    pub scheduled: u64,
    /// Messages sent in the measuring window.
    pub sent: u64,
    /// Answers requested in the measuring window.
    pub requested: u64,
    /// Answers received to those requests.
    pub answered: u64,
    /// Latency of answered messages from their scheduled send time (coordinated-omission corrected).
    pub latency_scheduled: LatencyHistogram,
    /// Latency of answered messages from their actual send time (as sockperf reports).
    pub latency_sent: LatencyHistogram,
    /// How late each measured message left compared to its schedule.
    pub lag: LatencyHistogram,
    /// Why the run ended early, if it did.
    pub error: Option<Arc<StreamError>>,
    /// True when cancelled from outside (Ctrl-C).
    pub cancelled: bool,
    /// Measured messages the schedule had due when the sender last wrote, for a run cut short: the rate is
    /// judged against these (what came due after the last write never had its chance).
    pub due_at_last_send: Option<u64>,
}

impl LoadResult {
    /// Messages per second actually sent over the measuring window.
    pub fn achieved_rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.sent as f64 / secs
        } else {
            0.0
        }
    }

    /// True when every scheduled message was sent within the measuring window (0.1% slack); for a run cut
    /// short (Ctrl-C), every message scheduled before the cut.
    pub fn rate_held(&self) -> bool {
        let due = self.scheduled_by_end();
        due > 0 && self.sent as f64 >= 0.999 * due as f64
    }

    /// Messages the schedule had due by the end of the measuring window as run: all of them for a complete
    /// run, those before the cut for an interrupted one (the rest were never due).
    pub fn scheduled_by_end(&self) -> u64 {
        match (self.cancelled, self.due_at_last_send) {
            (true, Some(due)) => due.min(self.scheduled),
            (true, None) => {
                ((self.rate * self.elapsed.as_secs_f64()).floor() as u64).min(self.scheduled)
            }
            _ => self.scheduled,
        }
    }

    /// Requested answers that never came.
    pub fn unanswered(&self) -> u64 {
        self.requested.saturating_sub(self.answered)
    }
}

/// Send times of the messages that asked for an answer, written by the sender and read by the receiver.
struct Slots {
    seq: Vec<AtomicU64>,
    scheduled_ns: Vec<AtomicU64>,
    sent_ns: Vec<AtomicU64>,
}

impl Slots {
    fn new() -> Self {
        let v = || (0..SLOTS).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Slots {
            seq: v(),
            scheduled_ns: v(),
            sent_ns: v(),
        }
    }
    fn index(seq: u64, reply_every: u64) -> usize {
        ((seq / reply_every) as usize) % SLOTS
    }
    fn put(&self, i: usize, seq: u64, scheduled_ns: u64, sent_ns: u64) {
        self.scheduled_ns[i].store(scheduled_ns, Ordering::Relaxed);
        self.sent_ns[i].store(sent_ns, Ordering::Relaxed);
        self.seq[i].store(seq, Ordering::Release);
    }
    /// Takes the send times of `seq` (once).
    fn take(&self, i: usize, seq: u64) -> Option<(u64, u64)> {
        if self.seq[i].load(Ordering::Acquire) != seq {
            return None;
        }
        let t = (
            self.scheduled_ns[i].load(Ordering::Relaxed),
            self.sent_ns[i].load(Ordering::Relaxed),
        );
        self.seq[i]
            .compare_exchange(seq, 0, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| t)
    }
}

/// State shared by the sender and the receiver.
struct Shared {
    slots: Slots,
    t0: Instant,
    reply_every: u64,
    sender_done: AtomicBool,
    requested: AtomicU64,
}

/// What the receiver thread returns.
struct Received {
    answered: u64,
    scheduled: LatencyHistogram,
    sent: LatencyHistogram,
    error: Option<StreamError>,
}

/// Runs the load. `Err` only when nothing could be measured (bad settings, no connection); a failure
/// mid-run returns the results so far with [`LoadResult::error`] set.
pub fn run(config: &LoadConfig) -> Result<LoadResult, StreamError> {
    config.validate()?;
    let addr = config.link.addr;
    let (mut conn, peer, _) = config
        .link
        .open(stream::socket_setup(true, POLL), Feature::default())?;
    let rx_conn = match &conn {
        Conn::Tcp(s) => Conn::Tcp(
            s.try_clone()
                .map_err(|e| io_error("setting up", config.link.transport, addr, e))?,
        ),
        Conn::Udp(s) => Conn::Udp(
            s.try_clone()
                .map_err(|e| io_error("setting up", config.link.transport, addr, e))?,
        ),
    };
    // Start a little ahead so the first messages are not late because of thread start-up.
    let plan = Schedule::at_rate(Instant::now() + Duration::from_millis(5), config.rate);
    let warm_n = plan.count_in(config.warmup);
    let measured_n = plan.count_in(config.duration);
    let t0 = plan.start();
    let measure_start = plan.due(warm_n);
    let measure_end = measure_start + config.duration;
    let shared = Arc::new(Shared {
        slots: Slots::new(),
        t0,
        reply_every: config.reply_every,
        sender_done: AtomicBool::new(false),
        requested: AtomicU64::new(0),
    });
    let receiver = {
        let shared = shared.clone();
        let (size, timeout, first_measured) = (config.size, config.link.timeout, warm_n + 1);
        std::thread::Builder::new()
            .name("load-receiver".into())
            .spawn(move || receive(rx_conn, addr, size, timeout, first_measured, &shared))
            .expect("spawn receiver thread")
    };

    // The sender: this thread. Over TCP, messages that are already due when the sender gets to them (it
    // fell behind) leave together in one write, as many as fit in 64 KiB, so it catches up quickly; each
    // still gets its own lag. UDP sends one datagram per message.
    let mut send = || {
        let mut msg = stream::payload(config.size);
        let len = config.size as u32;
        let max_batch = match config.link.transport {
            Transport::Tcp => (65536 / config.size).clamp(1, 256) as u64,
            Transport::Udp => 1,
        };
        let mut batch: Vec<u8> = Vec::with_capacity(max_batch as usize * config.size);
        let schedule = |i: u64| plan.due(i);
        let total = warm_n + measured_n;
        let mut lag = LatencyHistogram::new();
        let (mut sent, mut requested) = (0u64, 0u64);
        let mut blocked = None;
        let mut error = None;
        let never = AtomicBool::new(false);
        let mut i = 0u64;
        let mut last_send: Option<Instant> = None;
        let mut busy_since = Instant::now();
        while i < total {
            let due = schedule(i);
            if config.realtime {
                // A real-time thread that never sleeps is throttled by the kernel for 50 ms in every second
                // (sched_rt_runtime_us); a 300 us pause after 2 ms of busy sending keeps it well under that limit.
                let now = Instant::now();
                if due > now + Duration::from_micros(200) {
                    busy_since = due;
                } else if now - busy_since >= Duration::from_millis(2) {
                    std::thread::sleep(Duration::from_micros(200));
                    busy_since = Instant::now();
                }
            }
            link::wait_until(due);
            if config.cancel.load(Ordering::Relaxed) {
                break;
            }
            let now = Instant::now();
            if now >= measure_end {
                // Behind schedule at the end of the window: what is still due is not sent.
                break;
            }
            let first = i;
            last_send = Some(now);
            batch.clear();
            while i < total && i - first < max_batch && (i == first || schedule(i) <= now) {
                let seq = i + 1;
                // sockperf under-load's rule, exactly: an answer when seq % reply_every == 0.
                let wants = seq.is_multiple_of(config.reply_every);
                let flags = if wants {
                    Flags::CLIENT.with(Flags::PONG_REQUEST)
                } else {
                    Flags::CLIENT
                };
                Header { seq, flags, len }.write(&mut msg);
                batch.extend_from_slice(&msg);
                if wants && i >= warm_n {
                    let sched_ns = (schedule(i) - t0).as_nanos() as u64;
                    let sent_ns = (now - t0).as_nanos() as u64;
                    shared.slots.put(
                        Slots::index(seq, config.reply_every),
                        seq,
                        sched_ns,
                        sent_ns,
                    );
                }
                i += 1;
            }
            let r = match &mut conn {
                Conn::Tcp(s) => {
                    stream::send_bounded(s, &batch, addr, &never, Some(measure_end), &mut blocked)
                }
                Conn::Udp(s) => loop {
                    match s.send(&batch) {
                        Ok(_) => break Ok(Sent::All),
                        Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                            if Instant::now() >= measure_end {
                                break Ok(Sent::Cut(Duration::ZERO));
                            }
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                        Err(e) => break Err(io_error("sending to", Transport::Udp, addr, e)),
                    }
                },
            };
            match r {
                Ok(Sent::All) => {}
                Ok(Sent::Cut(stalled)) => {
                    if stalled >= Duration::from_millis(500) {
                        error = Some(StreamError::Stalled { addr, stalled });
                    }
                    break;
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
            for k in first.max(warm_n)..i {
                sent += 1;
                lag.record(now.saturating_duration_since(schedule(k)));
                if (k + 1).is_multiple_of(config.reply_every) {
                    requested += 1;
                }
            }
            shared.requested.store(requested, Ordering::Release);
        }
        // Measured messages due at the last write: those scheduled at or before it, from the window's start.
        let due = last_send.map(|at| {
            let mut k = i;
            while k < total && schedule(k) <= at {
                k += 1;
            }
            k.saturating_sub(warm_n)
        });
        (lag, sent, requested, error, due)
    };
    let (lag, sent, requested, error, due_at_last_send) = if config.realtime {
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    set_realtime().map_err(|e| {
                        StreamError::Invalid(format!(
                            "cannot make the sender a real-time thread (SCHED_FIFO): {e} (needs root or CAP_SYS_NICE; drop --realtime)"
                        ))
                    })?;
                    Ok(send())
                })
                .join()
                .unwrap_or_else(|_| Err(StreamError::Invalid("the sender thread panicked".into())))
        })?
    } else {
        send()
    };
    let mut error = error;
    let end = Instant::now().min(measure_end);
    shared.sender_done.store(true, Ordering::Release);
    let got = receiver.join().unwrap_or_else(|_| Received {
        answered: 0,
        scheduled: LatencyHistogram::new(),
        sent: LatencyHistogram::new(),
        error: None,
    });
    if error.is_none()
        && let Some(e) = got.error
    {
        error = Some(e);
    }
    let started = SystemTime::now() - measure_start.elapsed();
    Ok(LoadResult {
        addr,
        transport: config.link.transport,
        size: config.size,
        rate: config.rate,
        reply_every: config.reply_every,
        peer,
        started,
        elapsed: end.saturating_duration_since(measure_start),
        scheduled: measured_n,
        sent,
        requested,
        answered: got.answered,
        latency_scheduled: got.scheduled,
        latency_sent: got.sent,
        lag,
        error: error.map(Arc::new),
        cancelled: config.cancel.load(Ordering::Relaxed),
        due_at_last_send,
    })
}

/// Makes the calling thread a SCHED_FIFO real-time thread at priority 1.
fn set_realtime() -> io::Result<()> {
    crate::sys::set_thread_sched(crate::sys::Sched::Fifo(1))
}

/// The receiver thread: matches answers to their send times until every requested answer came, or the
/// sender is done and `timeout` passed.
fn receive(
    mut conn: Conn,
    addr: SocketAddr,
    size: usize,
    timeout: Duration,
    first_measured: u64,
    shared: &Shared,
) -> Received {
    let mut r = Received {
        answered: 0,
        scheduled: LatencyHistogram::new(),
        sent: LatencyHistogram::new(),
        error: None,
    };
    let mut done_at: Option<Instant> = None;
    let on_answer = |seq: u64, r: &mut Received| {
        if seq < first_measured
            || seq == sockperf::HELLO_SEQ
            || !seq.is_multiple_of(shared.reply_every)
        {
            return;
        }
        let now_ns = shared.t0.elapsed().as_nanos() as u64;
        if let Some((sched, sent)) = shared
            .slots
            .take(Slots::index(seq, shared.reply_every), seq)
        {
            r.answered += 1;
            r.scheduled.record_ns(now_ns.saturating_sub(sched));
            r.sent.record_ns(now_ns.saturating_sub(sent));
        }
    };
    let mut finished = |r: &Received| -> bool {
        if !shared.sender_done.load(Ordering::Acquire) {
            return false;
        }
        if r.answered >= shared.requested.load(Ordering::Acquire) {
            return true;
        }
        done_at.get_or_insert_with(Instant::now).elapsed() >= timeout
    };
    match &mut conn {
        Conn::Tcp(s) => {
            let mut framer = Framer::new(size);
            loop {
                match framer.next_message(s, addr, Instant::now() + POLL, None) {
                    Ok(Some(m)) => {
                        if let Ok(h) = Header::parse(m, sockperf::MAX_MESSAGE_LEN)
                            && !h.flags.contains(Flags::CLIENT)
                        {
                            on_answer(h.seq, &mut r);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        // A close after the sender finished and every answer came is the normal end.
                        if !(shared.sender_done.load(Ordering::Acquire)
                            && r.answered >= shared.requested.load(Ordering::Acquire))
                        {
                            r.error = Some(e);
                        }
                        return r;
                    }
                }
                if finished(&r) {
                    return r;
                }
            }
        }
        Conn::Udp(s) => {
            let mut buf = vec![0u8; MAX_UDP_MESSAGE_LEN + 1];
            loop {
                match s.recv(&mut buf) {
                    Ok(n) => {
                        if let Ok(h) = Header::parse(&buf[..n], MAX_UDP_MESSAGE_LEN)
                            && h.len as usize == n
                            && !h.flags.contains(Flags::CLIENT)
                        {
                            on_answer(h.seq, &mut r);
                        }
                    }
                    Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                    // ICMP port unreachable from an earlier datagram: the server is gone.
                    Err(e) => {
                        r.error = Some(io_error("receiving from", Transport::Udp, addr, e));
                        return r;
                    }
                }
                if finished(&r) {
                    return r;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_open_loop_from_its_start() {
        let start = Instant::now();
        let s = Schedule::new(start, Duration::from_millis(10));
        assert_eq!(s.start(), start);
        assert_eq!(s.due(0), start);
        assert_eq!(s.due(100), start + Duration::from_secs(1));
        // Messages due before start + span: 0..=99 in one second, 100 in 995 ms (the last at 990 ms).
        assert_eq!(s.count_in(Duration::from_secs(1)), 100);
        assert_eq!(s.count_in(Duration::from_millis(995)), 100);
        assert_eq!(s.count_in(Duration::ZERO), 0);
        let r = Schedule::at_rate(start, 1000.0);
        assert_eq!(r.due(1000), start + Duration::from_secs(1));
        assert_eq!(r.count_in(Duration::from_millis(50)), 50);
    }
}
