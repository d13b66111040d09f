//! The impairment proxy: puts a far-away network between a client and its server, without root and without
//! netem.
//!
//! - TCP ([`tcp`], [`relay`]): a terminating relay. Each direction of each connection has its own delay line
//!   ([`delay`]) released by the proxy's event loops with precise timers, so data keeps its order and a 20 ms
//!   delay comes out at 20 ms plus microseconds. Rate limits ([`rate`]) per connection and for all together, window
//!   emulation ([`window`]) so bulk transfers feel the latency as real TCP does, and faults ([`faults`]).
//! - UDP ([`udp`]): per-datagram delay, jitter, loss (random and Gilbert-Elliott), reordering, duplication.
//! - Control ([`control`]): a small HTTP API to read and replace the [`Impairment`] while connections stay up
//!   (open connections follow delay, jitter and rate from their next chunk, and faults from the change on),
//!   and to read the counters.
//!
//! Concurrency model (TCP): a fixed number of event-loop threads ([`relay`], one per core) relay every
//! connection with non-blocking sockets. A direction with no impairment is written straight on (bulk data
//! spliced socket -> pipe -> socket, without copies to user space); a delayed one keeps its chunks (in its
//! pipe when bulk) until their release time, which the loop's timer heap wakes it for: a timerfd until
//! the [`delay::wake_margin`] before it, then a spin, keeping idle CPUs awake meanwhile when asked so the
//! receiver wakes at once. UDP has one thread per proxy.

pub mod bridge;
pub mod control;
pub mod delay;
pub mod faults;
pub mod impairment;
pub mod packet;
pub mod rate;
pub mod relay;
pub mod tcp;
pub mod udp;
pub mod window;

pub use impairment::{
    Direction, GilbertElliott, Impairment, ImpairmentError, JitterDist, Trigger, Way,
};

use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Settings of a proxy.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where clients connect (port 0: any free port).
    pub listen: SocketAddr,
    /// The real server(s), tried in order.
    pub upstream: Vec<SocketAddr>,
    /// Relay UDP datagrams instead of TCP connections.
    pub udp: bool,
    /// Serve the control API here.
    pub control: Option<SocketAddr>,
    /// The impairment at start.
    pub impairment: Impairment,
    /// How long to wait for the upstream to accept a connection.
    pub connect_timeout: Duration,
    /// Keep idle CPUs polling during the last moments before each delayed release, so the receiver wakes at
    /// once (see [`delay`]; needs permission to write `/dev/cpu_dma_latency`, else nothing is done).
    /// Process-wide: the last proxy started decides. Off by default (a machine-wide power setting).
    pub cpu_wake: bool,
    /// Most clients relayed at once: TCP connections, or UDP client addresses. The one over it is closed at
    /// once (TCP, with a reset) or its datagrams dropped (UDP), and counted in [`Totals::refused`].
    pub max_clients: usize,
    /// A TCP connection with no byte in either direction for this long is closed (reset) and counted in
    /// [`Totals::idle_closed`]. `None`: never.
    pub idle_timeout: Option<Duration>,
    /// The bearer token the control API requires (`Authorization: Bearer ...`). Without one, the control API
    /// only listens on a loopback address.
    pub control_token: Option<ControlToken>,
}

/// Default of [`ProxyConfig::max_clients`]: each relayed TCP connection holds two sockets (and a pipe per
/// direction once it carried bulk data).
pub const DEFAULT_MAX_CLIENTS: usize = 4096;
/// Default of [`ProxyConfig::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The secret the control API requires from its clients; `Debug` does not show it.
#[derive(Clone)]
pub struct ControlToken(Vec<u8>);

impl std::fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlToken(..)")
    }
}

/// Shortest control token accepted, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

impl ControlToken {
    /// A token from its text (surrounding white space removed); `None` when shorter than [`MIN_TOKEN_LEN`]
    /// or not printable ASCII (it travels in an HTTP header).
    pub fn new(text: &str) -> Option<ControlToken> {
        let t = text.trim();
        (t.len() >= MIN_TOKEN_LEN && t.bytes().all(|b| b.is_ascii_graphic()))
            .then(|| ControlToken(t.as_bytes().to_vec()))
    }

    /// Reads a token file: one line of at least [`MIN_TOKEN_LEN`] printable characters.
    pub fn from_file(path: &std::path::Path) -> Result<ControlToken, ProxyError> {
        let bad = |why: String| ProxyError::Token {
            path: path.to_path_buf(),
            why,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
        ControlToken::new(&text).ok_or_else(|| {
            bad(format!(
                "it must hold one token of at least {MIN_TOKEN_LEN} printable characters, e.g. from \
                 `openssl rand -hex 32`"
            ))
        })
    }

    /// Whether `presented` is the token, compared in time independent of where they differ (only the length
    /// can be learnt from the time taken).
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.0.len() == presented.len()
            && self
                .0
                .iter()
                .zip(presented)
                .fold(0u8, |d, (a, b)| d | (a ^ b))
                == 0
    }
}

impl ProxyConfig {
    /// A TCP proxy from `listen` to `upstream` with no impairment.
    pub fn new(listen: SocketAddr, upstream: SocketAddr) -> Self {
        ProxyConfig {
            listen,
            upstream: vec![upstream],
            udp: false,
            control: None,
            impairment: Impairment::default(),
            connect_timeout: Duration::from_secs(3),
            cpu_wake: false,
            max_clients: DEFAULT_MAX_CLIENTS,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            control_token: None,
        }
    }
}

/// Why the proxy could not start or an impairment was refused.
#[derive(Debug, Error)]
pub enum ProxyError {
    /// A listening socket could not be opened.
    #[error(
        "cannot listen for {what} on {addr}: {source} ({})",
        crate::sys::bind_hint(*addr, source)
    )]
    Bind {
        /// "tcp clients", "udp clients" or "the control api".
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// No upstream address.
    #[error("no upstream address to relay to (give --upstream HOST:PORT)")]
    NoUpstream,
    /// The impairment is impossible.
    #[error(transparent)]
    Impairment(#[from] ImpairmentError),
    /// A control API on a non-loopback address without a token.
    #[error(
        "refusing to serve the control api on {addr} without a token: anyone who reaches it could change the impairment; give --control-token-file FILE, or use a loopback address such as 127.0.0.1"
    )]
    ControlExposed {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The upstream is the proxy's own listening socket: every connection would connect to itself, without
    /// end.
    #[error(
        "--upstream {upstream} is this proxy itself (it listens on {listen}): every connection would be relayed back to the proxy without end; give the address of the server to relay to"
    )]
    Loop {
        /// Where the proxy listens.
        listen: SocketAddr,
        /// The upstream address that reaches it.
        upstream: SocketAddr,
    },
    /// The control token file is unusable.
    #[error("control token file {}: {why}", path.display())]
    Token {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// Totals since start (counters endpoint, `total`).
#[derive(Debug, Default)]
pub struct Totals {
    /// TCP connections accepted.
    pub accepted: AtomicU64,
    /// TCP connections open now.
    pub active: AtomicU64,
    /// Connections closed because the upstream could not be reached.
    pub upstream_failures: AtomicU64,
    /// Bytes (TCP) or datagram payload bytes (UDP) relayed client to server.
    pub bytes_up: AtomicU64,
    /// Bytes relayed server to client.
    pub bytes_down: AtomicU64,
    /// Connections reset by the reset fault.
    pub fault_resets: AtomicU64,
    /// Connections stalled by the stall fault.
    pub fault_stalls: AtomicU64,
    /// Connections closed by the close fault.
    pub fault_closes: AtomicU64,
    /// UDP datagrams received (both directions).
    pub datagrams_in: AtomicU64,
    /// UDP datagrams sent (both directions, duplicates included).
    pub datagrams_out: AtomicU64,
    /// UDP datagrams dropped by loss emulation.
    pub datagrams_lost: AtomicU64,
    /// UDP datagrams sent twice.
    pub datagrams_duplicated: AtomicU64,
    /// UDP datagrams held back to be overtaken.
    pub datagrams_reordered: AtomicU64,
    /// Clients turned away over [`ProxyConfig::max_clients`] (TCP connections, or UDP datagrams from a new
    /// address).
    pub refused: AtomicU64,
    /// TCP connections closed after [`ProxyConfig::idle_timeout`] without traffic.
    pub idle_closed: AtomicU64,
    /// Control API requests refused: bad or missing token, or too many at once.
    pub control_refused: AtomicU64,
    /// Connections closed because they came back to this proxy through its own upstream (a relay loop).
    pub relay_loops: AtomicU64,
}

/// Counters of one TCP connection (or UDP client).
#[derive(Debug)]
pub struct ConnCounters {
    /// Connection number, from 1.
    pub id: u64,
    /// The client's address.
    pub client: SocketAddr,
    /// The upstream address used.
    pub upstream: Mutex<Option<SocketAddr>>,
    /// When it was accepted.
    pub started: Instant,
    /// Bytes relayed client to server.
    pub bytes_up: AtomicU64,
    /// Bytes relayed server to client.
    pub bytes_down: AtomicU64,
}

impl ConnCounters {
    /// Counts `n` bytes relayed `way`, here and in the proxy's `totals`.
    pub(crate) fn add_bytes(&self, totals: &Totals, way: Way, n: u64) {
        let (mine, all) = match way {
            Way::Up => (&self.bytes_up, &totals.bytes_up),
            Way::Down => (&self.bytes_down, &totals.bytes_down),
        };
        mine.fetch_add(n, Ordering::Relaxed);
        all.fetch_add(n, Ordering::Relaxed);
    }
}

/// Snapshot of the totals, as served by the counters endpoint.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, serde::Deserialize)]
pub struct TotalsDoc {
    /// TCP connections accepted.
    pub accepted: u64,
    /// TCP connections open now.
    pub active: u64,
    /// Connections closed because the upstream could not be reached.
    pub upstream_failures: u64,
    /// Bytes relayed client to server.
    pub bytes_up: u64,
    /// Bytes relayed server to client.
    pub bytes_down: u64,
    /// Connections reset by the reset fault.
    pub fault_resets: u64,
    /// Connections stalled by the stall fault.
    pub fault_stalls: u64,
    /// Connections closed by the close fault.
    pub fault_closes: u64,
    /// UDP datagrams received.
    pub datagrams_in: u64,
    /// UDP datagrams sent (duplicates included).
    pub datagrams_out: u64,
    /// UDP datagrams dropped.
    pub datagrams_lost: u64,
    /// UDP datagrams sent twice.
    pub datagrams_duplicated: u64,
    /// UDP datagrams held back.
    pub datagrams_reordered: u64,
    /// Clients turned away over the client limit.
    pub refused: u64,
    /// TCP connections closed for idling.
    pub idle_closed: u64,
    /// Control API requests refused (token, or too many at once).
    pub control_refused: u64,
    /// Connections closed because they came back through this proxy's own upstream (a relay loop).
    #[serde(default)]
    pub relay_loops: u64,
}

/// Snapshot of one connection.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, serde::Deserialize)]
pub struct ConnDoc {
    /// Connection number.
    pub id: u64,
    /// Client address.
    pub client: String,
    /// Upstream address, once connected.
    pub upstream: Option<String>,
    /// Age.
    pub age_ns: u64,
    /// Bytes client to server.
    pub bytes_up: u64,
    /// Bytes server to client.
    pub bytes_down: u64,
}

/// The counters document.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, serde::Deserialize)]
pub struct CountersDoc {
    /// Totals since start.
    pub total: TotalsDoc,
    /// Open connections (TCP) or known clients (UDP).
    pub connections: Vec<ConnDoc>,
}

/// State shared by every thread of one proxy.
#[derive(Debug)]
pub struct Shared {
    impairment: RwLock<Arc<Impairment>>,
    upstream: Vec<SocketAddr>,
    connect_timeout: Duration,
    total_links: [Mutex<rate::Link>; 2],
    totals: Totals,
    conns: Mutex<BTreeMap<u64, Arc<ConnCounters>>>,
    /// Open TCP connections, told when the impairment changes.
    live: Mutex<BTreeMap<u64, std::sync::Weak<tcp::Conn>>>,
    next_id: AtomicU64,
    stop: AtomicBool,
    max_clients: usize,
    idle_timeout: Option<Duration>,
    control_token: Option<ControlToken>,
    /// The proxy's own ends of its upstream connections and the peers of the clients it accepted: a client
    /// whose address is one of our own upstream ends is this proxy talking to itself.
    loop_guard: Mutex<LoopGuard>,
}

/// Addresses that reveal a relay loop at run time (an upstream name that now resolves here, a DNAT or
/// port-forward rule that sends the upstream port back to the listener). A loop is an accepted connection whose
/// peer is the local end of one of our upstream connections AND whose destination, as the client dialled it
/// (the NAT's original destination, else the listener's address), is that upstream connection's remote end: the
/// kernel may give a genuine client the same ephemeral port as one of our upstream connections (ports are unique
/// per 4-tuple, not per host), but that client dialled the listener, not the upstream. Each side is checked
/// against the other under one lock, so the loop is found whichever of the two ends is seen first. A loop
/// through another relay process (whose own address is the peer we see) is not visible here; its cost stays
/// bounded by `--max-clients`.
#[derive(Debug, Default)]
struct LoopGuard {
    /// Our upstream connections: local end -> remote end.
    outbound: std::collections::HashMap<SocketAddr, SocketAddr>,
    /// Accepted clients: peer -> the destination the client dialled.
    accepted: std::collections::HashMap<SocketAddr, SocketAddr>,
    /// Accepted clients found to be our own upstream connections after they were accepted: their handler
    /// stops at its next check.
    looped: std::collections::HashSet<SocketAddr>,
}

/// `a` with an IPv4-mapped IPv6 address written as IPv4, so a dual-stack listener's peers compare with
/// IPv4 upstream ends.
fn canonical_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical(a.ip()), a.port())
}

impl Shared {
    fn new(config: &ProxyConfig) -> Self {
        Shared {
            impairment: RwLock::new(Arc::new(config.impairment.clone())),
            upstream: config.upstream.clone(),
            connect_timeout: config.connect_timeout,
            total_links: [Mutex::new(rate::Link::new()), Mutex::new(rate::Link::new())],
            totals: Totals::default(),
            conns: Mutex::new(BTreeMap::new()),
            live: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            max_clients: config.max_clients.max(1),
            idle_timeout: config.idle_timeout,
            control_token: config.control_token.clone(),
            loop_guard: Mutex::new(LoopGuard::default()),
        }
    }

    /// Notes an accepted client (its peer address and the destination it dialled); true when it is one of
    /// this proxy's own upstream connections (a loop).
    fn note_accepted(&self, peer: SocketAddr, dialled: SocketAddr) -> bool {
        let mut g = self.loop_guard.lock().expect("loop guard");
        let (peer, dialled) = (canonical_addr(peer), canonical_addr(dialled));
        g.accepted.insert(peer, dialled);
        g.outbound.get(&peer) == Some(&dialled)
    }

    /// Notes an upstream connection (its local and remote ends); true when a client from that local end that
    /// dialled that remote end was already accepted (a loop).
    fn note_outbound(&self, local: SocketAddr, remote: SocketAddr) -> bool {
        let mut g = self.loop_guard.lock().expect("loop guard");
        let (local, remote) = (canonical_addr(local), canonical_addr(remote));
        g.outbound.insert(local, remote);
        let found = g.accepted.get(&local) == Some(&remote);
        if found {
            g.looped.insert(local);
        }
        found
    }

    /// True when the client accepted from `peer` was found to be one of our own upstream connections.
    fn is_looped(&self, peer: SocketAddr) -> bool {
        self.loop_guard
            .lock()
            .expect("loop guard")
            .looped
            .contains(&canonical_addr(peer))
    }

    /// Forgets a connection's addresses when it ends.
    fn forget_loop_ends(&self, peer: SocketAddr, local: Option<SocketAddr>) {
        let mut g = self.loop_guard.lock().expect("loop guard");
        g.accepted.remove(&canonical_addr(peer));
        g.looped.remove(&canonical_addr(peer));
        if let Some(l) = local {
            g.outbound.remove(&canonical_addr(l));
        }
    }

    /// The impairment in force now.
    pub fn impairment(&self) -> Arc<Impairment> {
        self.impairment.read().expect("impairment lock").clone()
    }

    /// Replaces the impairment; open connections follow it from their next chunk on, and their faults are
    /// planned again when the fault settings changed (times and byte counts from now).
    pub fn set_impairment(&self, i: Impairment) -> Result<Option<String>, ImpairmentError> {
        let note = i.validate()?;
        let i = Arc::new(i);
        *self.impairment.write().expect("impairment lock") = i.clone();
        let now = Instant::now();
        let live: Vec<_> = self
            .live
            .lock()
            .expect("connection list")
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for c in live {
            c.impairment_changed(&i, now);
        }
        Ok(note)
    }

    fn watch(&self, id: u64, conn: std::sync::Weak<tcp::Conn>) {
        self.live.lock().expect("connection list").insert(id, conn);
    }

    /// The totals.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    fn total_link(&self, way: Way) -> &Mutex<rate::Link> {
        &self.total_links[match way {
            Way::Up => 0,
            Way::Down => 1,
        }]
    }

    fn register(&self, client: SocketAddr) -> Arc<ConnCounters> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let c = Arc::new(ConnCounters {
            id,
            client,
            upstream: Mutex::new(None),
            started: Instant::now(),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
        });
        self.conns
            .lock()
            .expect("connection list")
            .insert(id, c.clone());
        c
    }

    fn unregister(&self, id: u64) {
        self.conns.lock().expect("connection list").remove(&id);
        self.live.lock().expect("connection list").remove(&id);
    }

    /// A snapshot of every counter.
    pub fn counters(&self) -> CountersDoc {
        let t = &self.totals;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CountersDoc {
            total: TotalsDoc {
                accepted: l(&t.accepted),
                active: l(&t.active),
                upstream_failures: l(&t.upstream_failures),
                bytes_up: l(&t.bytes_up),
                bytes_down: l(&t.bytes_down),
                fault_resets: l(&t.fault_resets),
                fault_stalls: l(&t.fault_stalls),
                fault_closes: l(&t.fault_closes),
                datagrams_in: l(&t.datagrams_in),
                datagrams_out: l(&t.datagrams_out),
                datagrams_lost: l(&t.datagrams_lost),
                datagrams_duplicated: l(&t.datagrams_duplicated),
                datagrams_reordered: l(&t.datagrams_reordered),
                refused: l(&t.refused),
                idle_closed: l(&t.idle_closed),
                control_refused: l(&t.control_refused),
                relay_loops: l(&t.relay_loops),
            },
            connections: self
                .conns
                .lock()
                .expect("connection list")
                .values()
                .map(|c| ConnDoc {
                    id: c.id,
                    client: c.client.to_string(),
                    upstream: c.upstream.lock().expect("upstream").map(|a| a.to_string()),
                    age_ns: c.started.elapsed().as_nanos() as u64,
                    bytes_up: l(&c.bytes_up),
                    bytes_down: l(&c.bytes_down),
                })
                .collect(),
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A running proxy; [`ProxyHandle::shutdown`] (or dropping it) stops accepting and closes the control API.
pub struct ProxyHandle {
    listen_addr: SocketAddr,
    control_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    wakers: Vec<Box<dyn Fn() + Send>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ProxyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyHandle")
            .field("listen_addr", &self.listen_addr)
            .field("control_addr", &self.control_addr)
            .finish()
    }
}

impl ProxyHandle {
    /// The address clients connect to.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }
    /// The control API's address, when enabled.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control_addr
    }
    /// The shared state (impairment, counters).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
    /// Stops accepting new connections and waits for the accept and control threads. Open TCP connections
    /// finish on their own threads.
    pub fn shutdown(mut self) {
        self.stop_now();
    }
    fn stop_now(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        for w in &self.wakers {
            w();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// True when `ip` is an address of this host: loopback, unspecified (connecting to it reaches loopback), or
/// an address a socket can be bound to (the kernel refuses addresses of other hosts with EADDRNOTAVAIL).
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// An IPv4-mapped IPv6 address as IPv4; an unspecified address as the loopback address a connection to it
/// reaches.
fn canonical(ip: IpAddr) -> IpAddr {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    if ip.is_unspecified() {
        match ip {
            IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        }
    } else {
        ip
    }
}

/// True when a connection to `upstream` would reach a socket listening on `listen` on this host: the same
/// port, and an address that listener accepts (its own address, the loopback address an unspecified
/// upstream reaches, or any local address when it listens on 0.0.0.0 or `::`, IPv4 included for `::`).
pub fn reaches_itself(listen: SocketAddr, upstream: SocketAddr) -> bool {
    if listen.port() == 0 || listen.port() != upstream.port() {
        return false;
    }
    let up = canonical(upstream.ip());
    if listen.ip().is_unspecified() {
        let same_family = matches!(
            (listen.ip(), up),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), _)
        );
        return same_family && is_local(up);
    }
    canonical(listen.ip()) == up
}

/// Starts a proxy (TCP or UDP, and the control API when asked).
pub fn start(config: &ProxyConfig) -> Result<ProxyHandle, ProxyError> {
    if config.upstream.is_empty() {
        return Err(ProxyError::NoUpstream);
    }
    if let Some(&upstream) = config
        .upstream
        .iter()
        .find(|u| reaches_itself(config.listen, **u))
    {
        return Err(ProxyError::Loop {
            listen: config.listen,
            upstream,
        });
    }
    config.impairment.validate()?;
    if let Some(c) = config.control
        && config.control_token.is_none()
        && !c.ip().is_loopback()
    {
        return Err(ProxyError::ControlExposed { addr: c });
    }
    delay::set_cpu_wake(config.cpu_wake);
    let shared = Arc::new(Shared::new(config));
    let mut handle = ProxyHandle {
        listen_addr: config.listen,
        control_addr: None,
        shared: shared.clone(),
        wakers: Vec::new(),
        threads: Vec::new(),
    };
    if config.udp {
        let (addr, waker, thread) = udp::start(config.listen, shared.clone())?;
        handle.listen_addr = addr;
        handle.wakers.push(waker);
        handle.threads.push(thread);
    } else {
        let (addr, waker, thread) = tcp::start(config.listen, shared.clone(), relay::Loops::start)?;
        handle.listen_addr = addr;
        handle.wakers.push(Box::new(move || waker.wake()));
        handle.threads.push(thread);
    }
    if let Some(c) = config.control {
        let (addr, waker, thread) = control::start(c, shared.clone())?;
        handle.control_addr = Some(addr);
        handle.wakers.push(Box::new(move || waker.wake()));
        handle.threads.push(thread);
    }
    Ok(handle)
}
