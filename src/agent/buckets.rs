//! The resolution of the agent's Prometheus histograms: how many `le` buckets each of the original
//! buckets is split into (`--buckets N`, TOML `buckets`; 1, 2, 4 or 8, default [`Buckets::DEFAULT`]).
//!
//! The original bounds ([`super::BUCKET_BOUNDS`] for `roundtrip_rtt_seconds`, [`WATCH_BUCKETS`] for
//! the `--watch` histograms) are always a subset of the finer ones, with the same float text, so
//! `sum by (le)` over a fleet of old and new agents still adds up at the bounds they share. With `N` the
//! watch histograms have `N` buckets per doubling; the probe histogram has `N` per step of 10^(1/4) = 1.78x
//! (`4N` per decade, 1.33 N per doubling).
//!
//! `histogram_quantile` interpolates linearly inside a bucket `(lo, hi]` with `hi = r lo`: its answer can be
//! off from the true value by up to `r - 1` above or `1 - 1/r` below ([`Buckets::worst_error`]).

use super::{BUCKET_BOUNDS, ErrorReason};
use std::sync::OnceLock;

/// Upper bounds (seconds) of the watch histograms at `--buckets 1`: 25 us doubling, 20 buckets up to 13.1 s;
/// `+Inf` follows. [`Buckets::watch_bounds`] adds bounds between them.
/// Loopback requests (tens of us) and LAN ones (hundreds of us) fall in different buckets.
pub const WATCH_BUCKETS: [f64; 20] = {
    let mut b = [0.0; 20];
    let mut k = 0;
    let mut v = 25e-6;
    while k < 20 {
        b[k] = v;
        v *= 2.0;
        k += 1;
    }
    b
};

/// Series of one histogram at `--buckets 1`: its buckets, `+Inf`, `_sum` and `_count`
/// ([`Buckets::watch_hist_series`] at any resolution).
pub const HIST_SERIES: usize = WATCH_BUCKETS.len() + 1 + 2;

/// A histogram resolution: each original bucket split into 1, 2, 4 or 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Buckets(u32);

/// The valid values of `--buckets`, coarsest first.
pub const CHOICES: [u32; 4] = [1, 2, 4, 8];

impl Default for Buckets {
    fn default() -> Self {
        Buckets::DEFAULT
    }
}

impl Buckets {
    /// The layout of agents before `--buckets` existed: one bucket per doubling (watch) or per 1.78x (probes).
    pub const ONE: Buckets = Buckets(1);
    /// The default: 4 buckets per doubling (watch), 16 per decade (probes).
    pub const DEFAULT: Buckets = Buckets(4);

    /// A resolution from its `--buckets` value; an error (one line, the valid choices) for any other.
    pub fn new(n: u32) -> Result<Buckets, String> {
        if CHOICES.contains(&n) {
            Ok(Buckets(n))
        } else {
            Err(format!(
                "buckets {n} is not a valid resolution: give 1, 2, 4 or 8 buckets per doubling (1 = the layout of \
                 older agents)"
            ))
        }
    }

    /// The `--buckets` value.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The next coarser resolution (8 -> 4 -> 2 -> 1), `None` at 1.
    pub fn coarser(self) -> Option<Buckets> {
        (self.0 > 1).then_some(Buckets(self.0 / 2))
    }

    fn index(self) -> usize {
        self.0.trailing_zeros() as usize
    }

    /// Upper bounds (seconds) of `roundtrip_rtt_seconds` (and the schedule lag): [`BUCKET_BOUNDS`] with
    /// `N - 1` bounds at 10^(-5 + k / 4N) between two neighbours; `+Inf` follows.
    pub fn probe_bounds(self) -> &'static [f64] {
        static B: [OnceLock<Vec<f64>>; 4] = [const { OnceLock::new() }; 4];
        B[self.index()].get_or_init(|| {
            let n = self.0 as usize;
            let mut v = Vec::with_capacity((BUCKET_BOUNDS.len() - 1) * n + 1);
            for (j, &b) in BUCKET_BOUNDS.iter().enumerate() {
                v.push(b);
                if j + 1 < BUCKET_BOUNDS.len() {
                    for i in 1..n {
                        let k = (j * n + i) as f64;
                        v.push(10f64.powf(-5.0 + k / (4 * n) as f64));
                    }
                }
            }
            v
        })
    }

    /// The `le` label values of [`Buckets::probe_bounds`], `+Inf` last.
    pub fn probe_le(self) -> &'static [String] {
        static L: [OnceLock<Vec<String>>; 4] = [const { OnceLock::new() }; 4];
        L[self.index()].get_or_init(|| le_of(self.probe_bounds()))
    }

    /// Upper bounds (seconds) of the `--watch` histograms: 25 us * 2^(k / N) up to 13.1 s, the N = 1 ones
    /// copied from [`WATCH_BUCKETS`]; `+Inf` follows.
    pub fn watch_bounds(self) -> &'static [f64] {
        static B: [OnceLock<Vec<f64>>; 4] = [const { OnceLock::new() }; 4];
        B[self.index()].get_or_init(|| {
            let n = self.0 as usize;
            let mut v = Vec::with_capacity((WATCH_BUCKETS.len() - 1) * n + 1);
            for (j, &b) in WATCH_BUCKETS.iter().enumerate() {
                v.push(b);
                if j + 1 < WATCH_BUCKETS.len() {
                    for i in 1..n {
                        v.push(b * 2f64.powf(i as f64 / n as f64));
                    }
                }
            }
            v
        })
    }

    /// The `le` label values of [`Buckets::watch_bounds`], `+Inf` last.
    pub fn watch_le(self) -> &'static [String] {
        static L: [OnceLock<Vec<String>>; 4] = [const { OnceLock::new() }; 4];
        L[self.index()].get_or_init(|| le_of(self.watch_bounds()))
    }

    /// The resolution whose probe histogram has `len` counts (bounds + `+Inf`); the coarsest for any other.
    pub fn of_probe_len(len: usize) -> Buckets {
        CHOICES
            .iter()
            .map(|&n| Buckets(n))
            .find(|b| b.probe_bounds().len() + 1 == len)
            .unwrap_or(Buckets::ONE)
    }

    /// The resolution whose watch histogram has `len` counts (bounds + `+Inf`); the coarsest for any other.
    pub fn of_watch_len(len: usize) -> Buckets {
        CHOICES
            .iter()
            .map(|&n| Buckets(n))
            .find(|b| b.watch_bounds().len() + 1 == len)
            .unwrap_or(Buckets::ONE)
    }

    /// Series exported per target: the histogram (bounds + `+Inf` + `_sum` + `_count`), probes total (1),
    /// errors per reason (8), up (1). 38 at 1, 110 at 4.
    pub fn series_per_target(self) -> usize {
        self.probe_bounds().len() + 3 + 1 + ErrorReason::ALL.len() + 1
    }

    /// Series of one watch histogram: its buckets, `+Inf`, `_sum` and `_count`.
    pub fn watch_hist_series(self) -> usize {
        self.watch_bounds().len() + 3
    }

    /// The finest resolution at most `self` whose `targets` fit in `max_series`, `None` when not even one
    /// bucket per step fits (the agent then refuses, as it did before `--buckets`).
    pub fn fit(self, targets: usize, max_series: usize) -> Option<Buckets> {
        let mut b = self;
        loop {
            if targets.saturating_mul(b.series_per_target()) <= max_series {
                return Some(b);
            }
            b = b.coarser()?;
        }
    }

    /// The worst relative error of `histogram_quantile` inside one bucket of the watch histograms (ratio
    /// `2^(1/N)`) and of the probe histogram (ratio `10^(1/4N)`): `(above, below)`, e.g. `(1.0, 0.5)` for
    /// the watch histograms at N = 1.
    pub fn worst_error(self) -> [(f64, f64); 2] {
        let n = f64::from(self.0);
        [2f64.powf(1.0 / n), 10f64.powf(1.0 / (4.0 * n))].map(|r| (r - 1.0, 1.0 - 1.0 / r))
    }
}

fn le_of(bounds: &[f64]) -> Vec<String> {
    bounds
        .iter()
        .map(|b| super::metrics::fmt_float(*b))
        .chain(std::iter::once("+Inf".to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> impl Iterator<Item = Buckets> {
        CHOICES.iter().map(|&n| Buckets::new(n).unwrap())
    }

    #[test]
    fn only_powers_of_two_up_to_8_are_valid() {
        for n in [0, 3, 5, 6, 7, 9, 16] {
            let e = Buckets::new(n).unwrap_err();
            assert!(e.contains("1, 2, 4 or 8") && !e.contains('\n'), "{e}");
        }
        assert_eq!(Buckets::default().get(), 4);
    }

    #[test]
    fn one_is_the_old_layout() {
        assert_eq!(Buckets::ONE.probe_bounds(), &BUCKET_BOUNDS[..]);
        assert_eq!(Buckets::ONE.watch_bounds(), &WATCH_BUCKETS[..]);
        assert_eq!(Buckets::ONE.series_per_target(), 38);
        assert_eq!(Buckets::ONE.watch_hist_series(), HIST_SERIES);
    }

    #[test]
    fn old_bounds_are_a_subset_with_the_same_text() {
        for b in all() {
            let n = b.get() as usize;
            let (p, w) = (b.probe_le(), b.watch_le());
            let old = Buckets::ONE.probe_le();
            for (j, le) in old[..old.len() - 1].iter().enumerate() {
                assert_eq!(&p[j * n], le, "probe bound {j} at {n}");
                assert_eq!(b.probe_bounds()[j * n], BUCKET_BOUNDS[j]);
            }
            let old = Buckets::ONE.watch_le();
            for (j, le) in old[..old.len() - 1].iter().enumerate() {
                assert_eq!(&w[j * n], le, "watch bound {j} at {n}");
            }
            assert_eq!(p.last().map(String::as_str), Some("+Inf"));
            assert_eq!(w.last().map(String::as_str), Some("+Inf"));
            // Every label is distinct, so no two bounds print alike.
            let mut sorted = p.to_vec();
            sorted.dedup();
            assert_eq!(sorted.len(), p.len());
        }
    }

    #[test]
    fn bounds_rise_evenly_n_per_step() {
        for b in all() {
            let n = f64::from(b.get());
            for (bounds, step) in [
                (b.probe_bounds(), 10f64.powf(0.25)),
                (b.watch_bounds(), 2.0),
            ] {
                let r = step.powf(1.0 / n);
                for w in bounds.windows(2) {
                    assert!(w[1] > w[0]);
                    assert!((w[1] / w[0] / r - 1.0).abs() < 1e-9, "{} {}", w[0], w[1]);
                }
            }
            assert_eq!(b.probe_bounds().len(), 24 * b.get() as usize + 1);
            assert_eq!(b.watch_bounds().len(), 19 * b.get() as usize + 1);
            // Per doubling: exactly N in the watch histograms, at least N in the probe one.
            let doublings = (10.0f64 / 1e-5).log2();
            assert!((b.probe_bounds().len() - 1) as f64 / doublings >= n);
            assert_eq!(Buckets::of_probe_len(b.probe_bounds().len() + 1), b);
            assert_eq!(Buckets::of_watch_len(b.watch_bounds().len() + 1), b);
        }
        assert!(Buckets::DEFAULT.get() >= 4);
    }

    #[test]
    fn the_budget_adapts_down_before_it_refuses() {
        let d = Buckets::DEFAULT;
        assert_eq!(d.series_per_target(), 110);
        assert_eq!(d.fit(100, 50_000), Some(d));
        // 1,000 targets: 110,000 at 4, 62,000 at 2, 38,000 at 1.
        assert_eq!(d.fit(1000, 50_000), Some(Buckets::ONE));
        assert_eq!(Buckets(8).fit(400, 50_000), Some(Buckets(4)));
        assert_eq!(Buckets(8).fit(700, 50_000), Some(Buckets(2)));
        // What refused before still refuses; what started before still starts.
        assert_eq!(d.fit(1316, 50_000), None);
        assert_eq!(d.fit(1315, 50_000), Some(Buckets::ONE));
        assert_eq!(Buckets::ONE.fit(10, 50_000), Some(Buckets::ONE));
    }

    #[test]
    fn worst_errors() {
        let e = |n| Buckets::new(n).unwrap().worst_error();
        let near = |a: f64, b: f64| (a - b).abs() < 1e-3;
        let [w, p] = e(1);
        assert!(near(w.0, 1.0) && near(w.1, 0.5));
        assert!(near(p.0, 0.778) && near(p.1, 0.438));
        let [w, _] = e(4);
        assert!(near(w.0, 0.189) && near(w.1, 0.159));
    }
}
