//! The TCP relay: accepts clients, connects each to the upstream, and hands the connection to one of the
//! proxy's event loops ([`super::relay`]), which relays both directions through their delay lines.
//!
//! Per direction, each chunk read is stamped with its release time (rate, then delay and jitter, order kept)
//! and written at that time; a direction with no impairment is written straight through (spliced when bulk).
//! Window emulation stops reading while `--window` bytes are unacknowledged. A FIN travels the same delay
//! line as the data before it, so a half-close arrives after the data.
//!
//! Connections cost sockets and a few hundred bytes each, not threads: idle or busy, 10,000 of them are
//! served by the same few loop threads. The loops also close those that stay quiet past the idle timeout.
//! Only the connect to the upstream (one short-lived thread while it connects) and a planned time-triggered
//! fault (a timer thread for that connection) take threads.

use super::faults::{FaultKind, FaultPlan};
use super::impairment::Way;
use super::window::Window;
use super::{ConnCounters, ProxyError, Shared};
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What relays the accepted connections: the proxy's event loops ([`super::relay::Loops`]).
pub(crate) trait Handoff: Send + Sync + 'static {
    /// Hands `conn` to be relayed; gives it back when that cannot be done any more.
    fn hand(&self, conn: Arc<Conn>) -> Result<(), Arc<Conn>>;
}

/// Binds the listener, starts the relay with `relay` (the event loops) and starts the accept thread.
pub(crate) fn start<R: Handoff>(
    listen: SocketAddr,
    shared: Arc<Shared>,
    relay: impl FnOnce(&Arc<Shared>) -> io::Result<R>,
) -> Result<(SocketAddr, super::control::AcceptWaker, JoinHandle<()>), ProxyError> {
    let bind_err = |source| ProxyError::Bind {
        what: "tcp clients",
        addr: listen,
        source,
    };
    let listener = TcpListener::bind(listen).map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let waker = super::control::AcceptWaker::new(&listener).map_err(bind_err)?;
    let loops = Arc::new(relay(&shared).map_err(bind_err)?);
    let thread = std::thread::Builder::new()
        .name("proxy-accept".into())
        .spawn(move || accept_loop(listener, shared, loops))
        .map_err(bind_err)?;
    Ok((addr, waker, thread))
}

/// Stops the fault timer of a connection that is over.
pub(super) fn finish(conn: &Conn) {
    conn.timer_done.store(true, Ordering::SeqCst);
    let timer = conn.timer.lock().expect("fault timer").take();
    if let Some(t) = timer {
        t.thread().unpark();
        if t.thread().id() != std::thread::current().id() {
            let _ = t.join();
        }
    }
}

fn accept_loop<R: Handoff>(listener: TcpListener, shared: Arc<Shared>, loops: Arc<R>) {
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
                let (shared2, loops2) = (shared.clone(), loops.clone());
                let spawned = std::thread::Builder::new()
                    .name("proxy-connect".into())
                    .spawn(move || handle(client, peer, shared2, &*loops2));
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

pub(super) const OPEN: u8 = 0;
pub(super) const RESET: u8 = 1;
pub(super) const STALLED: u8 = 2;
const CLOSING: u8 = 3;

/// One relayed TCP connection.
pub(crate) struct Conn {
    pub(super) client: TcpStream,
    pub(super) server: TcpStream,
    pub(super) plan: FaultPlan,
    fault: AtomicU8,
    windows: [Window; 2],
    counters: Arc<ConnCounters>,
    pub(super) shared: Arc<Shared>,
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
    pub(super) fn src(&self, way: Way) -> &TcpStream {
        match way {
            Way::Up => &self.client,
            Way::Down => &self.server,
        }
    }
    pub(super) fn dst(&self, way: Way) -> &TcpStream {
        self.src(way.reverse())
    }
    pub(super) fn fault(&self) -> u8 {
        self.fault.load(Ordering::SeqCst)
    }
    pub(super) fn window(&self, way: Way) -> &Window {
        &self.windows[idx(way)]
    }
    /// Whether the connection was ended (a side failed).
    pub(super) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
    /// Records that a byte was read now (for the idle timeout).
    pub(super) fn touch(&self) {
        self.last_read_ns.store(self.age_ns(), Ordering::Relaxed);
    }
    fn age_ns(&self) -> u64 {
        self.counters.started.elapsed().as_nanos() as u64
    }
    /// How long neither side sent anything.
    pub(super) fn quiet_for(&self) -> Duration {
        Duration::from_nanos(
            self.age_ns()
                .saturating_sub(self.last_read_ns.load(Ordering::Relaxed)),
        )
    }
    pub(super) fn count(&self, way: Way, n: u64) {
        self.counters.add_bytes(self.shared.totals(), way, n);
    }

    /// Makes both sides see a RST: linger 0 and the sockets are closed once every thread let go of them;
    /// shutting down the read side wakes the readers without sending anything.
    /// True for the call that reset it (false when it was reset already).
    pub(super) fn reset(&self) -> bool {
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
    pub(super) fn end(&self) {
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

    pub(super) fn fire(&self, kind: FaultKind) {
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

/// Counts a connection as active, and keeps its addresses in the loop guard, until it is dropped.
struct ActiveGuard {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    /// The proxy's end of the upstream connection, once connected.
    local: Option<SocketAddr>,
}
impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.shared.totals().active.fetch_sub(1, Ordering::Relaxed);
        self.shared.unregister(self.id);
        self.shared.forget_loop_ends(self.peer, self.local);
    }
}

/// The destination the client dialled before a NAT rule (REDIRECT/DNAT) sent it here: netfilter's
/// SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6); None without such a rule or without conntrack.
fn original_destination(s: &TcpStream) -> Option<SocketAddr> {
    const SO_ORIGINAL_DST: libc::c_int = 80; // linux/netfilter_ipv4.h; IP6T_SO_ORIGINAL_DST has the same value
    let v6 = s.local_addr().ok()?.is_ipv6();
    let level = if v6 { libc::SOL_IPV6 } else { libc::SOL_IP };
    let (ss, _) =
        crate::sys::getsockopt::<libc::sockaddr_storage>(s, level, SO_ORIGINAL_DST).ok()?;
    crate::sys::socket_addr(&ss)
}

/// Closes a socket with a reset: a connection of a relay loop has nothing to deliver.
fn reset_close(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Connects one accepted client upstream (it was counted in `active` by the accept loop; the connection's
/// guard releases it) and hands it to an event loop.
fn handle<R: Handoff>(client: TcpStream, peer: SocketAddr, shared: Arc<Shared>, loops: &R) {
    let t = shared.totals();
    let counters = shared.register(peer);
    let mut guard = ActiveGuard {
        shared: shared.clone(),
        id: counters.id,
        peer,
        local: None,
    };
    // A client that is this proxy's own upstream connection: the upstream leads back here.
    let dialled = original_destination(&client)
        .or_else(|| client.local_addr().ok())
        .unwrap_or(peer);
    if shared.note_accepted(peer, dialled) {
        t.relay_loops.fetch_add(1, Ordering::Relaxed);
        reset_close(&client);
        return;
    }
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
    if let Ok(local) = server.local_addr() {
        guard.local = Some(local);
        // The other order: the looping client was accepted before this connect returned.
        // The other order: the looping client was accepted before this connect returned; or this client was
        // itself found to be our own upstream connection while this connect ran.
        if shared.note_outbound(local, upstream) || shared.is_looped(peer) {
            t.relay_loops.fetch_add(1, Ordering::Relaxed);
            reset_close(&server);
            reset_close(&client);
            return;
        }
    }
    *counters.upstream.lock().expect("upstream") = Some(upstream);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    if client.set_nonblocking(true).is_err() || server.set_nonblocking(true).is_err() {
        return;
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
    if let Err(conn) = loops.hand(conn) {
        conn.reset();
        finish(&conn);
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
