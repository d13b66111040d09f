//! Value-to-pixel scales and the numbers on them: 1, 2, 5 x 10^n ticks, linear and logarithmic, and tick
//! labels in units [`crate::units`] can parse back.

use super::{Axis, ScaleKind, Unit};

/// Maps values to pixels along one axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Linear or log.
    pub kind: ScaleKind,
    /// Lowest value (at `px0`).
    pub lo: f64,
    /// Highest value (at `px1`).
    pub hi: f64,
    /// Pixel of `lo`.
    pub px0: f64,
    /// Pixel of `hi`.
    pub px1: f64,
}

impl Scale {
    /// A scale over data bounds [lo, hi] widened to the nearest tick values (1, 2, 5 x 10^n).
    pub fn fitted(axis: &Axis, lo: f64, hi: f64, px0: f64, px1: f64) -> Scale {
        let (lo, hi) = match axis.scale {
            ScaleKind::Linear => {
                let (lo, hi) = if hi > lo {
                    (lo, hi)
                } else {
                    let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
                    (lo - pad, hi + pad)
                };
                let step = nice_step((hi - lo) / 6.0);
                let nlo = if axis.min.is_some() {
                    lo
                } else {
                    (lo / step).floor() * step
                };
                let nhi = if axis.max.is_some() {
                    hi
                } else {
                    (hi / step).ceil() * step
                };
                (nlo, nhi)
            }
            ScaleKind::Log => {
                let lo = lo.max(f64::MIN_POSITIVE);
                let (lo, hi) = if hi > lo {
                    (lo, hi)
                } else {
                    (lo / 2.0, hi * 2.0)
                };
                let nlo = if axis.min.is_some() {
                    lo
                } else {
                    nice_below(lo)
                };
                let nhi = if axis.max.is_some() {
                    hi
                } else {
                    nice_above(hi)
                };
                (nlo, nhi)
            }
        };
        Scale {
            kind: axis.scale,
            lo,
            hi,
            px0,
            px1,
        }
    }

    /// True when the value lies on the axis (and, on a log axis, is positive).
    pub fn shows(&self, v: f64) -> bool {
        v.is_finite() && (self.kind == ScaleKind::Linear || v > 0.0)
    }

    fn t(&self, v: f64) -> f64 {
        match self.kind {
            ScaleKind::Linear => v,
            ScaleKind::Log => v.max(f64::MIN_POSITIVE).log10(),
        }
    }

    /// The pixel of a value.
    pub fn map(&self, v: f64) -> f64 {
        let (a, b) = (self.t(self.lo), self.t(self.hi));
        let f = if b > a {
            (self.t(v) - a) / (b - a)
        } else {
            0.5
        };
        self.px0 + f * (self.px1 - self.px0)
    }

    /// The value at a pixel (the inverse of [`Scale::map`]).
    pub fn invert(&self, px: f64) -> f64 {
        let (a, b) = (self.t(self.lo), self.t(self.hi));
        let f = (px - self.px0) / (self.px1 - self.px0);
        let t = a + f * (b - a);
        match self.kind {
            ScaleKind::Linear => t,
            ScaleKind::Log => 10f64.powf(t),
        }
    }

    /// Where bars and histograms start: zero on a linear axis, the bottom on a log axis.
    pub fn base(&self) -> f64 {
        match self.kind {
            ScaleKind::Linear => 0.0f64.clamp(self.lo, self.hi),
            ScaleKind::Log => self.lo,
        }
    }

    /// Tick values for this scale.
    pub fn ticks(&self) -> Vec<f64> {
        match self.kind {
            ScaleKind::Linear => linear_ticks(self.lo, self.hi, 6),
            ScaleKind::Log => log_ticks(self.lo, self.hi),
        }
    }
}

/// The smallest step of the form 1, 2 or 5 x 10^n that is at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= raw * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// Ticks at multiples of a 1/2/5 x 10^n step within [lo, hi], about `target` of them.
pub fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return vec![lo];
    }
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last)
        .map(|k| {
            let v = k as f64 * step;
            // Round away the float noise of k * step so labels read 0.3, not 0.30000000000000004.
            let digits = (-step.log10().floor()).max(0.0) as i32 + 1;
            let f = 10f64.powi(digits);
            (v * f).round() / f
        })
        .collect()
}

/// Ticks at 1, 2, 5 x 10^n within [lo, hi] on a log axis; only decades when the axis spans more than three.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return vec![];
    }
    let decades = hi.log10() - lo.log10();
    let mults: &[f64] = if decades > 3.5 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let mut out = Vec::new();
    let mut e = lo.log10().floor() as i32 - 1;
    let end = hi.log10().ceil() as i32 + 1;
    // Thin decade ticks on very wide axes so labels do not collide.
    let every = if decades > 9.0 { 2 } else { 1 };
    while e <= end {
        if mults.len() > 1 || e.rem_euclid(every) == 0 {
            for &m in mults {
                let v = m * 10f64.powi(e);
                if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        e += 1;
    }
    out
}

/// The largest 1, 2 or 5 x 10^n not above `v`.
pub fn nice_below(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    for m in [5.0, 2.0, 1.0] {
        if m * p <= v * (1.0 + 1e-9) {
            return m * p;
        }
    }
    p
}

/// The smallest 1, 2 or 5 x 10^n not below `v`.
pub fn nice_above(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// Formats a number with at most `max_decimals`, without trailing zeros.
fn trim(v: f64, max_decimals: usize) -> String {
    let s = format!("{v:.max_decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The label of a tick value in a unit, e.g. `250us`, `1.5ms`, `99.9%`, `2k`.
pub fn label(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Nanos => duration_label(v),
        Unit::Seconds => duration_label(v * 1e9),
        Unit::Count | Unit::Plain => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{}G", trim(v / 1e9, 3))
            } else if a >= 1e6 {
                format!("{}M", trim(v / 1e6, 3))
            } else if a >= 1e4 {
                format!("{}k", trim(v / 1e3, 3))
            } else {
                trim(v, 4)
            }
        }
        Unit::Bytes => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{}GB", trim(v / 1e9, 3))
            } else if a >= 1e6 {
                format!("{}MB", trim(v / 1e6, 3))
            } else if a >= 1e3 {
                format!("{}kB", trim(v / 1e3, 3))
            } else {
                format!("{}B", trim(v, 2))
            }
        }
        Unit::BitsPerSecond => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{}Gbit/s", trim(v / 1e9, 3))
            } else if a >= 1e6 {
                format!("{}Mbit/s", trim(v / 1e6, 3))
            } else if a >= 1e3 {
                format!("{}kbit/s", trim(v / 1e3, 3))
            } else {
                format!("{}bit/s", trim(v, 2))
            }
        }
        Unit::Percent => format!("{}%", trim(v, 4)),
        Unit::TailPercentile => {
            if v <= 1.0 {
                "0%".to_string()
            } else {
                format!("{}%", trim(100.0 * (1.0 - 1.0 / v), 6))
            }
        }
    }
}

fn duration_label(ns: f64) -> String {
    let a = ns.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a < 1e3 {
        format!("{}ns", trim(ns, 2))
    } else if a < 1e6 {
        format!("{}us", trim(ns / 1e3, 3))
    } else if a < 1e9 {
        format!("{}ms", trim(ns / 1e6, 3))
    } else {
        format!("{}s", trim(ns / 1e9, 3))
    }
}
