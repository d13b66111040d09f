//! Decoding `struct tcp_info` (linux/tcp.h) by length: a field the kernel did not fill (an older kernel
//! sends a shorter struct) is `None`, never zero and never a panic.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The kernel's TCP state for one socket, as `tcp_info` reports it. Times are [`Duration`]s, sizes bytes;
/// `None` means the kernel's struct was too short to hold the field (or it has no value yet, for `min_rtt`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpInfo {
    /// How many bytes of `struct tcp_info` the kernel sent.
    pub len: usize,
    /// Smoothed round-trip time (`tcpi_rtt`).
    #[serde(with = "crate::units::ser::opt_ns", rename = "rtt_ns")]
    pub rtt: Option<Duration>,
    /// Round-trip time variation (`tcpi_rttvar`).
    #[serde(with = "crate::units::ser::opt_ns", rename = "rttvar_ns")]
    pub rttvar: Option<Duration>,
    /// Lowest round-trip time seen (`tcpi_min_rtt`, 4.6+).
    #[serde(with = "crate::units::ser::opt_ns", rename = "min_rtt_ns")]
    pub min_rtt: Option<Duration>,
    /// Retransmission timeout (`tcpi_rto`).
    #[serde(with = "crate::units::ser::opt_ns", rename = "rto_ns")]
    pub rto: Option<Duration>,
    /// Congestion window in segments (`tcpi_snd_cwnd`).
    pub cwnd: Option<u32>,
    /// Slow-start threshold in segments (`tcpi_snd_ssthresh`; the kernel's "infinite" 0x7fffffff is None).
    pub ssthresh: Option<u32>,
    /// Segments sent and not yet acknowledged, the data in flight (`tcpi_unacked`).
    pub unacked: Option<u32>,
    /// Sender maximum segment size in bytes (`tcpi_snd_mss`).
    pub snd_mss: Option<u32>,
    /// Receiver maximum segment size in bytes (`tcpi_rcv_mss`).
    pub rcv_mss: Option<u32>,
    /// Send window scale (shift) the peer announced.
    pub snd_wscale: Option<u8>,
    /// Receive window scale (shift) this side announced.
    pub rcv_wscale: Option<u8>,
    /// The peer's advertised receive window in bytes, already scaled (`tcpi_snd_wnd`, 5.4+).
    pub snd_wnd: Option<u32>,
    /// The window this side advertises in bytes (`tcpi_rcv_wnd`, 6.2+).
    pub rcv_wnd: Option<u32>,
    /// This side's estimate of the receive space it needs (`tcpi_rcv_space`).
    pub rcv_space: Option<u32>,
    /// Segments being retransmitted now (`tcpi_retrans`).
    pub retrans: Option<u32>,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total_retrans: Option<u32>,
    /// Segments believed lost (`tcpi_lost`).
    pub lost: Option<u32>,
    /// Reordering metric in segments (`tcpi_reordering`).
    pub reordering: Option<u32>,
    /// Delivery rate estimate in bytes/s (`tcpi_delivery_rate`, 4.9+).
    pub delivery_rate: Option<u64>,
    /// The delivery rate was measured while the application had nothing to send (4.9+).
    pub delivery_rate_app_limited: Option<bool>,
    /// Time with data outstanding, all limits included (`tcpi_busy_time`, 4.10+).
    #[serde(with = "crate::units::ser::opt_ns", rename = "busy_time_ns")]
    pub busy_time: Option<Duration>,
    /// Part of the busy time the peer's receive window stopped sending (`tcpi_rwnd_limited`).
    #[serde(with = "crate::units::ser::opt_ns", rename = "rwnd_limited_ns")]
    pub rwnd_limited: Option<Duration>,
    /// Part of the busy time a full send buffer stopped sending (`tcpi_sndbuf_limited`).
    #[serde(with = "crate::units::ser::opt_ns", rename = "sndbuf_limited_ns")]
    pub sndbuf_limited: Option<Duration>,
    /// Bytes the peer acknowledged (`tcpi_bytes_acked`, 4.1+).
    pub bytes_acked: Option<u64>,
    /// Bytes received (`tcpi_bytes_received`, 4.1+).
    pub bytes_received: Option<u64>,
    /// Bytes sent, retransmissions included (`tcpi_bytes_sent`, 4.19+).
    pub bytes_sent: Option<u64>,
    /// Bytes retransmitted (`tcpi_bytes_retrans`, 4.19+).
    pub bytes_retrans: Option<u64>,
    /// Bytes written by the application and not yet sent (`tcpi_notsent_bytes`).
    pub notsent_bytes: Option<u32>,
    /// Pacing rate in bytes/s (`tcpi_pacing_rate`).
    pub pacing_rate: Option<u64>,
}

/// Byte offsets of the fields in `struct tcp_info` (linux/tcp.h).
mod off {
    pub const WSCALE: usize = 6;
    pub const APP_LIMITED: usize = 7;
    pub const RTO: usize = 8;
    pub const SND_MSS: usize = 16;
    pub const RCV_MSS: usize = 20;
    pub const UNACKED: usize = 24;
    pub const LOST: usize = 32;
    pub const RETRANS: usize = 36;
    pub const RTT: usize = 68;
    pub const RTTVAR: usize = 72;
    pub const SSTHRESH: usize = 76;
    pub const CWND: usize = 80;
    pub const REORDERING: usize = 88;
    pub const RCV_SPACE: usize = 96;
    pub const TOTAL_RETRANS: usize = 100;
    pub const PACING_RATE: usize = 104;
    pub const BYTES_ACKED: usize = 120;
    pub const BYTES_RECEIVED: usize = 128;
    pub const NOTSENT: usize = 144;
    pub const MIN_RTT: usize = 148;
    pub const DELIVERY_RATE: usize = 160;
    pub const BUSY: usize = 168;
    pub const RWND_LIMITED: usize = 176;
    pub const SNDBUF_LIMITED: usize = 184;
    pub const BYTES_SENT: usize = 200;
    pub const BYTES_RETRANS: usize = 208;
    pub const SND_WND: usize = 228;
    pub const RCV_WND: usize = 232;
}

/// Decodes as much of `struct tcp_info` as `buf` holds (native byte order, as the kernel writes it).
pub fn decode(buf: &[u8]) -> TcpInfo {
    let u8_at = |o: usize| buf.get(o).copied();
    let u32_at = |o: usize| {
        buf.get(o..o + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        buf.get(o..o + 8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_ne_bytes(a)
        })
    };
    let us32 = |o: usize| u32_at(o).map(|v| Duration::from_micros(u64::from(v)));
    let us64 = |o: usize| u64_at(o).map(Duration::from_micros);
    let ws = u8_at(off::WSCALE);
    TcpInfo {
        len: buf.len(),
        rtt: us32(off::RTT),
        rttvar: us32(off::RTTVAR),
        // ~0U until the first RTT sample.
        min_rtt: u32_at(off::MIN_RTT)
            .filter(|&v| v != u32::MAX)
            .map(|v| Duration::from_micros(u64::from(v))),
        rto: us32(off::RTO),
        cwnd: u32_at(off::CWND),
        // TCP_INFINITE_SSTHRESH: still in slow start, no threshold yet.
        ssthresh: u32_at(off::SSTHRESH).filter(|&v| v < 0x7fff_ffff),
        unacked: u32_at(off::UNACKED),
        snd_mss: u32_at(off::SND_MSS),
        rcv_mss: u32_at(off::RCV_MSS),
        snd_wscale: ws.map(|b| b & 0x0f),
        rcv_wscale: ws.map(|b| b >> 4),
        snd_wnd: u32_at(off::SND_WND),
        rcv_wnd: u32_at(off::RCV_WND),
        rcv_space: u32_at(off::RCV_SPACE),
        retrans: u32_at(off::RETRANS),
        total_retrans: u32_at(off::TOTAL_RETRANS),
        lost: u32_at(off::LOST),
        reordering: u32_at(off::REORDERING),
        delivery_rate: u64_at(off::DELIVERY_RATE),
        delivery_rate_app_limited: if buf.len() >= off::DELIVERY_RATE + 8 {
            u8_at(off::APP_LIMITED).map(|b| b & 1 == 1)
        } else {
            None
        },
        busy_time: us64(off::BUSY),
        rwnd_limited: us64(off::RWND_LIMITED),
        sndbuf_limited: us64(off::SNDBUF_LIMITED),
        bytes_acked: u64_at(off::BYTES_ACKED),
        bytes_received: u64_at(off::BYTES_RECEIVED),
        bytes_sent: u64_at(off::BYTES_SENT),
        bytes_retrans: u64_at(off::BYTES_RETRANS),
        notsent_bytes: u32_at(off::NOTSENT),
        pacing_rate: u64_at(off::PACING_RATE).filter(|&v| v != u64::MAX),
    }
}

impl TcpInfo {
    /// Bytes in flight: data sent (less retransmitted) and not yet acknowledged, from the kernel's byte
    /// counters (Linux 4.19+); on older kernels unacknowledged segments times the sender's MSS (an upper
    /// bound: a 64-byte request is one segment, not one MSS).
    pub fn in_flight_bytes(&self) -> Option<u64> {
        if self.unacked == Some(0) {
            return Some(0);
        }
        if let (Some(sent), Some(acked)) = (self.bytes_sent, self.bytes_acked) {
            return Some(
                sent.saturating_sub(self.bytes_retrans.unwrap_or(0))
                    .saturating_sub(acked),
            );
        }
        Some(u64::from(self.unacked?) * u64::from(self.snd_mss?))
    }

    /// The congestion window in bytes (segments times the sender's MSS).
    pub fn cwnd_bytes(&self) -> Option<u64> {
        Some(u64::from(self.cwnd?) * u64::from(self.snd_mss?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], o: usize, v: u32) {
        b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn short_struct_leaves_newer_fields_none() {
        let mut b = vec![0u8; 104]; // a 2.6-era struct: up to tcpi_total_retrans
        put32(&mut b, off::RTT, 1500);
        put32(&mut b, off::CWND, 10);
        b[off::WSCALE] = 0x79; // rcv 7, snd 9
        let i = decode(&b);
        assert_eq!(i.rtt, Some(Duration::from_micros(1500)));
        assert_eq!(i.cwnd, Some(10));
        assert_eq!(i.snd_wscale, Some(9));
        assert_eq!(i.rcv_wscale, Some(7));
        assert_eq!(i.min_rtt, None);
        assert_eq!(i.busy_time, None);
        assert_eq!(i.snd_wnd, None);
        assert_eq!(i.delivery_rate_app_limited, None);
    }

    #[test]
    fn any_length_decodes_without_panic() {
        let b = vec![0xffu8; 300];
        for n in 0..b.len() {
            let i = decode(&b[..n]);
            assert_eq!(i.len, n);
        }
        assert_eq!(decode(&[]).rtt, None);
    }
}
