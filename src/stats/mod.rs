//! The one statistics engine: HDR histograms of durations with exact count, min, max, mean and stddev.
//!
//! Percentiles come from an HDR histogram with nanosecond resolution and three significant digits, so memory
//! stays constant (about 200 KiB) whatever the run length. Count, min, max, mean and standard deviation are
//! kept exactly beside it.
#![forbid(unsafe_code)]

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Largest duration a histogram records (one hour); longer values are clamped to it.
pub const MAX_RECORDABLE: Duration = Duration::from_secs(3600);
/// Significant decimal digits kept by the histograms.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The percentiles every summary reports.
pub const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

/// A latency histogram with exact moments.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    count: u64,
    min_ns: u64,
    max_ns: u64,
    mean_ns: f64,
    m2: f64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram covering 1 ns to [`MAX_RECORDABLE`].
    pub fn new() -> Self {
        LatencyHistogram {
            hist: empty_hist(),
            count: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            mean_ns: 0.0,
            m2: 0.0,
        }
    }

    /// Records one duration.
    #[inline]
    pub fn record(&mut self, d: Duration) {
        self.record_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records one duration given in nanoseconds.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        let clamped = ns.clamp(1, MAX_RECORDABLE.as_nanos() as u64);
        self.hist.saturating_record(clamped);
        self.record_moments(ns);
    }

    /// Counts `ns` in the exact moments (count, min, max, mean, variance) only, not in the buckets.
    #[inline]
    fn record_moments(&mut self, ns: u64) {
        self.count += 1;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        let x = ns as f64;
        let delta = x - self.mean_ns;
        self.mean_ns += delta / self.count as f64;
        self.m2 += delta * (x - self.mean_ns);
    }

    /// Adds every value of `other` (Chan's parallel variance formula for the moments).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.count == 0 {
            return;
        }
        self.hist.add(&other.hist).expect("same bounds");
        let n1 = self.count as f64;
        let n2 = other.count as f64;
        let delta = other.mean_ns - self.mean_ns;
        let n = n1 + n2;
        self.mean_ns += delta * n2 / n;
        self.m2 += other.m2 + delta * delta * n1 * n2 / n;
        self.count += other.count;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Forgets every value.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.count = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
        self.mean_ns = 0.0;
        self.m2 = 0.0;
    }

    /// Number of values recorded.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The value at percentile `p` (0..=100), within three significant digits; the exact max for 100.
    pub fn percentile_ns(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        if p >= 100.0 {
            return self.max_ns;
        }
        let v = self.hist.value_at_quantile(p / 100.0);
        // The histogram reports the top of a bucket; never above the exact maximum or below the minimum.
        v.clamp(self.min_ns, self.max_ns)
    }

    /// The summary every command reports.
    pub fn summary(&self) -> Summary {
        if self.count == 0 {
            return Summary::default();
        }
        let stddev = if self.count > 1 {
            (self.m2 / (self.count - 1) as f64).sqrt()
        } else {
            0.0
        };
        Summary {
            count: self.count,
            min_ns: self.min_ns,
            mean_ns: self.mean_ns,
            stddev_ns: stddev,
            p50_ns: self.percentile_ns(50.0),
            p90_ns: self.percentile_ns(90.0),
            p99_ns: self.percentile_ns(99.0),
            p99_9_ns: self.percentile_ns(99.9),
            p99_99_ns: self.percentile_ns(99.99),
            max_ns: self.max_ns,
        }
    }

    /// Non-empty buckets on a logarithmic grid (`per_decade` buckets per factor of ten), for plots and JSON.
    pub fn buckets(&self, per_decade: u32) -> Vec<Bucket> {
        let mut out: Vec<Bucket> = Vec::new();
        if self.count == 0 {
            return out;
        }
        let factor = 10f64.powf(1.0 / per_decade as f64);
        let mut upper = 1.0f64;
        for v in self.hist.iter_recorded() {
            let value = v.value_iterated_to();
            while (upper as u64) < value {
                upper *= factor;
            }
            let up = upper.ceil() as u64;
            match out.last_mut() {
                Some(last) if last.le_ns == up => last.count += v.count_at_value(),
                _ => out.push(Bucket {
                    le_ns: up,
                    count: v.count_at_value(),
                }),
            }
        }
        out
    }

    /// Values at a range of percentiles for the percentile curve: 0, 50, 75, 87.5, ... up to `1 - 10^-depth`.
    pub fn percentile_curve(&self) -> Vec<PercentilePoint> {
        let mut out = Vec::new();
        if self.count == 0 {
            return out;
        }
        let mut tail = 1.0f64;
        while tail >= 1.0 / (self.count as f64).max(10.0) / 2.0 {
            let p = 100.0 * (1.0 - tail);
            out.push(PercentilePoint {
                percentile: p,
                value_ns: self.percentile_ns(p),
            });
            tail /= 2.0;
        }
        out.push(PercentilePoint {
            percentile: 100.0,
            value_ns: self.max_ns,
        });
        out
    }
}

/// Two durations of each event that are mostly equal, such as a response's times to its first and to its last
/// byte (the same when the response is one packet): recorded as one histogram of the second ("last"), the
/// exact moments of the first, and for the events where the two differ a correction (the last value taken
/// out, the first put in), so an event whose two values are equal costs one bucket update instead of two.
/// When most events differ, the first values get their own buckets from then on. The summaries are those two
/// [`LatencyHistogram`]s recording every value would give.
#[derive(Clone, Debug)]
pub struct PairedHistogram {
    last: LatencyHistogram,
    /// The first values: exact moments always; buckets only once `separate`.
    first: LatencyHistogram,
    /// The corrections: the last and the first values of the events whose two values differ.
    differ: Option<Box<(Histogram<u64>, Histogram<u64>)>>,
    /// Events whose two values differ.
    differing: u64,
    /// The first values are recorded in `first`'s own buckets.
    separate: bool,
}

impl Default for PairedHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl PairedHistogram {
    /// Empty.
    pub fn new() -> Self {
        PairedHistogram {
            last: LatencyHistogram::new(),
            first: LatencyHistogram::new(),
            differ: None,
            differing: 0,
            separate: false,
        }
    }

    /// Records one event's two values, in nanoseconds.
    #[inline]
    pub fn record_ns(&mut self, first_ns: u64, last_ns: u64) {
        self.last.record_ns(last_ns);
        if self.separate {
            self.first.record_ns(first_ns);
            return;
        }
        self.first.record_moments(first_ns);
        if first_ns != last_ns {
            self.record_difference(first_ns, last_ns);
        }
    }

    /// [`record_ns`](Self::record_ns) without the last value's bucket: the caller adds the buckets of the
    /// last values later, from a histogram that recorded them ([`add_last_buckets`](Self::add_last_buckets);
    /// the live intervals' per-operation histograms), so each event updates one bucket in all. The first
    /// values stay corrections of the last values' buckets (never buckets of their own, which would be
    /// derived from buckets not all added yet).
    #[inline]
    pub fn record_ns_without_last_bucket(&mut self, first_ns: u64, last_ns: u64) {
        self.last.record_moments(last_ns);
        if self.separate {
            self.first.record_ns(first_ns);
            return;
        }
        self.first.record_moments(first_ns);
        if first_ns != last_ns {
            self.record_correction(first_ns, last_ns);
        }
    }

    /// Adds the buckets of `h` (the last values of events recorded with
    /// [`record_ns_without_last_bucket`](Self::record_ns_without_last_bucket)) to the last values' buckets.
    pub fn add_last_buckets(&mut self, h: &LatencyHistogram) {
        if h.count > 0 {
            self.last.hist.add(&h.hist).expect("same bounds");
        }
    }

    #[cold]
    fn record_correction(&mut self, first_ns: u64, last_ns: u64) {
        let max = MAX_RECORDABLE.as_nanos() as u64;
        let d = self
            .differ
            .get_or_insert_with(|| Box::new((empty_hist(), empty_hist())));
        d.0.saturating_record(last_ns.clamp(1, max));
        d.1.saturating_record(first_ns.clamp(1, max));
        self.differing += 1;
    }

    #[cold]
    fn record_difference(&mut self, first_ns: u64, last_ns: u64) {
        self.record_correction(first_ns, last_ns);
        // Most events differ: corrections would cost more than the first values' own buckets.
        if self.differing >= 1024 && self.differing * 2 > self.first.count {
            self.first.hist = self.first_buckets();
            self.differ = None;
            self.separate = true;
        }
    }

    /// The first values' buckets: the last values' with the corrections applied.
    fn first_buckets(&self) -> Histogram<u64> {
        if self.separate {
            return self.first.hist.clone();
        }
        let mut h = self.last.hist.clone();
        if let Some(d) = &self.differ {
            // The values taken out were all recorded in `h` with the same bounds: neither step can fail.
            if h.subtract(&d.0).is_err() || h.add(&d.1).is_err() {
                return self.last.hist.clone();
            }
        }
        h
    }

    /// The histogram of the second ("last") values.
    pub fn last(&self) -> &LatencyHistogram {
        &self.last
    }

    /// The histogram of the first values (built from the last values' and the corrections).
    pub fn first(&self) -> LatencyHistogram {
        let mut f = self.first.clone();
        f.hist = self.first_buckets();
        f
    }

    /// Events recorded.
    pub fn len(&self) -> u64 {
        self.last.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

fn empty_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_RECORDABLE.as_nanos() as u64, SIGNIFICANT_DIGITS)
        .expect("static histogram bounds are valid")
}

/// The statistics every command reports for a set of durations; all values in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of values.
    pub count: u64,
    /// Smallest value (exact).
    pub min_ns: u64,
    /// Arithmetic mean (exact).
    pub mean_ns: f64,
    /// Sample standard deviation (exact).
    pub stddev_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p99_9_ns: u64,
    /// 99.99th percentile.
    pub p99_99_ns: u64,
    /// Largest value (exact).
    pub max_ns: u64,
}

/// One histogram bucket: how many values were at most `le_ns` (and above the previous bucket's bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Upper bound of the bucket in nanoseconds.
    pub le_ns: u64,
    /// Values in the bucket.
    pub count: u64,
}

/// One point of a percentile curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PercentilePoint {
    /// Percentile, 0..=100.
    pub percentile: f64,
    /// Value at that percentile in nanoseconds.
    pub value_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A paired histogram summarises its two series exactly as two histograms recording every value do:
    /// mostly equal pairs, pairs that differ (a correction each), values past the recordable range and 0,
    /// and enough differing pairs that the first values move to their own buckets half way.
    #[test]
    fn paired_histogram_gives_the_summaries_of_two_histograms() {
        for differ_every in [0u64, 7, 2, 1] {
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let mut paired = PairedHistogram::new();
            let (mut first, mut last) = (LatencyHistogram::new(), LatencyHistogram::new());
            for i in 0..5000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let l = match i {
                    10 => 0,
                    11 => u64::MAX,
                    _ => 1_000 + x % 3_000_000,
                };
                let f = if differ_every > 0 && i % differ_every == 0 {
                    l / 3
                } else {
                    l
                };
                paired.record_ns(f, l);
                first.record_ns(f);
                last.record_ns(l);
            }
            assert_eq!(paired.len(), 5000);
            assert_eq!(
                paired.last().summary(),
                last.summary(),
                "every {differ_every}"
            );
            assert_eq!(
                paired.first().summary(),
                first.summary(),
                "every {differ_every}"
            );
            assert_eq!(paired.first().buckets(10), first.buckets(10));
        }
    }

    /// The exact percentile by the nearest-rank method, as HdrHistogram defines it.
    fn exact(sorted: &[u64], p: f64) -> u64 {
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted[rank - 1]
    }

    #[test]
    fn percentiles_agree_with_an_exact_sort() {
        // A deterministic, heavy-tailed sample: 200k values from a xorshift generator.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut raw = Vec::new();
        let mut h = LatencyHistogram::new();
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let ns = (20_000.0 / (1.0 - u).powf(0.7)) as u64; // 20 us with a Pareto-like tail
            raw.push(ns);
            h.record_ns(ns);
        }
        raw.sort_unstable();
        for p in [1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99] {
            let want = exact(&raw, p) as f64;
            let got = h.percentile_ns(p) as f64;
            let rel = (got - want).abs() / want;
            assert!(rel <= 1e-3, "p{p}: hdr {got} vs exact {want} ({rel:e})");
        }
        let s = h.summary();
        assert_eq!(s.count, raw.len() as u64);
        assert_eq!(s.min_ns, raw[0]);
        assert_eq!(s.max_ns, *raw.last().unwrap());
        let mean = raw.iter().map(|&v| v as f64).sum::<f64>() / raw.len() as f64;
        assert!((s.mean_ns - mean).abs() / mean < 1e-9);
        let var =
            raw.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / (raw.len() - 1) as f64;
        assert!((s.stddev_ns - var.sqrt()).abs() / var.sqrt() < 1e-6);
    }

    #[test]
    fn merge_equals_recording_everything() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        let mut all = LatencyHistogram::new();
        for i in 1..1000u64 {
            let v = i * 997 % 5000 + 100;
            if i % 3 == 0 {
                a.record_ns(v)
            } else {
                b.record_ns(v)
            }
            all.record_ns(v);
        }
        a.merge(&b);
        let (sa, sall) = (a.summary(), all.summary());
        assert_eq!(sa.count, sall.count);
        assert_eq!(sa.p99_ns, sall.p99_ns);
        assert!((sa.mean_ns - sall.mean_ns).abs() < 1e-6);
        assert!((sa.stddev_ns - sall.stddev_ns).abs() < 1e-6);
    }

    #[test]
    fn buckets_hold_every_value() {
        let mut h = LatencyHistogram::new();
        for v in [100, 150, 1_000, 20_000, 20_001, 5_000_000] {
            h.record_ns(v);
        }
        let b = h.buckets(10);
        assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 6);
        assert!(b.windows(2).all(|w| w[0].le_ns < w[1].le_ns));
        assert!(b.last().unwrap().le_ns >= 5_000_000);
        let curve = h.percentile_curve();
        assert_eq!(curve.last().unwrap().value_ns, 5_000_000);
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(LatencyHistogram::new().summary(), Summary::default());
    }
}
