//! The TCP event loops: each owns a poll, a share of the clients, one read buffer and one write buffer.
//!
//! Every loop polls the (shared) listening socket and accepts what it can; a client stays on the loop that
//! accepted it. Reads go into the loop's buffer and are answered from there ([`super::session`]); only an
//! incomplete message is kept per client. Answers that the client's socket cannot take at once are queued and
//! reading from that client pauses until they are gone (backpressure), so a client that stops reading costs at
//! most one read's worth of answers. Reverse streams and replay answers are generated into the loop's write
//! buffer as the socket takes them, never held whole. Timed replay answers wake the loop through a timerfd.

use super::session::{self, Context, DropKind, DropReason, ReadHint, Session, Step};
use super::timer::{self, TimerFd};
use super::{RefuseReason, ServerEvent, Shared};
use crate::wire::sockperf::{self, Control, Flags, HEADER_LEN, Header, MAX_MESSAGE_LEN};
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const TIMER: Token = Token(2);
const FIRST: usize = 3;

/// Size of the loop's read buffer: one largest message.
const READ_BUF: usize = MAX_MESSAGE_LEN;
/// Size of the loop's buffer for generated output (reverse streams, replay answers).
const WRITE_BUF: usize = 64 * 1024;
/// Replay answers queued per client before reading from it pauses.
const MAX_QUEUED: usize = 256;
/// How often deadlines are checked.
const SWEEP: Duration = Duration::from_millis(500);
/// Full reads from one client before the loop turns to the others (a client streaming faster than the loop
/// reads would otherwise keep it forever); the client is served again in the next turn.
const READS_PER_TURN: usize = 8;
/// Writes to one client before the loop turns to the others (a reverse stream taken as fast as it is made).
const WRITES_PER_TURN: usize = 32;

/// Starts loop number `i` on a copy of the listening socket.
pub(super) fn spawn(
    i: usize,
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
) -> io::Result<(Arc<Waker>, JoinHandle<()>)> {
    listener.set_nonblocking(true)?;
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let mut listener = TcpListener::from_std(listener);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let timer = TimerFd::new()?;
    poll.registry()
        .register(&mut SourceFd(&timer.as_raw_fd()), TIMER, Interest::READABLE)?;
    let mut filler = vec![0u8; WRITE_BUF + 256];
    for (j, b) in filler.iter_mut().enumerate() {
        *b = pattern(j);
    }
    let mut l = Loop {
        poll,
        listener,
        timer,
        timers: BinaryHeap::new(),
        conns: Vec::new(),
        free: Vec::new(),
        next_gen: 0,
        read_buf: vec![0u8; READ_BUF],
        write_buf: vec![0u8; WRITE_BUF],
        answers: Vec::with_capacity(64 * 1024),
        filler,
        shared,
        accept_retry: false,
        ready: VecDeque::new(),
    };
    let thread = std::thread::Builder::new()
        .name(format!("server-tcp-{i}"))
        .spawn(move || {
            timer::tight_timer_slack();
            l.run();
        })?;
    Ok((waker, thread))
}

/// Discards up to `len` bytes of what `stream` received, without copying them (`recv` with `MSG_TRUNC`, which
/// TCP on Linux treats as "consume and drop").
fn discard(stream: &TcpStream, len: usize) -> io::Result<usize> {
    crate::sys::tcp_discard(stream, len)
}

/// The payload byte at offset `j` of a message (recognisable, not zeros: compressing links would flatter zeros).
fn pattern(j: usize) -> u8 {
    (j as u8).wrapping_mul(31).wrapping_add(7)
}

/// Output that is generated as the socket takes it.
#[derive(Debug)]
enum Out {
    /// Answers already made.
    Bytes { buf: Vec<u8>, pos: usize },
    /// A replay answer: `len` bytes starting with `header`, due at `at`.
    Replay {
        header: [u8; HEADER_LEN],
        len: u64,
        sent: u64,
        at: Instant,
    },
    /// A reverse stream: messages of `size` bytes until `until`.
    Reverse {
        size: u64,
        until: Instant,
        sent: u64,
    },
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    generation: u64,
    session: Session,
    out: VecDeque<Out>,
    /// Bytes read but not processed while reading was paused by a reverse stream.
    held: Vec<u8>,
    /// Reading is paused until `out` is empty (or holds only replay answers, fewer than [`MAX_QUEUED`]).
    paused: bool,
    /// The peer's FIN (or a hang-up) was reported: reads go on until end of file, since a short read no longer
    /// means the socket is drained (edge-triggered, no event comes again for a FIN already reported).
    peer_closed: bool,
    /// When the incomplete message started.
    partial_since: Option<Instant>,
    last_read: Instant,
    /// Since when output is ready and the socket takes none of it.
    stalled_since: Option<Instant>,
    /// The deadline this client has in the timer heap, so it is pushed once, not on every flush.
    timer_at: Option<Instant>,
}

impl Conn {
    /// Bytes of memory this client holds beyond its fixed state.
    fn must_pause(&self) -> bool {
        self.out.len() >= MAX_QUEUED
            || self
                .out
                .iter()
                .any(|o| matches!(o, Out::Bytes { .. } | Out::Reverse { .. }))
    }
}

/// What became of a client after some work.
enum Fate {
    Alive,
    Gone(Option<DropReason>),
}

struct Loop {
    poll: Poll,
    listener: TcpListener,
    timer: TimerFd,
    /// (when, slot, generation) of replay answers waiting for their time.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    next_gen: u64,
    read_buf: Vec<u8>,
    write_buf: Vec<u8>,
    answers: Vec<u8>,
    filler: Vec<u8>,
    shared: Arc<Shared>,
    /// Accepting failed for lack of file descriptors: try again at the next sweep.
    accept_retry: bool,
    /// (slot, generation) of clients to read from again in the next turn.
    ready: VecDeque<(usize, u64)>,
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = Instant::now() + SWEEP;
        loop {
            let wait = if self.ready.is_empty() {
                next_sweep.saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait))
                && e.kind() != io::ErrorKind::Interrupted
            {
                // Nothing sensible is left to do with a broken poll: stop serving on this loop.
                return;
            }
            if self.shared.stopping() {
                return;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_all(),
                    WAKER => {}
                    TIMER => self.fire_timers(),
                    Token(t) => {
                        let slot = t - FIRST;
                        if ev.is_writable() {
                            self.service(slot, false);
                        }
                        if (ev.is_read_closed() || ev.is_error())
                            && let Some(c) = self.conns.get_mut(slot).and_then(|c| c.as_mut())
                        {
                            c.peer_closed = true;
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.service(slot, true);
                        }
                    }
                }
            }
            // Clients whose socket still had data when their turn ended.
            for _ in 0..self.ready.len() {
                let Some((slot, generation)) = self.ready.pop_front() else {
                    break;
                };
                if self.conns[slot]
                    .as_ref()
                    .is_some_and(|c| c.generation == generation)
                {
                    self.service(slot, true);
                }
            }
            if Instant::now() >= next_sweep {
                self.sweep();
                next_sweep = Instant::now() + SWEEP;
            }
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    (self.shared.events)(ServerEvent::AcceptFailed {
                        why: RefuseReason::OutOfFiles,
                    });
                    self.accept_retry = true;
                    return;
                }
                // A client that left before accept, and the like.
                Err(_) => {}
            }
        }
    }

    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) {
        let shared = &self.shared;
        let limits = &shared.limits;
        let refuse = |why| {
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            (shared.events)(ServerEvent::Refused { peer, why });
        };
        if shared.clients.fetch_add(1, Ordering::SeqCst) >= limits.max_clients {
            shared.clients.fetch_sub(1, Ordering::SeqCst);
            return refuse(RefuseReason::MaxClients(limits.max_clients));
        }
        {
            let mut per = shared.per_address.lock().expect("per-address counts");
            let n = per.entry(canonical(peer.ip())).or_insert(0);
            if *n >= limits.max_per_address {
                drop(per);
                shared.clients.fetch_sub(1, Ordering::SeqCst);
                return refuse(RefuseReason::MaxPerAddress(limits.max_per_address));
            }
            *n += 1;
        }
        let _ = stream.set_nodelay(true);
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.next_gen += 1;
        let mut conn = Conn {
            stream,
            peer,
            generation: self.next_gen,
            session: Session::new(shared.psk.is_some()),
            out: VecDeque::new(),
            held: Vec::new(),
            paused: false,
            peer_closed: false,
            partial_since: None,
            last_read: Instant::now(),
            stalled_since: None,
            timer_at: None,
        };
        if self
            .poll
            .registry()
            .register(
                &mut conn.stream,
                Token(FIRST + slot),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            self.release(peer);
            self.free.push(slot);
            return;
        }
        (shared.events)(ServerEvent::Connected { peer });
        self.conns[slot] = Some(conn);
    }

    /// Forgets a client in the shared counts.
    fn release(&self, peer: SocketAddr) {
        self.shared.clients.fetch_sub(1, Ordering::SeqCst);
        let mut per = self.shared.per_address.lock().expect("per-address counts");
        let ip = canonical(peer.ip());
        if let Some(n) = per.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                per.remove(&ip);
            }
        }
    }

    fn close(&mut self, slot: usize, reason: Option<DropReason>) {
        let Some(mut conn) = self.conns[slot].take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if reason.as_ref().is_some_and(|r| {
            matches!(
                r.kind,
                DropKind::Deadline | DropKind::Idle | DropKind::StoppedReading
            )
        }) {
            // A client dropped for holding on sees a reset, and the server keeps no TIME_WAIT for it. Others
            // get a normal close, so a refusal written just before is read.
            let _ = socket2::SockRef::from(&conn.stream).set_linger(Some(Duration::ZERO));
        }
        self.release(conn.peer);
        self.free.push(slot);
        (self.shared.events)(ServerEvent::Disconnected {
            peer: conn.peer,
            messages: conn.session.messages,
            bytes: conn.session.bytes,
            reason,
        });
    }

    /// Writes what is queued, then (when `read` and not paused) reads and answers until the socket is drained.
    fn service(&mut self, slot: usize, read: bool) {
        let mut read = read;
        loop {
            match self.flush(slot) {
                Fate::Gone(r) => return self.close(slot, r),
                Fate::Alive => {}
            }
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            if conn.paused && !conn.must_pause() {
                // Output drained: go on with what was held back, then read again (edge-triggered: the
                // readiness that arrived while paused is not reported twice).
                conn.paused = false;
                if conn.partial_since.is_some() {
                    conn.partial_since = Some(Instant::now());
                }
                read = true;
                if !conn.held.is_empty() {
                    let mut held = std::mem::take(&mut conn.held);
                    let fate = self.process(slot, &mut held, session::realtime_ns());
                    if let Fate::Gone(r) = fate {
                        return self.close(slot, r);
                    }
                    continue;
                }
            }
            if !read || self.conns[slot].as_ref().is_none_or(|c| c.paused) {
                return;
            }
            read = false;
            match self.read(slot) {
                Fate::Gone(r) => return self.close(slot, r),
                Fate::Alive => {}
            }
            // Reading may have queued output or paused; one more round writes it.
            if self.conns[slot].as_ref().is_none_or(|c| c.out.is_empty()) {
                return;
            }
        }
    }

    /// Reads until the socket is drained or reading pauses, or [`READS_PER_TURN`] buffers' worth was read (then
    /// the client waits in [`Loop::ready`] for the next turn).
    ///
    /// The payload of a large streamed message (one that needs no answer) is discarded in the kernel
    /// (`MSG_TRUNC`), never copied: such a client is read header by header ([`session::ReadHint`]).
    fn read(&mut self, slot: usize) -> Fate {
        let mut budget = READS_PER_TURN * READ_BUF;
        let mut ops = 0;
        while budget > 0 && ops < READS_PER_TURN * 8 {
            ops += 1;
            let Some(conn) = self.conns[slot].as_mut() else {
                return Fate::Alive;
            };
            if conn.paused {
                return Fate::Alive;
            }
            let hint = conn.session.read_hint();
            let want = match hint {
                ReadHint::Discard(n) => n.min(READ_BUF),
                ReadHint::Header => HEADER_LEN,
                ReadHint::Any => READ_BUF,
            };
            let result = if let ReadHint::Discard(_) = hint {
                discard(&conn.stream, want)
            } else {
                conn.stream.read(&mut self.read_buf[..want])
            };
            let n = match result {
                Ok(0) => {
                    let pending = conn.session.pending();
                    return Fate::Gone((pending > 0).then(|| {
                        DropReason::new(
                            DropKind::ClosedMidMessage,
                            format!("closed mid-message ({pending} bytes pending)"),
                        )
                    }));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Fate::Alive,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // sockperf clients end with a reset: that is a normal end, not a fault.
                Err(e)
                    if e.kind() == io::ErrorKind::ConnectionReset
                        && conn.session.pending() == 0 =>
                {
                    return Fate::Gone(None);
                }
                Err(e) => {
                    return Fate::Gone(Some(DropReason::new(
                        DropKind::Io,
                        format!("read failed: {e}"),
                    )));
                }
            };
            budget = budget.saturating_sub(n.max(HEADER_LEN));
            conn.session.bytes += n as u64;
            conn.last_read = Instant::now();
            if let ReadHint::Discard(_) = hint {
                conn.session.discarded(n);
            } else {
                let recv_ns = session::realtime_ns();
                let mut buf = std::mem::take(&mut self.read_buf);
                let fate = self.process(slot, &mut buf[..n], recv_ns);
                self.read_buf = buf;
                if let Fate::Gone(_) = fate {
                    return fate;
                }
            }
            let peer_closed = self.conns[slot].as_ref().is_some_and(|c| c.peer_closed);
            if n < want && !peer_closed {
                // A short read took everything the socket had (with the peer still there: a FIN arriving
                // later raises a new event).
                return Fate::Alive;
            }
        }
        if let Some(c) = self.conns[slot].as_ref() {
            self.ready.push_back((slot, c.generation));
        }
        Fate::Alive
    }

    /// Answers the messages in `data`, queues what cannot be written at once.
    fn process(&mut self, slot: usize, data: &mut [u8], recv_ns: u64) -> Fate {
        let shared = &self.shared;
        let Some(conn) = self.conns[slot].as_mut() else {
            return Fate::Alive;
        };
        let now = Instant::now();
        let cx = Context {
            psk: shared.psk.as_ref(),
            jar: &shared.jar,
            peer: conn.peer,
            now_s: shared.now_s(),
            recv_ns,
            allow_replay: shared.allow_replay,
        };
        let answers = &mut self.answers;
        answers.clear();
        let before = conn.session.answered;
        let mut off = 0;
        let mut dropped = None;
        loop {
            let (used, step) = conn.session.feed(&mut data[off..], &cx, answers);
            off += used;
            match step {
                Step::Continue => break,
                Step::Drop(r) => {
                    dropped = Some(r);
                    break;
                }
                Step::Reverse { size, duration } => {
                    let size = u64::from(size).clamp(HEADER_LEN as u64, MAX_MESSAGE_LEN as u64);
                    let duration = duration.min(sockperf::MAX_REVERSE_DURATION);
                    queue_answers(conn, answers);
                    conn.out.push_back(Out::Reverse {
                        size,
                        until: now + duration,
                        sent: 0,
                    });
                    (shared.events)(ServerEvent::ReverseStarted {
                        peer: conn.peer,
                        transport: "tcp",
                        size: size as u32,
                        duration,
                    });
                    conn.held.extend_from_slice(&data[off..]);
                    conn.paused = true;
                    break;
                }
                Step::Replay { header, delay } => {
                    queue_answers(conn, answers);
                    let mut h = [0u8; HEADER_LEN];
                    header.write(&mut h);
                    conn.out.push_back(Out::Replay {
                        header: h,
                        len: u64::from(header.len),
                        sent: 0,
                        at: now + delay,
                    });
                }
            }
        }
        shared
            .answered
            .fetch_add(conn.session.answered - before, Ordering::Relaxed);
        conn.partial_since = if conn.session.pending() > 0 {
            Some(conn.partial_since.unwrap_or(now))
        } else {
            None
        };
        queue_answers(conn, answers);
        if let Some(r) = dropped {
            // Best effort for the last answers (a refusal that says why), then close.
            let _ = self.flush(slot);
            return Fate::Gone(Some(r));
        }
        if conn.must_pause() {
            conn.paused = true;
        }
        Fate::Alive
    }

    /// Writes queued output until the socket is full or nothing is due; arms the timer for a later answer.
    fn flush(&mut self, slot: usize) -> Fate {
        let Some(conn) = self.conns[slot].as_mut() else {
            return Fate::Alive;
        };
        let deadline_for_timer;
        let mut writes = 0;
        loop {
            writes += 1;
            if writes > WRITES_PER_TURN {
                // A client that takes a stream as fast as it is made would keep the loop: next turn.
                self.ready.push_back((slot, conn.generation));
                return Fate::Alive;
            }
            let Some(front) = conn.out.front_mut() else {
                conn.stalled_since = None;
                return Fate::Alive;
            };
            let now = Instant::now();
            let result = match front {
                Out::Bytes { buf, pos } => conn.stream.write(&buf[*pos..]).map(|n| {
                    *pos += n;
                    *pos == buf.len()
                }),
                Out::Replay {
                    header,
                    len,
                    sent,
                    at,
                } => {
                    if now < *at {
                        deadline_for_timer = *at;
                        break;
                    }
                    let n = generate(&mut self.write_buf, &self.filler, *sent, *len, *len, |_| {
                        *header
                    });
                    conn.stream.write(&self.write_buf[..n]).map(|w| {
                        *sent += w as u64;
                        *sent == *len
                    })
                }
                Out::Reverse { size, until, sent } => {
                    let size = *size;
                    // Stop at the next message boundary once the time is up.
                    let end = if now >= *until || self.shared.stopping() {
                        sent.div_ceil(size) * size
                    } else {
                        u64::MAX
                    };
                    if *sent == end {
                        let messages = *sent / size;
                        let bytes = *sent;
                        conn.out.pop_front();
                        conn.out.push_front(Out::Bytes {
                            buf: Control::ReverseEnd { messages, bytes }.encode(Flags(0)),
                            pos: 0,
                        });
                        continue;
                    }
                    let n = generate(&mut self.write_buf, &self.filler, *sent, size, end, |i| {
                        reverse_header(i, size)
                    });
                    conn.stream.write(&self.write_buf[..n]).map(|w| {
                        *sent += w as u64;
                        false
                    })
                }
            };
            match result {
                Ok(done) => {
                    conn.stalled_since = None;
                    if done {
                        conn.out.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    conn.stalled_since.get_or_insert(now);
                    return Fate::Alive;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Fate::Gone(Some(DropReason::new(
                        DropKind::Io,
                        format!("write failed: {e}"),
                    )));
                }
            }
        }
        // The front answer is not due yet.
        conn.stalled_since = None;
        if conn.timer_at == Some(deadline_for_timer) {
            return Fate::Alive;
        }
        conn.timer_at = Some(deadline_for_timer);
        let entry = (deadline_for_timer, slot, conn.generation);
        self.timers.push(Reverse(entry));
        if self.timer.armed().is_none_or(|a| deadline_for_timer < a) {
            let _ = self.timer.arm(deadline_for_timer);
        }
        Fate::Alive
    }

    fn fire_timers(&mut self) {
        self.timer.clear();
        let now = Instant::now();
        while let Some(Reverse((at, slot, generation))) = self.timers.peek().copied() {
            if at > now {
                let _ = self.timer.arm(at);
                break;
            }
            self.timers.pop();
            if let Some(c) = self.conns[slot]
                .as_mut()
                .filter(|c| c.generation == generation)
            {
                c.timer_at = None;
                self.service(slot, false);
            }
        }
    }

    /// Drops clients over their deadlines; retries accepting after a shortage of file descriptors.
    fn sweep(&mut self) {
        let now = Instant::now();
        let limits = self.shared.limits.clone();
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns[slot].as_ref() else {
                continue;
            };
            let over = |since: Option<Instant>, limit: Duration| {
                since.is_some_and(|t| now.duration_since(t) > limit)
            };
            // While reading is paused, an incomplete message is the server's doing, not the client's.
            let reason = if !conn.paused && over(conn.partial_since, limits.message_deadline) {
                Some(DropReason::new(
                    DropKind::Deadline,
                    format!(
                        "did not complete a message within {:?} ({} bytes pending)",
                        limits.message_deadline,
                        conn.session.pending()
                    ),
                ))
            } else if over(conn.stalled_since, limits.message_deadline) {
                Some(DropReason::new(
                    DropKind::StoppedReading,
                    format!("took none of its answers for {:?}", limits.message_deadline),
                ))
            } else if limits
                .idle_timeout
                .is_some_and(|t| over(Some(conn.last_read), t) && conn.out.is_empty())
            {
                Some(DropReason::new(
                    DropKind::Idle,
                    format!(
                        "sent nothing for {:?} (--idle-timeout)",
                        limits.idle_timeout.unwrap_or_default()
                    ),
                ))
            } else {
                None
            };
            if let Some(r) = reason {
                self.close(slot, Some(r));
            }
        }
        if std::mem::take(&mut self.accept_retry) {
            self.accept_all();
        }
    }
}

/// Moves the answers made so far behind what is queued, writing them at once when nothing is queued.
fn queue_answers(conn: &mut Conn, answers: &mut Vec<u8>) {
    if answers.is_empty() {
        return;
    }
    let mut pos = 0;
    if conn.out.is_empty() {
        while pos < answers.len() {
            match conn.stream.write(&answers[pos..]) {
                Ok(n) => pos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // WouldBlock (queued below), or a failure the next flush reports.
                Err(_) => break,
            }
        }
    }
    if pos < answers.len() {
        conn.out.push_back(Out::Bytes {
            buf: answers[pos..].to_vec(),
            pos: 0,
        });
    }
    answers.clear();
}

/// Fills `buf` with the bytes of a generated stream from offset `from`, up to `end` (exclusive) and at most
/// the buffer's size: messages of `size` bytes, message `i` starting with `header(i)`, payload byte `j` of each
/// message being [`pattern`]`(j)`. Returns how many bytes were written.
fn generate(
    buf: &mut [u8],
    filler: &[u8],
    from: u64,
    size: u64,
    end: u64,
    header: impl Fn(u64) -> [u8; HEADER_LEN],
) -> usize {
    let mut n = 0usize;
    let mut off = from;
    while n < buf.len() && off < end {
        let i = off / size;
        let within = off % size;
        let message_end = ((i + 1) * size).min(end);
        if within < HEADER_LEN as u64 {
            let h = header(i);
            let take = (HEADER_LEN as u64 - within)
                .min(message_end - off)
                .min((buf.len() - n) as u64) as usize;
            buf[n..n + take].copy_from_slice(&h[within as usize..within as usize + take]);
            n += take;
            off += take as u64;
            continue;
        }
        // filler[j] == pattern(j), periodic in 256: start at the same phase.
        let take = (message_end - off).min((buf.len() - n) as u64) as usize;
        let phase = (within % 256) as usize;
        let take = take.min(filler.len() - phase);
        buf[n..n + take].copy_from_slice(&filler[phase..phase + take]);
        n += take;
        off += take as u64;
    }
    n
}

/// IPv4-mapped IPv6 addresses (a dual-stack listener's view of IPv4 clients) count as their IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The header of the `i`-th (from 0) message of `size` bytes of a reverse stream.
fn reverse_header(i: u64, size: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    Header {
        seq: i + 1,
        flags: Flags(0),
        len: size as u32,
    }
    .write(&mut h);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_streams_match_whole_messages() {
        let mut filler = vec![0u8; WRITE_BUF + 256];
        for (j, b) in filler.iter_mut().enumerate() {
            *b = pattern(j);
        }
        for size in [14u64, 15, 64, 300, 70_000, MAX_MESSAGE_LEN as u64] {
            let hdr = |i: u64| reverse_header(i, size);
            // Three whole messages, built directly.
            let mut want = Vec::new();
            for i in 0..3 {
                let mut m: Vec<u8> = (0..size as usize).map(pattern).collect();
                m[..HEADER_LEN].copy_from_slice(&hdr(i));
                want.extend(m);
            }
            // Generated in pieces of odd sizes.
            for piece in [1usize, 13, 1000, WRITE_BUF] {
                let mut got = Vec::new();
                let mut buf = vec![0u8; piece];
                while (got.len() as u64) < 3 * size {
                    let n = generate(&mut buf, &filler, got.len() as u64, size, 3 * size, hdr);
                    assert!(n > 0);
                    got.extend_from_slice(&buf[..n]);
                }
                assert_eq!(got, want, "size {size}, piece {piece}");
            }
        }
    }
}
