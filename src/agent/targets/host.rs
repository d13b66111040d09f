//! Facts about this host the agent needs to pick its targets: name resolution ([`Lookup`]), its own
//! addresses and name, and which targets would be the agent itself ([`SelfFilter`]).

use super::{ProbeKind, TargetSpec};
use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// Resolves names: host, port -> every address.
pub type Lookup = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// The system resolver (getaddrinfo, through [`crate::resolve::lookup`]: `*.invalid` answered without DNS):
/// every A/AAAA record of `host`, without duplicates.
pub fn system_lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let mut seen = HashSet::new();
    let addrs: Vec<SocketAddr> = crate::resolve::lookup(host, port)?
        .into_iter()
        .filter(|a| seen.insert(*a))
        .collect();
    if addrs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no address"));
    }
    Ok(addrs)
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Which targets are this agent itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelfFilter {
    /// This host's (network namespace's) addresses ([`local_addresses`]).
    pub local: Vec<IpAddr>,
    /// The responder's bind address (None or unspecified: every address).
    pub bind: Option<IpAddr>,
    /// The responder's port (None: no responder).
    pub port: Option<u16>,
}

impl SelfFilter {
    /// True when probing `t` would probe this agent: a TCP/UDP/connect target at our responder's port on one
    /// of our addresses (or on the bind address), or an ICMP target on one of our addresses.
    pub fn is_self(&self, t: &TargetSpec) -> bool {
        let ip = canonical(t.addr.ip());
        let ours = ip.is_loopback()
            || ip.is_unspecified()
            || self.local.iter().any(|l| canonical(*l) == ip);
        match t.probe {
            ProbeKind::Db { .. } | ProbeKind::DbLink { .. } => false,
            ProbeKind::Icmp { .. } => ours,
            _ => {
                if self.port != Some(t.addr.port()) {
                    return false;
                }
                match self.bind.map(canonical) {
                    None => ours,
                    Some(b) if b.is_unspecified() => ours,
                    Some(b) => b == ip || ip.is_unspecified(),
                }
            }
        }
    }
}

/// This host's addresses (every interface of this network namespace), from getifaddrs.
pub fn local_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list and stores its head in ifap; it is freed below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return out;
    }
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: p is a node of the list returned by getifaddrs, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: ifap came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(ifap) };
    out.sort();
    out.dedup();
    out
}

/// The local address the kernel would use toward `to` (a connected UDP socket; nothing is sent).
pub fn local_address_toward(to: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if to.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(to).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// This host's name (empty when it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length; gethostname NUL-terminates within it (or truncates).
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The default `source` label: the local address toward the first target, else the host name.
pub fn default_source(first: Option<SocketAddr>) -> String {
    if let Some(ip) = first.and_then(local_address_toward) {
        return ip.to_string();
    }
    let h = hostname();
    if h.is_empty() { "localhost".into() } else { h }
}
