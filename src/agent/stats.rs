//! Per-target statistics: the RTT [`Histogram`] in the fixed [`BUCKET_BOUNDS`], probe and error counters, the
//! last outcome, and a bounded ring of recent outcomes from which [`WindowStats`] (exact percentiles and loss
//! over [`super::engine::EngineConfig::window`]) are computed at snapshot time.
//!
//! Memory per target: the fixed part of a [`TargetStats`] is about 400 bytes (histogram 232 at `--buckets 1`, 808 at 4; counters 64, the
//! last error's text, the ring's header); the ring holds one 16-byte entry per probe whose outcome is younger
//! than the window, at most [`RECENT_CAP`] entries (16 KiB). At one probe per second and a 60 s window that is
//! 60 entries (about 1 KiB); the cap only matters for intervals shorter than window / 1024, where the window
//! then covers the last 1024 probes (its `span` says how long that was).

use super::buckets::Buckets;
use super::{BUCKET_BOUNDS, ErrorReason, Histogram, TargetSnapshot, TargetSpec, WindowStats};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most recent outcomes kept per target for the window statistics.
pub const RECENT_CAP: usize = 1024;

/// Marks a failed probe in the ring.
const FAILED: u64 = u64::MAX;

/// The bucket a value (seconds) falls in among the [`BUCKET_BOUNDS`]: the first bound that is `>=` the value
/// (Prometheus `le` semantics), or 25 (`+Inf`) above 10 s. NaN goes to `+Inf`.
pub fn bucket_index(seconds: f64) -> usize {
    bucket_in(&BUCKET_BOUNDS, seconds)
}

/// The bucket a value (seconds) falls in among `bounds` (as [`bucket_index`]).
pub fn bucket_in(bounds: &[f64], seconds: f64) -> usize {
    bounds
        .partition_point(|&b| b.partial_cmp(&seconds) == Some(std::cmp::Ordering::Less))
        .max(if seconds.is_nan() { bounds.len() } else { 0 })
}

impl Histogram {
    /// A histogram with no values in the [`BUCKET_BOUNDS`] (`--buckets 1`).
    pub fn zero() -> Histogram {
        Histogram::with(Buckets::ONE)
    }

    /// A histogram with no values in the bounds of `buckets`.
    pub fn with(buckets: Buckets) -> Histogram {
        Histogram {
            counts: vec![0; buckets.probe_bounds().len() + 1],
            sum_s: 0.0,
            count: 0,
        }
    }

    /// Its resolution (from the number of its counts).
    pub fn buckets(&self) -> Buckets {
        Buckets::of_probe_len(self.counts.len())
    }

    /// Adds one value, in seconds.
    pub fn record_seconds(&mut self, seconds: f64) {
        let last = self.counts.len() - 1;
        let k = bucket_in(self.buckets().probe_bounds(), seconds).min(last);
        self.counts[k] += 1;
        self.sum_s += seconds;
        self.count += 1;
    }
}

/// One recent outcome: when (nanoseconds since the stats' origin) and the RTT in nanoseconds, or [`FAILED`].
#[derive(Debug, Clone, Copy)]
struct Recent {
    at_ns: u64,
    rtt_ns: u64,
}

/// Everything measured for one target since it was added.
#[derive(Debug)]
pub struct TargetStats {
    rtt: Histogram,
    probes: u64,
    errors: [u64; 8],
    up: bool,
    last_rtt: Option<Duration>,
    /// The last error's words; reused so that a failing target does not allocate per probe.
    last_error: String,
    has_error: bool,
    recent: VecDeque<Recent>,
    origin: Instant,
    window: Duration,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)
}

impl TargetStats {
    /// Empty statistics for a target added at `now`, keeping outcomes for `window`, its histogram in the
    /// bounds of `buckets`.
    pub fn new(now: Instant, window: Duration, buckets: Buckets) -> TargetStats {
        TargetStats {
            rtt: Histogram::with(buckets),
            probes: 0,
            errors: [0; 8],
            up: false,
            last_rtt: None,
            last_error: String::new(),
            has_error: false,
            recent: VecDeque::new(),
            origin: now,
            window,
        }
    }

    /// Probes whose outcome is known.
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// Failed probes per reason, indexed like [`ErrorReason::ALL`].
    pub fn errors(&self) -> &[u64; 8] {
        &self.errors
    }

    /// Failed probes for one reason.
    pub fn errors_for(&self, reason: ErrorReason) -> u64 {
        self.errors[reason_index(reason)]
    }

    /// Whether the last probe was answered.
    pub fn up(&self) -> bool {
        self.up
    }

    /// The RTT histogram.
    pub fn histogram(&self) -> &Histogram {
        &self.rtt
    }

    fn push(&mut self, at: Instant, rtt_ns: u64) {
        let at_ns = nanos(at.saturating_duration_since(self.origin));
        let keep_from = at_ns.saturating_sub(nanos(self.window));
        while let Some(front) = self.recent.front() {
            if self.recent.len() >= RECENT_CAP || front.at_ns < keep_from {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        self.recent.push_back(Recent { at_ns, rtt_ns });
    }

    /// Records an answered probe whose outcome became known at `at`.
    pub fn answered(&mut self, at: Instant, rtt: Duration) {
        self.rtt.record_seconds(rtt.as_secs_f64());
        self.probes += 1;
        self.up = true;
        self.last_rtt = Some(rtt);
        self.push(at, nanos(rtt).min(FAILED - 1));
    }

    /// Records a failed probe; `detail` is the error in words (never a password).
    pub fn failed(&mut self, at: Instant, reason: ErrorReason, detail: std::fmt::Arguments<'_>) {
        self.probes += 1;
        self.errors[reason_index(reason)] += 1;
        self.up = false;
        self.set_error(reason, detail);
        self.push(at, FAILED);
    }

    /// Records a failed name resolution: counted as a probe failed with reason `dns`, without touching `up`
    /// or the window (the last good addresses keep being probed, and their outcomes are what the window and
    /// `up` describe).
    pub fn dns_failed(&mut self, detail: std::fmt::Arguments<'_>) {
        self.probes += 1;
        self.errors[reason_index(ErrorReason::Dns)] += 1;
        self.set_error(ErrorReason::Dns, detail);
    }

    fn set_error(&mut self, reason: ErrorReason, detail: std::fmt::Arguments<'_>) {
        self.last_error.clear();
        let _ = write!(self.last_error, "{}: {detail}", reason.name());
        self.has_error = true;
    }

    /// Statistics over the window ending at `now`. `scratch` is reused between calls to hold the RTTs.
    pub fn window_stats(&self, now: Instant, scratch: &mut Vec<u64>) -> WindowStats {
        let now_ns = nanos(now.saturating_duration_since(self.origin));
        let window_ns = nanos(self.window);
        let mut from = now_ns.saturating_sub(window_ns);
        if self.recent.len() >= RECENT_CAP
            && let Some(first) = self.recent.front()
        {
            from = from.max(first.at_ns);
        }
        scratch.clear();
        let mut sent = 0u64;
        let mut lost = 0u64;
        for r in self.recent.iter().rev() {
            if r.at_ns < from {
                break;
            }
            if r.at_ns > now_ns {
                continue;
            }
            sent += 1;
            if r.rtt_ns == FAILED {
                lost += 1;
            } else {
                scratch.push(r.rtt_ns);
            }
        }
        // Exact nearest-rank percentiles by selection (linear time, cheaper than sorting every window):
        // the smallest value with at least p of the values at or below it.
        let n = scratch.len();
        let rank = |p: f64| ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
        let (mut p50, mut p90, mut p99, mut max) = (None, None, None, None);
        if n > 0 {
            let mut from = 0;
            let mut pick = |k: usize| -> u64 {
                let (_, v, _) = scratch[from..].select_nth_unstable(k - from);
                let v = *v;
                from = k;
                v
            };
            p50 = Some(pick(rank(0.5)));
            p90 = Some(pick(rank(0.9)));
            p99 = Some(pick(rank(0.99)));
            max = scratch[from..].iter().max().copied();
        }
        let d = |v: Option<u64>| v.map(Duration::from_nanos);
        WindowStats {
            span: Duration::from_nanos(now_ns - from),
            sent,
            lost,
            p50: d(p50),
            p90: d(p90),
            p99: d(p99),
            max: d(max),
        }
    }

    /// The target's state at `now`.
    pub fn snapshot(
        &self,
        spec: Arc<TargetSpec>,
        now: Instant,
        scratch: &mut Vec<u64>,
    ) -> TargetSnapshot {
        TargetSnapshot {
            spec,
            rtt: self.rtt.clone(),
            probes: self.probes,
            errors: self.errors,
            up: self.up,
            last_rtt: self.last_rtt,
            last_error: self.has_error.then(|| self.last_error.clone()),
            window: self.window_stats(now, scratch),
        }
    }
}

/// The index of a reason in [`ErrorReason::ALL`].
pub fn reason_index(reason: ErrorReason) -> usize {
    match reason {
        ErrorReason::Timeout => 0,
        ErrorReason::Refused => 1,
        ErrorReason::Reset => 2,
        ErrorReason::Unreachable => 3,
        ErrorReason::Protocol => 4,
        ErrorReason::Auth => 5,
        ErrorReason::Dns => 6,
        ErrorReason::Other => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_index_follows_all() {
        for (i, r) in ErrorReason::ALL.iter().enumerate() {
            assert_eq!(reason_index(*r), i);
        }
    }

    #[test]
    fn buckets_use_le_semantics() {
        assert_eq!(bucket_index(0.0), 0);
        assert_eq!(bucket_index(1e-5), 0);
        assert_eq!(bucket_index(1.000_001e-5), 1);
        assert_eq!(bucket_index(1e-4), 4);
        assert_eq!(bucket_index(Duration::from_micros(100).as_secs_f64()), 4);
        assert_eq!(bucket_index(10.0), 24);
        assert_eq!(bucket_index(10.5), 25);
        assert_eq!(bucket_index(f64::NAN), 25);
        let mut h = Histogram::zero();
        h.record_seconds(0.5);
        h.record_seconds(0.001);
        assert_eq!(h.count, 2);
        assert_eq!(h.counts[8], 1);
        assert_eq!(h.counts[19], 1);
        assert!((h.sum_s - 0.501).abs() < 1e-12);
    }

    #[test]
    fn counters_up_and_last_error() {
        let t0 = Instant::now();
        let mut s = TargetStats::new(t0, Duration::from_secs(60), Buckets::ONE);
        assert!(!s.up());
        s.answered(t0, Duration::from_micros(50));
        assert!(s.up());
        s.failed(t0, ErrorReason::Refused, format_args!("connection refused"));
        assert!(!s.up());
        assert_eq!(s.errors_for(ErrorReason::Refused), 1);
        assert_eq!(s.probes(), 2);
        s.dns_failed(format_args!("no such name"));
        assert_eq!(s.errors_for(ErrorReason::Dns), 1);
        assert!(!s.up());
        let mut scratch = Vec::new();
        let snap = s.snapshot(
            Arc::new(TargetSpec {
                target: "x".into(),
                addr: "127.0.0.1:1".parse().unwrap(),
                probe: super::super::ProbeKind::Connect,
                interval: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
                labels: Vec::new(),
            }),
            t0,
            &mut scratch,
        );
        assert_eq!(snap.last_error.as_deref(), Some("dns: no such name"));
        assert_eq!(snap.last_rtt, Some(Duration::from_micros(50)));
        assert_eq!(snap.window.sent, 2);
        assert_eq!(snap.window.lost, 1);
    }

    #[test]
    fn window_percentiles_are_exact_and_old_samples_leave() {
        let t0 = Instant::now();
        let mut s = TargetStats::new(t0, Duration::from_secs(10), Buckets::ONE);
        for i in 1..=100u64 {
            s.answered(t0 + Duration::from_millis(i), Duration::from_micros(i));
        }
        let mut scratch = Vec::new();
        let w = s.window_stats(t0 + Duration::from_millis(200), &mut scratch);
        assert_eq!(w.sent, 100);
        assert_eq!(w.lost, 0);
        assert_eq!(w.p50, Some(Duration::from_micros(50)));
        assert_eq!(w.p90, Some(Duration::from_micros(90)));
        assert_eq!(w.p99, Some(Duration::from_micros(99)));
        assert_eq!(w.max, Some(Duration::from_micros(100)));
        // 20 s later everything is out of the window, and a new sample evicts the old ones.
        let later = t0 + Duration::from_secs(20);
        let w = s.window_stats(later, &mut scratch);
        assert_eq!(w.sent, 0);
        assert_eq!(w.p50, None);
        s.failed(later, ErrorReason::Timeout, format_args!("no answer"));
        assert_eq!(s.recent.len(), 1);
        assert_eq!(s.histogram().count, 100);
    }

    #[test]
    fn selection_matches_sorting() {
        let t0 = Instant::now();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in [1usize, 2, 3, 7, 10, 99, 100, 101, 250] {
            let mut s = TargetStats::new(t0, Duration::from_secs(3600), Buckets::ONE);
            let mut all = Vec::new();
            for i in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = 1 + x % 50; // duplicates on purpose
                all.push(v);
                s.answered(
                    t0 + Duration::from_millis(i as u64),
                    Duration::from_nanos(v),
                );
            }
            all.sort_unstable();
            let at = |p: f64| all[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
            let w = s.window_stats(t0 + Duration::from_secs(1), &mut Vec::new());
            assert_eq!(w.p50, Some(Duration::from_nanos(at(0.5))), "n={n}");
            assert_eq!(w.p90, Some(Duration::from_nanos(at(0.9))), "n={n}");
            assert_eq!(w.p99, Some(Duration::from_nanos(at(0.99))), "n={n}");
            assert_eq!(w.max, Some(Duration::from_nanos(all[n - 1])), "n={n}");
        }
    }

    #[test]
    fn ring_is_capped() {
        let t0 = Instant::now();
        let mut s = TargetStats::new(t0, Duration::from_secs(3600), Buckets::ONE);
        for i in 0..(RECENT_CAP as u64 + 500) {
            s.answered(t0 + Duration::from_millis(i), Duration::from_micros(10));
        }
        assert_eq!(s.recent.len(), RECENT_CAP);
        let now = t0 + Duration::from_millis(RECENT_CAP as u64 + 500);
        let w = s.window_stats(now, &mut Vec::new());
        assert_eq!(w.sent, RECENT_CAP as u64);
        assert!(w.span < Duration::from_secs(3600));
    }
}
