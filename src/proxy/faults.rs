//! Faults of a TCP connection: reset (RST) or stall after a time or a number of bytes, a clean close after a
//! number of bytes, and a slow close. The plan is fixed when the connection is accepted (from the impairment
//! in force then); bytes are counted over both directions together, and a byte limit is exact: the chunk
//! that crosses it is cut at the limit.

use super::impairment::{Impairment, Trigger};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Both sides get a RST.
    Reset,
    /// Nothing more is relayed; connections stay open until a side closes.
    Stall,
    /// Both sides get a clean close (FIN) once the data before the limit is delivered.
    Close,
}

/// The faults planned for one connection.
#[derive(Debug)]
pub struct FaultPlan {
    byte_limits: Vec<(u64, FaultKind)>,
    /// Time-triggered faults, earliest first.
    pub timers: Vec<(Duration, FaultKind)>,
    /// How long to hold each FIN.
    pub slow_close: Duration,
    relayed: AtomicU64,
}

impl FaultPlan {
    /// The plan for a connection accepted under `imp`.
    pub fn from_impairment(imp: &Impairment) -> Self {
        let mut byte_limits = Vec::new();
        let mut timers = Vec::new();
        for (t, kind) in [
            (imp.reset_after, FaultKind::Reset),
            (imp.stall_after, FaultKind::Stall),
        ] {
            match t {
                Some(Trigger::Bytes(n)) => byte_limits.push((n, kind)),
                Some(Trigger::AfterNs(ns)) => timers.push((Duration::from_nanos(ns), kind)),
                None => {}
            }
        }
        if let Some(n) = imp.close_after_bytes {
            byte_limits.push((n, FaultKind::Close));
        }
        byte_limits.sort_by_key(|&(n, _)| n);
        timers.sort_by_key(|&(d, _)| d);
        FaultPlan {
            byte_limits,
            timers,
            slow_close: Duration::from_nanos(imp.slow_close_ns),
            relayed: AtomicU64::new(0),
        }
    }

    /// True when no byte-triggered fault is planned (the reader can skip the accounting).
    pub fn no_byte_limits(&self) -> bool {
        self.byte_limits.is_empty()
    }

    /// At most how many of the next bytes may be read before a byte limit is reached (`usize::MAX`: no limit).
    pub fn room(&self) -> usize {
        let done = self.relayed.load(Ordering::Relaxed);
        self.byte_limits.first().map_or(usize::MAX, |&(n, _)| {
            n.saturating_sub(done).min(usize::MAX as u64) as usize
        })
    }

    /// Accounts `n` bytes just read; returns how many of them may be relayed and the fault that fires, if the
    /// limit was reached (the two directions may race: the limit stays exact because each takes its share
    /// with one atomic add).
    pub fn account(&self, n: usize) -> (usize, Option<FaultKind>) {
        let Some(&(limit, kind)) = self.byte_limits.first() else {
            return (n, None);
        };
        let before = self.relayed.fetch_add(n as u64, Ordering::SeqCst);
        let after = before + n as u64;
        if after < limit {
            (n, None)
        } else {
            (limit.saturating_sub(before) as usize, Some(kind))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_limit_is_exact_and_earliest_wins() {
        let imp = Impairment {
            reset_after: Some(Trigger::Bytes(1000)),
            close_after_bytes: Some(300),
            stall_after: Some(Trigger::AfterNs(5_000)),
            ..Default::default()
        };
        let p = FaultPlan::from_impairment(&imp);
        assert_eq!(
            p.timers,
            vec![(Duration::from_nanos(5_000), FaultKind::Stall)]
        );
        assert_eq!(p.room(), 300);
        assert_eq!(p.account(200), (200, None));
        assert_eq!(p.room(), 100);
        assert_eq!(p.account(200), (100, Some(FaultKind::Close)));
        assert_eq!(p.account(50), (0, Some(FaultKind::Close)));
    }
}
