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
    crate::sys::interface_addresses().unwrap_or_default()
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
    crate::sys::hostname().unwrap_or_default()
}

/// The default `source` label: the local address toward the first target, else the host name.
pub fn default_source(first: Option<SocketAddr>) -> String {
    if let Some(ip) = first.and_then(local_address_toward) {
        return ip.to_string();
    }
    let h = hostname();
    if h.is_empty() { "localhost".into() } else { h }
}
