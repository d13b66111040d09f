//! The kernel's own view of a TCP connection (`getsockopt(TCP_INFO)`): smoothed RTT, its variation and the
//! minimum RTT the kernel saw, all from ACK timing (RFC 6298), in microseconds.
//!
//! The one `unsafe` call is the `getsockopt` itself; the bytes it fills are decoded by
//! [`crate::tcpwatch::info`], the one decoder of `struct tcp_info` (linux/tcp.h), which checks the length the
//! kernel reported, so an older kernel that fills fewer fields gives `None` for them instead of garbage.

use serde::Serialize;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

/// What `TCP_INFO` says about a connection's round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TcpRtt {
    /// Smoothed RTT (`tcpi_rtt`), microsecond resolution.
    #[serde(rename = "srtt_ns", with = "crate::units::ser::ns")]
    pub srtt: Duration,
    /// RTT mean deviation (`tcpi_rttvar`).
    #[serde(rename = "rttvar_ns", with = "crate::units::ser::ns")]
    pub rttvar: Duration,
    /// Smallest RTT the kernel measured on the connection (`tcpi_min_rtt`), on kernels that report it.
    #[serde(rename = "min_rtt_ns", with = "crate::units::ser::opt_ns", default)]
    pub min_rtt: Option<Duration>,
}

/// Bytes of `struct tcp_info` asked for (more than any kernel fills today).
const INFO_LEN: usize = 256;

/// The round-trip fields of the bytes `getsockopt` filled, decoded by [`crate::tcpwatch::info::decode`] (the
/// one decoder of `struct tcp_info`); None when they are too few to hold `tcpi_rttvar`.
pub fn decode(buf: &[u8]) -> Option<TcpRtt> {
    let i = crate::tcpwatch::info::decode(buf);
    Some(TcpRtt {
        srtt: i.rtt?,
        rttvar: i.rttvar?,
        // ~0U (no sample yet) the decoder leaves out; 0 is no measurement either.
        min_rtt: i.min_rtt.filter(|d| !d.is_zero()),
    })
}

/// Reads `TCP_INFO` from a connected TCP socket.
pub fn read(sock: &impl AsFd) -> io::Result<TcpRtt> {
    let mut buf = [0u8; INFO_LEN];
    let len = crate::sys::getsockopt_bytes(sock, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
    decode(&buf[..len]).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("TCP_INFO returned only {len} bytes, too short for tcpi_rtt"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets of the fields in `struct tcp_info`.
    const OFF_RTT: usize = 68;
    const OFF_RTTVAR: usize = 72;
    const OFF_MIN_RTT: usize = 148;

    #[test]
    fn decodes_by_offset_and_length() {
        let mut b = [0u8; 160];
        b[OFF_RTT..OFF_RTT + 4].copy_from_slice(&250u32.to_ne_bytes());
        b[OFF_RTTVAR..OFF_RTTVAR + 4].copy_from_slice(&40u32.to_ne_bytes());
        b[OFF_MIN_RTT..OFF_MIN_RTT + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
        let r = decode(&b).unwrap();
        assert_eq!(r.srtt, Duration::from_micros(250));
        assert_eq!(r.rttvar, Duration::from_micros(40));
        assert_eq!(r.min_rtt, None);
        b[OFF_MIN_RTT..OFF_MIN_RTT + 4].copy_from_slice(&17u32.to_ne_bytes());
        assert_eq!(decode(&b).unwrap().min_rtt, Some(Duration::from_micros(17)));
        // An old kernel that fills only 104 bytes: no min_rtt, still the smoothed RTT.
        assert_eq!(decode(&b[..104]).unwrap().min_rtt, None);
        assert!(decode(&b[..70]).is_none());
    }

    #[test]
    fn reads_a_real_loopback_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        let local = c.local_addr().unwrap();
        // Both ends: another test's connection may share the local port (ephemeral ports are per 4-tuple).
        let peer = c.peer_addr().unwrap();
        let ss_rtt_ms = || -> f64 {
            let out = std::process::Command::new("ss")
                .args(["-tinH", "src", &local.to_string(), "dst", &peer.to_string()])
                .output()
                .expect("ss (iproute2) runs");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.split_whitespace()
                .find_map(|t| t.strip_prefix("rtt:"))
                .and_then(|v| v.split('/').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no rtt in ss output: {text}"))
        };
        // After the handshake the kernel has one RTT sample (the SYN-ACK): the same value ss(8) reads over
        // netlink (printed in ms with 3 decimals). The comparison counts only when our reading is the same
        // before and after ss, in case the kernel takes a sample while ss runs.
        let mut seen = Vec::new();
        for _ in 0..20 {
            let before = read(&c).unwrap();
            assert!(before.srtt > Duration::ZERO, "{before:?}");
            let theirs = ss_rtt_ms();
            let after = read(&c).unwrap();
            if before.srtt == after.srtt {
                let ours_ms = before.srtt.as_secs_f64() * 1e3;
                assert!(
                    (ours_ms - theirs).abs() <= 0.0015,
                    "srtt {ours_ms} ms, ss says {theirs} ms"
                );
                return;
            }
            seen.push((before.srtt, theirs, after.srtt));
        }
        panic!("the srtt never held still across an ss run: {seen:?}");
    }
}
