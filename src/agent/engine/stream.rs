//! The event loop: one thread, one `mio` poll, the [`timers`](super::timers) of every target's due probes and
//! outstanding pings' deadlines, one read buffer. TCP and UDP ping targets are served here over their persistent
//! connections; connect, ICMP and database targets are only scheduled here and handed to the probe pool.
//!
//! Why one file of ~900 lines: the loop's state (slots, connections, in-flight pings, timers) is touched by
//! every event handler below, and the handlers are read as one state machine: a connect, a send, an answer
//! and a deadline of the same slot follow each other here.

use super::messages::{Connection, Job, Msg, Pending};
use super::timers::{Timer, TimerKind, Timers};
use super::{BATCH, Entry, Failure, KERNEL_SLACK, MAX_INFLIGHT, Shared, io_failure, lock};
use crate::agent::{ErrorReason, ProbeKind, TargetSpec};
use crate::wire::sockperf::{Flags, HEADER_LEN, HELLO_SEQ, Header, MAX_MESSAGE_LEN};
use mio::net::{TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// The waker's token (slot tokens are `slot | cgen << 32`, never all ones).
pub(super) const WAKER: Token = Token(usize::MAX);

/// Size of the shared read buffer.
const READ_BUF: usize = 64 * 1024;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Tcp { size: usize },
    Udp { size: usize },
    Pool,
}

enum Conn {
    Idle,
    /// The loop's non-blocking connect is under way (a dead host costs no worker).
    TcpConnecting(TcpStream),
    /// A worker is making the connection for the probe due at `due`.
    Connecting,
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// An outstanding ping.
#[derive(Debug, Clone, Copy)]
struct Flight {
    /// 0: answered out of order (UDP), waiting to leave the front.
    seq: u64,
    sent: Instant,
}

/// The pings outstanding on one connection, oldest first.
#[derive(Debug)]
struct Inflight {
    ring: [Flight; MAX_INFLIGHT],
    head: usize,
    len: usize,
}

impl Inflight {
    fn new(now: Instant) -> Inflight {
        Inflight {
            ring: [Flight { seq: 0, sent: now }; MAX_INFLIGHT],
            head: 0,
            len: 0,
        }
    }
    fn full(&self) -> bool {
        self.len == MAX_INFLIGHT
    }
    fn push(&mut self, f: Flight) {
        debug_assert!(!self.full());
        self.ring[(self.head + self.len) % MAX_INFLIGHT] = f;
        self.len += 1;
    }
    fn front(&self) -> Option<Flight> {
        (self.len > 0).then(|| self.ring[self.head])
    }
    fn pop(&mut self) -> Option<Flight> {
        let f = self.front()?;
        self.head = (self.head + 1) % MAX_INFLIGHT;
        self.len -= 1;
        self.trim();
        Some(f)
    }
    /// Drops answered entries from the front.
    fn trim(&mut self) {
        while self.len > 0 && self.ring[self.head].seq == 0 {
            self.head = (self.head + 1) % MAX_INFLIGHT;
            self.len -= 1;
        }
    }
    /// Removes the ping with sequence `seq` (UDP: answers may come out of order).
    fn take(&mut self, seq: u64) -> Option<Flight> {
        for i in 0..self.len {
            let k = (self.head + i) % MAX_INFLIGHT;
            if self.ring[k].seq == seq {
                let f = self.ring[k];
                self.ring[k].seq = 0;
                self.trim();
                return Some(f);
            }
        }
        None
    }
}

struct Slot {
    entry: Arc<Entry>,
    spec: Arc<TargetSpec>,
    kind: Kind,
    /// `spec.interval` and `spec.timeout`, kept here so that a due probe or a deadline touches only the
    /// slot (following `spec` to another cache line was a cache miss per timer).
    interval: Duration,
    timeout: Duration,
    /// Unique tag of this slot's occupant, for deadline timers.
    epoch: u32,
    /// Tag of the live due timer.
    sched: u32,
    /// When the next probe is due.
    next_due: Instant,
    /// Generation of the connection (tokens and worker answers carry it).
    cgen: u32,
    conn: Conn,
    seq: u64,
    inflight: Inflight,
    /// An incomplete TCP message.
    partial: Vec<u8>,
}

fn kind_of(spec: &TargetSpec) -> Kind {
    let size = |s: u32| (s as usize).clamp(HEADER_LEN, MAX_MESSAGE_LEN);
    match spec.probe {
        ProbeKind::Tcp { size: s } => Kind::Tcp { size: size(s) },
        ProbeKind::Udp { size: s } => Kind::Udp {
            size: size(s).min(crate::wire::sockperf::MAX_UDP_MESSAGE_LEN),
        },
        _ => Kind::Pool,
    }
}

fn token(slot: u32, cgen: u32) -> Token {
    Token(slot as usize | (cgen as usize) << 32)
}

/// The event loop's state.
pub(super) struct Loop {
    poll: Poll,
    rx: mpsc::Receiver<Msg>,
    connects: mpsc::Sender<Job>,
    probes: mpsc::Sender<Job>,
    shared: Arc<Shared>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_id: HashMap<u64, u32>,
    heap: Timers,
    next_tag: u32,
    rbuf: Vec<u8>,
    sbuf: Vec<u8>,
    stop: bool,
    /// Schedule lags of this wake-up, added to the shared histogram once per wake-up.
    lag: crate::agent::Histogram,
    /// The engine has a key (UDP peers must be re-authenticated after a silence).
    keyed: bool,
}

impl Loop {
    pub(super) fn new(
        poll: Poll,
        rx: mpsc::Receiver<Msg>,
        connects: mpsc::Sender<Job>,
        probes: mpsc::Sender<Job>,
        shared: Arc<Shared>,
        keyed: bool,
    ) -> io::Result<Loop> {
        Ok(Loop {
            poll,
            rx,
            connects,
            probes,
            shared,
            slots: Vec::new(),
            free: Vec::new(),
            by_id: HashMap::new(),
            heap: Timers::new(),
            next_tag: 0,
            rbuf: vec![0u8; READ_BUF],
            sbuf: Vec::new(),
            stop: false,
            lag: crate::agent::Histogram::zero(),
            keyed,
        })
    }

    fn tag(&mut self) -> u32 {
        self.next_tag = self.next_tag.wrapping_add(1);
        self.next_tag
    }

    /// Runs until [`Msg::Stop`] (or the engine is gone).
    ///
    /// Timers are served with slack: the loop sleeps until the earliest timer rounded up to the next
    /// multiple of [`SLACK`](super::SLACK) and then handles every timer due by then (and within [`BATCH`]), so at 5,000
    /// probes/s one wake-up sends ~10 pings instead of one wake-up per ~1 ms bucket, and the pings' answers
    /// come back together. A wake-up for I/O before that instant only reads; one after it also serves the
    /// timers (that timer wake-up is saved).
    pub(super) fn run(mut self) {
        // The kernel may also fire our timeout late by KERNEL_SLACK, to share a wake-up with other timers.
        let _ = crate::sys::set_timer_slack(KERNEL_SLACK);
        let mut events = Events::with_capacity(1024);
        while !self.stop {
            let due = self.heap.next().map(|at| self.heap.wake_at(at));
            let timeout = due.map(|w| w.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != io::ErrorKind::Interrupted
            {
                // Nothing sensible to do but retry after a pause.
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut wake = false;
            for ev in events.iter() {
                if ev.token() == WAKER {
                    wake = true;
                    continue;
                }
                let t = ev.token().0;
                self.io(t as u32, (t >> 32) as u32, ev.is_read_closed());
            }
            if wake || events.is_empty() {
                self.messages();
            }
            if self.stop {
                break;
            }
            if due.is_some_and(|w| Instant::now() >= w) {
                self.timers();
            }
        }
    }

    fn messages(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(m) => self.message(m),
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.stop = true;
                    return;
                }
            }
        }
    }

    fn message(&mut self, m: Msg) {
        match m {
            Msg::Stop => self.stop = true,
            Msg::Add { entry, spec, first } => {
                let id = entry.id;
                let epoch = self.tag();
                let sched = self.tag();
                // Connection generations start from a fresh tag, so a worker's late answer for a removed
                // target never lands on the target that reuses its slot.
                let cgen = self.tag();
                let slot = Slot {
                    entry,
                    kind: kind_of(&spec),
                    interval: spec.interval,
                    timeout: spec.timeout,
                    spec,
                    epoch,
                    sched,
                    next_due: first,
                    cgen,
                    conn: Conn::Idle,
                    seq: 0,
                    inflight: Inflight::new(first),
                    partial: Vec::new(),
                };
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i as usize] = Some(slot);
                        i
                    }
                    None => {
                        self.slots.push(Some(slot));
                        (self.slots.len() - 1) as u32
                    }
                };
                self.by_id.insert(id, i);
                self.heap.push(Timer {
                    at: first,
                    slot: i,
                    tag: sched,
                    kind: TimerKind::Due,
                });
            }
            Msg::Update { id, spec } => {
                let Some(&i) = self.by_id.get(&id) else {
                    return;
                };
                let sched = self.tag();
                let Some(s) = self.slots[i as usize].as_mut() else {
                    return;
                };
                let reconnect = s.spec.addr != spec.addr || s.spec.probe != spec.probe;
                if s.spec.interval != spec.interval {
                    // The schedule keeps its phase: the next due probe stays, the new interval follows it.
                    s.sched = sched;
                    self.heap.push(Timer {
                        at: s.next_due,
                        slot: i,
                        tag: sched,
                        kind: TimerKind::Due,
                    });
                }
                if s.spec.timeout != spec.timeout
                    && let Some(f) = s.inflight.front()
                {
                    // Deadline timers were set with the old timeout: one for the oldest ping with the new.
                    self.heap.push(Timer {
                        at: f.sent + spec.timeout,
                        slot: i,
                        tag: s.epoch,
                        kind: TimerKind::Deadline,
                    });
                }
                s.kind = kind_of(&spec);
                s.interval = spec.interval;
                s.timeout = spec.timeout;
                s.spec = spec;
                if reconnect {
                    // Pings outstanding to the old address are forgotten, not counted.
                    s.conn = Conn::Idle;
                    s.cgen = s.cgen.wrapping_add(1);
                    s.inflight = Inflight::new(Instant::now());
                    s.partial = Vec::new();
                    lock(&s.entry.db).take();
                }
            }
            Msg::Remove { id } => {
                let Some(i) = self.by_id.remove(&id) else {
                    return;
                };
                self.slots[i as usize] = None;
                self.free.push(i);
            }
            Msg::Connected { slot, cgen, result } => self.connected(slot, cgen, result),
        }
    }

    fn slot(&mut self, i: u32) -> Option<&mut Slot> {
        self.slots.get_mut(i as usize).and_then(Option::as_mut)
    }

    fn connected(&mut self, i: u32, cgen: u32, result: Result<Connection, Failure>) {
        let registry = self.poll.registry();
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return;
        };
        if s.cgen != cgen || !matches!(s.conn, Conn::Connecting) {
            return;
        }
        let now = Instant::now();
        let conn = match result {
            Err(f) => {
                s.entry.record_err(now, &f);
                s.conn = Conn::Idle;
                return;
            }
            Ok(Connection::Tcp(t)) => {
                let mut t = TcpStream::from_std(t);
                registry
                    .register(&mut t, token(i, cgen), Interest::READABLE)
                    .map(|()| Conn::Tcp(t))
            }
            Ok(Connection::Udp(u)) => {
                let mut u = UdpSocket::from_std(u);
                registry
                    .register(&mut u, token(i, cgen), Interest::READABLE)
                    .map(|()| Conn::Udp(u))
            }
        };
        match conn {
            Ok(c) => {
                s.conn = c;
                s.inflight = Inflight::new(now);
                s.partial.clear();
                self.send(i, None);
            }
            Err(e) => {
                s.entry
                    .record_err(now, &io_failure("registering the socket", &e));
                s.conn = Conn::Idle;
            }
        }
    }

    /// Handles the timers due by now (and within [`BATCH`]).
    fn timers(&mut self) {
        let horizon = Instant::now() + BATCH;
        while let Some(t) = self.heap.pop_until(horizon) {
            match t.kind {
                TimerKind::Due => self.due(t.slot, t.tag),
                TimerKind::Deadline => self.deadline(t.slot, t.tag, horizon),
                TimerKind::ConnectDeadline => self.connect_deadline(t.slot, t.tag),
            }
        }
        if self.lag.count > 0 {
            self.shared.merge_lag(&self.lag);
            self.lag = crate::agent::Histogram::zero();
        }
    }

    fn due(&mut self, i: u32, tag: u32) {
        let Some(s) = self.slot(i) else { return };
        // One live due timer per slot: the one carrying its current schedule tag.
        if s.sched != tag {
            return;
        }
        let at = s.next_due;
        // The next one: phase + n x interval; slots already missed by a whole interval are skipped.
        let interval = s.interval.max(Duration::from_micros(100));
        let mut next = at + interval;
        let now = Instant::now();
        if next + interval <= now {
            let late = now.duration_since(next).as_nanos();
            let skip = (late / interval.as_nanos()) as u32;
            next += interval * skip;
        }
        s.next_due = next;
        let sched = s.sched;
        self.heap.push(Timer {
            at: next,
            slot: i,
            tag: sched,
            kind: TimerKind::Due,
        });
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return;
        };
        match (&s.conn, s.kind) {
            (_, Kind::Pool) => {
                if s.entry.busy.swap(true, Ordering::AcqRel) {
                    return; // still running: this due probe is skipped
                }
                let job = Job::Probe {
                    entry: s.entry.clone(),
                    spec: s.spec.clone(),
                    due: at,
                };
                if self.probes.send(job).is_err() {
                    self.stop = true;
                }
            }
            (Conn::Idle, _) => {
                // The probe starts with a new connection: its lag is when the connect started.
                self.lag
                    .record_seconds(Instant::now().saturating_duration_since(at).as_secs_f64());
                self.start_connect(i);
            }
            (Conn::Connecting | Conn::TcpConnecting(_), _) => {} // skipped: the connection's outcome counts
            (Conn::Tcp(_) | Conn::Udp(_), _) => self.send(i, Some(at)),
        }
    }

    fn start_connect(&mut self, i: u32) {
        let registry = self.poll.registry();
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return;
        };
        s.cgen = s.cgen.wrapping_add(1);
        let now = Instant::now();
        let deadline = now + s.spec.timeout;
        if matches!(s.kind, Kind::Udp { .. }) {
            s.conn = Conn::Connecting;
            let job = Job::Connect {
                slot: i,
                cgen: s.cgen,
                link: Pending::Udp(s.spec.addr),
                deadline,
            };
            if self.connects.send(job).is_err() {
                self.stop = true;
            }
            return;
        }
        let started = TcpStream::connect(s.spec.addr).and_then(|mut t| {
            registry
                .register(&mut t, token(i, s.cgen), Interest::WRITABLE)
                .map(|()| t)
        });
        match started {
            Ok(t) => {
                s.conn = Conn::TcpConnecting(t);
                let cgen = s.cgen;
                self.heap.push(Timer {
                    at: deadline,
                    slot: i,
                    tag: cgen,
                    kind: TimerKind::ConnectDeadline,
                });
            }
            Err(e) => {
                s.entry.record_err(now, &io_failure("connect", &e));
                s.conn = Conn::Idle;
            }
        }
    }

    /// The TCP connect of slot `i` went on for the whole timeout.
    fn connect_deadline(&mut self, i: u32, cgen: u32) {
        let Some(s) = self.slot(i) else { return };
        if s.cgen != cgen || !matches!(s.conn, Conn::TcpConnecting(_)) {
            return;
        }
        let f = Failure::new(
            ErrorReason::Timeout,
            format!("connect: no answer within {:?}", s.spec.timeout),
        );
        s.entry.record_err(Instant::now(), &f);
        drop_conn(s);
    }

    /// The non-blocking connect of slot `i` is writable: connected (the handshake goes to a worker) or
    /// failed.
    fn connect_done(&mut self, i: u32) {
        let registry = self.poll.registry();
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return;
        };
        let Conn::TcpConnecting(t) = &s.conn else {
            return;
        };
        let now = Instant::now();
        let error = match t.take_error() {
            Ok(Some(e)) | Err(e) => Some(e),
            Ok(None) => match t.peer_addr() {
                Ok(_) => None,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return, // not yet
                Err(e) => Some(e),
            },
        };
        if let Some(e) = error {
            s.entry.record_err(now, &io_failure("connect", &e));
            drop_conn(s);
            return;
        }
        let Conn::TcpConnecting(mut t) = std::mem::replace(&mut s.conn, Conn::Connecting) else {
            return;
        };
        let _ = registry.deregister(&mut t);
        let job = Job::Connect {
            slot: i,
            cgen: s.cgen,
            link: Pending::Tcp(t.into()),
            deadline: now + s.spec.timeout,
        };
        if self.connects.send(job).is_err() {
            self.stop = true;
        }
    }

    /// Sends one ping on the slot's connection; `due` is when it was due (None: right after the handshake,
    /// not a scheduler measurement).
    fn send(&mut self, i: u32, due: Option<Instant>) {
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return;
        };
        let size = match s.kind {
            Kind::Tcp { size } | Kind::Udp { size } => size,
            Kind::Pool => return,
        };
        if s.inflight.full() {
            let now = Instant::now();
            let f = Failure::new(ErrorReason::Timeout, "no answer within the timeout");
            if matches!(s.conn, Conn::Tcp(_)) {
                fail_all(s, now, &f);
                drop_conn(s);
                self.start_connect(i);
                return;
            }
            s.inflight.pop();
            s.entry.record_err(now, &f);
        }
        if self.sbuf.len() < size {
            self.sbuf.resize(size, 0);
        }
        s.seq += 1;
        if s.seq == HELLO_SEQ {
            s.seq = 1;
        }
        Header {
            seq: s.seq,
            flags: Flags::CLIENT.with(Flags::PONG_REQUEST),
            len: size as u32,
        }
        .write(&mut self.sbuf);
        let msg = &self.sbuf[..size];
        let sent = Instant::now();
        let res = match &mut s.conn {
            Conn::Tcp(t) => t.write(msg),
            Conn::Udp(u) => u.send(msg),
            _ => return,
        };
        let tcp = matches!(s.conn, Conn::Tcp(_));
        match res {
            Ok(n) if n == size => {
                s.inflight.push(Flight { seq: s.seq, sent });
                let at = sent + s.timeout;
                let epoch = s.epoch;
                if let Some(due) = due {
                    self.lag
                        .record_seconds(sent.saturating_duration_since(due).as_secs_f64());
                }
                self.heap.push(Timer {
                    at,
                    slot: i,
                    tag: epoch,
                    kind: TimerKind::Deadline,
                });
            }
            Ok(_) | Err(_) if tcp => {
                // A short write: the peer does not read what we send; any error: the connection is gone.
                let f = match res {
                    Err(e) if e.kind() != io::ErrorKind::WouldBlock => io_failure("send", &e),
                    _ => Failure::new(
                        ErrorReason::Timeout,
                        "the peer does not take our messages (send buffer full)",
                    ),
                };
                s.entry.record_err(sent, &f);
                fail_all(s, sent, &f);
                drop_conn(s);
            }
            Ok(_) => s
                .entry
                .record_err(sent, &Failure::new(ErrorReason::Other, "short UDP send")),
            Err(e) => {
                let f = io_failure("send", &e);
                s.entry.record_err(sent, &f);
                // With a key the connection is made again at the next due time.
                self.keyed_udp_reset(i, f.reason);
            }
        }
    }

    /// Over UDP with a key, a refusal or a timeout means the peer may have forgotten our handshake.
    fn keyed_udp_reset(&mut self, i: u32, reason: ErrorReason) -> bool {
        let keyed = self.keyed;
        let Some(s) = self.slot(i) else { return false };
        if keyed
            && matches!(s.conn, Conn::Udp(_))
            && matches!(reason, ErrorReason::Refused | ErrorReason::Timeout)
        {
            let now = Instant::now();
            let f = Failure::new(reason, "no answer after the peer refused or went silent");
            fail_all(s, now, &f);
            drop_conn(s);
            return true;
        }
        false
    }

    fn deadline(&mut self, i: u32, tag: u32, horizon: Instant) {
        let Some(s) = self.slot(i) else { return };
        if s.epoch != tag {
            return;
        }
        let timeout = s.timeout;
        let mut expired = false;
        while let Some(f) = s.inflight.front() {
            if f.sent + timeout > horizon {
                break;
            }
            expired = true;
            let fail = Failure::new(
                ErrorReason::Timeout,
                format!("no answer within {timeout:?}"),
            );
            if matches!(s.conn, Conn::Tcp(_)) {
                fail_all(s, Instant::now(), &fail);
                drop_conn(s);
                return;
            }
            s.inflight.pop();
            s.entry.record_err(Instant::now(), &fail);
        }
        if expired {
            self.keyed_udp_reset(i, ErrorReason::Timeout);
        }
    }

    fn io(&mut self, i: u32, cgen: u32, closed: bool) {
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return;
        };
        if s.cgen != cgen {
            return;
        }
        match s.conn {
            Conn::Tcp(_) => self.read_tcp(i, closed),
            Conn::Udp(_) => self.read_udp(i),
            Conn::TcpConnecting(_) => self.connect_done(i),
            Conn::Idle | Conn::Connecting => {}
        }
    }

    fn read_tcp(&mut self, i: u32, closed: bool) {
        let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
            return;
        };
        let rbuf = &mut self.rbuf;
        loop {
            let Conn::Tcp(t) = &mut s.conn else { return };
            let res = t.read(rbuf);
            let now = Instant::now();
            match res {
                Ok(0) => {
                    let f = Failure::new(ErrorReason::Reset, "the peer closed the connection");
                    fail_all(s, now, &f);
                    drop_conn(s);
                    return;
                }
                Ok(n) => {
                    if let Err(f) = feed_tcp(s, &rbuf[..n], now) {
                        fail_all(s, now, &f);
                        drop_conn(s);
                        return;
                    }
                    // A short read drained the socket (unless the peer also closed: read on to see it).
                    if n < rbuf.len() && !closed {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let f = io_failure("receive", &e);
                    fail_all(s, now, &f);
                    drop_conn(s);
                    return;
                }
            }
        }
    }

    fn read_udp(&mut self, i: u32) {
        let mut reset = None;
        {
            let Some(s) = self.slots.get_mut(i as usize).and_then(Option::as_mut) else {
                return;
            };
            let Kind::Udp { size } = s.kind else { return };
            // Edge-triggered: drain to WouldBlock (a connected socket only hears its peer, bounded by its buffer).
            loop {
                let Conn::Udp(u) = &mut s.conn else { return };
                let res = u.recv(&mut self.rbuf);
                let now = Instant::now();
                match res {
                    Ok(n) => {
                        let msg = &self.rbuf[..n];
                        match check_answer(msg, size) {
                            Ok(h) if h.seq == HELLO_SEQ => {} // a late handshake answer
                            Ok(h) => {
                                if let Some(f) = s.inflight.take(h.seq) {
                                    s.entry
                                        .record_ok(now, now.saturating_duration_since(f.sent));
                                }
                                // Otherwise: the answer to a ping already counted as a timeout.
                            }
                            Err(f) => {
                                if s.inflight.pop().is_some() {
                                    s.entry.record_err(now, &f);
                                }
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let f = io_failure("receive", &e);
                        if s.inflight.pop().is_some() {
                            s.entry.record_err(now, &f);
                        }
                        reset = Some(f.reason);
                    }
                }
            }
        }
        if let Some(r) = reset {
            self.keyed_udp_reset(i, r);
        }
    }
}

/// Checks one answer: a sockperf message of the ping's size, flags without `CLIENT`.
fn check_answer(msg: &[u8], size: usize) -> Result<Header, Failure> {
    let h = Header::parse(msg, MAX_MESSAGE_LEN).map_err(|e| {
        Failure::new(
            ErrorReason::Protocol,
            format!("not a sockperf message: {e}"),
        )
    })?;
    if h.len as usize != size || msg.len() != size {
        return Err(Failure::new(
            ErrorReason::Protocol,
            format!("an answer of {} bytes to a {size}-byte ping", h.len),
        ));
    }
    if h.flags.contains(Flags::CLIENT) {
        return Err(Failure::new(
            ErrorReason::Protocol,
            "the answer still has the client flag (not a sockperf server)",
        ));
    }
    Ok(h)
}

/// Takes TCP bytes: completes the kept partial message, then whole messages from `data`; keeps the rest.
fn feed_tcp(s: &mut Slot, mut data: &[u8], now: Instant) -> Result<(), Failure> {
    let Kind::Tcp { size } = s.kind else {
        return Ok(());
    };
    if !s.partial.is_empty() {
        let need = size - s.partial.len();
        let take = need.min(data.len());
        s.partial.extend_from_slice(&data[..take]);
        data = &data[take..];
        if s.partial.len() < HEADER_LEN {
            return Ok(());
        }
        let h = check_header(&s.partial, size)?;
        if s.partial.len() < size {
            let _ = h;
            return Ok(());
        }
        let msg = std::mem::take(&mut s.partial);
        let r = answer_tcp(s, &msg, now);
        s.partial = msg;
        s.partial.clear();
        r?;
    }
    while !data.is_empty() {
        if data.len() < HEADER_LEN {
            s.partial.extend_from_slice(data);
            return Ok(());
        }
        check_header(data, size)?;
        if data.len() < size {
            s.partial.extend_from_slice(data);
            return Ok(());
        }
        answer_tcp(s, &data[..size], now)?;
        data = &data[size..];
    }
    Ok(())
}

/// The header of a message that should be the answer to one of our pings: its length must be the ping's.
fn check_header(b: &[u8], size: usize) -> Result<Header, Failure> {
    let h = Header::parse(&b[..HEADER_LEN], MAX_MESSAGE_LEN).map_err(|e| {
        Failure::new(
            ErrorReason::Protocol,
            format!("not a sockperf message: {e}"),
        )
    })?;
    if h.len as usize != size {
        return Err(Failure::new(
            ErrorReason::Protocol,
            format!("an answer of {} bytes to a {size}-byte ping", h.len),
        ));
    }
    Ok(h)
}

fn answer_tcp(s: &mut Slot, msg: &[u8], now: Instant) -> Result<(), Failure> {
    let h = check_answer(msg, msg.len())?;
    let Some(f) = s.inflight.front() else {
        return Err(Failure::new(
            ErrorReason::Protocol,
            "a message that answers no ping",
        ));
    };
    if f.seq != h.seq {
        return Err(Failure::new(
            ErrorReason::Protocol,
            format!("the answer to ping {} came for ping {}", h.seq, f.seq),
        ));
    }
    s.inflight.pop();
    s.entry
        .record_ok(now, now.saturating_duration_since(f.sent));
    Ok(())
}

/// Counts every outstanding ping as failed.
fn fail_all(s: &mut Slot, now: Instant, f: &Failure) {
    while let Some(fl) = s.inflight.pop() {
        let _ = fl;
        s.entry.record_err(now, f);
    }
}

/// Closes the slot's connection; the next due probe makes a new one.
fn drop_conn(s: &mut Slot) {
    s.conn = Conn::Idle;
    s.cgen = s.cgen.wrapping_add(1);
    s.partial.clear();
    if s.partial.capacity() > 4096 {
        s.partial = Vec::new();
    }
}
