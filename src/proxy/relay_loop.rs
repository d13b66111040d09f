//! Relay loops found at run time: a connection that reaches the proxy from the very process it relays to
//! (A -> B -> A through a second relay on this host, or any upstream that connects back). Without this check
//! each such connection makes the next one (connect upstream, which connects back, which is accepted, ...)
//! until file descriptors or threads run out; with it the first connection that comes back is refused (reset)
//! and counted, and the chain unwinds.
//!
//! How: for a connection from an address of this host, the kernel's socket table (`/proc/net/tcp`, `tcp6`)
//! gives the inode of the peer's socket; the process listening on the upstream address is found once (its
//! `/proc/PID/fd` links, cached for 2 s); the connection came back when that process holds the peer's
//! socket. Checks run at most once every 5 ms, so a flood of local clients costs a bounded amount of work;
//! a loop is caught by the first check that sees one of its links. Loops through a third host or through
//! more than two relays are not seen (their cost stays bounded by `--max-clients`).
#![forbid(unsafe_code)]

use crate::tcpwatch::procfs;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shortest time between two checks.
const MIN_GAP: Duration = Duration::from_millis(5);

/// How long the upstream listener's process is remembered.
const PID_TTL: Duration = Duration::from_secs(2);

/// One row of the kernel's TCP socket table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRow {
    /// Local address.
    pub local: SocketAddr,
    /// Remote address.
    pub remote: SocketAddr,
    /// State (0x0A: listening).
    pub state: u8,
    /// Socket inode.
    pub inode: u32,
}

/// Parses `/proc/net/tcp` or `/proc/net/tcp6` text; lines that do not parse are skipped.
pub fn parse_table(text: &str) -> Vec<TcpRow> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(TcpRow {
                local: parse_addr(f.get(1)?)?,
                remote: parse_addr(f.get(2)?)?,
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// `0100007F:1F90` (IPv4, 32-bit words in the kernel's byte order) or the 32-digit IPv6 form.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(canonical(ip), port))
}

/// IPv4-mapped IPv6 as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn canonical_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical(a.ip()), a.port())
}

fn read_table() -> Vec<TcpRow> {
    let mut rows = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(t) = std::fs::read_to_string(f) {
            rows.extend(parse_table(&t));
        }
    }
    rows
}

/// The process holding socket `inode`, from every `/proc/PID/fd`.
fn pid_of(inode: u32) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if procfs::socket_inodes(Path::new("/proc"), pid).is_ok_and(|s| s.contains(&inode)) {
            return Some(pid);
        }
    }
    None
}

/// The run-time check of one proxy.
#[derive(Debug)]
pub(crate) struct LoopCheck {
    upstream: Vec<SocketAddr>,
    last: Mutex<Option<Instant>>,
    listener: Mutex<Option<(Instant, Option<u32>)>>,
}

impl LoopCheck {
    pub(crate) fn new(upstream: &[SocketAddr]) -> Self {
        LoopCheck {
            upstream: upstream.iter().map(|a| canonical_addr(*a)).collect(),
            last: Mutex::new(None),
            listener: Mutex::new(None),
        }
    }

    /// The process listening on an upstream address, from `table` (remembered for [`PID_TTL`]).
    fn listener_pid(&self, table: &[TcpRow]) -> Option<u32> {
        let mut cached = self.listener.lock().expect("listener pid");
        if let Some((at, pid)) = *cached
            && at.elapsed() < PID_TTL
        {
            return pid;
        }
        let pid = table
            .iter()
            .find(|r| {
                r.state == 0x0A
                    && self.upstream.iter().any(|u| {
                        u.port() == r.local.port()
                            && (r.local.ip() == u.ip() || r.local.ip().is_unspecified())
                    })
            })
            .and_then(|r| pid_of(r.inode));
        *cached = Some((Instant::now(), pid));
        pid
    }

    /// True when the connection from `peer`, accepted on `local`, comes from the process this proxy relays
    /// to. False when it does not, when the peer is not on this host, or when a check ran less than
    /// [`MIN_GAP`] ago.
    pub(crate) fn came_back(&self, peer: SocketAddr, local: SocketAddr) -> bool {
        let (peer, local) = (canonical_addr(peer), canonical_addr(local));
        if !(peer.ip().is_loopback() || peer.ip() == local.ip()) {
            return false;
        }
        {
            let mut last = self.last.lock().expect("loop check time");
            if last.is_some_and(|t| t.elapsed() < MIN_GAP) {
                return false;
            }
            *last = Some(Instant::now());
        }
        let table = read_table();
        let Some(peer_inode) = table
            .iter()
            .find(|r| r.local == peer && r.remote == local)
            .map(|r| r.inode)
        else {
            return false;
        };
        let Some(pid) = self.listener_pid(&table) else {
            return false;
        };
        procfs::socket_inodes(Path::new("/proc"), pid)
            .unwrap_or_else(|_| HashSet::new())
            .contains(&peer_inode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_table() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0 100 0 0 10 0\n\
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0 20 4 30 10 -1\n\
   junk\n";
        let rows = parse_table(t);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(rows[0].state, 0x0A);
        assert_eq!(rows[0].inode, 12345);
        assert_eq!(rows[1].remote, "127.0.0.1:8080".parse().unwrap());
        let t6 = "header\n   0: 00000000000000000000000001000000:0050 0000000000000000FFFF00000100007F:C350 01 0:0 0:0 0 0 0 99 1\n";
        let r = parse_table(t6);
        assert_eq!(r[0].local, "[::1]:80".parse().unwrap());
        assert_eq!(r[0].remote, "127.0.0.1:50000".parse().unwrap());
    }

    #[test]
    fn a_real_socket_is_found_in_the_table_as_ss_sees_it() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        let (here, there) = (c.local_addr().unwrap(), c.peer_addr().unwrap());
        let row = read_table()
            .into_iter()
            .find(|r| r.local == here && r.remote == there)
            .expect("our client socket in /proc/net/tcp");
        // The inode is the one behind our own file descriptor.
        let mine = procfs::socket_inodes(Path::new("/proc"), std::process::id()).unwrap();
        assert!(mine.contains(&row.inode));
        assert_eq!(pid_of(row.inode), Some(std::process::id()));
    }
}
