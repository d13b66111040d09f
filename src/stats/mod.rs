//! The one statistics engine: HDR histograms of durations with exact count, min, max, mean and stddev.
//!
//! Percentiles come from an HDR histogram with nanosecond resolution and three significant digits (the bucket
//! layout of the `hdrhistogram` crate's `Histogram::new_with_bounds(1, one hour, 3)`, kept here as a plain
//! array of counts so that recording a value is a handful of instructions), so memory stays bounded (at most
//! about 260 KiB, grown as larger values arrive) whatever the run length. Count, min, max, mean and standard
//! deviation are kept exactly beside it.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Largest duration a histogram records (one hour); longer values are clamped to it.
pub const MAX_RECORDABLE: Duration = Duration::from_secs(3600);
/// Significant decimal digits kept by the histograms.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The percentiles every summary reports.
pub const PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

/// [`MAX_RECORDABLE`] in nanoseconds.
const MAX_NS: u64 = MAX_RECORDABLE.as_secs() * 1_000_000_000;

/// log2 of half the sub-buckets of a bucket: 2048 sub-buckets (the power of two above 2 * 10^3) resolve three
/// significant digits.
const HALF_MAGNITUDE: u32 = 10;
/// Values below this many nanoseconds have a bucket each.
const SUB_BUCKETS: u64 = 1 << (HALF_MAGNITUDE + 1);

/// Bucket counts laid out as hdrhistogram's `Histogram<u64>` with bounds 1 ..= [`MAX_RECORDABLE`] and
/// [`SIGNIFICANT_DIGITS`] (unit 1 ns): the same index for every value, so the same quantiles. The array grows
/// as larger values arrive (counts past its end are zero), so an unused histogram costs no memory.
#[derive(Clone, Debug, Default)]
struct Buckets {
    counts: Vec<u64>,
}

/// Length of a full counts array: to the index of [`MAX_RECORDABLE`], where every larger value is counted.
const LEN_MAX: usize = index_of(MAX_NS) + 1;

/// The power of two that scales `v`'s sub-bucket (hdrhistogram's `bucket_for`).
#[inline]
const fn bucket_of(v: u64) -> u32 {
    // 53 = 64 - log2(SUB_BUCKETS): values below SUB_BUCKETS are bucket 0.
    (64 - (HALF_MAGNITUDE + 1)) - (v | (SUB_BUCKETS - 1)).leading_zeros()
}

/// The counts index of `v` (hdrhistogram's `index_for`: `((bucket + 1) << 10) + (v >> bucket) - 1024`).
#[inline]
const fn index_of(v: u64) -> usize {
    let b = bucket_of(v);
    ((b as usize) << HALF_MAGNITUDE) + (v >> b) as usize
}

/// The lowest value counted at `index` (hdrhistogram's `value_for`).
fn value_for(index: usize) -> u64 {
    let b = (index >> HALF_MAGNITUDE) as i64 - 1;
    let half = 1u64 << HALF_MAGNITUDE;
    let sub = (index as u64 & (half - 1)) + half;
    if b < 0 { sub - half } else { sub << b }
}

/// The lowest value counted with `v`.
fn lowest_equivalent(v: u64) -> u64 {
    let b = bucket_of(v);
    (v >> b) << b
}

/// The highest value counted with `v`.
fn highest_equivalent(v: u64) -> u64 {
    if v == u64::MAX {
        return u64::MAX;
    }
    lowest_equivalent(v).saturating_add(1 << bucket_of(v)) - 1
}

impl Buckets {
    /// Counts one value (clamped to 1 ..= [`MAX_RECORDABLE`], as hdrhistogram's `saturating_record` of the
    /// clamped value: the array never reaches past [`MAX_RECORDABLE`]'s index, so larger values take the
    /// out-of-line path, which clamps them).
    #[inline]
    fn record(&mut self, ns: u64) {
        let i = index_of(ns.max(1));
        match self.counts.get_mut(i) {
            Some(c) => *c += 1,
            None => self.grow_record(i),
        }
    }

    #[cold]
    #[inline(never)]
    fn grow_record(&mut self, i: usize) {
        // The index grows with the value: past LEN_MAX, values above MAX_RECORDABLE.
        let i = i.min(LEN_MAX - 1);
        self.grow(i + 1);
        self.counts[i] += 1;
    }

    /// At least `len` (at most [`LEN_MAX`]) counts: to the end of that bucket, so a few larger values do not
    /// grow it again.
    fn grow(&mut self, len: usize) {
        if len > self.counts.len() {
            let half = 1 << HALF_MAGNITUDE;
            self.counts
                .resize((len.div_ceil(half) * half).min(LEN_MAX), 0);
        }
    }

    /// Values counted.
    fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// Adds every count of `other`.
    fn add(&mut self, other: &Buckets) {
        self.grow(other.counts.len());
        for (a, &b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(b);
        }
    }

    /// Takes the counts of `other` out; an error, with `self` part done, when a count would go below zero.
    fn subtract(&mut self, other: &Buckets) -> Result<(), ()> {
        for (i, &b) in other.counts.iter().enumerate() {
            if b != 0 {
                let a = self.counts.get_mut(i).ok_or(())?;
                *a = a.checked_sub(b).ok_or(())?;
            }
        }
        Ok(())
    }

    /// The value at `quantile` (0..=1): the highest value of the bucket holding it (the lowest for 0), 0 when
    /// empty (hdrhistogram's `value_at_quantile`).
    fn value_at_quantile(&self, quantile: f64) -> u64 {
        let quantile = if quantile > 1.0 { 1.0 } else { quantile };
        let target = ((quantile * self.total() as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                let v = value_for(i);
                return if quantile == 0.0 {
                    lowest_equivalent(v)
                } else {
                    highest_equivalent(v)
                };
            }
        }
        0
    }

    /// [`value_at_quantile`](Self::value_at_quantile) of each of `quantiles`, in one pass when they ascend.
    fn values_at_quantiles<const N: usize>(&self, quantiles: [f64; N]) -> [u64; N] {
        if !quantiles.is_sorted() {
            return quantiles.map(|q| self.value_at_quantile(q));
        }
        let total = self.total() as f64;
        let mut out = [0u64; N];
        // `seen` counts the values up to index `at` (exclusive); a target no higher than a previous one is
        // reached at the same index.
        let (mut seen, mut at) = (0u64, 0usize);
        let mut found: Option<usize> = None;
        for (o, q) in out.iter_mut().zip(quantiles) {
            let q = if q > 1.0 { 1.0 } else { q };
            let target = ((q * total).ceil() as u64).max(1);
            if found.is_none() || seen < target {
                found = None;
                while let Some(&c) = self.counts.get(at) {
                    seen += c;
                    at += 1;
                    if seen >= target {
                        found = Some(at - 1);
                        break;
                    }
                }
            }
            *o = match found {
                Some(i) if q == 0.0 => lowest_equivalent(value_for(i)),
                Some(i) => highest_equivalent(value_for(i)),
                None => 0,
            };
        }
        out
    }

    /// Each non-empty bucket's highest value and count, lowest first (hdrhistogram's `iter_recorded`).
    fn recorded(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != 0)
            .map(|(i, &c)| (highest_equivalent(value_for(i)), c))
    }
}

/// Count, min, max, mean and the sum of squared deviations of the values recorded, exact (Welford's
/// algorithm).
#[derive(Clone, Copy, Debug)]
struct Moments {
    count: u64,
    min_ns: u64,
    max_ns: u64,
    mean_ns: f64,
    m2: f64,
}

impl Moments {
    const EMPTY: Moments = Moments {
        count: 0,
        min_ns: u64::MAX,
        max_ns: 0,
        mean_ns: 0.0,
        m2: 0.0,
    };

    #[inline]
    fn record(&mut self, ns: u64) {
        self.count += 1;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        let x = to_f64(ns);
        let delta = x - self.mean_ns;
        // The count is far below 2^63: a signed conversion, one instruction, gives the same value.
        self.mean_ns += delta / (self.count as i64) as f64;
        self.m2 += delta * (x - self.mean_ns);
    }
}

/// `v as f64`, with the one-instruction signed conversion when `v` fits (the same value).
#[inline]
fn to_f64(v: u64) -> f64 {
    match i64::try_from(v) {
        Ok(s) => s as f64,
        Err(_) => to_f64_above_i64(v),
    }
}

/// `v as f64` for the values `i64` cannot hold (out of line, so the compiler keeps the short form above).
#[cold]
#[inline(never)]
fn to_f64_above_i64(v: u64) -> f64 {
    v as f64
}

/// A latency histogram with exact moments.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Buckets,
    m: Moments,
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
            hist: Buckets::default(),
            m: Moments::EMPTY,
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
        self.hist.record(ns);
        self.m.record(ns);
    }

    /// Adds every value of `other` (Chan's parallel variance formula for the moments).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.m.count == 0 {
            return;
        }
        self.hist.add(&other.hist);
        let (a, b) = (&mut self.m, &other.m);
        let n1 = a.count as f64;
        let n2 = b.count as f64;
        let delta = b.mean_ns - a.mean_ns;
        let n = n1 + n2;
        a.mean_ns += delta * n2 / n;
        a.m2 += b.m2 + delta * delta * n1 * n2 / n;
        a.count += b.count;
        a.min_ns = a.min_ns.min(b.min_ns);
        a.max_ns = a.max_ns.max(b.max_ns);
    }

    /// Forgets every value.
    pub fn reset(&mut self) {
        self.hist.counts.clear();
        self.m = Moments::EMPTY;
    }

    /// Number of values recorded.
    pub fn len(&self) -> u64 {
        self.m.count
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.m.count == 0
    }

    /// The value at percentile `p` (0..=100), within three significant digits; the exact max for 100.
    pub fn percentile_ns(&self, p: f64) -> u64 {
        if self.m.count == 0 {
            return 0;
        }
        if p >= 100.0 {
            return self.m.max_ns;
        }
        let v = self.hist.value_at_quantile(p / 100.0);
        // The histogram reports the top of a bucket; never above the exact maximum or below the minimum.
        v.clamp(self.m.min_ns, self.m.max_ns)
    }

    /// The summary every command reports.
    pub fn summary(&self) -> Summary {
        let m = &self.m;
        if m.count == 0 {
            return Summary::default();
        }
        let stddev = if m.count > 1 {
            (m.m2 / (m.count - 1) as f64).sqrt()
        } else {
            0.0
        };
        // percentile_ns of each, in one pass over the buckets.
        let [p50, p90, p99, p99_9, p99_99] = self
            .hist
            .values_at_quantiles(PERCENTILES.map(|p| p / 100.0))
            .map(|v| v.clamp(m.min_ns, m.max_ns));
        Summary {
            count: m.count,
            min_ns: m.min_ns,
            mean_ns: m.mean_ns,
            stddev_ns: stddev,
            p50_ns: p50,
            p90_ns: p90,
            p99_ns: p99,
            p99_9_ns: p99_9,
            p99_99_ns: p99_99,
            max_ns: m.max_ns,
        }
    }

    /// Non-empty buckets on a logarithmic grid (`per_decade` buckets per factor of ten), for plots and JSON.
    pub fn buckets(&self, per_decade: u32) -> Vec<Bucket> {
        let mut out: Vec<Bucket> = Vec::new();
        if self.m.count == 0 {
            return out;
        }
        let factor = 10f64.powf(1.0 / per_decade as f64);
        let mut upper = 1.0f64;
        for (value, count) in self.hist.recorded() {
            while (upper as u64) < value {
                upper *= factor;
            }
            let up = upper.ceil() as u64;
            match out.last_mut() {
                Some(last) if last.le_ns == up => last.count += count,
                _ => out.push(Bucket { le_ns: up, count }),
            }
        }
        out
    }

    /// Values at a range of percentiles for the percentile curve: 0, 50, 75, 87.5, ... up to `1 - 10^-depth`.
    pub fn percentile_curve(&self) -> Vec<PercentilePoint> {
        let mut out = Vec::new();
        if self.m.count == 0 {
            return out;
        }
        let mut tail = 1.0f64;
        while tail >= 1.0 / (self.m.count as f64).max(10.0) / 2.0 {
            let p = 100.0 * (1.0 - tail);
            out.push(PercentilePoint {
                percentile: p,
                value_ns: self.percentile_ns(p),
            });
            tail /= 2.0;
        }
        out.push(PercentilePoint {
            percentile: 100.0,
            value_ns: self.m.max_ns,
        });
        out
    }
}

/// Two durations of each event that are mostly equal, such as a response's times to its first and to its last
/// byte (the same when the response is one packet): recorded as one histogram of the second ("last"), the
/// exact moments of the first, and for the events where the two differ a correction (the last value taken
/// out, the first put in), so an event whose two values are equal costs one bucket update instead of two.
/// Until the first event whose two values differ, the first values' moments are the last values' (the same
/// values recorded in the same order), so such an event costs one update of the moments too. When most events
/// differ, the first values get their own buckets from then on. The summaries are those two
/// [`LatencyHistogram`]s recording every value would give.
#[derive(Clone, Debug)]
pub struct PairedHistogram {
    last: LatencyHistogram,
    /// The first values: exact moments once `apart` (before, `last`'s are theirs); buckets only once
    /// `separate`.
    first: LatencyHistogram,
    /// Some event's two values differed: `first` has moments of its own.
    apart: bool,
    /// The corrections: the last and the first values of the events whose two values differ.
    differ: (Buckets, Buckets),
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
            apart: false,
            differ: (Buckets::default(), Buckets::default()),
            differing: 0,
            separate: false,
        }
    }

    /// Records one event's two values, in nanoseconds.
    #[inline]
    pub fn record_ns(&mut self, first_ns: u64, last_ns: u64) {
        if !self.apart && first_ns == last_ns {
            self.last.record_ns(last_ns);
        } else {
            self.record_ns_apart(first_ns, last_ns);
        }
    }

    /// [`record_ns`](Self::record_ns) once the two values differ or have differed.
    #[inline(never)]
    fn record_ns_apart(&mut self, first_ns: u64, last_ns: u64) {
        self.set_apart();
        self.last.record_ns(last_ns);
        if self.separate {
            self.first.record_ns(first_ns);
            return;
        }
        self.first.m.record(first_ns);
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
        if !self.apart && first_ns == last_ns {
            self.last.m.record(last_ns);
        } else {
            self.record_apart_without_last_bucket(first_ns, last_ns);
        }
    }

    /// [`record_ns_without_last_bucket`](Self::record_ns_without_last_bucket) once the two values differ or
    /// have differed.
    #[inline(never)]
    fn record_apart_without_last_bucket(&mut self, first_ns: u64, last_ns: u64) {
        self.set_apart();
        self.last.m.record(last_ns);
        if self.separate {
            self.first.record_ns(first_ns);
            return;
        }
        self.first.m.record(first_ns);
        if first_ns != last_ns {
            self.record_correction(first_ns, last_ns);
        }
    }

    /// From the first event whose two values differ on, the first values' moments are their own: they
    /// start as the last values' so far.
    fn set_apart(&mut self) {
        if !self.apart {
            self.first.m = self.last.m;
            self.apart = true;
        }
    }

    /// Adds the buckets of `h` (the last values of events recorded with
    /// [`record_ns_without_last_bucket`](Self::record_ns_without_last_bucket)) to the last values' buckets.
    pub fn add_last_buckets(&mut self, h: &LatencyHistogram) {
        if h.m.count > 0 {
            self.last.hist.add(&h.hist);
        }
    }

    #[cold]
    fn record_correction(&mut self, first_ns: u64, last_ns: u64) {
        self.differ.0.record(last_ns);
        self.differ.1.record(first_ns);
        self.differing += 1;
    }

    #[cold]
    fn record_difference(&mut self, first_ns: u64, last_ns: u64) {
        self.record_correction(first_ns, last_ns);
        // Most events differ: corrections would cost more than the first values' own buckets.
        if self.differing >= 1024 && self.differing * 2 > self.first.m.count {
            self.first.hist = self.first_buckets();
            self.differ = (Buckets::default(), Buckets::default());
            self.separate = true;
        }
    }

    /// The first values' buckets: the last values' with the corrections applied.
    fn first_buckets(&self) -> Buckets {
        if self.separate {
            return self.first.hist.clone();
        }
        let mut h = self.last.hist.clone();
        // The values taken out were all counted in `h`: neither step can fail.
        if h.subtract(&self.differ.0).is_err() {
            return self.last.hist.clone();
        }
        h.add(&self.differ.1);
        h
    }

    /// The histogram of the second ("last") values.
    pub fn last(&self) -> &LatencyHistogram {
        &self.last
    }

    /// The histogram of the first values (built from the last values' and the corrections).
    pub fn first(&self) -> LatencyHistogram {
        LatencyHistogram {
            hist: self.first_buckets(),
            m: if self.apart {
                self.first.m
            } else {
                self.last.m
            },
        }
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

    /// A pseudo-random sequence (xorshift), the same every run.
    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// The reference: hdrhistogram with the bounds and digits the buckets copy.
    fn hdr() -> hdrhistogram::Histogram<u64> {
        hdrhistogram::Histogram::new_with_bounds(1, MAX_NS, SIGNIFICANT_DIGITS).unwrap()
    }

    /// The bucket layout is hdrhistogram's: for values over the whole range (and past it, clamped), the same
    /// bucket bounds, and the same quantiles, recorded buckets, sums and differences.
    #[test]
    fn buckets_are_hdrhistogram_s() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut values = vec![
            0,
            1,
            2,
            1023,
            1024,
            2047,
            2048,
            2049,
            4095,
            4096,
            1_000_000,
            MAX_NS - 1,
            MAX_NS,
            MAX_NS + 1,
            4_398_046_511_103,
            4_398_046_511_104,
            u64::MAX,
        ];
        for _ in 0..200_000 {
            let r = xorshift(&mut x);
            values.push(r >> (r % 64));
        }
        let (mut theirs, mut ours) = (hdr(), Buckets::default());
        let (mut theirs_half, mut ours_half) = (hdr(), Buckets::default());
        for (k, &v) in values.iter().enumerate() {
            let c = v.clamp(1, MAX_NS);
            assert_eq!(lowest_equivalent(c), theirs.lowest_equivalent(c), "{v}");
            assert_eq!(highest_equivalent(c), theirs.highest_equivalent(c), "{v}");
            assert_eq!(value_for(index_of(c)), theirs.lowest_equivalent(c), "{v}");
            theirs.saturating_record(c);
            ours.record(v);
            if k % 3 == 0 {
                theirs_half.saturating_record(c);
                ours_half.record(v);
            }
        }
        assert!(ours.counts.len() <= LEN_MAX);
        let check = |ours: &Buckets, theirs: &hdrhistogram::Histogram<u64>| {
            assert_eq!(ours.total(), theirs.len());
            for q in [
                0.0, 1e-9, 1e-6, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 0.99999,
                1.0, 1.5,
            ] {
                assert_eq!(
                    ours.value_at_quantile(q),
                    theirs.value_at_quantile(q),
                    "q {q}"
                );
            }
            let qs = [0.0, 0.0, 1e-9, 0.5, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0, 2.0];
            assert_eq!(
                ours.values_at_quantiles(qs),
                qs.map(|q| theirs.value_at_quantile(q))
            );
            let unsorted = [0.9, 0.5, 0.0];
            assert_eq!(
                ours.values_at_quantiles(unsorted),
                unsorted.map(|q| theirs.value_at_quantile(q))
            );
            let recorded: Vec<(u64, u64)> = theirs
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect();
            assert_eq!(ours.recorded().collect::<Vec<_>>(), recorded);
        };
        check(&ours, &theirs);
        check(&ours_half, &theirs_half);
        let (mut sum, mut sum_ref) = (ours.clone(), theirs.clone());
        sum.add(&ours_half);
        sum_ref.add(&theirs_half).unwrap();
        check(&sum, &sum_ref);
        assert!(sum.subtract(&ours).is_ok());
        sum_ref.subtract(&theirs).unwrap();
        check(&sum, &sum_ref);
        check(&ours_half, &sum_ref);
        assert!(ours_half.subtract(&ours).is_err());
        let empty = Buckets::default();
        assert_eq!(empty.value_at_quantile(0.5), hdr().value_at_quantile(0.5));
        assert_eq!(empty.values_at_quantiles([0.0, 0.5]), [0, 0]);
        assert_eq!(empty.recorded().count(), 0);
    }

    /// The first values' moments follow the last values' until a pair differs, then go their own way: the
    /// summaries are those of two histograms recording every value, with the pairs differing from the start,
    /// from half way and never, recorded with their last values' buckets or with those buckets added later.
    #[test]
    fn paired_histogram_moments_part_when_a_pair_differs() {
        for differ_from in [0u64, 2_500, 10_000] {
            for later_buckets in [false, true] {
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
                let mut paired = PairedHistogram::new();
                let mut later = LatencyHistogram::new();
                let (mut first, mut last) = (LatencyHistogram::new(), LatencyHistogram::new());
                for i in 0..5000u64 {
                    let l = 1 + xorshift(&mut x) % 5_000_000;
                    let f = if i >= differ_from && i % 3 == 0 {
                        l / 2
                    } else {
                        l
                    };
                    if later_buckets {
                        paired.record_ns_without_last_bucket(f, l);
                        later.record_ns(l);
                    } else {
                        paired.record_ns(f, l);
                    }
                    first.record_ns(f);
                    last.record_ns(l);
                }
                paired.add_last_buckets(&later);
                let at = format!("from {differ_from}, later {later_buckets}");
                assert_eq!(paired.last().summary(), last.summary(), "{at}");
                assert_eq!(paired.first().summary(), first.summary(), "{at}");
                assert_eq!(paired.first().buckets(10), first.buckets(10), "{at}");
            }
        }
    }

    /// `to_f64` is `as f64` on both sides of `i64::MAX`.
    #[test]
    fn to_f64_is_as_f64() {
        for v in [
            0,
            1,
            1 << 53,
            (1 << 53) + 1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
        ] {
            assert_eq!(to_f64(v).to_bits(), (v as f64).to_bits(), "{v}");
        }
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(LatencyHistogram::new().summary(), Summary::default());
    }
}
