//! The responder: `roundtrip server`, speaking the sockperf 3.x message format on TCP and UDP.
//!
//! Concurrency: TCP clients are served by a few event loops (mio over epoll, one per core by default, see
//! [`Limits::threads`]), not by a thread each, so ten thousand connections cost memory for their state only:
//! a few hundred bytes each, plus one incomplete message while one is arriving (a buffer that grows with the
//! bytes that arrived, not with the length a header announces). One thread answers UDP. The protocol of one TCP
//! client lives apart from the I/O in [`session`].
//!
//! Who may use it, and how much:
//! - **No amplification over UDP.** Every answer a UDP client gets before it proved it receives at its address
//!   is no larger than its request: echoes are the same size; a reverse stream starts only after the client
//!   sent back a cookie ([`crate::wire::auth::CookieJar`]) that the server gave its address, lasts at most
//!   [`Limits::max_reverse`], one per address and [`Limits::max_reverse_streams`] in all.
//! - **Limits**: [`Limits::max_clients`] and [`Limits::max_per_address`] connections (the one over is closed at
//!   once), [`Limits::message_deadline`] to complete a started message and to read answers, an optional
//!   [`Limits::idle_timeout`].
//! - **Pre-shared key** ([`ServerConfig::psk`]): clients must prove the key before anything is answered, not
//!   even sockperf pings (see [`crate::wire::sockperf`]).
//!
//! Beyond sockperf it serves roundtrip's negotiated extensions: server timestamps, receive counts, reverse
//! streams and, with [`ServerConfig::allow_replay`], replay requests. The server never prints: it reports
//! [`ServerEvent`]s, one per occurrence; the command line turns them into rate-limited log lines.

mod pktinfo;
pub mod session;
mod tcp;
mod timer;
mod udp;

pub use session::{DropKind, DropReason};

use crate::wire::auth::{CookieJar, Psk};
use crate::wire::sockperf;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How much of the server one stranger, and all of them together, may claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// TCP connections open at once; the one over is closed at once (reset).
    pub max_clients: usize,
    /// TCP connections open at once from one IP address.
    pub max_per_address: usize,
    /// Time to complete a message once its first byte arrived, and to take an answer once it is ready; a
    /// client over it is dropped (slowloris, or a client that stops reading).
    pub message_deadline: Duration,
    /// Drop a TCP client that sent nothing for this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Longest UDP reverse stream; longer requests are granted this much.
    pub max_reverse: Duration,
    /// UDP reverse streams running at once, all clients together (one per client address).
    pub max_reverse_streams: usize,
    /// Event loops serving TCP (0: one per core).
    pub threads: usize,
}

impl Limits {
    /// Default [`Limits::max_clients`].
    pub const MAX_CLIENTS: usize = 16_384;
    /// Default [`Limits::max_per_address`].
    pub const MAX_PER_ADDRESS: usize = 256;
    /// Default [`Limits::message_deadline`].
    pub const MESSAGE_DEADLINE: Duration = Duration::from_secs(10);
    /// Default [`Limits::idle_timeout`].
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    /// Default [`Limits::max_reverse`].
    pub const MAX_REVERSE: Duration = Duration::from_secs(30);
    /// Default [`Limits::max_reverse_streams`].
    pub const MAX_REVERSE_STREAMS: usize = 4;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: Self::MAX_CLIENTS,
            max_per_address: Self::MAX_PER_ADDRESS,
            message_deadline: Self::MESSAGE_DEADLINE,
            idle_timeout: Some(Self::IDLE_TIMEOUT),
            max_reverse: Self::MAX_REVERSE,
            max_reverse_streams: Self::MAX_REVERSE_STREAMS,
            threads: 0,
        }
    }
}

/// What the server should listen on, and for whom. Build it with `..Default::default()`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; `None` binds every address (IPv6 dual-stack, or IPv4 when IPv6 is unavailable).
    pub bind: Option<IpAddr>,
    /// Port for both TCP and UDP; 0 lets the system pick one (the same for both).
    pub port: u16,
    /// Serve TCP.
    pub tcp: bool,
    /// Serve UDP.
    pub udp: bool,
    /// Clients must prove this key before anything is answered.
    pub psk: Option<Psk>,
    /// Answer replay requests ([`crate::wire::sockperf::ReplayRequest`]).
    pub allow_replay: bool,
    /// Resource limits.
    pub limits: Limits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            port: sockperf::DEFAULT_PORT,
            tcp: true,
            udp: true,
            psk: None,
            allow_replay: false,
            limits: Limits::default(),
        }
    }
}

/// Why a connection was refused at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefuseReason {
    /// [`Limits::max_clients`] connections were open.
    MaxClients(usize),
    /// [`Limits::max_per_address`] connections from this address were open.
    MaxPerAddress(usize),
    /// The process ran out of file descriptors (raise `ulimit -n`).
    OutOfFiles,
}

impl std::fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefuseReason::MaxClients(n) => {
                write!(f, "{n} clients already connected (--max-clients)")
            }
            RefuseReason::MaxPerAddress(n) => write!(
                f,
                "{n} clients already connected from this address (--max-per-address)"
            ),
            RefuseReason::OutOfFiles => {
                f.write_str("out of file descriptors (raise `ulimit -n` or lower --max-clients)")
            }
        }
    }
}

/// What was wrong with a UDP datagram the server ignored or refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatagramIssue {
    /// Not a sockperf message.
    Malformed,
    /// From an address that has not proved the key (a server with a key).
    Unauthenticated,
    /// A wrong proof of the key.
    BadProof,
    /// A reverse request whose cookie was stale or made for another address.
    BadCookie,
    /// Asked for more than the request's size before proving its address (no answer is sent).
    TooShort,
    /// A reverse request while the limit of streams was running.
    ReverseBusy,
    /// The table of authenticated addresses is full.
    TableFull,
}

impl DatagramIssue {
    /// A short name, for log lines and counters.
    pub fn name(self) -> &'static str {
        match self {
            DatagramIssue::Malformed => "malformed datagram",
            DatagramIssue::Unauthenticated => "datagram without the key",
            DatagramIssue::BadProof => "wrong key",
            DatagramIssue::BadCookie => "bad cookie",
            DatagramIssue::TooShort => "request too short to answer",
            DatagramIssue::ReverseBusy => "reverse streams busy",
            DatagramIssue::TableFull => "authenticated address table full",
        }
    }
}

/// Something that happened in the server, for the caller to log (one event per occurrence).
#[derive(Debug, Clone)]
pub enum ServerEvent {
    /// A TCP client connected.
    Connected {
        /// The client's address.
        peer: SocketAddr,
    },
    /// A TCP client went away or was dropped.
    Disconnected {
        /// The client's address.
        peer: SocketAddr,
        /// Messages received from it.
        messages: u64,
        /// Bytes received from it.
        bytes: u64,
        /// Why it was dropped, when it was not a clean close.
        reason: Option<DropReason>,
    },
    /// A TCP connection was closed at once, over a limit.
    Refused {
        /// The client's address.
        peer: SocketAddr,
        /// Which limit.
        why: RefuseReason,
    },
    /// A UDP datagram was ignored or refused.
    Datagram {
        /// The sender.
        peer: SocketAddr,
        /// What was wrong.
        issue: DatagramIssue,
        /// Details.
        detail: String,
    },
    /// Accepting a TCP connection failed (it stays queued and is tried again).
    AcceptFailed {
        /// Why.
        why: RefuseReason,
    },
    /// A reverse stream started.
    ReverseStarted {
        /// The client.
        peer: SocketAddr,
        /// "tcp" or "udp".
        transport: &'static str,
        /// Message size.
        size: u32,
        /// How long it will last.
        duration: Duration,
    },
}

/// A server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    /// Binding the listening socket failed.
    #[error(
        "cannot listen on {proto} {addr}: {source} ({})",
        crate::sys::bind_hint(*addr, source)
    )]
    Bind {
        /// "tcp" or "udp".
        proto: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        source: io::Error,
    },
    /// The event loop could not be set up.
    #[error("cannot start the server's event loop: {0}")]
    Loop(io::Error),
    /// Neither TCP nor UDP was asked for.
    #[error("nothing to serve: enable TCP or UDP")]
    NothingToServe,
    /// A limit is zero.
    #[error("{0} must be at least 1")]
    BadLimit(&'static str),
}

pub(crate) type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// State every thread of one server shares.
pub(crate) struct Shared {
    pub stop: AtomicBool,
    pub limits: Limits,
    pub psk: Option<Psk>,
    pub allow_replay: bool,
    pub jar: CookieJar,
    pub started: Instant,
    pub events: EventSink,
    pub answered: AtomicU64,
    /// TCP connections open.
    pub clients: AtomicUsize,
    /// TCP connections open per IP address.
    pub per_address: Mutex<std::collections::HashMap<IpAddr, usize>>,
}

impl Shared {
    /// Seconds since start, the cookie clock.
    pub fn now_s(&self) -> u32 {
        self.started.elapsed().as_secs() as u32
    }
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A running server; dropping it stops it.
pub struct ServerHandle {
    tcp_addr: Option<SocketAddr>,
    udp_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    wakers: Vec<Arc<mio::Waker>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("tcp_addr", &self.tcp_addr)
            .field("udp_addr", &self.udp_addr)
            .finish()
    }
}

impl ServerHandle {
    /// The TCP address actually bound.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }
    /// The UDP address actually bound.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp_addr
    }
    /// Messages answered so far, TCP and UDP together.
    pub fn answered(&self) -> u64 {
        self.shared.answered.load(Ordering::Relaxed)
    }
    /// TCP clients connected now.
    pub fn clients(&self) -> usize {
        self.shared.clients.load(Ordering::Relaxed)
    }
    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }
    /// Stops accepting, closes every client and waits for the threads.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        for w in &self.wakers {
            let _ = w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn bind_socket(addr: SocketAddr, ty: Type) -> io::Result<Socket> {
    let proto = if ty == Type::STREAM {
        Protocol::TCP
    } else {
        Protocol::UDP
    };
    let sock = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        sock.set_only_v6(false)?;
    }
    if ty == Type::STREAM {
        sock.set_reuse_address(true)?;
    }
    sock.bind(&addr.into())?;
    Ok(sock)
}

/// Binds TCP and UDP on one port; with port 0 the UDP socket takes the port TCP was given.
fn bind_pair(
    ip: IpAddr,
    config: &ServerConfig,
) -> Result<(Option<Socket>, Option<Socket>), ServerError> {
    let mut port = config.port;
    let tcp = if config.tcp {
        let addr = SocketAddr::new(ip, port);
        let fail = |source| ServerError::Bind {
            proto: "tcp",
            addr,
            source,
        };
        let s = bind_socket(addr, Type::STREAM).map_err(fail)?;
        s.listen(4096).map_err(fail)?;
        port = s
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map_or(port, |a| a.port());
        Some(s)
    } else {
        None
    };
    let udp = if config.udp {
        let addr = SocketAddr::new(ip, port);
        Some(
            bind_socket(addr, Type::DGRAM).map_err(|source| ServerError::Bind {
                proto: "udp",
                addr,
                source,
            })?,
        )
    } else {
        None
    };
    Ok((tcp, udp))
}

/// Starts a server; events are passed to `events` from the server's threads.
pub fn start(
    config: &ServerConfig,
    events: impl Fn(ServerEvent) + Send + Sync + 'static,
) -> Result<ServerHandle, ServerError> {
    if !config.tcp && !config.udp {
        return Err(ServerError::NothingToServe);
    }
    let l = &config.limits;
    for (v, name) in [
        (l.max_clients, "--max-clients"),
        (l.max_per_address, "--max-per-address"),
        (l.max_reverse_streams, "--max-reverse-streams"),
    ] {
        if v == 0 {
            return Err(ServerError::BadLimit(name));
        }
    }
    if l.message_deadline.is_zero() {
        return Err(ServerError::BadLimit("--message-deadline"));
    }
    let (tcp, udp) = match config.bind {
        Some(ip) => bind_pair(ip, config)?,
        None => match bind_pair(IpAddr::V6(Ipv6Addr::UNSPECIFIED), config) {
            Ok(pair) => pair,
            Err(ServerError::Bind { source, .. })
                if source.kind() == io::ErrorKind::AddrNotAvailable
                    || source.raw_os_error() == Some(libc::EAFNOSUPPORT) =>
            {
                bind_pair(IpAddr::from([0, 0, 0, 0]), config)?
            }
            Err(e) => return Err(e),
        },
    };
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        limits: config.limits.clone(),
        psk: config.psk.clone(),
        allow_replay: config.allow_replay,
        jar: CookieJar::new(),
        started: Instant::now(),
        events: Arc::new(events),
        answered: AtomicU64::new(0),
        clients: AtomicUsize::new(0),
        per_address: Mutex::default(),
    });
    let mut handle = ServerHandle {
        tcp_addr: None,
        udp_addr: None,
        shared: shared.clone(),
        wakers: Vec::new(),
        threads: Vec::new(),
    };
    if let Some(sock) = tcp {
        let listener: std::net::TcpListener = sock.into();
        handle.tcp_addr = listener.local_addr().ok();
        let loops = if config.limits.threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get().min(16))
        } else {
            config.limits.threads
        };
        for i in 0..loops {
            let l = listener.try_clone().map_err(ServerError::Loop)?;
            let (waker, thread) = tcp::spawn(i, l, shared.clone()).map_err(ServerError::Loop)?;
            handle.wakers.push(waker);
            handle.threads.push(thread);
        }
    }
    if let Some(sock) = udp {
        let udp: std::net::UdpSocket = sock.into();
        handle.udp_addr = udp.local_addr().ok();
        handle
            .threads
            .push(udp::spawn(udp, shared.clone()).map_err(ServerError::Loop)?);
    }
    Ok(handle)
}

/// True when `ip` is a loopback address (IPv4-mapped included).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit (a server holds one per client); returns
/// the limit now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    let (soft, hard) = crate::sys::nofile_limit()?;
    if soft < hard && crate::sys::set_nofile_soft(hard, hard).is_ok() {
        return Ok(hard);
    }
    Ok(soft)
}
