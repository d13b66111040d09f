//! The RTT of one direction's data: first-sent segments wait for the ACK that covers them; their samples are
//! kept exactly while few.

use super::Half;
use super::sequence::{Pending, seq_gt, seq_le};
use crate::stats::{LatencyHistogram, Summary};

/// Values kept exactly while few (most connections are short), in a [`LatencyHistogram`] beyond that, so
/// that a capture of a million short connections does not allocate a histogram for each.
#[derive(Debug, Default)]
pub(super) enum Samples {
    #[default]
    Empty,
    Few(Vec<u64>),
    Many(Box<LatencyHistogram>),
}

pub(super) const FEW: usize = 256;

impl Samples {
    #[inline]
    pub(super) fn record(&mut self, v: u64) {
        match self {
            Samples::Empty => *self = Samples::Few(vec![v]),
            Samples::Few(xs) if xs.len() < FEW => xs.push(v),
            Samples::Few(xs) => {
                let mut h = Box::new(LatencyHistogram::new());
                for &x in xs.iter() {
                    h.record_ns(x);
                }
                h.record_ns(v);
                *self = Samples::Many(h);
            }
            Samples::Many(h) => h.record_ns(v),
        }
    }

    /// The same summary a [`LatencyHistogram`] gives (nearest-rank percentiles), exact while few.
    pub(super) fn summary(&self) -> Summary {
        match self {
            Samples::Empty => Summary::default(),
            Samples::Many(h) => h.summary(),
            Samples::Few(xs) => {
                let mut v = xs.clone();
                v.sort_unstable();
                let n = v.len();
                let pct =
                    |p: f64| v[(((p / 100.0) * n as f64).ceil().max(1.0) as usize).min(n) - 1];
                let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
                let var = if n > 1 {
                    v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1) as f64
                } else {
                    0.0
                };
                Summary {
                    count: n as u64,
                    min_ns: v[0],
                    mean_ns: mean,
                    stddev_ns: var.sqrt(),
                    p50_ns: pct(50.0),
                    p90_ns: pct(90.0),
                    p99_ns: pct(99.0),
                    p99_9_ns: pct(99.9),
                    p99_99_ns: pct(99.99),
                    max_ns: v[n - 1],
                }
            }
        }
    }
}

impl Half {
    /// This side's ACK of `ack` at `ts` (not a reset): counts an advancing ACK and takes the RTT of the
    /// newest segment of the other side it covers, unless that was retransmitted.
    #[inline]
    pub(super) fn on_ack(&mut self, oh: &mut Half, ack: u32, ts: i64) {
        let h = self;
        if !h.acked || seq_gt(ack, h.last_ack) {
            h.advancing_acks += 1;
            let mut newest: Option<Pending> = None;
            while let Some(p) = oh.pending.front() {
                if seq_le(p.end, ack) {
                    newest = oh.pending.pop_front();
                } else {
                    break;
                }
            }
            if let Some(p) = newest
                && !p.retransmitted
                && ts >= p.ts_ns
            {
                oh.rtt.record((ts - p.ts_ns) as u64);
            }
        }
        h.acked = true;
        h.last_ack = ack;
        h.last_ack_ts = ts;
    }
}
