//! The latency model: the arithmetic of the seeds, each formula with its source.
//!
//! Everything here is pure computation on typed quantities (durations, bytes, bit/s), no I/O; the RTT of a
//! result document the user names is read by [`crate::doc::rtt_from_result`].
#![forbid(unsafe_code)]

use std::time::Duration;
use thiserror::Error;

/// A model that cannot be evaluated, with what to change.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ModelError {
    /// The inputs contradict each other.
    #[error("{0}")]
    Impossible(String),
    /// A result document could not be used.
    #[error("cannot take the RTT from {path}: {why}")]
    FromResult {
        /// The file.
        path: String,
        /// What was wrong.
        why: String,
    },
}

/// Where a measured TPS went: seed 000's arithmetic.
///
/// Source: seed 000 ("Performing in the cloud – network latency", Frits Hoogland): with one session doing
/// `round_trips` round trips per transaction, each second has `TPS x round_trips x RTT` in network transit, and
/// the rest divided by TPS is the time per transaction spent elsewhere (processing):
/// `1000 - (0.021 x 2356) = 950.524 ms; 950.524 / 2356 = 0.40 ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TpsBreakdown {
    /// The measured transactions per second.
    pub tps: f64,
    /// The RTT it was measured at.
    pub rtt: Duration,
    /// Round trips per transaction.
    pub round_trips: f64,
    /// Time in network transit per second of work.
    pub transit_per_s: Duration,
    /// Time per transaction not in transit (processing).
    pub processing: Duration,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Splits a measured TPS at an RTT into transit and processing (seed 000).
pub fn tps_breakdown(
    tps: f64,
    rtt: Duration,
    round_trips: f64,
) -> Result<TpsBreakdown, ModelError> {
    if !(tps > 0.0 && tps.is_finite()) {
        return Err(ModelError::Impossible(format!(
            "TPS {tps} must be more than 0"
        )));
    }
    if !(round_trips > 0.0 && round_trips.is_finite()) {
        return Err(ModelError::Impossible(format!(
            "round trips per transaction {round_trips} must be more than 0"
        )));
    }
    let transit = tps * round_trips * secs(rtt);
    if transit >= 1.0 {
        return Err(ModelError::Impossible(format!(
            "{tps} TPS x {round_trips} round trips x {} RTT = {transit:.3} s of transit per second: one session \
             cannot do that; check the TPS, the RTT, or lower --round-trips",
            crate::units::fmt_duration(rtt)
        )));
    }
    Ok(TpsBreakdown {
        tps,
        rtt,
        round_trips,
        transit_per_s: Duration::from_secs_f64(transit),
        processing: Duration::from_secs_f64((1.0 - transit) / tps),
    })
}

/// One session's TPS at another RTT: `1 / (processing + round_trips x RTT)`.
pub fn predict_tps(b: &TpsBreakdown, rtt: Duration) -> f64 {
    1.0 / (secs(b.processing) + b.round_trips * secs(rtt))
}

/// Sessions needed to keep `target_tps` at `rtt` (Little's law, L = lambda x W, with W the time per
/// transaction `processing + round_trips x RTT`). Source: J. D. C. Little, "A proof for the queuing formula
/// L = lambda W", Operations Research 9(3), 1961.
pub fn concurrency_needed(b: &TpsBreakdown, target_tps: f64, rtt: Duration) -> f64 {
    target_tps * (secs(b.processing) + b.round_trips * secs(rtt))
}

/// Most a window-limited TCP stream can carry: `window / RTT` (bit/s). Source: RFC 7323 section 1.1 (the
/// window must cover the bandwidth-delay product); seed 002 saw 880 Mbit/s fall under 120 Mbit/s at 40 ms.
pub fn window_bps(window_bytes: u64, rtt: Duration) -> Result<f64, ModelError> {
    if rtt.is_zero() {
        return Err(ModelError::Impossible(
            "the RTT must be more than 0 for a window limit".into(),
        ));
    }
    Ok(window_bytes as f64 * 8.0 / secs(rtt))
}

/// Bandwidth-delay product, the window needed to fill a link: `rate x RTT / 8` bytes. Source: RFC 7323 1.1.
pub fn bdp_bytes(rate_bps: u64, rtt: Duration) -> f64 {
    rate_bps as f64 * secs(rtt) / 8.0
}

/// The Mathis constant C = sqrt(3/2) for periodic loss and an ACK per segment.
pub const MATHIS_C: f64 = 1.224_744_871_391_589;

/// Steady-state TCP (Reno) throughput under random loss: `MSS / RTT x C / sqrt(p)` (bit/s). Source: M. Mathis,
/// J. Semke, J. Mahdavi, T. Ott, "The macroscopic behavior of the TCP congestion avoidance algorithm",
/// ACM SIGCOMM CCR 27(3), 1997.
pub fn mathis_bps(mss: u64, rtt: Duration, loss: f64) -> Result<f64, ModelError> {
    if !(loss > 0.0 && loss < 1.0) {
        return Err(ModelError::Impossible(format!(
            "loss {loss} must be between 0 and 1 (exclusive), e.g. 1e-4 or 0.01%"
        )));
    }
    if rtt.is_zero() || mss == 0 {
        return Err(ModelError::Impossible(
            "MSS and RTT must be more than 0".into(),
        ));
    }
    Ok(mss as f64 * 8.0 / secs(rtt) * MATHIS_C / loss.sqrt())
}

/// IPv4 (20) + TCP (20) + TCP timestamps option (12): a 1500-byte MTU carries 1448 bytes of data, as in seed 004.
pub const TCPIP_OVERHEAD: u64 = 52;
/// Ethernet header (14) and FCS (4).
pub const ETHERNET_FRAMING: u64 = 18;
/// Preamble + start delimiter (8) and inter-frame gap (12): wire time without bytes of the frame.
pub const ETHERNET_GAP: u64 = 20;
/// Smallest Ethernet frame (header + payload + FCS).
pub const ETHERNET_MIN_FRAME: u64 = 64;

/// How a block of application data crosses a store-and-forward Ethernet path (seed 004: "an 8K block will take
/// 5.7 packets which rounds off to 6 packets", and jumbo frames).
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    /// Application bytes.
    pub bytes: u64,
    /// MTU.
    pub mtu: u64,
    /// Data bytes per full frame (MSS): MTU - 52.
    pub mss: u64,
    /// Frames (TCP segments) needed.
    pub frames: u64,
    /// Data bytes in the last frame.
    pub last_frame_bytes: u64,
    /// Bytes on the wire, Ethernet framing, preamble and gap included.
    pub wire_bytes: u64,
    /// Time to serialise all frames onto one link.
    pub serialisation: Duration,
    /// Store-and-forward hops (links) between sender and receiver.
    pub hops: u32,
    /// Time until the last bit arrives over `hops` store-and-forward links of the same rate (propagation left
    /// out): each switch must receive a whole frame before it sends it on.
    pub total: Duration,
}

/// Frames, wire bytes and serialisation of `bytes` over links of `link_bps` with `mtu`, through `hops` links.
///
/// Source: IEEE 802.3 framing (18 bytes header+FCS, 8 preamble, 12 gap), RFC 791/793/7323 headers (52 bytes
/// with timestamps); store-and-forward: a frame leaves a switch only after it fully arrived, computed frame by
/// frame per hop.
pub fn transfer(bytes: u64, link_bps: u64, mtu: u64, hops: u32) -> Result<Transfer, ModelError> {
    if mtu <= TCPIP_OVERHEAD || mtu > 65_535 {
        return Err(ModelError::Impossible(format!(
            "MTU {mtu} must be between {} and 65535 (1500 is standard Ethernet, 9000 jumbo)",
            TCPIP_OVERHEAD + 1
        )));
    }
    if link_bps == 0 {
        return Err(ModelError::Impossible(
            "the link rate must be more than 0".into(),
        ));
    }
    if hops == 0 {
        return Err(ModelError::Impossible(
            "hops must be at least 1 (the sender's own link)".into(),
        ));
    }
    let mss = mtu - TCPIP_OVERHEAD;
    let frames = bytes.div_ceil(mss).max(1);
    let last = bytes - (frames - 1) * mss;
    let wire = |payload: u64| {
        (payload + TCPIP_OVERHEAD + ETHERNET_FRAMING).max(ETHERNET_MIN_FRAME) + ETHERNET_GAP
    };
    let ser = |payload: u64| wire(payload) as f64 * 8.0 / link_bps as f64;
    let sizes: Vec<u64> = (0..frames)
        .map(|i| if i + 1 == frames { last } else { mss })
        .collect();
    let wire_bytes = sizes.iter().map(|&p| wire(p)).sum();
    // finish[k] on each hop = max(arrival of frame k from the previous hop, this link free) + serialisation.
    let mut prev: Vec<f64> = vec![0.0; sizes.len()];
    let mut first_hop = 0.0;
    for h in 0..hops {
        let mut free = 0.0f64;
        let mut cur = Vec::with_capacity(sizes.len());
        for (k, &p) in sizes.iter().enumerate() {
            let start = if h == 0 { free } else { free.max(prev[k]) };
            free = start + ser(p);
            cur.push(free);
        }
        if h == 0 {
            first_hop = free;
        }
        prev = cur;
    }
    Ok(Transfer {
        bytes,
        mtu,
        mss,
        frames,
        last_frame_bytes: last,
        wire_bytes,
        serialisation: Duration::from_secs_f64(first_hop),
        hops,
        total: Duration::from_secs_f64(*prev.last().unwrap_or(&0.0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1000.0)
    }

    #[test]
    fn seed_000_processing_times() {
        // Seed 000: 0.40 / 0.48 / 0.49 ms.
        let cases = [
            (2356.0, 0.021, 950.524, "0.40"),
            (1567.0, 0.161, 747.713, "0.48"),
            (854.0, 0.685, 415.010, "0.49"),
        ];
        for (tps, rtt, rest_ms, want) in cases {
            let b = tps_breakdown(tps, ms(rtt), 1.0).unwrap();
            let rest = 1000.0 - b.transit_per_s.as_secs_f64() * 1000.0;
            assert!((rest - rest_ms).abs() < 0.001, "{rest}");
            assert_eq!(format!("{:.2}", b.processing.as_secs_f64() * 1000.0), want);
        }
        let b = tps_breakdown(2356.0, ms(0.021), 1.0).unwrap();
        // Back at its own RTT the prediction is the measurement.
        assert!((predict_tps(&b, ms(0.021)) - 2356.0).abs() < 0.01);
        assert!((concurrency_needed(&b, 2356.0, ms(0.021)) - 1.0).abs() < 1e-5);
        assert!(tps_breakdown(100.0, Duration::from_millis(20), 1.0).is_err());
    }

    #[test]
    fn window_bdp_mathis() {
        let w = window_bps(64 * 1024, Duration::from_millis(40)).unwrap();
        assert!((w - 13_107_200.0).abs() < 1e-6);
        assert_eq!(
            bdp_bytes(1_000_000_000, Duration::from_millis(40)),
            5_000_000.0
        );
        let m = mathis_bps(1460, Duration::from_millis(40), 1e-4).unwrap();
        assert!((m - 1460.0 * 8.0 / 0.04 * MATHIS_C / 0.01).abs() < 1e-6);
        assert!((m / 1e6 - 35.76).abs() < 0.01);
        assert!(mathis_bps(1460, Duration::from_millis(40), 0.0).is_err());
    }

    #[test]
    fn seed_004_frames() {
        let t = transfer(8192, 1_000_000_000, 1500, 1).unwrap();
        assert_eq!((t.mss, t.frames, t.last_frame_bytes), (1448, 6, 952));
        assert_eq!(t.wire_bytes, 5 * 1538 + (952 + 52 + 18 + 20));
        assert_eq!(t.serialisation, Duration::from_nanos(69_856));
        let j = transfer(8192, 1_000_000_000, 9000, 1).unwrap();
        assert_eq!((j.mss, j.frames), (8948, 1));
        assert_eq!(j.wire_bytes, 8192 + 52 + 38);
        // Store-and-forward: jumbo frames pay the whole frame again at each hop, small frames pipeline.
        let t3 = transfer(8192, 1_000_000_000, 1500, 3).unwrap();
        let j3 = transfer(8192, 1_000_000_000, 9000, 3).unwrap();
        assert_eq!(j3.total, Duration::from_nanos(3 * 66_256));
        assert!(t3.total < j3.total);
        assert!(transfer(8192, 1, 40, 1).is_err());
    }
}
