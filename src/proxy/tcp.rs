//! The TCP relay: accepts clients, connects each to the upstream, and relays both directions through their
//! delay lines.
//!
//! Per connection: one reader thread per direction; a direction with no impairment is written straight
//! through by its reader. Otherwise the reader stamps each chunk with its release time (rate, then delay and
//! jitter, order kept) and hands it to that direction's releasing thread, which sleeps precisely to the release
//! time and writes it. Window emulation makes the reader wait while `--window` bytes are unacknowledged.
//! A FIN travels the same delay line as the data before it, so a half-close arrives after the data.
//!
//! A connection holds no thread until it carries a byte: once connected upstream it waits in the lobby (one
//! thread, one poll for every waiting connection) and gets its pumps when either side sends something (or
//! closes). So idle connections, even 10,000 of them, cost sockets and a few hundred bytes each, not threads;
//! the lobby also closes those that stay quiet past the idle timeout.

use super::delay::{self, DelayLine, Rng};
use super::faults::{FaultKind, FaultPlan};
use super::impairment::{DEFAULT_PATH_LIMIT, Way};
use super::rate::{self, Link};
use super::window::Window;
use super::{ConnCounters, ProxyError, Shared};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Read size of the relay.
const BUF: usize = 128 * 1024;

/// A read at least this large switches a pass-through direction to splice(2) for the next read.
const SPLICE_FROM: usize = 16 * 1024;

/// Binds the listener and starts the accept thread.
pub(crate) fn start(
    listen: SocketAddr,
    shared: Arc<Shared>,
) -> Result<(SocketAddr, JoinHandle<()>), ProxyError> {
    let bind_err = |source| ProxyError::Bind {
        what: "tcp clients",
        addr: listen,
        source,
    };
    let listener = TcpListener::bind(listen).map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let lobby = Lobby::start(shared.clone()).map_err(bind_err)?;
    let thread = std::thread::Builder::new()
        .name("proxy-accept".into())
        .spawn(move || accept_loop(listener, shared, lobby))
        .map_err(bind_err)?;
    Ok((addr, thread))
}

/// Where connected but silent connections wait for their first byte, without threads.
#[derive(Clone)]
struct Lobby {
    tx: mpsc::Sender<Arc<Conn>>,
    waker: Arc<mio::Waker>,
}

const LOBBY_WAKER: mio::Token = mio::Token(usize::MAX);
/// How often the lobby looks for idle connections and for the proxy stopping.
const LOBBY_SWEEP: Duration = Duration::from_millis(500);

impl Lobby {
    fn start(shared: Arc<Shared>) -> io::Result<Lobby> {
        let poll = mio::Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), LOBBY_WAKER)?);
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("proxy-lobby".into())
            .spawn(move || lobby_loop(poll, &rx, &shared))?;
        Ok(Lobby { tx, waker })
    }

    /// Hands `conn` to the lobby; gives it back when the lobby is gone.
    fn park(&self, conn: Arc<Conn>) -> Result<(), Arc<Conn>> {
        self.tx.send(conn).map_err(|e| e.0)?;
        let _ = self.waker.wake();
        Ok(())
    }
}

fn lobby_loop(mut poll: mio::Poll, rx: &mpsc::Receiver<Arc<Conn>>, shared: &Shared) {
    use mio::unix::SourceFd;
    let mut events = mio::Events::with_capacity(256);
    let mut waiting: std::collections::HashMap<usize, Arc<Conn>> = Default::default();
    let mut next = 0usize;
    let mut last_sweep = Instant::now();
    let forget = |poll: &mio::Poll, c: &Conn| {
        for s in [&c.client, &c.server] {
            let _ = poll.registry().deregister(&mut SourceFd(&s.as_raw_fd()));
        }
    };
    loop {
        if poll.poll(&mut events, Some(LOBBY_SWEEP)).is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
        if shared.stopping() {
            for c in waiting.values() {
                finish(c);
            }
            return;
        }
        let mut woken = Vec::new();
        for e in events.iter() {
            if e.token() == LOBBY_WAKER {
                continue;
            }
            woken.push(e.token().0 / 2);
        }
        // Newcomers (registered after this round's events: a socket already readable is reported at once).
        while let Ok(c) = rx.try_recv() {
            let k = next;
            next = next.wrapping_add(1) % (usize::MAX / 2 - 1);
            let ok = [(&c.client, 0), (&c.server, 1)].iter().all(|(s, i)| {
                poll.registry()
                    .register(
                        &mut SourceFd(&s.as_raw_fd()),
                        mio::Token(2 * k + i),
                        mio::Interest::READABLE,
                    )
                    .is_ok()
            });
            if ok {
                waiting.insert(k, c);
            } else {
                forget(&poll, &c);
                wake_up(c);
            }
        }
        for k in woken {
            if let Some(c) = waiting.remove(&k) {
                forget(&poll, &c);
                wake_up(c);
            }
        }
        if last_sweep.elapsed() >= LOBBY_SWEEP {
            last_sweep = Instant::now();
            if let Some(idle) = shared.idle_timeout {
                waiting.retain(|_, c| {
                    if c.quiet_for() < idle {
                        return true;
                    }
                    forget(&poll, c);
                    if c.reset() {
                        shared.totals().idle_closed.fetch_add(1, Ordering::Relaxed);
                    }
                    finish(c);
                    false
                });
            }
        }
    }
}

/// Gives a connection that has something to relay its pumps.
fn wake_up(conn: Arc<Conn>) {
    let c = conn.clone();
    let spawned = std::thread::Builder::new()
        .name("proxy-conn".into())
        .spawn(move || run_pumps(&c));
    if spawned.is_err() {
        conn.reset();
        finish(&conn);
    }
}

/// Relays both directions until both end, then stops the fault timer.
fn run_pumps(conn: &Arc<Conn>) {
    let up = {
        let conn = conn.clone();
        std::thread::Builder::new()
            .name("proxy-up".into())
            .spawn(move || pump(&conn, Way::Up))
    };
    match up {
        Ok(up) => {
            pump(conn, Way::Down);
            let _ = up.join();
        }
        Err(_) => conn.end(),
    }
    finish(conn);
}

/// Stops the fault timer of a connection that is over.
fn finish(conn: &Conn) {
    conn.timer_done.store(true, Ordering::SeqCst);
    let timer = conn.timer.lock().expect("fault timer").take();
    if let Some(t) = timer {
        t.thread().unpark();
        if t.thread().id() != std::thread::current().id() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, lobby: Lobby) {
    loop {
        let accepted = listener.accept();
        if shared.stopping() {
            return;
        }
        match accepted {
            Ok((client, peer)) => {
                let t = shared.totals();
                if t.active.load(Ordering::SeqCst) >= shared.max_clients as u64 {
                    // Over the limit: closed at once, with a reset (no TIME_WAIT kept for it).
                    t.refused.fetch_add(1, Ordering::Relaxed);
                    let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
                    continue;
                }
                t.accepted.fetch_add(1, Ordering::Relaxed);
                t.active.fetch_add(1, Ordering::SeqCst);
                let (shared2, lobby2) = (shared.clone(), lobby.clone());
                let spawned = std::thread::Builder::new()
                    .name("proxy-connect".into())
                    .spawn(move || handle(client, peer, shared2, &lobby2));
                if spawned.is_err() {
                    t.active.fetch_sub(1, Ordering::SeqCst);
                    // Out of threads: the client's socket was dropped with the closure (closed); keep serving.
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            // Out of file descriptors or a client that went away before accept: keep running.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

const OPEN: u8 = 0;
const RESET: u8 = 1;
const STALLED: u8 = 2;
const CLOSING: u8 = 3;

/// One relayed TCP connection.
pub(crate) struct Conn {
    client: TcpStream,
    server: TcpStream,
    plan: FaultPlan,
    fault: AtomicU8,
    windows: [Window; 2],
    counters: Arc<ConnCounters>,
    shared: Arc<Shared>,
    ended: AtomicBool,
    /// The thread firing time-triggered faults, once one is planned.
    timer: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// Tells the fault timer to stop (the connection is over).
    timer_done: AtomicBool,
    /// When a byte was last read from either side, in nanoseconds since the connection started.
    last_read_ns: AtomicU64,
    /// Counts the connection as active until it is dropped.
    _active: ActiveGuard,
}

fn idx(way: Way) -> usize {
    match way {
        Way::Up => 0,
        Way::Down => 1,
    }
}

impl Conn {
    fn src(&self, way: Way) -> &TcpStream {
        match way {
            Way::Up => &self.client,
            Way::Down => &self.server,
        }
    }
    fn dst(&self, way: Way) -> &TcpStream {
        self.src(way.reverse())
    }
    fn fault(&self) -> u8 {
        self.fault.load(Ordering::SeqCst)
    }
    fn window(&self, way: Way) -> &Window {
        &self.windows[idx(way)]
    }
    fn age_ns(&self) -> u64 {
        self.counters.started.elapsed().as_nanos() as u64
    }
    /// How long neither side sent anything.
    fn quiet_for(&self) -> Duration {
        Duration::from_nanos(
            self.age_ns()
                .saturating_sub(self.last_read_ns.load(Ordering::Relaxed)),
        )
    }
    fn count(&self, way: Way, n: u64) {
        let t = self.shared.totals();
        match way {
            Way::Up => {
                self.counters.bytes_up.fetch_add(n, Ordering::Relaxed);
                t.bytes_up.fetch_add(n, Ordering::Relaxed);
            }
            Way::Down => {
                self.counters.bytes_down.fetch_add(n, Ordering::Relaxed);
                t.bytes_down.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Makes both sides see a RST: linger 0 and the sockets are closed once every thread let go of them;
    /// shutting down the read side wakes the readers without sending anything.
    /// True for the call that reset it (false when it was reset already).
    fn reset(&self) -> bool {
        if self.fault.swap(RESET, Ordering::SeqCst) == RESET {
            return false;
        }
        for s in [&self.client, &self.server] {
            let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
            let _ = s.shutdown(Shutdown::Read);
        }
        self.end();
        true
    }

    /// Ends the connection (a side failed): wakes everybody.
    fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        for w in &self.windows {
            w.close();
        }
        if self.fault() != RESET {
            for s in [&self.client, &self.server] {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Starts the fault timer thread when a time-triggered fault is planned, or wakes it to read the new plan.
    fn start_fault_timer(self: &Arc<Self>) {
        if self.plan.next_timer().is_none() {
            return;
        }
        let mut t = self.timer.lock().expect("fault timer");
        match t.as_ref() {
            Some(h) => h.thread().unpark(),
            None if !self.timer_done.load(Ordering::SeqCst) => {
                let conn = self.clone();
                *t = std::thread::Builder::new()
                    .name("proxy-faults".into())
                    .spawn(move || fault_timer(conn))
                    .ok();
            }
            None => {}
        }
    }

    /// Follows an impairment set while the connection is open: its faults apply from now on (the other
    /// settings are read chunk by chunk anyway).
    pub(crate) fn impairment_changed(self: &Arc<Self>, imp: &super::Impairment, now: Instant) {
        if self.plan.replan(imp, now) {
            self.start_fault_timer();
        }
    }

    fn fire(&self, kind: FaultKind) {
        let t = self.shared.totals();
        match kind {
            FaultKind::Reset => {
                if self.fault() != RESET {
                    t.fault_resets.fetch_add(1, Ordering::Relaxed);
                }
                self.reset();
            }
            FaultKind::Stall => {
                if self
                    .fault
                    .compare_exchange(OPEN, STALLED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    t.fault_stalls.fetch_add(1, Ordering::Relaxed);
                    for w in &self.windows {
                        w.close();
                    }
                }
            }
            FaultKind::Close => {
                if self
                    .fault
                    .compare_exchange(OPEN, CLOSING, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    t.fault_closes.fetch_add(1, Ordering::Relaxed);
                    // Both readers see end-of-file next and pass a FIN on behind the data already in the path.
                    for s in [&self.client, &self.server] {
                        let _ = s.shutdown(Shutdown::Read);
                    }
                }
            }
        }
    }
}

fn connect_upstream(shared: &Shared) -> io::Result<(TcpStream, SocketAddr)> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no upstream address");
    for &a in &shared.upstream {
        match TcpStream::connect_timeout(&a, shared.connect_timeout) {
            Ok(s) => return Ok((s, a)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Closes a client cleanly (FIN, not RST): shut down our side, read what it sent until it closes too (or a
/// short while passed), then close.
fn clean_close(client: TcpStream) {
    let _ = client.shutdown(Shutdown::Write);
    let _ = client.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 4096];
    let mut c = &client;
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

struct ActiveGuard(Arc<Shared>, u64);
impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.totals().active.fetch_sub(1, Ordering::Relaxed);
        self.0.unregister(self.1);
    }
}

/// Connects one accepted client upstream (it was counted in `active` by the accept loop; the connection's
/// guard releases it) and parks it in the lobby until it has something to relay.
fn handle(client: TcpStream, peer: SocketAddr, shared: Arc<Shared>, lobby: &Lobby) {
    let t = shared.totals();
    let counters = shared.register(peer);
    let guard = ActiveGuard(shared.clone(), counters.id);
    let started = counters.started;
    let imp = shared.impairment();
    let (server, upstream) = match connect_upstream(&shared) {
        Ok(s) => s,
        Err(_) => {
            t.upstream_failures.fetch_add(1, Ordering::Relaxed);
            clean_close(client);
            return;
        }
    };
    *counters.upstream.lock().expect("upstream") = Some(upstream);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    if let Some(idle) = shared.idle_timeout {
        // A read that waits this long wakes its pump, which closes the connection if the other side was
        // quiet as well.
        let _ = client.set_read_timeout(Some(idle));
        let _ = server.set_read_timeout(Some(idle));
    }
    let conn = Arc::new(Conn {
        client,
        server,
        plan: FaultPlan::from_impairment(&imp, started),
        fault: AtomicU8::new(OPEN),
        windows: [Window::new(), Window::new()],
        counters,
        shared: shared.clone(),
        ended: AtomicBool::new(false),
        timer: std::sync::Mutex::new(None),
        timer_done: AtomicBool::new(false),
        last_read_ns: AtomicU64::new(0),
        _active: guard,
    });
    shared.watch(conn.counters.id, Arc::downgrade(&conn));
    // The impairment may have changed between the accept and the watch: plan again if so.
    let now_imp = shared.impairment();
    if !Arc::ptr_eq(&imp, &now_imp) {
        conn.plan.replan(&now_imp, Instant::now());
    }
    conn.start_fault_timer();
    if let Err(conn) = lobby.park(conn) {
        run_pumps(&conn);
    }
}

/// Fires the time-triggered faults of `conn` at their times; unparked when the plan changes or the connection
/// ends.
fn fault_timer(conn: Arc<Conn>) {
    while !conn.timer_done.load(Ordering::SeqCst) {
        let now = Instant::now();
        if let Some(kind) = conn.plan.take_due_timer(now) {
            conn.fire(kind);
            continue;
        }
        match conn.plan.next_timer() {
            Some((at, _)) => std::thread::park_timeout(at - now),
            None => std::thread::park(),
        }
    }
}

enum Item {
    Data { release: Instant, bytes: Vec<u8> },
    Fin { at: Instant },
}

struct Releaser {
    tx: mpsc::Sender<Item>,
    pending: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

fn releaser(conn: &Arc<Conn>, way: Way) -> io::Result<Releaser> {
    let (tx, rx) = mpsc::channel::<Item>();
    let pending = Arc::new(AtomicU64::new(0));
    let (c, p) = (conn.clone(), pending.clone());
    let thread = std::thread::Builder::new()
        .name(format!("proxy-release-{}", way.name()))
        .spawn(move || release_loop(&c, way, rx, &p))?;
    Ok(Releaser {
        tx,
        pending,
        thread,
    })
}

fn release_loop(conn: &Conn, way: Way, rx: mpsc::Receiver<Item>, pending: &AtomicU64) {
    delay::precise_timers_for_this_thread();
    delay::realtime_for_this_thread();
    let mut failed = false;
    for item in rx {
        match item {
            Item::Data { release, bytes } => {
                let n = bytes.len() as u64;
                let f = conn.fault();
                if !failed && f != RESET && f != STALLED {
                    let awake = delay::sleep_until(release);
                    let written = conn.dst(way).write_all(&bytes);
                    drop(awake);
                    if written.is_err() {
                        failed = true;
                        conn.end();
                    } else {
                        let (back, _) = conn.shared.impairment().one_way(way.reverse());
                        conn.window(way).ack_at(Instant::now() + back, n);
                    }
                }
                pending.fetch_sub(n, Ordering::Release);
            }
            Item::Fin { at } => {
                if !failed && conn.fault() != RESET {
                    let _awake = delay::sleep_until(at);
                    let _ = conn.dst(way).shutdown(Shutdown::Write);
                }
            }
        }
    }
}

/// Waits while a stalled connection stays open; returns when a side closed (or the connection ended).
fn stall_wait(conn: &Conn, way: Way) {
    let fd = conn.src(way).as_raw_fd();
    while !conn.ended.load(Ordering::SeqCst) && conn.fault() == STALLED {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, owned by this frame; the socket outlives the call (conn holds it).
        let r = unsafe { libc::poll(&mut p, 1, 100) };
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
        if r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
            conn.end();
            break;
        }
    }
}

/// Relays one direction until end-of-file, failure or a fault.
fn pump(conn: &Arc<Conn>, way: Way) {
    let src = conn.src(way);
    let mut buf = vec![0u8; BUF];
    let mut rel: Option<Releaser> = None;
    let mut line = DelayLine::new(Rng::from_entropy());
    let mut link = Link::new();
    let window = conn.window(way);
    let mut realtime: Option<bool> = None;
    let mut stamped = false;
    let pipe = Pipe::new().ok();
    let mut bulk = false;
    loop {
        match conn.fault() {
            STALLED => {
                stall_wait(conn, way);
                break;
            }
            RESET => break,
            _ => {}
        }
        if conn.ended.load(Ordering::SeqCst) {
            break;
        }
        let mut imp = conn.shared.impairment();
        let pending = rel
            .as_ref()
            .map_or(0, |r| r.pending.load(Ordering::Acquire));
        let mut fast = imp.is_pass_through(way) && pending == 0;
        // A delayed direction stamps arrivals: its reader must wake on time too, even on a loaded machine.
        if realtime != Some(!fast) {
            if fast {
                delay::normal_for_this_thread();
            } else {
                delay::realtime_for_this_thread();
            }
            realtime = Some(!fast);
        }
        let (rate, total) = imp.rates(way);
        // Splice pays off for bulk data; small messages (ping-pong) are cheaper with plain read and write.
        let use_splice = fast && bulk && conn.plan.no_byte_limits() && pipe.is_some();
        let mut want = match rate.into_iter().chain(total).min() {
            Some(bps) => rate::chunk_for_rate(bps),
            None => BUF,
        };
        if !use_splice {
            want = want.min(conn.plan.room()).max(1);
        }
        let reserved = if fast {
            want
        } else {
            window.reserve(want, imp.window_bytes.unwrap_or(DEFAULT_PATH_LIMIT))
        };
        if reserved == 0 {
            continue; // window closed: a fault or the end; the checks above decide
        }
        // Data that waited in the socket buffer for the window to open entered the emulated path only now.
        let window_open = Instant::now();
        let read = if use_splice {
            let p = pipe.as_ref().expect("pipe");
            splice(src.as_raw_fd(), p.w.as_raw_fd(), reserved).map(|n| (n, Instant::now()))
        } else if fast {
            (&*src)
                .read(&mut buf[..reserved])
                .map(|n| (n, Instant::now()))
        } else {
            if !stamped {
                stamped = delay::enable_rx_timestamps(src.as_raw_fd());
            }
            delay::read_stamped(src.as_raw_fd(), &mut buf[..reserved])
        };
        let (n, arrival) = match read {
            Ok((n, stamp)) => {
                conn.last_read_ns.store(conn.age_ns(), Ordering::Relaxed);
                (n, stamp.max(window_open))
            }
            Err(e) => {
                if !fast {
                    window.unreserve(reserved);
                }
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && let Some(idle) = conn.shared.idle_timeout
                {
                    let quiet = conn.quiet_for();
                    if quiet < idle {
                        // The other direction was busy: wait for the rest of the idle time.
                        let rest = (idle - quiet).max(Duration::from_millis(10));
                        let _ = src.set_read_timeout(Some(rest));
                        continue;
                    }
                    if conn.reset() {
                        conn.shared
                            .totals()
                            .idle_closed
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
                if e.kind() == io::ErrorKind::ConnectionReset && conn.fault() == OPEN {
                    conn.reset(); // pass the peer's RST on
                } else {
                    conn.end();
                }
                break;
            }
        };
        if !fast {
            window.unreserve(reserved - n);
        }
        let f = conn.fault();
        if f == RESET || f == STALLED {
            if !fast {
                window.unreserve(n);
            }
            continue;
        }
        // The impairment may have changed while this thread waited in read: the data follows the new one.
        let now_imp = conn.shared.impairment();
        if !Arc::ptr_eq(&imp, &now_imp) {
            if fast && !now_imp.is_pass_through(way) {
                window.charge(n);
                fast = false;
            }
            imp = now_imp;
        }
        bulk = n >= SPLICE_FROM;
        if use_splice && n > 0 {
            let p = pipe.as_ref().expect("pipe");
            if fast {
                // Zero-copy pass-through: socket -> pipe -> socket.
                conn.count(way, n as u64);
                if splice_all(p.r.as_raw_fd(), conn.dst(way).as_raw_fd(), n).is_err() {
                    conn.end();
                    break;
                }
                continue;
            }
            // The impairment arrived while the data sat in the pipe: take it out and delay it.
            if buf.len() < n {
                buf.resize(n, 0);
            }
            if (&std::fs::File::from(p.r.try_clone().expect("pipe fd")))
                .read_exact(&mut buf[..n])
                .is_err()
            {
                conn.end();
                break;
            }
        }
        if n == 0 {
            send_fin(conn, way, &imp, &line, rel.as_ref());
            break;
        }
        let (keep, fired) = if conn.plan.no_byte_limits() {
            (n, None)
        } else {
            conn.plan.account(n)
        };
        if keep > 0 {
            conn.count(way, keep as u64);
            if fast {
                if conn.dst(way).write_all(&buf[..keep]).is_err() {
                    conn.end();
                    break;
                }
            } else {
                let mut ready = arrival;
                if let Some(bps) = rate {
                    ready = link.transmit(arrival, keep as u64, bps);
                }
                if let Some(bps) = total {
                    let t = conn.shared.total_link(way).lock().expect("link").transmit(
                        arrival,
                        keep as u64,
                        bps,
                    );
                    ready = ready.max(t);
                }
                let (d, j) = imp.one_way(way);
                let release = line.release(ready, d, j, imp.jitter_dist);
                if rel.is_none() {
                    match releaser(conn, way) {
                        Ok(r) => rel = Some(r),
                        Err(_) => {
                            conn.end();
                            break;
                        }
                    }
                }
                let r = rel.as_ref().expect("releaser started");
                r.pending.fetch_add(keep as u64, Ordering::Release);
                let _ = r.tx.send(Item::Data {
                    release,
                    bytes: buf[..keep].to_vec(),
                });
            }
        }
        if !fast && keep < n {
            window.unreserve(n - keep);
        }
        if let Some(kind) = fired {
            conn.fire(kind);
            if kind == FaultKind::Close {
                send_fin(conn, way, &imp, &line, rel.as_ref());
                break;
            }
        }
    }
    if realtime == Some(true) {
        delay::normal_for_this_thread();
    }
    if let Some(r) = rel {
        drop(r.tx);
        let _ = r.thread.join();
    }
}

/// Passes a FIN on behind the data already in the path, held `slow_close` longer when asked.
fn send_fin(
    conn: &Conn,
    way: Way,
    imp: &super::Impairment,
    line: &DelayLine,
    rel: Option<&Releaser>,
) {
    let (d, _) = imp.one_way(way);
    let mut at = Instant::now() + d;
    if let Some(last) = line.last() {
        at = at.max(last);
    }
    at += conn.plan.slow_close();
    match rel {
        Some(r) => {
            let _ = r.tx.send(Item::Fin { at });
        }
        None => {
            let _awake = delay::sleep_until(at);
            let _ = conn.dst(way).shutdown(Shutdown::Write);
        }
    }
}

/// A pipe for splice(2): data moves socket -> pipe -> socket inside the kernel, without copies to user space.
struct Pipe {
    r: std::os::fd::OwnedFd,
    w: std::os::fd::OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        use std::os::fd::FromRawFd;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two file descriptors into the array on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (r, w) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // A bigger pipe moves more per call (best effort: the system may cap it).
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, BUF as libc::c_int);
        }
        Ok(Pipe { r, w })
    }
}

/// One splice(2) call of at most `len` bytes; blocks like read.
fn splice(from: std::os::fd::RawFd, to: std::os::fd::RawFd, len: usize) -> io::Result<usize> {
    loop {
        // SAFETY: plain descriptors, null offsets (sockets and pipes have none).
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
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

/// Moves exactly `len` bytes from the pipe to the socket.
fn splice_all(from: std::os::fd::RawFd, to: std::os::fd::RawFd, mut len: usize) -> io::Result<()> {
    while len > 0 {
        match splice(from, to, len)? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "splice moved nothing",
                ));
            }
            n => len -= n,
        }
    }
    Ok(())
}
