//! TCP handshake timing and port state (`hping3 -S`, `nping --tcp-connect`).
//!
//! Each attempt sends one SYN and times the answer:
//! - **open**: a SYN-ACK came back, i.e. the handshake completed (the time is the SYN -> SYN-ACK round trip);
//! - **closed**: a RST came back (nothing listens on the port);
//! - **filtered**: nothing came back within the timeout (a firewall drops the SYN, or the host is down);
//! - **unreachable**: an ICMP error came back, or there is no route to the host.
//!
//! Two ways to send the SYN:
//! - [`ConnectMode::Kernel`] (default, unprivileged): a non-blocking `connect()`, timed until the socket is
//!   writable. The kernel completes the handshake with its final ACK and the connection is then closed
//!   normally, so the server application sees an accept and an end of file.
//! - [`ConnectMode::Raw`] (root or `CAP_NET_RAW`): the SYN is built here and sent from a raw socket, and the
//!   SYN-ACK is answered with a RST, as `hping3 -S` does, so no connection ever reaches the server
//!   application. Because no socket of this machine owns that connection, this machine's kernel *also*
//!   answers the SYN-ACK with a RST of its own: both carry the same sequence number, the server acts on the
//!   first and silently drops the second (a RST is never answered). The source port is reserved by a bound,
//!   non-listening TCP socket for the length of each attempt, so no real connection of this machine can use
//!   the same addresses meanwhile. An ICMP error about the SYN reaches the (connected) raw socket as a
//!   receive error and is reported as unreachable.

use crate::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};
use thiserror::Error;

/// How the SYN is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectMode {
    /// `connect()` through the kernel; works unprivileged.
    Kernel,
    /// A SYN from a raw socket, answered with RST; needs root or `CAP_NET_RAW`.
    Raw,
}

impl std::fmt::Display for ConnectMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConnectMode::Kernel => "connect()",
            ConnectMode::Raw => "raw SYN",
        })
    }
}

/// What one attempt found out about the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortState {
    /// The handshake completed (SYN-ACK).
    Open,
    /// RST: nothing listens there.
    Closed,
    /// No answer within the timeout.
    Filtered,
    /// An ICMP error, or no route.
    Unreachable,
}

impl std::fmt::Display for PortState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PortState::Open => "open",
            PortState::Closed => "closed",
            PortState::Filtered => "filtered",
            PortState::Unreachable => "unreachable",
        })
    }
}

/// Settings of a handshake run. Build with [`ConnectConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct ConnectConfig {
    /// The host and port.
    pub addr: SocketAddr,
    /// Number of attempts.
    pub count: u64,
    /// Time from the start of one attempt to the start of the next.
    pub interval: Duration,
    /// How long to wait for an answer before calling the port filtered.
    pub timeout: Duration,
    /// Kernel `connect()` or raw SYN.
    pub mode: ConnectMode,
    /// Set from outside (Ctrl-C) to end the run early; results so far are kept.
    pub cancel: Arc<AtomicBool>,
    /// Stop after this many unanswered attempts in a row while nothing at all has answered yet, so a host
    /// that drops everything does not cost `count` timeouts. `None`: always make `count` attempts.
    pub give_up_after: Option<u64>,
}

impl ConnectConfig {
    /// Defaults: 5 attempts, one per second, 1 s timeout, kernel `connect()`.
    pub fn new(addr: SocketAddr) -> Self {
        ConnectConfig {
            addr,
            count: 5,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            mode: ConnectMode::Kernel,
            cancel: Arc::new(AtomicBool::new(false)),
            give_up_after: None,
        }
    }

    /// Checks the settings before any I/O.
    pub fn validate(&self) -> Result<(), ConnectError> {
        if self.count == 0 {
            return Err(ConnectError::Invalid("count must be at least 1".into()));
        }
        if self.timeout.is_zero() {
            return Err(ConnectError::Invalid("timeout must be more than 0".into()));
        }
        if self.addr.port() == 0 {
            return Err(ConnectError::Invalid(format!(
                "no port in {}: give HOST:PORT",
                self.addr
            )));
        }
        Ok(())
    }
}

/// A handshake run could not start, or stopped.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// Settings are out of range.
    #[error("{0}")]
    Invalid(String),
    /// `--raw` without the privilege to open a raw socket.
    #[error(
        "cannot open a raw socket to send the SYN to {addr}: {source} (--raw needs root or CAP_NET_RAW; without --raw the handshake is timed with connect(), unprivileged)"
    )]
    RawNotPermitted {
        /// The target.
        addr: SocketAddr,
        /// The system's error.
        source: io::Error,
    },
    /// A system call failed in a way that says nothing about the port.
    #[error("{op} for {addr} failed: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The target.
        addr: SocketAddr,
        /// The system's error.
        source: io::Error,
    },
}

/// One attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Attempt number, from 1.
    #[serde(default)]
    pub seq: u64,
    /// What the answer said.
    pub state: PortState,
    /// From sending the SYN to the answer (SYN-ACK, RST or ICMP error); `None` when nothing came back.
    #[serde(rename = "time_ns", with = "crate::units::ser::opt_ns", default)]
    pub time: Option<Duration>,
    /// Start of the attempt since the start of the run.
    #[serde(rename = "at_ns", with = "crate::units::ser::ns")]
    pub at: Duration,
    /// The system's or the network's own words, when the answer was not a SYN-ACK.
    #[serde(default)]
    pub detail: Option<String>,
}

/// Receives each attempt as it ends.
pub trait ConnectObserver {
    /// Called after every attempt.
    fn attempt(&mut self, _attempt: &Attempt) {}
}

/// An observer that ignores everything.
pub struct NoConnectObserver;
impl ConnectObserver for NoConnectObserver {}

/// The result of a handshake run, complete or cut short.
#[derive(Debug, Clone)]
pub struct ConnectResult {
    /// The target.
    pub addr: SocketAddr,
    /// How the SYN was sent.
    pub mode: ConnectMode,
    /// Wall-clock start.
    pub started: SystemTime,
    /// Length of the run.
    pub elapsed: Duration,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// Handshake times of the attempts that found the port open.
    pub handshake: LatencyHistogram,
    /// SYN -> RST times of the attempts that found the port closed.
    pub refused: LatencyHistogram,
    /// Why the run stopped early, if it did.
    pub error: Option<Arc<ConnectError>>,
    /// True when cancelled from outside (Ctrl-C).
    pub cancelled: bool,
    /// True when the run stopped early because nothing answered (see `give_up_after`).
    pub gave_up: bool,
}

impl ConnectResult {
    /// A run to `addr` by `mode` started at `started`, with no attempt yet.
    fn new(addr: SocketAddr, mode: ConnectMode, started: SystemTime) -> ConnectResult {
        ConnectResult {
            addr,
            mode,
            started,
            elapsed: Duration::ZERO,
            attempts: Vec::new(),
            handshake: LatencyHistogram::new(),
            refused: LatencyHistogram::new(),
            error: None,
            cancelled: false,
            gave_up: false,
        }
    }

    /// Attempts that ended in `state`.
    pub fn count(&self, state: PortState) -> u64 {
        self.attempts.iter().filter(|a| a.state == state).count() as u64
    }

    /// The state most attempts found (ties go to the more definite answer: open, closed, unreachable,
    /// filtered); `None` when there was no attempt.
    pub fn verdict(&self) -> Option<PortState> {
        [
            PortState::Open,
            PortState::Closed,
            PortState::Unreachable,
            PortState::Filtered,
        ]
        .into_iter()
        .map(|s| (self.count(s), s))
        .filter(|(n, _)| *n > 0)
        .fold(None, |best: Option<(u64, PortState)>, (n, s)| match best {
            Some((bn, _)) if bn >= n => best,
            _ => Some((n, s)),
        })
        .map(|(_, s)| s)
    }
}

/// Names an errno the way a user reads it.
fn errno_words(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "ECONNREFUSED",
        Some(libc::EHOSTUNREACH) => "EHOSTUNREACH",
        Some(libc::ENETUNREACH) => "ENETUNREACH",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EPERM) => "EPERM",
        Some(libc::ETIMEDOUT) => "ETIMEDOUT",
        Some(libc::EPROTO) => "EPROTO",
        Some(libc::ENOPROTOOPT) => "ENOPROTOOPT",
        _ => return e.to_string(),
    };
    format!("{} ({name})", os_words(e))
}

/// The system's words for an error without the "(os error N)" tail.
pub fn os_words(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Classifies a failed connect() or raw receive; `None` when the error says nothing about the port.
fn classify(e: &io::Error) -> Option<(PortState, String)> {
    let words = errno_words(e);
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => Some((PortState::Closed, format!("RST: {words}"))),
        Some(libc::EHOSTUNREACH)
        | Some(libc::ENETUNREACH)
        | Some(libc::EPROTO)
        | Some(libc::ENOPROTOOPT) => Some((PortState::Unreachable, words)),
        Some(libc::EACCES) | Some(libc::EPERM) => Some((
            PortState::Unreachable,
            format!("{words}: refused by a firewall rule (administratively prohibited)"),
        )),
        Some(libc::ETIMEDOUT) => Some((PortState::Filtered, words)),
        _ if e.kind() == io::ErrorKind::TimedOut => None,
        _ => None,
    }
}

/// Asks the kernel to report every ICMP error about this socket's packets as a receive error
/// (`IP_RECVERR` / `IPV6_RECVERR`). Without it a connected raw or ICMP socket only hears of "hard" errors
/// such as port unreachable, and host or network unreachable would look like silence.
pub(crate) fn set_recv_err(sock: &Socket, v6: bool) -> io::Result<()> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVERR)
    };
    crate::sys::setsockopt_on(sock, level, name)
}

fn new_socket(addr: SocketAddr, ty: Type, proto: Protocol) -> io::Result<Socket> {
    Socket::new(Domain::for_address(addr), ty, Some(proto))
}

/// One attempt through the kernel's connect(): a blocking connect() bounded by `SO_SNDTIMEO`, so the whole
/// handshake is one system call (no non-blocking dance, no poll) and the clock brackets only that call. On
/// loopback the kernel completes the handshake inside the call; elsewhere the call sleeps until the SYN-ACK,
/// the RST or the ICMP error arrives, or the timeout ends it with `EINPROGRESS`.
fn kernel_attempt(
    config: &ConnectConfig,
) -> Result<(PortState, Option<Duration>, Option<String>), ConnectError> {
    let addr = config.addr;
    let io = |op, source| ConnectError::Io { op, addr, source };
    let sock = new_socket(addr, Type::STREAM, Protocol::TCP)
        .map_err(|e| io("creating a TCP socket", e))?;
    sock.set_write_timeout(Some(config.timeout))
        .map_err(|e| io("setting the connect timeout (SO_SNDTIMEO)", e))?;
    let target = SockAddr::from(addr);
    let filtered = || {
        Ok((
            PortState::Filtered,
            None,
            Some(format!("no answer within {:?}", config.timeout)),
        ))
    };
    let t0 = Instant::now();
    let mut res = sock.connect(&target);
    let mut t = t0.elapsed();
    // A signal (Ctrl-C) interrupts the wait but not the handshake: calling connect() again resumes waiting.
    while let Err(e) = &res {
        if e.kind() != io::ErrorKind::Interrupted || config.cancel.load(Ordering::Relaxed) {
            break;
        }
        let left = config.timeout.saturating_sub(t0.elapsed());
        if left.is_zero() {
            return filtered();
        }
        let _ = sock.set_write_timeout(Some(left));
        res = match sock.connect(&target) {
            Err(e) if e.raw_os_error() == Some(libc::EISCONN) => Ok(()),
            r => r,
        };
        t = t0.elapsed();
    }
    match res {
        Ok(()) => Ok((PortState::Open, Some(t), None)),
        Err(e)
            if e.raw_os_error() == Some(libc::EINPROGRESS)
                || e.raw_os_error() == Some(libc::EALREADY)
                || e.kind() == io::ErrorKind::WouldBlock =>
        {
            filtered()
        }
        // Interrupted by Ctrl-C: the attempt never got its answer; the caller drops it.
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok((PortState::Filtered, None, None)),
        Err(e) => match classify(&e) {
            Some((PortState::Filtered, d)) => Ok((PortState::Filtered, None, Some(d))),
            Some((state, d)) => Ok((state, Some(t), Some(d))),
            None => Err(io("connect()", e)),
        },
    }
}

/// A classic BPF program for a raw IPv4 TCP socket that keeps the segments whose source port is `port` (the
/// IP header's length read from its first byte, as tcpdump's `tcp src port` compiles).
fn source_port_filter(port: u16) -> [libc::sock_filter; 5] {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    [
        // X = 4 * (IP header length)
        op(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, 0, 0, 0),
        // A = the TCP source port
        op(libc::BPF_LD | libc::BPF_H | libc::BPF_IND, 0, 0, 0),
        op(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            0,
            1,
            u32::from(port),
        ),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0xffff),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
    ]
}

/// Raw-socket state shared by the attempts of one run.
struct RawProber {
    sock: Socket,
    src: IpAddr,
    dst: SocketAddr,
    isn: u32,
}

/// TCP flags.
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

impl RawProber {
    fn open(config: &ConnectConfig) -> Result<RawProber, ConnectError> {
        let dst = config.addr;
        let sock = new_socket(dst, Type::RAW, Protocol::TCP).map_err(|source| {
            if matches!(
                source.raw_os_error(),
                Some(libc::EPERM) | Some(libc::EACCES)
            ) {
                ConnectError::RawNotPermitted { addr: dst, source }
            } else {
                ConnectError::Io {
                    op: "opening a raw TCP socket",
                    addr: dst,
                    source,
                }
            }
        })?;
        // Connected: the kernel only hands us packets from the target, and (with IP_RECVERR) ICMP errors
        // about our SYNs become receive errors. Port 0: raw sockets take the protocol, not a port.
        set_recv_err(&sock, dst.is_ipv6()).map_err(|source| ConnectError::Io {
            op: "asking for ICMP errors (IP_RECVERR)",
            addr: dst,
            source,
        })?;
        // Kernel receive timestamps, as for ICMP: the SYN-ACK's arrival, not our wake-up.
        let _ = crate::probe::rxtime::enable(&sock);
        sock.connect(&SockAddr::from(SocketAddr::new(dst.ip(), 0)))
            .map_err(|source| ConnectError::Io {
                op: "connecting the raw socket",
                addr: dst,
                source,
            })?;
        // Only the target port's segments: a raw TCP socket gets a copy of every TCP segment from the target's
        // address, and on a busy host (a bulk transfer on loopback) they fill its receive buffer until the
        // SYN-ACK is dropped and the port reads as filtered. IPv4 raw sockets see the IP header first.
        if dst.is_ipv4() {
            crate::sys::attach_filter(&sock, &source_port_filter(dst.port())).map_err(
                |source| ConnectError::Io {
                    op: "filtering the raw socket to the target port (SO_ATTACH_FILTER)",
                    addr: dst,
                    source,
                },
            )?;
        }
        // What arrived before the filter (any TCP segment of the host) is dropped unread, so it cannot hold
        // the buffer the first SYN-ACK needs (bounded: the target port itself may be streaming).
        let mut stale = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
        for _ in 0..100_000 {
            if sock
                .recv_with_flags(&mut stale, libc::MSG_DONTWAIT)
                .is_err()
            {
                break;
            }
        }
        // The source address the kernel's routing picks for this destination.
        let probe = UdpSocket::bind(if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })
            .and_then(|u| u.connect(dst).map(|_| u))
            .and_then(|u| u.local_addr());
        let src = match probe {
            Ok(a) => a.ip(),
            Err(source) => {
                return Err(ConnectError::Io {
                    op: "finding the source address (route lookup)",
                    addr: dst,
                    source,
                });
            }
        };
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            ^ std::process::id().rotate_left(16);
        Ok(RawProber {
            sock,
            src,
            dst,
            isn: seed,
        })
    }

    fn attempt(
        &mut self,
        config: &ConnectConfig,
        seq: u64,
    ) -> Result<(PortState, Option<Duration>, Option<String>), ConnectError> {
        let dst = self.dst;
        // Reserve a source port for this attempt: bound, never listening or connected.
        let guard = new_socket(dst, Type::STREAM, Protocol::TCP)
            .and_then(|g| {
                g.bind(&SockAddr::from(SocketAddr::new(self.src, 0)))
                    .map(|_| g)
            })
            .and_then(|g| g.local_addr().map(|a| (g, a)));
        let (_guard, local) = guard.map_err(|source| ConnectError::Io {
            op: "reserving a source port",
            addr: dst,
            source,
        })?;
        let sport = local.as_socket().map_or(0, |a| a.port());
        let isn = self
            .isn
            .wrapping_add((seq as u32).wrapping_mul(0x0101_0101));
        let syn = tcp_segment(self.src, dst.ip(), sport, dst.port(), isn, 0, SYN);
        let mut buf = [0u8; 1500];
        let t0_wall = SystemTime::now();
        let t0 = Instant::now();
        if let Err(e) = self.sock.send(&syn) {
            return match classify(&e) {
                Some((state, d)) => Ok((state, Some(t0.elapsed()), Some(d))),
                None => Err(ConnectError::Io {
                    op: "sending the SYN",
                    addr: dst,
                    source: e,
                }),
            };
        }
        let deadline = t0 + config.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok((
                    PortState::Filtered,
                    None,
                    Some(format!("no answer within {:?}", config.timeout)),
                ));
            }
            let _ = self.sock.set_read_timeout(Some(left));
            let (n, stamp) = match crate::probe::rxtime::recv(&self.sock, &mut buf) {
                Ok(r) => r,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let t = t0.elapsed();
                    return match classify(&e) {
                        Some((state, d)) => Ok((state, Some(t), Some(format!("ICMP error: {d}")))),
                        None => Err(ConnectError::Io {
                            op: "receiving the answer",
                            addr: dst,
                            source: e,
                        }),
                    };
                }
            };
            let t = crate::probe::rxtime::rtt(t0_wall, stamp, t0.elapsed());
            let tcp = if dst.is_ipv4() {
                strip_ipv4(&buf[..n])
            } else {
                Some(&buf[..n])
            };
            let Some(h) = tcp.and_then(TcpHeader::parse) else {
                continue;
            };
            if h.sport != dst.port() || h.dport != sport {
                continue;
            }
            if h.flags & RST != 0 && (h.flags & ACK == 0 || h.ack == isn.wrapping_add(1)) {
                return Ok((PortState::Closed, Some(t), Some("RST".into())));
            }
            if h.flags & (SYN | ACK) == SYN | ACK && h.ack == isn.wrapping_add(1) {
                // Answer as hping3 -S: reset, so the server never completes the connection.
                let rst = tcp_segment(self.src, dst.ip(), sport, dst.port(), h.ack, 0, RST);
                let _ = self.sock.send(&rst);
                return Ok((PortState::Open, Some(t), None));
            }
        }
    }
}

/// The fields of a TCP header this probe looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TcpHeader {
    sport: u16,
    dport: u16,
    ack: u32,
    flags: u8,
}

impl TcpHeader {
    fn parse(b: &[u8]) -> Option<TcpHeader> {
        if b.len() < 20 {
            return None;
        }
        let be16 = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let be32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(TcpHeader {
            sport: be16(0),
            dport: be16(2),
            ack: be32(8),
            flags: b[13],
        })
    }
}

/// The payload of an IPv4 packet (raw IPv4 sockets deliver the IP header).
fn strip_ipv4(b: &[u8]) -> Option<&[u8]> {
    let first = *b.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    if ihl < 20 {
        return None;
    }
    b.get(ihl..)
}

/// The Internet checksum of `data` added to `sum`.
fn checksum_add(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

fn checksum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A 20-byte TCP header with its checksum over the IPv4 or IPv6 pseudo-header.
fn tcp_segment(
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[8..12].copy_from_slice(&ack.to_be_bytes());
    h[12] = 5 << 4; // data offset: 5 words, no options
    h[13] = flags;
    let window: u16 = if flags & RST != 0 { 0 } else { 64240 };
    h[14..16].copy_from_slice(&window.to_be_bytes());
    let mut sum = 0u32;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            sum = checksum_add(sum, &s.octets());
            sum = checksum_add(sum, &d.octets());
            sum = checksum_add(sum, &[0, 6, 0, 20]);
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            sum = checksum_add(sum, &v6(s));
            sum = checksum_add(sum, &v6(d));
            sum = checksum_add(sum, &[0, 0, 0, 20, 0, 0, 0, 6]);
        }
    }
    sum = checksum_add(sum, &h);
    h[16..18].copy_from_slice(&checksum_fold(sum).to_be_bytes());
    h
}

/// Counts unanswered attempts in a row; true when `limit` of them came while nothing (`heard == 0`) has
/// answered at all.
pub(crate) fn give_up(limit: Option<u64>, silent: &mut u64, answered: bool, heard: u64) -> bool {
    if answered {
        *silent = 0;
        return false;
    }
    *silent += 1;
    matches!(limit, Some(n) if heard == 0 && *silent >= n)
}

/// Sleeps until `deadline` in short steps, returning early when cancelled.
fn sleep_until(deadline: Instant, cancel: &AtomicBool) {
    while !cancel.load(Ordering::Relaxed) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Runs the attempts. `Err` only when nothing could be tried (bad settings, no raw socket); a failure
/// mid-run returns the attempts so far with [`ConnectResult::error`] set.
pub fn run(
    config: &ConnectConfig,
    observer: &mut dyn ConnectObserver,
) -> Result<ConnectResult, ConnectError> {
    config.validate()?;
    let mut raw = match config.mode {
        ConnectMode::Raw => Some(RawProber::open(config)?),
        ConnectMode::Kernel => None,
    };
    let started = SystemTime::now();
    let t0 = Instant::now();
    let mut result = ConnectResult::new(config.addr, config.mode, started);
    let mut next = t0;
    let mut silent = 0u64;
    for seq in 1..=config.count {
        if seq > 1 {
            sleep_until(next, &config.cancel);
        }
        if config.cancel.load(Ordering::Relaxed) {
            result.cancelled = true;
            break;
        }
        let at = t0.elapsed();
        next = Instant::now() + config.interval;
        let outcome = match &mut raw {
            Some(r) => r.attempt(config, seq),
            None => kernel_attempt(config),
        };
        let (state, time, detail) = match outcome {
            Ok(o) => o,
            Err(e) => {
                result.error = Some(Arc::new(e));
                break;
            }
        };
        if config.cancel.load(Ordering::Relaxed) && state == PortState::Filtered {
            // Cut short by Ctrl-C, not by the network: not an attempt.
            result.cancelled = true;
            break;
        }
        match (state, time) {
            (PortState::Open, Some(t)) => result.handshake.record(t),
            (PortState::Closed, Some(t)) => result.refused.record(t),
            _ => {}
        }
        let attempt = Attempt {
            seq,
            state,
            time,
            at,
            detail,
        };
        let answered = attempt.state != PortState::Filtered;
        observer.attempt(&attempt);
        result.attempts.push(attempt);
        let heard = result
            .attempts
            .iter()
            .filter(|a| a.state != PortState::Filtered)
            .count() as u64;
        if give_up(config.give_up_after, &mut silent, answered, heard) {
            result.gave_up = true;
            break;
        }
    }
    result.elapsed = t0.elapsed();
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_checksum_matches_a_known_segment() {
        // A SYN 10.0.0.1:40000 -> 10.0.0.2:80, seq 1, checksum verified: summing the pseudo-header and
        // the segment including its checksum gives 0xffff.
        let src: IpAddr = "10.0.0.1".parse().unwrap();
        let dst: IpAddr = "10.0.0.2".parse().unwrap();
        let seg = tcp_segment(src, dst, 40000, 80, 1, 0, SYN);
        let mut sum = checksum_add(0, &[10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 20]);
        sum = checksum_add(sum, &seg);
        assert_eq!(checksum_fold(sum), 0);
        assert_eq!(&seg[..4], &[0x9c, 0x40, 0, 80]);
        assert_eq!(seg[13], SYN);
        let h = TcpHeader::parse(&seg).unwrap();
        assert_eq!((h.sport, h.dport, h.ack, h.flags), (40000, 80, 0, SYN));

        let s6: IpAddr = "fd00::1".parse().unwrap();
        let d6: IpAddr = "fd00::2".parse().unwrap();
        let seg = tcp_segment(s6, d6, 1, 2, 3, 4, RST | ACK);
        let mut sum = 0;
        if let (IpAddr::V6(a), IpAddr::V6(b)) = (s6, d6) {
            sum = checksum_add(sum, &a.octets());
            sum = checksum_add(sum, &b.octets());
        }
        sum = checksum_add(sum, &[0, 0, 0, 20, 0, 0, 0, 6]);
        sum = checksum_add(sum, &seg);
        assert_eq!(checksum_fold(sum), 0);
    }

    #[test]
    fn parsers_reject_short_or_foreign_bytes() {
        assert!(TcpHeader::parse(&[0u8; 19]).is_none());
        assert!(strip_ipv4(&[]).is_none());
        assert!(strip_ipv4(&[0x60, 0, 0, 0]).is_none()); // IPv6 version nibble
        assert!(strip_ipv4(&[0x41; 10]).is_none()); // IHL 1 word: invalid
        assert!(strip_ipv4(&[0x46; 10]).is_none()); // IHL 24 bytes but only 10 there
        let mut pkt = vec![0x45u8; 20];
        pkt.extend_from_slice(&[1, 2, 3]);
        assert_eq!(strip_ipv4(&pkt), Some(&[1u8, 2, 3][..]));
    }

    #[test]
    fn errors_map_to_port_states() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(
            classify(&e(libc::ECONNREFUSED)).unwrap().0,
            PortState::Closed
        );
        assert_eq!(
            classify(&e(libc::EHOSTUNREACH)).unwrap().0,
            PortState::Unreachable
        );
        assert_eq!(
            classify(&e(libc::ENETUNREACH)).unwrap().0,
            PortState::Unreachable
        );
        assert_eq!(
            classify(&e(libc::ETIMEDOUT)).unwrap().0,
            PortState::Filtered
        );
        assert!(classify(&e(libc::EBADF)).is_none());
    }

    #[test]
    fn gives_up_only_on_silence_from_the_start() {
        let mut silent = 0;
        assert!(!give_up(Some(2), &mut silent, false, 0));
        assert!(give_up(Some(2), &mut silent, false, 0));
        let mut silent = 0;
        assert!(!give_up(Some(2), &mut silent, false, 1));
        assert!(
            !give_up(Some(2), &mut silent, false, 1),
            "something answered before: keep going"
        );
        assert!(!give_up(None, &mut silent, false, 0));
        assert!(!give_up(Some(1), &mut silent, true, 1));
        assert_eq!(silent, 0);
    }

    #[test]
    fn verdict_prefers_the_majority_then_the_definite_answer() {
        let mut r = ConnectResult::new(
            "127.0.0.1:1".parse().unwrap(),
            ConnectMode::Kernel,
            SystemTime::now(),
        );
        assert_eq!(r.verdict(), None);
        let a = |state| Attempt {
            seq: 1,
            state,
            time: None,
            at: Duration::ZERO,
            detail: None,
        };
        r.attempts = vec![
            a(PortState::Filtered),
            a(PortState::Filtered),
            a(PortState::Open),
        ];
        assert_eq!(r.verdict(), Some(PortState::Filtered));
        r.attempts.push(a(PortState::Open));
        assert_eq!(r.verdict(), Some(PortState::Open));
    }
}
