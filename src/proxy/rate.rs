//! Rate limiting as a link of fixed bit rate: a chunk occupies the link for `bytes * 8 / rate` after the link
//! is free (a token bucket whose depth is one chunk). The chunk's delay starts when its last bit has left,
//! as on a real link (serialisation, then propagation).

use std::time::{Duration, Instant};

/// One emulated link (per connection and direction, or shared by all connections for `--rate-total`).
#[derive(Debug, Clone, Default)]
pub struct Link {
    free_at: Option<Instant>,
}

/// Time to serialise `bytes` at `bps` bit/s.
pub fn serialisation(bytes: u64, bps: u64) -> Duration {
    Duration::from_nanos(((bytes as u128 * 8 * 1_000_000_000) / bps.max(1) as u128) as u64)
}

impl Link {
    /// A free link.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `bytes` arriving at `arrival` at `bps`; returns when the last bit has left.
    pub fn transmit(&mut self, arrival: Instant, bytes: u64, bps: u64) -> Instant {
        let start = self.free_at.map_or(arrival, |f| f.max(arrival));
        let done = start + serialisation(bytes, bps);
        self.free_at = Some(done);
        done
    }
}

/// How many bytes to read at once when a rate applies: about 1 ms of the link, between 1448 and 64 KiB, so
/// the emulated link is smooth rather than bursty.
pub fn chunk_for_rate(bps: u64) -> usize {
    ((bps / 8 / 1000) as usize).clamp(1448, 64 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_to_back_chunks_queue() {
        let mut l = Link::new();
        let t0 = Instant::now();
        // 1 Mbit/s: 125 bytes per ms.
        let a = l.transmit(t0, 125, 1_000_000);
        assert_eq!(a - t0, Duration::from_millis(1));
        let b = l.transmit(t0, 250, 1_000_000);
        assert_eq!(b - t0, Duration::from_millis(3));
        // An idle link starts fresh.
        let c = l.transmit(t0 + Duration::from_millis(10), 125, 1_000_000);
        assert_eq!(c - t0, Duration::from_millis(11));
        assert_eq!(chunk_for_rate(1_000_000_000), 64 * 1024);
        assert_eq!(chunk_for_rate(1_000_000), 1448);
    }
}
