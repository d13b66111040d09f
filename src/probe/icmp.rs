//! ICMP echo round trips (`ping`, `fping`), IPv4 and IPv6.
//!
//! Two kinds of socket can send an echo request:
//! - a **raw** socket (root or `CAP_NET_RAW`): the echo is built here, and replies are picked out of every
//!   ICMP packet the host receives by their identifier and sequence number;
//! - the unprivileged **ICMP datagram** socket (`socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)`), which the kernel
//!   allows only to the groups in `net.ipv4.ping_group_range` (the same setting covers IPv6). The kernel sets
//!   the identifier and the checksum, and delivers only the replies to this socket.
//!
//! [`IcmpMode::Auto`] tries the raw socket first, then the datagram socket; when neither is allowed the error
//! says how to allow it. Both sockets are connected to the target, so the kernel turns an ICMP error about our
//! echo (host or network unreachable, ...) into a receive error, reported per probe.

use crate::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};
use thiserror::Error;

/// Largest echo payload: an IPv4 datagram of 65535 bytes minus the IP and ICMP headers.
pub const MAX_PAYLOAD: usize = 65_507;
/// `ping`'s default payload size.
pub const DEFAULT_PAYLOAD: usize = 56;
const ICMP_HEADER: usize = 8;

/// Which socket to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IcmpMode {
    /// Raw when allowed, else the datagram socket.
    #[default]
    Auto,
    /// Raw only.
    Raw,
    /// The unprivileged datagram socket only.
    Datagram,
}

/// The socket that was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IcmpSocket {
    /// `SOCK_RAW`.
    Raw,
    /// `SOCK_DGRAM` ICMP socket.
    Datagram,
}

impl std::fmt::Display for IcmpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IcmpSocket::Raw => "raw socket",
            IcmpSocket::Datagram => "unprivileged ICMP datagram socket",
        })
    }
}

/// Settings of an echo run. Build with [`IcmpConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct IcmpConfig {
    /// The host.
    pub addr: IpAddr,
    /// Number of echo requests.
    pub count: u64,
    /// Time from one request to the next.
    pub interval: Duration,
    /// How long to wait for each reply.
    pub timeout: Duration,
    /// Payload bytes after the 8-byte ICMP header (`ping -s`).
    pub size: usize,
    /// Raw, datagram or whichever works.
    pub mode: IcmpMode,
    /// Set from outside (Ctrl-C) to end the run early; results so far are kept.
    pub cancel: Arc<AtomicBool>,
    /// Stop after this many unanswered attempts in a row while nothing at all has answered yet, so a host
    /// that drops everything does not cost `count` timeouts. `None`: always make `count` attempts.
    pub give_up_after: Option<u64>,
}

impl IcmpConfig {
    /// Defaults: 5 requests, one per second, 1 s timeout, 56-byte payload, automatic socket.
    pub fn new(addr: IpAddr) -> Self {
        IcmpConfig {
            addr,
            count: 5,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            size: DEFAULT_PAYLOAD,
            mode: IcmpMode::Auto,
            cancel: Arc::new(AtomicBool::new(false)),
            give_up_after: None,
        }
    }

    /// Checks the settings before any I/O.
    pub fn validate(&self) -> Result<(), IcmpError> {
        if self.count == 0 {
            return Err(IcmpError::Invalid("count must be at least 1".into()));
        }
        if self.timeout.is_zero() {
            return Err(IcmpError::Invalid("timeout must be more than 0".into()));
        }
        if self.size > MAX_PAYLOAD {
            return Err(IcmpError::Invalid(format!(
                "ICMP payload size {} is more than {MAX_PAYLOAD} bytes",
                self.size
            )));
        }
        Ok(())
    }
}

/// An echo run could not start or stopped.
#[derive(Debug, Error)]
pub enum IcmpError {
    /// Settings are out of range.
    #[error("{0}")]
    Invalid(String),
    /// Neither a raw nor a datagram ICMP socket may be opened by this user.
    #[error(
        "ICMP echo to {addr} is not permitted: {detail} (run as root, give the binary CAP_NET_RAW with `setcap cap_net_raw+ep`, or allow unprivileged ICMP sockets for your group {gid} with `sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"`; it is now \"{range}\")"
    )]
    NotPermitted {
        /// The target.
        addr: IpAddr,
        /// What the system said for each socket tried.
        detail: String,
        /// This process's group id.
        gid: String,
        /// The current value of `net.ipv4.ping_group_range`.
        range: String,
    },
    /// The kernel has no route to the host (or a local rule forbids it): nothing can be sent.
    #[error(
        "cannot send ICMP echo to {addr}: {detail} (no route to it: check the address and `ip route get {addr}`)"
    )]
    NoRoute {
        /// The target.
        addr: IpAddr,
        /// The system's words.
        detail: String,
    },
    /// A system call failed.
    #[error("{op} for {addr} failed: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The target.
        addr: IpAddr,
        /// The system's error.
        source: io::Error,
    },
}

/// What became of one echo request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum ProbeOutcome {
    /// The echo reply came back.
    Reply {
        /// Bytes of the ICMP message received (header and payload).
        #[serde(default)]
        bytes: usize,
        /// The reply's IP TTL, when the socket shows it (raw IPv4).
        #[serde(default)]
        ttl: Option<u8>,
        /// Round-trip time in nanoseconds.
        rtt_ns: u64,
    },
    /// No reply within the timeout.
    Timeout,
    /// An ICMP error (or a local routing error) instead of a reply.
    Error {
        /// The error.
        detail: String,
    },
}

/// One echo request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// ICMP sequence number.
    #[serde(default)]
    pub seq: u16,
    /// Send time since the start of the run, nanoseconds.
    pub at_ns: u64,
    /// What came back.
    #[serde(flatten)]
    pub outcome: ProbeOutcome,
}

/// Receives each probe as it ends.
pub trait IcmpObserver {
    /// Called after every echo request.
    fn probe(&mut self, _probe: &Probe) {}
}

/// An observer that ignores everything.
pub struct NoIcmpObserver;
impl IcmpObserver for NoIcmpObserver {}

/// The result of an echo run, complete or cut short.
#[derive(Debug, Clone)]
pub struct IcmpResult {
    /// The target.
    pub addr: IpAddr,
    /// Which socket was used.
    pub socket: IcmpSocket,
    /// Payload bytes per request.
    pub size: usize,
    /// Wall-clock start.
    pub started: SystemTime,
    /// Length of the run.
    pub elapsed: Duration,
    /// Requests sent.
    pub sent: u64,
    /// Replies received in time.
    pub received: u64,
    /// Requests answered by an ICMP error or refused locally.
    pub errors: u64,
    /// The last error's words, when there was one.
    pub last_error: Option<String>,
    /// Round-trip times.
    pub rtt: LatencyHistogram,
    /// Why the run stopped early, if it did.
    pub error: Option<Arc<IcmpError>>,
    /// True when cancelled from outside (Ctrl-C).
    pub cancelled: bool,
    /// True when the run stopped early because nothing answered (see `give_up_after`).
    pub gave_up: bool,
}

impl IcmpResult {
    /// Requests with no reply.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

fn own_gid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Gid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .unwrap_or_else(|| "?".into())
}

/// The current `net.ipv4.ping_group_range`, tabs made spaces.
pub fn ping_group_range() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range")
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// Opens the socket the mode asks for, connected to the target.
fn open(config: &IcmpConfig) -> Result<(Socket, IcmpSocket), IcmpError> {
    let addr = config.addr;
    let (domain, proto) = match addr {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6),
    };
    let io_err = |op, source| IcmpError::Io { op, addr, source };
    let mut refused = Vec::new();
    let tries: &[IcmpSocket] = match config.mode {
        IcmpMode::Auto => &[IcmpSocket::Raw, IcmpSocket::Datagram],
        IcmpMode::Raw => &[IcmpSocket::Raw],
        IcmpMode::Datagram => &[IcmpSocket::Datagram],
    };
    for &kind in tries {
        let ty = match kind {
            IcmpSocket::Raw => Type::RAW,
            IcmpSocket::Datagram => Type::DGRAM,
        };
        match Socket::new(domain, ty, Some(proto)) {
            Ok(s) => {
                crate::probe::connect::set_recv_err(&s, addr.is_ipv6())
                    .map_err(|e| io_err("asking for ICMP errors (IP_RECVERR)", e))?;
                s.connect(&SockAddr::from(SocketAddr::new(addr, 0)))
                    .map_err(|e| {
                        if is_path_error(&e) {
                            IcmpError::NoRoute {
                                addr,
                                detail: error_words(&e),
                            }
                        } else {
                            io_err("connecting the ICMP socket", e)
                        }
                    })?;
                let _ = s.set_recv_buffer_size(256 * 1024);
                // Kernel receive timestamps, as fping: without them the RTT includes our wake-up.
                let _ = crate::probe::rxtime::enable(&s);
                return Ok((s, kind));
            }
            Err(e) if is_permission(&e) => {
                refused.push(format!("{kind}: {}", crate::probe::connect::os_words(&e)))
            }
            Err(e) => return Err(io_err("opening an ICMP socket", e)),
        }
    }
    Err(IcmpError::NotPermitted {
        addr,
        detail: refused.join("; "),
        gid: own_gid(),
        range: ping_group_range(),
    })
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// ICMP types.
const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

/// Builds an echo request. The checksum is filled for IPv4; the kernel fills it for ICMPv6 and for
/// datagram sockets (which also replace the identifier).
pub fn echo_request(v6: bool, id: u16, seq: u16, payload: usize) -> Vec<u8> {
    let mut m = vec![0u8; ICMP_HEADER + payload];
    m[0] = if v6 { ECHO_REQUEST_V6 } else { ECHO_REQUEST_V4 };
    m[4..6].copy_from_slice(&id.to_be_bytes());
    m[6..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in m.iter_mut().enumerate().skip(ICMP_HEADER) {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    if !v6 {
        let c = checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
    }
    m
}

/// What a received packet is, as far as this run cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// An echo reply with this identifier and sequence number; `bytes` of ICMP, `ttl` when known.
    Reply {
        /// Identifier.
        id: u16,
        /// Sequence number.
        seq: u16,
        /// ICMP bytes.
        bytes: usize,
        /// IPv4 TTL when the packet carried its IP header.
        ttl: Option<u8>,
    },
    /// Anything else (our own request seen on loopback, other ICMP traffic, garbage).
    Other,
}

/// Decodes a packet from an ICMP socket: raw IPv4 sockets deliver the IP header, the others do not.
pub fn parse_received(v6: bool, with_ip_header: bool, b: &[u8]) -> Received {
    let (icmp, ttl) = if with_ip_header {
        let Some(&first) = b.first() else {
            return Received::Other;
        };
        let ihl = usize::from(first & 0x0f) * 4;
        if first >> 4 != 4 || ihl < 20 || b.len() < ihl {
            return Received::Other;
        }
        (&b[ihl..], Some(b[8]))
    } else {
        (b, None)
    };
    if icmp.len() < ICMP_HEADER {
        return Received::Other;
    }
    let want = if v6 { ECHO_REPLY_V6 } else { ECHO_REPLY_V4 };
    if icmp[0] != want || icmp[1] != 0 {
        return Received::Other;
    }
    Received::Reply {
        id: u16::from_be_bytes([icmp[4], icmp[5]]),
        seq: u16::from_be_bytes([icmp[6], icmp[7]]),
        bytes: icmp.len(),
        ttl,
    }
}

fn error_words(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EHOSTUNREACH) => " (EHOSTUNREACH)",
        Some(libc::ENETUNREACH) => " (ENETUNREACH)",
        Some(libc::EACCES) => " (EACCES: administratively prohibited)",
        Some(libc::EPERM) => " (EPERM: blocked by a local firewall rule)",
        Some(libc::ECONNREFUSED) => " (ECONNREFUSED: ICMP port unreachable)",
        Some(libc::EMSGSIZE) => " (EMSGSIZE: larger than the path MTU; try a smaller --size)",
        _ => "",
    };
    format!("{}{name}", crate::probe::connect::os_words(e))
}

/// Errors that describe the path to the host rather than a broken socket.
fn is_path_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EHOSTUNREACH)
            | Some(libc::ENETUNREACH)
            | Some(libc::EACCES)
            | Some(libc::EPERM)
            | Some(libc::ECONNREFUSED)
            | Some(libc::EMSGSIZE)
            | Some(libc::EPROTO)
            | Some(libc::EHOSTDOWN)
    )
}

/// Sends the echo requests. `Err` only when nothing could be sent (bad settings, no socket allowed); a
/// failure mid-run returns the results so far with [`IcmpResult::error`] set.
pub fn run(config: &IcmpConfig, observer: &mut dyn IcmpObserver) -> Result<IcmpResult, IcmpError> {
    config.validate()?;
    let (sock, kind) = open(config)?;
    let addr = config.addr;
    let v6 = addr.is_ipv6();
    let with_ip_header = kind == IcmpSocket::Raw && !v6;
    let id = (std::process::id() as u16)
        ^ SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u16);
    let mut result = IcmpResult {
        addr,
        socket: kind,
        size: config.size,
        started: SystemTime::now(),
        elapsed: Duration::ZERO,
        sent: 0,
        received: 0,
        errors: 0,
        last_error: None,
        rtt: LatencyHistogram::new(),
        error: None,
        cancelled: false,
        gave_up: false,
    };
    let mut buf = vec![0u8; ICMP_HEADER + config.size + 128];
    let t0 = Instant::now();
    let mut next = t0;
    let mut silent = 0u64;
    use crate::probe::connect::give_up;
    for n in 0..config.count {
        if n > 0 {
            while !config.cancel.load(Ordering::Relaxed) {
                let left = next.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(50)));
            }
        }
        if config.cancel.load(Ordering::Relaxed) {
            result.cancelled = true;
            break;
        }
        let seq = (n as u16).wrapping_add(1);
        let msg = echo_request(v6, id, seq, config.size);
        let sent_wall = SystemTime::now();
        let sent_at = Instant::now();
        next = sent_at + config.interval;
        let at_ns = u64::try_from((sent_at - t0).as_nanos()).unwrap_or(u64::MAX);
        let send = (&sock).write_all_once(&msg);
        result.sent += 1;
        let outcome = match send {
            Err(e) if is_path_error(&e) => ProbeOutcome::Error {
                detail: error_words(&e),
            },
            Err(e) => {
                result.error = Some(Arc::new(IcmpError::Io {
                    op: "sending the echo request",
                    addr,
                    source: e,
                }));
                break;
            }
            Ok(()) => match wait_reply(
                &sock,
                &mut buf,
                config,
                v6,
                with_ip_header,
                kind,
                id,
                seq,
                (sent_at, sent_wall),
            ) {
                Ok(o) => o,
                Err(e) => {
                    result.error = Some(Arc::new(IcmpError::Io {
                        op: "receiving the echo reply",
                        addr,
                        source: e,
                    }));
                    break;
                }
            },
        };
        match &outcome {
            ProbeOutcome::Reply { rtt_ns, .. } => {
                result.received += 1;
                result.rtt.record_ns(*rtt_ns);
            }
            ProbeOutcome::Error { detail } => {
                result.errors += 1;
                result.last_error = Some(detail.clone());
            }
            ProbeOutcome::Timeout => {}
        }
        let answered = !matches!(outcome, ProbeOutcome::Timeout);
        observer.probe(&Probe {
            seq,
            at_ns,
            outcome,
        });
        if give_up(
            config.give_up_after,
            &mut silent,
            answered,
            result.received + result.errors,
        ) {
            result.gave_up = true;
            break;
        }
    }
    result.elapsed = t0.elapsed();
    Ok(result)
}

/// Sends a whole datagram in one call.
trait SendOnce {
    fn write_all_once(self, msg: &[u8]) -> io::Result<()>;
}

impl SendOnce for &Socket {
    fn write_all_once(self, msg: &[u8]) -> io::Result<()> {
        let n = self.send(msg)?;
        if n != msg.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short send of an ICMP message",
            ));
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn wait_reply(
    sock: &Socket,
    buf: &mut [u8],
    config: &IcmpConfig,
    v6: bool,
    with_ip_header: bool,
    kind: IcmpSocket,
    id: u16,
    seq: u16,
    (sent_at, sent_wall): (Instant, SystemTime),
) -> io::Result<ProbeOutcome> {
    let deadline = sent_at + config.timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(ProbeOutcome::Timeout);
        }
        sock.set_read_timeout(Some(left))?;
        let (n, stamp) = match crate::probe::rxtime::recv(sock, buf) {
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
            Err(e) if is_path_error(&e) => {
                return Ok(ProbeOutcome::Error {
                    detail: format!("ICMP error: {}", error_words(&e)),
                });
            }
            Err(e) => return Err(e),
        };
        let rtt = crate::probe::rxtime::rtt(sent_wall, stamp, sent_at.elapsed());
        match parse_received(v6, with_ip_header, &buf[..n]) {
            // Datagram sockets rewrite the identifier and deliver only their own replies.
            Received::Reply {
                id: rid,
                seq: rseq,
                bytes,
                ttl,
            } if rseq == seq && (kind == IcmpSocket::Datagram || rid == id) => {
                return Ok(ProbeOutcome::Reply {
                    bytes,
                    ttl,
                    rtt_ns: u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX),
                });
            }
            _ => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_request_checksums_to_zero() {
        let m = echo_request(false, 0x1234, 7, 56);
        assert_eq!(m.len(), 64);
        assert_eq!(m[0], 8);
        assert_eq!(&m[4..8], &[0x12, 0x34, 0, 7]);
        assert_eq!(checksum(&m), 0);
        let odd = echo_request(false, 1, 1, 3);
        assert_eq!(checksum(&odd), 0);
        assert_eq!(echo_request(true, 1, 1, 0)[0], 128);
    }

    #[test]
    fn parses_replies_with_and_without_ip_header() {
        // A real IPv4 echo reply as a raw socket delivers it: 20-byte IP header (TTL 64), then ICMP.
        let mut pkt = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1, //
            0, 0, 0, 0, 0xab, 0xcd, 0, 9,
        ];
        assert_eq!(
            parse_received(false, true, &pkt),
            Received::Reply {
                id: 0xabcd,
                seq: 9,
                bytes: 8,
                ttl: Some(64)
            }
        );
        // Our own request looped back is not a reply.
        pkt[20] = 8;
        assert_eq!(parse_received(false, true, &pkt), Received::Other);
        // ICMPv6 reply without IP header.
        let v6 = [129u8, 0, 0, 0, 0, 1, 0, 2, 0xff];
        assert_eq!(
            parse_received(true, false, &v6),
            Received::Reply {
                id: 1,
                seq: 2,
                bytes: 9,
                ttl: None
            }
        );
        // Truncated and foreign bytes.
        for bad in [&[][..], &[0x45u8; 10][..], &[0x60, 0, 0][..], &[0u8; 7][..]] {
            assert_eq!(parse_received(false, true, bad), Received::Other);
            assert_eq!(parse_received(false, false, bad), Received::Other);
        }
    }

    #[test]
    fn settings_are_checked() {
        let mut c = IcmpConfig::new("127.0.0.1".parse().unwrap());
        assert!(c.validate().is_ok());
        c.size = MAX_PAYLOAD + 1;
        assert!(c.validate().is_err());
        c.size = 0;
        c.count = 0;
        assert!(c.validate().is_err());
    }
}
