//! The TCP relay's event loops: a few threads (one per core) relay every connection, both directions, with
//! non-blocking sockets, and release delayed data from a timer heap.
//!
//! Per direction, by impairment:
//! - Pass-through (no delay, jitter or rate): bytes are written straight on. Small reads (ping-pong) use
//!   read and write; after a read of at least [`SPLICE_FROM`] the direction moves bulk data with splice(2),
//!   socket -> pipe -> socket, without copying it to user space (as HAProxy does). What the receiver cannot
//!   take yet waits in the pipe and the source is not read until it drained.
//! - Delay and jitter only: the bytes can wait in the pipe. Bulk data is spliced into the direction's pipe
//!   and spliced out at its release time, so a delayed bulk transfer is zero-copy too, as long as the pipe has
//!   room (the window in flight can be larger than a pipe: the rest is copied). Small reads are read with
//!   their kernel arrival stamp (SO_TIMESTAMPNS) and copied, so a ping's delay is measured from when it
//!   arrived, not from when the loop got to it.
//! - Rate limits: spliced bytes are counted like copied ones (the link only needs the byte count), so rate
//!   shaping splices too.
//! - Byte-triggered faults (`reset/stall/close after N bytes`): copied, since the relay must cut the stream
//!   at an exact byte; splicing resumes when no byte limit is planned.
//!
//! Release timing: the loop keeps a heap of the next release time of each connection. It arms a timerfd
//! (nanosecond, absolute deadline, 1 ns timer slack) for the [`delay::wake_margin`] before the earliest one,
//! and spins the rest of the margin polling its sockets without waiting (so other connections are relayed
//! meanwhile), the same wait-then-spin as [`delay::sleep_until`]: the oversleeps of the timer feed the same
//! adaptive margin. While it has delayed data pending, the loop thread runs at real-time priority when
//! permitted, and holds the CPU-latency request around releases when `--cpu-wake` is on.
#![allow(unsafe_code)] // splice through a pipe, pipe sizing and a zero-timeout poll of the relay

use super::delay::{self, CpusAwake, DelayLine, LoopTimer, Rng};
use super::faults::FaultKind;
use super::impairment::{DEFAULT_PATH_LIMIT, Way};
use super::rate::{self, Link};
use super::tcp::{Conn, Handoff, RESET, STALLED, finish};
use super::{Impairment, Shared};
use mio::unix::SourceFd;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// Read size of the relay.
pub const BUF: usize = 128 * 1024;

/// A read at least this large switches a direction to splice(2) for the next reads.
pub const SPLICE_FROM: usize = 16 * 1024;

/// A pass-through direction that splices keeps splicing while its reads are at least this large.
const STAY_SPLICED: usize = 2048;

/// How many reads one direction gets per turn before the loop serves the other connections.
const READS_PER_TURN: usize = 16;

/// How often a loop looks for idle connections and for the proxy stopping.
const SWEEP: Duration = Duration::from_millis(500);

const WAKER: mio::Token = mio::Token(usize::MAX);
const TIMER: mio::Token = mio::Token(usize::MAX - 1);

/// The event loops of one proxy; connections are handed to them in turn.
pub(crate) struct Loops {
    loops: Vec<(mpsc::Sender<Arc<Conn>>, Arc<mio::Waker>)>,
    next: AtomicUsize,
}

/// How many event loops a proxy runs: one per core.
pub fn loop_count() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 16))
}

impl Loops {
    /// Starts [`loop_count`] loop threads.
    pub(crate) fn start(shared: &Arc<Shared>) -> io::Result<Loops> {
        let mut loops = Vec::new();
        for i in 0..loop_count() {
            let poll = mio::Poll::new()?;
            let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER)?);
            let timer = LoopTimer::new()?;
            let (tx, rx) = mpsc::channel();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("proxy-loop-{i}"))
                .spawn(move || Loop::new(poll, timer, rx, shared).run())?;
            loops.push((tx, waker));
        }
        Ok(Loops {
            loops,
            next: AtomicUsize::new(0),
        })
    }
}

impl Handoff for Loops {
    /// Hands `conn` to a loop; gives it back when the loops are gone.
    fn hand(&self, conn: Arc<Conn>) -> Result<(), Arc<Conn>> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.loops.len();
        let (tx, waker) = &self.loops[i];
        tx.send(conn).map_err(|e| e.0)?;
        let _ = waker.wake();
        Ok(())
    }
}

/// A pipe for splice(2): data moves socket -> pipe -> socket inside the kernel, without copies to user space.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    /// Capacity in bytes.
    cap: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        use std::os::fd::FromRawFd;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two file descriptors into the array on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A bigger pipe moves more per call (best effort: the system may cap it).
        // SAFETY: fcntl on a descriptor we own.
        let cap = unsafe {
            libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, BUF as libc::c_int);
            libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ)
        };
        Ok(Pipe {
            r,
            w,
            cap: usize::try_from(cap).unwrap_or(4096).max(4096),
        })
    }
}

/// One non-blocking splice(2) call of at most `len` bytes.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    loop {
        // SAFETY: plain descriptors, null offsets (sockets and pipes have none).
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads exactly `buf.len()` bytes that are in the pipe already.
fn pipe_read(p: &Pipe, buf: &mut [u8]) -> io::Result<()> {
    (&std::fs::File::from(p.r.try_clone()?)).read_exact(buf)
}

enum What {
    /// Bytes copied out, and how many of them were written already.
    Bytes(Vec<u8>, usize),
    /// Bytes waiting in the direction's pipe.
    Piped(usize),
    /// The end of the stream (shutdown of the write side).
    Fin,
}

struct Chunk {
    release: Instant,
    what: What,
    /// Counted in the window: acknowledged one reverse delay after its release.
    windowed: bool,
    /// Its full length (for the window).
    len: usize,
}

/// One direction of a relayed connection.
struct Dir {
    queue: VecDeque<Chunk>,
    /// Bytes in the pipe (queued as `Piped`).
    piped: usize,
    pipe: Option<Pipe>,
    line: DelayLine,
    link: Link,
    stamped: bool,
    /// The last read was large: splice the next ones.
    bulk: bool,
    /// Nothing more is read from the source (end of file, a close fault).
    eof: bool,
    /// The FIN was passed on.
    done: bool,
    /// The window is full until this time.
    window_wait: Option<Instant>,
    /// The receiver could not take the chunk that is due: waiting for it to become writable.
    blocked: bool,
    /// The window was found full since the last read.
    window_was_full: bool,
}

impl Dir {
    fn new() -> Dir {
        Dir {
            queue: VecDeque::new(),
            piped: 0,
            pipe: None,
            line: DelayLine::new(Rng::from_entropy()),
            link: Link::new(),
            stamped: false,
            bulk: false,
            eof: false,
            done: false,
            window_wait: None,
            blocked: false,
            window_was_full: false,
        }
    }

    fn pipe(&mut self) -> Option<&Pipe> {
        if self.pipe.is_none() {
            self.pipe = Pipe::new().ok();
        }
        self.pipe.as_ref()
    }

    /// When this direction next needs the loop by time: its next release, or the window opening (a chunk
    /// that is due already waits for its receiver, which an event tells, not a timer).
    fn next_time(&self) -> Option<Instant> {
        let front = self
            .queue
            .front()
            .filter(|_| !self.blocked)
            .map(|c| c.release);
        match (front, self.window_wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

struct Relay {
    conn: Arc<Conn>,
    dirs: [Dir; 2],
    /// The earliest time this relay is in the heap for.
    timer: Option<Instant>,
}

/// How a turn of a relay ended.
enum Turn {
    /// Waiting for events or its timer.
    Wait,
    /// A direction had more to read: serve it again soon.
    Again,
    /// The connection is over.
    Closed,
}

/// How a direction's turn ended.
enum DirTurn {
    Wait,
    Again,
    /// The connection must end (a side failed, or a fault).
    End,
}

fn idx(way: Way) -> usize {
    match way {
        Way::Up => 0,
        Way::Down => 1,
    }
}

/// Release time of a FIN read now: behind the data already in the path, held `slow_close` longer.
impl Dir {
    /// Nothing more is read from the source: the FIN is queued behind what is on its way.
    fn end(&mut self, conn: &Conn, way: Way, imp: &Impairment) {
        self.eof = true;
        let at = fin_time(conn, way, imp, &self.line);
        self.queue.push_back(Chunk {
            release: at,
            what: What::Fin,
            windowed: false,
            len: 0,
        });
    }
}

fn fin_time(conn: &Conn, way: Way, imp: &Impairment, line: &DelayLine) -> Instant {
    let (d, _) = imp.one_way(way);
    let mut at = Instant::now() + d;
    if let Some(last) = line.last() {
        at = at.max(last);
    }
    at + conn.plan.slow_close()
}

/// True when a socket's peer closed or failed (poll without waiting).
fn hung_up(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, owned by this frame.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

impl Relay {
    fn turn(&mut self, buf: &mut [u8]) -> Turn {
        let conn = self.conn.clone();
        match conn.fault() {
            RESET => return Turn::Closed,
            STALLED => {
                // Nothing is relayed any more; the connection stays until a side closes.
                for d in &mut self.dirs {
                    d.queue.clear();
                    d.window_wait = None;
                }
                if conn.is_ended()
                    || hung_up(conn.client.as_raw_fd())
                    || hung_up(conn.server.as_raw_fd())
                {
                    conn.end();
                    return Turn::Closed;
                }
                return Turn::Wait;
            }
            _ => {}
        }
        if conn.is_ended() {
            return Turn::Closed;
        }
        let mut again = false;
        for way in [Way::Up, Way::Down] {
            match self.pump(&conn, way, buf) {
                DirTurn::Wait => {}
                DirTurn::Again => again = true,
                DirTurn::End => return Turn::Closed,
            }
        }
        if conn.fault() == RESET {
            return Turn::Closed;
        }
        if self.dirs.iter().all(|d| d.done) {
            return Turn::Closed;
        }
        if again { Turn::Again } else { Turn::Wait }
    }

    /// Writes what is due; false when the receiver cannot take more now. Err: the write failed.
    fn flush(&mut self, conn: &Conn, way: Way) -> Result<bool, ()> {
        let d = &mut self.dirs[idx(way)];
        let dst = conn.dst(way);
        d.blocked = true;
        let mut now = Instant::now();
        while let Some(c) = d.queue.front_mut() {
            if c.release > now {
                d.blocked = false;
                return Ok(true);
            }
            match &mut c.what {
                What::Bytes(v, off) => match (&*dst).write(&v[*off..]) {
                    Ok(n) => {
                        *off += n;
                        if *off < v.len() {
                            return Ok(false);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return Err(()),
                },
                What::Piped(left) => {
                    let p = d.pipe.as_ref().expect("piped data has a pipe");
                    match splice(p.r.as_raw_fd(), dst.as_raw_fd(), *left) {
                        Ok(0) => return Err(()),
                        Ok(n) => {
                            *left -= n;
                            d.piped -= n;
                            if *left > 0 {
                                return Ok(false);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(_) => return Err(()),
                    }
                }
                What::Fin => {
                    let _ = dst.shutdown(Shutdown::Write);
                    d.done = true;
                }
            }
            let c = d.queue.pop_front().expect("front");
            if c.windowed {
                now = Instant::now();
                let (back, _) = conn.shared.impairment().one_way(way.reverse());
                conn.window(way).ack_at(now + back, c.len as u64);
            }
        }
        d.blocked = false;
        Ok(true)
    }

    /// One turn of one direction: write what is due, then read while the receiver and the window allow.
    fn pump(&mut self, conn: &Conn, way: Way, buf: &mut [u8]) -> DirTurn {
        let src = conn.src(way);
        for _ in 0..READS_PER_TURN {
            match self.flush(conn, way) {
                Err(()) => {
                    conn.end();
                    return DirTurn::End;
                }
                Ok(false) => return DirTurn::Wait, // woken when the receiver can take more
                Ok(true) => {}
            }
            let f = conn.fault();
            if f == RESET || f == STALLED {
                return DirTurn::Wait;
            }
            let d = &mut self.dirs[idx(way)];
            if d.eof {
                return DirTurn::Wait;
            }
            let mut imp = conn.shared.impairment();
            let mut fast = imp.is_pass_through(way) && d.queue.is_empty();
            let (rate, total) = imp.rates(way);
            let no_limits = conn.plan.no_byte_limits();
            let mut want = match rate.into_iter().chain(total).min() {
                Some(bps) => rate::chunk_for_rate(bps),
                None => BUF,
            };
            // Splice when bulk, no byte limit must cut the stream, and the pipe has room (a delayed
            // direction's pipe holds the bytes until their release).
            let room = if d.bulk && no_limits {
                let cap = d.pipe().map_or(0, |p| p.cap);
                cap.saturating_sub(d.piped)
            } else {
                0
            };
            let use_splice = room >= SPLICE_FROM.min(want);
            if use_splice {
                want = want.min(room);
            } else {
                want = want.min(conn.plan.room()).min(buf.len()).max(1);
            }
            let window = conn.window(way);
            d.window_wait = None;
            let reserved = if fast {
                want
            } else {
                match window.try_reserve(want, imp.window_bytes.unwrap_or(DEFAULT_PATH_LIMIT)) {
                    Ok(0) => return DirTurn::Wait, // closed: a fault or the end
                    Ok(n) => n,
                    Err(t) => {
                        d.window_wait = t;
                        d.window_was_full = true;
                        return DirTurn::Wait;
                    }
                }
            };
            // Data that waited in the socket buffer for a full window entered the emulated path only when
            // the window opened; otherwise its kernel arrival stamp counts.
            let window_open = std::mem::take(&mut d.window_was_full).then(Instant::now);
            let read = if use_splice {
                let p = d.pipe.as_ref().expect("pipe");
                splice(src.as_raw_fd(), p.w.as_raw_fd(), reserved).map(|n| (n, Instant::now()))
            } else if fast {
                (&*src)
                    .read(&mut buf[..reserved])
                    .map(|n| (n, Instant::now()))
            } else {
                if !d.stamped {
                    d.stamped = delay::enable_rx_timestamps(src);
                }
                delay::read_stamped(src.as_raw_fd(), &mut buf[..reserved])
            };
            let (n, arrival) = match read {
                Ok((n, stamp)) => (n, window_open.map_or(stamp, |w| stamp.max(w))),
                Err(e) => {
                    if !fast {
                        window.unreserve(reserved);
                    }
                    match e.kind() {
                        io::ErrorKind::Interrupted => continue,
                        io::ErrorKind::WouldBlock => return DirTurn::Wait,
                        io::ErrorKind::ConnectionReset if conn.fault() == super::tcp::OPEN => {
                            conn.reset(); // pass the peer's RST on
                        }
                        _ => conn.end(),
                    }
                    return DirTurn::End;
                }
            };
            conn.touch();
            if !fast {
                window.unreserve(reserved - n);
            }
            if use_splice {
                d.piped += n;
            }
            // Pass-through stays with splice until the reads get small (a stream under load arrives in
            // pieces); a delayed direction copies reads below SPLICE_FROM, to keep their kernel arrival stamps.
            d.bulk = n >= SPLICE_FROM || (use_splice && fast && n >= STAY_SPLICED);
            // The impairment may have changed since it was read: the data follows the new one.
            let now_imp = conn.shared.impairment();
            if !Arc::ptr_eq(&imp, &now_imp) {
                if fast && !now_imp.is_pass_through(way) {
                    window.charge(n);
                    fast = false;
                }
                imp = now_imp;
            }
            if n == 0 {
                d.end(conn, way, &imp);
                continue;
            }
            let (keep, fired) = if conn.plan.no_byte_limits() {
                (n, None)
            } else {
                conn.plan.account(n)
            };
            let mut what = if use_splice {
                What::Piped(n)
            } else {
                What::Bytes(Vec::new(), 0)
            };
            if use_splice && keep < n {
                // A byte limit arrived while the data was in the pipe: take it out to cut it exactly.
                let p = d.pipe.as_ref().expect("pipe");
                if pipe_read(p, &mut buf[..n]).is_err() {
                    conn.end();
                    return DirTurn::End;
                }
                d.piped -= n;
                what = What::Bytes(Vec::new(), 0);
            }
            if keep > 0 {
                conn.count(way, keep as u64);
                let release = if fast {
                    arrival
                } else {
                    let mut ready = arrival;
                    if let Some(bps) = rate {
                        ready = d.link.transmit(arrival, keep as u64, bps);
                    }
                    if let Some(bps) = total {
                        let t = conn.shared.total_link(way).lock().expect("link").transmit(
                            arrival,
                            keep as u64,
                            bps,
                        );
                        ready = ready.max(t);
                    }
                    let (dl, j) = imp.one_way(way);
                    d.line.release(ready, dl, j, imp.jitter_dist)
                };
                if let What::Bytes(v, _) = &mut what {
                    if fast {
                        // Pass-through: straight on; only what the receiver cannot take is kept.
                        match conn.dst(way).write(&buf[..keep]) {
                            Ok(w) if w == keep => {}
                            Ok(w) => v.extend_from_slice(&buf[w..keep]),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                v.extend_from_slice(&buf[..keep])
                            }
                            Err(_) => {
                                conn.end();
                                return DirTurn::End;
                            }
                        }
                    } else {
                        v.extend_from_slice(&buf[..keep]);
                    }
                }
                let empty = matches!(&what, What::Bytes(v, _) if v.is_empty());
                if !empty {
                    d.queue.push_back(Chunk {
                        release,
                        what,
                        windowed: !fast,
                        len: keep,
                    });
                }
            }
            if !fast && keep < n {
                window.unreserve(n - keep);
            }
            if let Some(kind) = fired {
                conn.fire(kind);
                if kind == FaultKind::Close {
                    let d = &mut self.dirs[idx(way)];
                    d.end(conn, way, &imp);
                }
            }
        }
        // Read budget used up: flush what is due and come back for the rest.
        match self.flush(conn, way) {
            Err(()) => {
                conn.end();
                DirTurn::End
            }
            Ok(_) => DirTurn::Again,
        }
    }

    fn next_time(&self) -> Option<Instant> {
        match (self.dirs[0].next_time(), self.dirs[1].next_time()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One event loop thread.
struct Loop {
    poll: mio::Poll,
    timer: LoopTimer,
    rx: mpsc::Receiver<Arc<Conn>>,
    shared: Arc<Shared>,
    relays: Vec<Option<Relay>>,
    free: Vec<usize>,
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
    again: Vec<usize>,
    buf: Vec<u8>,
}

impl Loop {
    fn new(
        poll: mio::Poll,
        timer: LoopTimer,
        rx: mpsc::Receiver<Arc<Conn>>,
        shared: Arc<Shared>,
    ) -> Loop {
        Loop {
            poll,
            timer,
            rx,
            shared,
            relays: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            again: Vec::new(),
            buf: vec![0u8; BUF],
        }
    }

    fn run(mut self) {
        delay::precise_timers_for_this_thread();
        let _ = self.poll.registry().register(
            &mut SourceFd(&self.timer.raw_fd()),
            TIMER,
            mio::Interest::READABLE,
        );
        let mut events = mio::Events::with_capacity(1024);
        let mut last_sweep = Instant::now();
        let mut realtime = false;
        let mut touched = Vec::new();
        let mut awake: Option<CpusAwake> = None;
        loop {
            // Wait: until the margin before the next release (timerfd), then spin without waiting, keeping
            // idle CPUs awake (when asked) until the release was written.
            let now = Instant::now();
            let spin = matches!(self.heap.peek(), Some(Reverse((t, _))) if *t <= now + delay::wake_margin());
            if spin {
                awake.get_or_insert_with(CpusAwake::hold);
            } else {
                awake = None;
            }
            let timeout = match self.heap.peek() {
                _ if spin || !self.again.is_empty() => Some(Duration::ZERO),
                Some(Reverse((t, _))) => {
                    self.timer.arm(*t - delay::wake_margin());
                    Some(SWEEP)
                }
                None => Some(SWEEP),
            };
            // Delayed data pending: this thread must wake on time even on a loaded machine.
            // Delayed data pending, or a delay in force (arrivals must be read on time too): this thread must
            // wake on time even on a loaded machine.
            let want_rt = !self.heap.is_empty() || {
                let imp = self.shared.impairment();
                !imp.is_pass_through(Way::Up) || !imp.is_pass_through(Way::Down)
            };
            if want_rt != realtime {
                if want_rt {
                    delay::realtime_for_this_thread();
                } else {
                    delay::normal_for_this_thread();
                }
                realtime = want_rt;
            }
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != io::ErrorKind::Interrupted
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            touched.clear();
            let mut newcomers = false;
            for e in events.iter() {
                match e.token() {
                    WAKER => newcomers = true,
                    TIMER => self.timer.fired(),
                    t => touched.push(t.0 / 2),
                }
            }
            if newcomers {
                self.admit();
            }
            for &slot in &touched {
                self.serve(slot);
            }
            let now = Instant::now();
            while let Some(&Reverse((t, slot))) = self.heap.peek() {
                if t > now {
                    break;
                }
                self.heap.pop();
                if let Some(Some(r)) = self.relays.get_mut(slot)
                    && r.timer.is_some_and(|rt| rt <= now)
                {
                    r.timer = None;
                }
                self.serve(slot);
            }
            for slot in std::mem::take(&mut self.again) {
                self.serve(slot);
            }
            if last_sweep.elapsed() >= SWEEP {
                last_sweep = Instant::now();
                self.sweep();
                if self.shared.stopping() && self.relays.iter().all(Option::is_none) {
                    return;
                }
            }
        }
    }

    /// Takes the connections handed to this loop.
    fn admit(&mut self) {
        while let Ok(conn) = self.rx.try_recv() {
            let slot = self.free.pop().unwrap_or_else(|| {
                self.relays.push(None);
                self.relays.len() - 1
            });
            let ok = [(&conn.client, 0), (&conn.server, 1)].iter().all(|(s, i)| {
                self.poll
                    .registry()
                    .register(
                        &mut SourceFd(&s.as_raw_fd()),
                        mio::Token(2 * slot + i),
                        mio::Interest::READABLE | mio::Interest::WRITABLE,
                    )
                    .is_ok()
            });
            self.relays[slot] = Some(Relay {
                conn: conn.clone(),
                dirs: [Dir::new(), Dir::new()],
                timer: None,
            });
            if ok {
                self.again.push(slot);
            } else {
                conn.reset();
                self.close(slot);
            }
        }
    }

    /// Gives one relay its turn.
    fn serve(&mut self, slot: usize) {
        let Some(Some(r)) = self.relays.get_mut(slot) else {
            return;
        };
        match r.turn(&mut self.buf) {
            Turn::Closed => self.close(slot),
            t => {
                if matches!(t, Turn::Again) {
                    self.again.push(slot);
                }
                if let Some(next) = r.next_time()
                    && r.timer.is_none_or(|s| next < s)
                {
                    r.timer = Some(next);
                    self.heap.push(Reverse((next, slot)));
                }
            }
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(r) = self.relays[slot].take() {
            for s in [&r.conn.client, &r.conn.server] {
                let _ = self
                    .poll
                    .registry()
                    .deregister(&mut SourceFd(&s.as_raw_fd()));
            }
            finish(&r.conn);
            self.free.push(slot);
        }
    }

    /// Closes the connections quiet for the idle timeout.
    fn sweep(&mut self) {
        let Some(idle) = self.shared.idle_timeout else {
            return;
        };
        for slot in 0..self.relays.len() {
            let quiet = match &self.relays[slot] {
                Some(r) => r.conn.quiet_for() >= idle,
                None => false,
            };
            if quiet {
                let r = self.relays[slot].as_ref().expect("relay");
                if r.conn.reset() {
                    self.shared
                        .totals()
                        .idle_closed
                        .fetch_add(1, Ordering::Relaxed);
                }
                self.close(slot);
            }
        }
    }
}
