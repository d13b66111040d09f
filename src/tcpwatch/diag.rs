//! The sock_diag netlink messages (linux/inet_diag.h): building a `SOCK_DIAG_BY_FAMILY` dump request and
//! parsing the kernel's replies. Pure byte work, so it is tested on captured replies; a short or malformed
//! message is an error, never a panic.
#![forbid(unsafe_code)]

use super::info::{self, TcpInfo};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `NETLINK_SOCK_DIAG`, the netlink protocol number of socket diagnostics.
pub const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
const INET_DIAG_MSG_LEN: usize = 72;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_SKMEMINFO: u16 = 7;
const IPPROTO_TCP: u8 = 6;

/// Address family of a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `AF_INET`.
    V4,
    /// `AF_INET6`.
    V6,
}

impl Family {
    fn af(self) -> u8 {
        match self {
            Family::V4 => 2,
            Family::V6 => 10,
        }
    }
}

/// TCP states (`TCP_ESTABLISHED` = 1 ... `TCP_CLOSING` = 11).
pub const TCP_STATES: [&str; 13] = [
    "unknown",
    "established",
    "syn-sent",
    "syn-recv",
    "fin-wait-1",
    "fin-wait-2",
    "time-wait",
    "close",
    "close-wait",
    "last-ack",
    "listen",
    "closing",
    "new-syn-recv",
];

/// The states a watch asks for: every state of a live connection (not LISTEN, TIME-WAIT or CLOSE).
pub const LIVE_STATES: u32 =
    (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 8) | (1 << 9) | (1 << 11);

/// Builds one dump request for every TCP socket of `family` in `states` (a bit mask, bit N = state N),
/// asking for `tcp_info`, the congestion control name and the socket memory counters.
pub fn dump_request(family: Family, states: u32, seq: u32) -> Vec<u8> {
    let len = (NLMSG_HDRLEN + 56) as u32;
    let mut b = Vec::with_capacity(len as usize);
    b.extend_from_slice(&len.to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
    // struct inet_diag_req_v2
    b.push(family.af());
    b.push(IPPROTO_TCP);
    let ext = (1u8 << (INET_DIAG_INFO - 1))
        | (1u8 << (INET_DIAG_CONG - 1))
        | (1u8 << (INET_DIAG_SKMEMINFO - 1));
    b.push(ext);
    b.push(0);
    b.extend_from_slice(&states.to_ne_bytes());
    b.resize(len as usize, 0); // inet_diag_sockid: all wildcards
    b
}

/// Socket memory counters (`INET_DIAG_SKMEMINFO`), in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkMem {
    /// Bytes queued for reading.
    pub rmem_alloc: u32,
    /// Receive buffer size (`SO_RCVBUF` as the kernel holds it).
    pub rcvbuf: u32,
    /// Bytes queued for sending, in flight included.
    pub wmem_queued: u32,
    /// Send buffer size (`SO_SNDBUF` as the kernel holds it).
    pub sndbuf: u32,
}

/// One socket from a dump.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagSocket {
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port.
    pub remote: SocketAddr,
    /// TCP state number (index into [`TCP_STATES`]).
    pub state: u8,
    /// The kernel's unique socket cookie, the connection's identity across dumps.
    pub cookie: u64,
    /// Socket inode (what `/proc/PID/fd` links name), 0 for a socket no process holds.
    pub inode: u32,
    /// Owner's user id.
    pub uid: u32,
    /// Bytes received and not yet read by the application (established sockets).
    pub recv_q: u32,
    /// Bytes sent and not yet acknowledged, or written and not sent.
    pub send_q: u32,
    /// The kernel's TCP state, when it sent `INET_DIAG_INFO`.
    pub info: Option<TcpInfo>,
    /// Congestion control algorithm name.
    pub congestion: Option<Cow<'static, str>>,
    /// Memory counters.
    pub mem: Option<SkMem>,
}

impl DiagSocket {
    /// An established socket from `local` to `remote` with kernel state `info` and nothing queued (tests).
    #[cfg(test)]
    pub(crate) fn established(local: &str, remote: &str, cookie: u64, info: TcpInfo) -> DiagSocket {
        DiagSocket {
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            state: 1,
            cookie,
            inode: 1,
            uid: 0,
            recv_q: 0,
            send_q: 0,
            info: Some(info),
            congestion: None,
            mem: None,
        }
    }

    /// The state's name ("established", ...).
    pub fn state_name(&self) -> &'static str {
        TCP_STATES
            .get(usize::from(self.state))
            .copied()
            .unwrap_or("unknown")
    }
}

/// What a netlink reply buffer held.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Sockets, in order.
    pub sockets: Vec<DiagSocket>,
    /// True once `NLMSG_DONE` was seen: the dump is complete.
    pub done: bool,
}

/// Why a reply could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// A message header or body was cut short.
    #[error("sock_diag reply truncated: {0}")]
    Truncated(&'static str),
    /// The kernel answered with an error (the errno).
    #[error("sock_diag request refused by the kernel: {}", std::io::Error::from_raw_os_error(*.0))]
    Kernel(i32),
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    b.get(o..o + 2).map(|x| u16::from_ne_bytes([x[0], x[1]]))
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)
        .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
}

fn be16_at(b: &[u8], o: usize) -> Option<u16> {
    b.get(o..o + 2).map(|x| u16::from_be_bytes([x[0], x[1]]))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The common algorithm names without an allocation per socket and sample.
fn congestion_name(b: &[u8]) -> Cow<'static, str> {
    const KNOWN: [&str; 8] = [
        "cubic", "bbr", "reno", "dctcp", "htcp", "vegas", "westwood", "bic",
    ];
    match KNOWN.iter().find(|k| k.as_bytes() == b) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(String::from_utf8_lossy(b).into_owned()),
    }
}

/// Parses one buffer the kernel returned from a dump request: zero or more netlink messages.
pub fn parse(buf: &[u8]) -> Result<Parsed, ParseError> {
    let mut out = Parsed::default();
    out.done = parse_into(buf, &mut out.sockets)?;
    Ok(out)
}

/// Like [`parse`], appending the sockets to `sockets`; returns true once the dump is complete.
pub fn parse_into(buf: &[u8], sockets: &mut Vec<DiagSocket>) -> Result<bool, ParseError> {
    let mut rest = buf;
    while !rest.is_empty() {
        let len = u32_at(rest, 0).ok_or(ParseError::Truncated("netlink header"))? as usize;
        let kind = u16_at(rest, 4).ok_or(ParseError::Truncated("netlink header"))?;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(ParseError::Truncated("netlink message length"));
        }
        let body = &rest[NLMSG_HDRLEN..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = u32_at(body, 0).ok_or(ParseError::Truncated("netlink error"))? as i32;
                if errno != 0 {
                    return Err(ParseError::Kernel(-errno));
                }
            }
            SOCK_DIAG_BY_FAMILY => sockets.push(parse_socket(body)?),
            _ => {}
        }
        rest = rest.get(align4(len)..).unwrap_or(&[]);
    }
    Ok(false)
}

fn addr(family: u8, b: &[u8]) -> Option<IpAddr> {
    match family {
        2 => {
            let a = b.get(0..4)?;
            Some(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])))
        }
        10 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(b.get(0..16)?);
            let v6 = Ipv6Addr::from(a);
            // A dual-stack socket talking IPv4 shows as ::ffff:a.b.c.d; name it by its IPv4 address.
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

/// Parses one `struct inet_diag_msg` and its attributes.
fn parse_socket(b: &[u8]) -> Result<DiagSocket, ParseError> {
    let t = ParseError::Truncated("inet_diag_msg");
    if b.len() < INET_DIAG_MSG_LEN {
        return Err(t);
    }
    let family = b[0];
    let sport = be16_at(b, 4).ok_or(ParseError::Truncated("inet_diag_msg"))?;
    let dport = be16_at(b, 6).ok_or(ParseError::Truncated("inet_diag_msg"))?;
    let src = addr(family, &b[8..24]).ok_or(ParseError::Truncated("address family"))?;
    let dst = addr(family, &b[24..40]).ok_or(ParseError::Truncated("address family"))?;
    let cookie_lo = u64::from(u32_at(b, 44).unwrap_or(0));
    let cookie_hi = u64::from(u32_at(b, 48).unwrap_or(0));
    let mut s = DiagSocket {
        local: SocketAddr::new(src, sport),
        remote: SocketAddr::new(dst, dport),
        state: b[1],
        cookie: cookie_hi << 32 | cookie_lo,
        recv_q: u32_at(b, 56).unwrap_or(0),
        send_q: u32_at(b, 60).unwrap_or(0),
        uid: u32_at(b, 64).unwrap_or(0),
        inode: u32_at(b, 68).unwrap_or(0),
        info: None,
        congestion: None,
        mem: None,
    };
    let mut rest = &b[INET_DIAG_MSG_LEN..];
    while rest.len() >= 4 {
        let alen = usize::from(u16_at(rest, 0).unwrap_or(0));
        let atype = u16_at(rest, 2).unwrap_or(0) & 0x3fff;
        if alen < 4 || alen > rest.len() {
            return Err(ParseError::Truncated("attribute length"));
        }
        let data = &rest[4..alen];
        match atype {
            INET_DIAG_INFO => s.info = Some(info::decode(data)),
            INET_DIAG_CONG => {
                let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
                s.congestion = Some(congestion_name(&data[..end]));
            }
            INET_DIAG_SKMEMINFO => {
                let m = |i: usize| u32_at(data, i * 4);
                if let (Some(rmem_alloc), Some(rcvbuf), Some(sndbuf), Some(wmem_queued)) =
                    (m(0), m(1), m(3), m(5))
                {
                    s.mem = Some(SkMem {
                        rmem_alloc,
                        rcvbuf,
                        wmem_queued,
                        sndbuf,
                    });
                }
            }
            _ => {}
        }
        rest = rest.get(align4(alen)..).unwrap_or(&[]);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real reply: `SOCK_DIAG_BY_FAMILY` dump of AF_INET on Linux 6.18, one established loopback
    /// connection from 127.0.0.1 to 127.0.0.1:port (tests/fixtures/sock_diag_v4.bin, captured with
    /// tests/fixtures/capture_sock_diag.py).
    const FIXTURE: &[u8] = include_bytes!("../../tests/fixtures/sock_diag_v4.bin");

    #[test]
    fn request_layout() {
        let r = dump_request(Family::V6, LIVE_STATES, 7);
        assert_eq!(r.len(), 72);
        assert_eq!(u32_at(&r, 0), Some(72));
        assert_eq!(u16_at(&r, 4), Some(20));
        assert_eq!(u16_at(&r, 6), Some(0x301));
        assert_eq!(u32_at(&r, 8), Some(7));
        assert_eq!(r[16], 10);
        assert_eq!(r[17], 6);
        assert_eq!(r[18], 0b0100_1010);
    }

    #[test]
    fn fixture_parses() {
        let p = parse(FIXTURE).unwrap();
        assert!(!p.sockets.is_empty());
        let s = &p.sockets[0];
        assert_eq!(s.state_name(), "established");
        assert!(s.local.ip().is_loopback());
        let i = s.info.as_ref().unwrap();
        assert!(i.len >= 104);
        assert!(i.rtt.is_some() && i.cwnd.unwrap() > 0);
        assert!(s.congestion.is_some());
        assert!(s.mem.unwrap().sndbuf > 0);
        assert!(s.cookie != 0 && s.inode != 0);
    }

    #[test]
    fn every_truncation_is_an_error_or_a_prefix() {
        for n in 0..FIXTURE.len() {
            // Never a panic; a cut inside a message is an error.
            let _ = parse(&FIXTURE[..n]);
        }
        let mut bad = FIXTURE.to_vec();
        bad[0..4].copy_from_slice(&5u32.to_ne_bytes());
        assert_eq!(
            parse(&bad).unwrap_err(),
            ParseError::Truncated("netlink message length")
        );
    }

    #[test]
    fn kernel_error_is_reported() {
        let mut b = Vec::new();
        b.extend_from_slice(&36u32.to_ne_bytes());
        b.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        b.extend_from_slice(&[0; 10]);
        b.extend_from_slice(&(-22i32).to_ne_bytes());
        b.extend_from_slice(&[0; 16]);
        assert_eq!(parse(&b).unwrap_err(), ParseError::Kernel(22));
    }

    #[test]
    fn attribute_length_overrun_is_an_error() {
        let mut b = vec![0u8; NLMSG_HDRLEN + INET_DIAG_MSG_LEN + 8];
        let len = b.len() as u32;
        b[0..4].copy_from_slice(&len.to_ne_bytes());
        b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        b[16] = 2;
        let a = NLMSG_HDRLEN + INET_DIAG_MSG_LEN;
        b[a..a + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(
            parse(&b).unwrap_err(),
            ParseError::Truncated("attribute length")
        );
    }
}
