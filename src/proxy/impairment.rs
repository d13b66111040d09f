//! What the emulated path does to the traffic: delay, jitter, rate, window, faults, and (UDP) loss, reordering
//! and duplication. One [`Impairment`] value is shared by every connection and can be replaced while the proxy
//! runs (the control API), without dropping connections.
//!
//! In JSON every duration carries `_ns`, every rate `_bps` (bit/s) and every size `_bytes`. Missing fields take
//! their default (no impairment), so `PUT {"delay_ns": 20000000}` means "20 ms each way and nothing else".

use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::time::Duration;
use thiserror::Error;

/// Largest delay or jitter accepted (one hour): beyond it the emulation makes no sense.
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// Shape of the per-chunk (TCP) or per-datagram (UDP) jitter around the delay.
///
/// Clipping, documented because it changes the distribution: a sampled delay below zero is raised to zero, and a
/// chunk is never released before the chunk ahead of it in the same direction (data keeps its order), so a
/// short delay directly behind a long one is lengthened to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    /// delay + U(-jitter, +jitter).
    #[default]
    Uniform,
    /// delay + N(0, jitter^2), i.e. jitter is the standard deviation; clipped to +-4 jitter.
    Normal,
    /// delay + a Pareto-distributed extra (shape 3, mean = jitter): never below the delay, heavy tail,
    /// clipped at 20 x jitter.
    Pareto,
}

/// Which directions get the delay, jitter and rate limit. `Up` is client to server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Both directions (the default: a round trip pays the delay twice).
    #[default]
    Both,
    /// Client to server only.
    Up,
    /// Server to client only.
    Down,
}

/// One direction of a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Client to upstream server.
    Up,
    /// Upstream server to client.
    Down,
}

impl Way {
    /// The other direction.
    pub fn reverse(self) -> Way {
        match self {
            Way::Up => Way::Down,
            Way::Down => Way::Up,
        }
    }
    /// "up" or "down".
    pub fn name(self) -> &'static str {
        match self {
            Way::Up => "up",
            Way::Down => "down",
        }
    }
}

/// When a fault fires: after the connection has lived this long, or after this many bytes were relayed
/// (both directions together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Connection age.
    AfterNs(u64),
    /// Bytes relayed, both directions together.
    Bytes(u64),
}

/// Gilbert-Elliott two-state loss model (bursty loss): in the good state a datagram is lost with
/// `loss_good`, in the bad state with `loss_bad`; after each datagram the state flips good->bad with `p` and
/// bad->good with `r`. Mean burst length is 1/r, long-run share of bad state p/(p+r).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliott {
    /// Probability good -> bad per datagram.
    pub p: f64,
    /// Probability bad -> good per datagram.
    pub r: f64,
    /// Loss probability in the good state (often 0).
    #[serde(default)]
    pub loss_good: f64,
    /// Loss probability in the bad state (often 1).
    #[serde(default = "one")]
    pub loss_bad: f64,
}

fn one() -> f64 {
    1.0
}

/// Everything the emulated path does. Defaults: nothing (a plain relay).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Impairment {
    /// One-way delay added to each impaired direction.
    pub delay_ns: u64,
    /// Jitter around the delay (see [`JitterDist`] for its meaning and the clipping).
    pub jitter_ns: u64,
    /// Jitter distribution.
    pub jitter_dist: JitterDist,
    /// Directions that get delay, jitter and rate.
    pub direction: Direction,
    /// Rate limit per connection and direction, bit/s.
    pub rate_bps: Option<u64>,
    /// Rate limit for all connections together, per direction, bit/s.
    pub rate_total_bps: Option<u64>,
    /// TCP window emulation: at most this many bytes unacknowledged per direction in the emulated path.
    pub window_bytes: Option<u64>,
    /// TCP fault: reset both sides (RST) after this.
    pub reset_after: Option<Trigger>,
    /// TCP fault: stop relaying (both directions, connections stay open) after this.
    pub stall_after: Option<Trigger>,
    /// TCP fault: close both sides cleanly (FIN) after this many bytes.
    pub close_after_bytes: Option<u64>,
    /// TCP fault: hold each close (FIN) this long before passing it on.
    pub slow_close_ns: u64,
    /// UDP: random loss probability per datagram (0..=1).
    pub loss: f64,
    /// UDP: bursty loss (applied in addition to `loss`).
    pub gilbert_elliott: Option<GilbertElliott>,
    /// UDP: probability that a datagram is held back by `reorder_delay_ns` (so later ones overtake it).
    pub reorder: f64,
    /// UDP: how long a reordered datagram is held back beyond its delay (default 10 ms when 0).
    pub reorder_delay_ns: u64,
    /// UDP: probability that a datagram is sent twice.
    pub duplicate: f64,
}

/// An impossible impairment, with what to change.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("invalid impairment: {0}")]
pub struct ImpairmentError(pub String);

/// The buffer the proxy allows per direction when no `--window` is given: it bounds memory when a receiver is
/// slower than a sender, like a large TCP window would.
pub const DEFAULT_PATH_LIMIT: u64 = 32 << 20;

/// Largest emulated TCP window, bytes: what one connection may hold per direction in the emulated path.
pub const MAX_WINDOW: u64 = 1 << 30;

/// The range of `--window` and of `window_bytes` over the control API (one definition for both).
pub const WINDOW_BYTES: RangeInclusive<u64> = 1..=MAX_WINDOW;

/// `value` when it lies in `range`, else the one-line refusal naming the setting `what` (a flag such as
/// `--window`, or an API field such as `window_bytes`) and the range. The command line's value parsers and the
/// control API's `validate` both call it with the same range constant, so a value one refuses the other
/// refuses too.
pub fn check_bytes(what: &str, value: u64, range: &RangeInclusive<u64>) -> Result<u64, String> {
    if range.contains(&value) {
        return Ok(value);
    }
    Err(format!(
        "{what} {value} bytes is out of range: give {} to {}",
        crate::units::fmt_bytes_exact(*range.start()),
        crate::units::fmt_bytes_exact(*range.end())
    ))
}

/// Default hold-back of a reordered UDP datagram.
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_millis(10);

impl Impairment {
    /// Whether the next datagram is lost: by the independent `loss`, or by the Gilbert-Elliott chain, whose
    /// state (`bad`) then takes its step.
    pub(crate) fn lost(&self, rng: &mut crate::proxy::delay::Rng, bad: &mut bool) -> bool {
        let mut lost = rng.chance(self.loss);
        if let Some(ge) = &self.gilbert_elliott {
            let p_loss = if *bad { ge.loss_bad } else { ge.loss_good };
            lost |= rng.chance(p_loss);
            *bad = if *bad {
                !rng.chance(ge.r)
            } else {
                rng.chance(ge.p)
            };
        }
        lost
    }

    /// Checks the values; returns a note (not an error) when jitter would take the delay below zero and is
    /// therefore clipped.
    pub fn validate(&self) -> Result<Option<String>, ImpairmentError> {
        let err = |s: String| Err(ImpairmentError(s));
        let max = MAX_DELAY.as_nanos() as u64;
        if self.delay_ns > max || self.jitter_ns > max || self.slow_close_ns > max {
            return err("delay, jitter and slow close must be at most 1h".into());
        }
        for (name, p) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
        ] {
            if !(0.0..=1.0).contains(&p) || p.is_nan() {
                return err(format!(
                    "{name} {p} is not a probability between 0 and 1 (e.g. 0.01 or 1%)"
                ));
            }
        }
        if let Some(g) = &self.gilbert_elliott {
            for (name, p) in [
                ("p", g.p),
                ("r", g.r),
                ("loss_good", g.loss_good),
                ("loss_bad", g.loss_bad),
            ] {
                if !(0.0..=1.0).contains(&p) || p.is_nan() {
                    return err(format!(
                        "Gilbert-Elliott {name} {p} is not a probability between 0 and 1"
                    ));
                }
            }
        }
        for (name, r) in [("rate", self.rate_bps), ("rate total", self.rate_total_bps)] {
            if r == Some(0) {
                return err(format!(
                    "{name} must be more than 0 bit/s (leave it out for no limit)"
                ));
            }
        }
        if self.window_bytes == Some(0) {
            return err(
                "window must be at least 1 byte (leave it out for no window emulation)".into(),
            );
        }
        if let Some(w) = self.window_bytes {
            check_bytes("window_bytes", w, &WINDOW_BYTES).map_err(ImpairmentError)?;
        }
        if self.reorder_delay_ns > max {
            return err("reorder delay must be at most 1h".into());
        }
        if let Some(Trigger::Bytes(0)) | Some(Trigger::AfterNs(0)) = self.reset_after {
            return err("reset-after must be more than 0".into());
        }
        if self.close_after_bytes == Some(0) {
            return err("close-after must be more than 0 bytes".into());
        }
        if self.jitter_ns > self.delay_ns && self.jitter_dist != JitterDist::Pareto {
            return Ok(Some(format!(
                "note: {} jitter of {} around a delay of {} would go below zero; such samples are clipped to \
                 zero delay (so the mean delay is a little more than the delay) and data still keeps its order",
                match self.jitter_dist {
                    JitterDist::Normal => "normal",
                    _ => "uniform",
                },
                crate::units::fmt_nanos(self.jitter_ns as f64),
                crate::units::fmt_nanos(self.delay_ns as f64),
            )));
        }
        Ok(None)
    }

    /// Delay and jitter applied in direction `way`.
    pub fn one_way(&self, way: Way) -> (Duration, Duration) {
        let on = matches!(
            (self.direction, way),
            (Direction::Both, _) | (Direction::Up, Way::Up) | (Direction::Down, Way::Down)
        );
        if on {
            (
                Duration::from_nanos(self.delay_ns),
                Duration::from_nanos(self.jitter_ns),
            )
        } else {
            (Duration::ZERO, Duration::ZERO)
        }
    }

    /// Per-connection and total rate limits in direction `way`.
    pub fn rates(&self, way: Way) -> (Option<u64>, Option<u64>) {
        let on = matches!(
            (self.direction, way),
            (Direction::Both, _) | (Direction::Up, Way::Up) | (Direction::Down, Way::Down)
        );
        if on {
            (self.rate_bps, self.rate_total_bps)
        } else {
            (None, None)
        }
    }

    /// True when direction `way` of a TCP connection can be relayed straight through: no delay, jitter or
    /// rate there, and no window emulation that needs its acknowledgements timed.
    pub fn is_pass_through(&self, way: Way) -> bool {
        let (d, j) = self.one_way(way);
        let (r, t) = self.rates(way);
        let (rd, _) = self.one_way(way.reverse());
        d.is_zero()
            && j.is_zero()
            && r.is_none()
            && t.is_none()
            && (self.window_bytes.is_none() || rd.is_zero())
    }

    /// Hold-back of a reordered datagram.
    pub fn reorder_delay(&self) -> Duration {
        if self.reorder_delay_ns == 0 {
            DEFAULT_REORDER_DELAY
        } else {
            Duration::from_nanos(self.reorder_delay_ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_defaults() {
        let i: Impairment =
            serde_json::from_str(r#"{"delay_ns": 20000000, "reset_after": {"bytes": 10}}"#)
                .unwrap();
        assert_eq!(i.delay_ns, 20_000_000);
        assert_eq!(i.reset_after, Some(Trigger::Bytes(10)));
        assert_eq!(i.direction, Direction::Both);
        let back: Impairment = serde_json::from_slice(&serde_json::to_vec(&i).unwrap()).unwrap();
        assert_eq!(back, i);
        assert!(serde_json::from_str::<Impairment>(r#"{"delay": 5}"#).is_err());
    }

    #[test]
    fn validation() {
        let mut i = Impairment {
            loss: 1.5,
            ..Default::default()
        };
        assert!(i.validate().is_err());
        i.loss = 0.1;
        assert_eq!(i.validate(), Ok(None));
        i.delay_ns = 1_000_000;
        i.jitter_ns = 2_000_000;
        assert!(i.validate().unwrap().unwrap().contains("clipped"));
        i.jitter_dist = JitterDist::Pareto;
        assert_eq!(i.validate(), Ok(None));
        i.rate_bps = Some(0);
        assert!(i.validate().is_err());
    }

    #[test]
    fn directions() {
        let i = Impairment {
            delay_ns: 5,
            direction: Direction::Up,
            ..Default::default()
        };
        assert_eq!(i.one_way(Way::Up).0, Duration::from_nanos(5));
        assert_eq!(i.one_way(Way::Down).0, Duration::ZERO);
        assert!(!i.is_pass_through(Way::Up));
        assert!(i.is_pass_through(Way::Down));
    }
}
