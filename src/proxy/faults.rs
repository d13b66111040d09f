//! Faults of a TCP connection: reset (RST) or stall after a time or a number of bytes, a clean close after a
//! number of bytes, and a slow close. The plan is made when the connection is accepted (from the impairment
//! in force then), with times counted from the accept; when the faults of the impairment are changed later
//! (control API), open connections are planned again, with times and byte counts starting at the change.
//! Bytes are counted over both directions together, and a byte limit is exact: the chunk that crosses it is
//! cut at the limit.

use super::impairment::{Impairment, Trigger};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// The fault settings of an impairment, to tell whether a change concerns faults at all.
fn fault_fields(imp: &Impairment) -> (Option<Trigger>, Option<Trigger>, Option<u64>, u64) {
    (
        imp.reset_after,
        imp.stall_after,
        imp.close_after_bytes,
        imp.slow_close_ns,
    )
}

#[derive(Debug)]
struct Plan {
    /// Total bytes (as counted by `relayed`) at which a fault fires, lowest first.
    byte_limits: Vec<(u64, FaultKind)>,
    /// When time-triggered faults fire, earliest first (removed once fired).
    timers: Vec<(Instant, FaultKind)>,
    slow_close: Duration,
    fields: (Option<Trigger>, Option<Trigger>, Option<u64>, u64),
}

impl Plan {
    fn new(imp: &Impairment, start: Instant, bytes_before: u64) -> Plan {
        let mut byte_limits = Vec::new();
        let mut timers = Vec::new();
        for (t, kind) in [
            (imp.reset_after, FaultKind::Reset),
            (imp.stall_after, FaultKind::Stall),
        ] {
            match t {
                Some(Trigger::Bytes(n)) => byte_limits.push((bytes_before.saturating_add(n), kind)),
                Some(Trigger::AfterNs(ns)) => timers.push((start + Duration::from_nanos(ns), kind)),
                None => {}
            }
        }
        if let Some(n) = imp.close_after_bytes {
            byte_limits.push((bytes_before.saturating_add(n), FaultKind::Close));
        }
        byte_limits.sort_by_key(|&(n, _)| n);
        timers.sort_by_key(|&(t, _)| t);
        Plan {
            byte_limits,
            timers,
            slow_close: Duration::from_nanos(imp.slow_close_ns),
            fields: fault_fields(imp),
        }
    }
}

/// The faults planned for one connection.
#[derive(Debug)]
pub struct FaultPlan {
    plan: RwLock<Plan>,
    relayed: AtomicU64,
}

impl FaultPlan {
    /// The plan for a connection accepted at `started` under `imp`.
    pub fn from_impairment(imp: &Impairment, started: Instant) -> Self {
        FaultPlan {
            plan: RwLock::new(Plan::new(imp, started, 0)),
            relayed: AtomicU64::new(0),
        }
    }

    /// Plans again for an impairment set at `now` while the connection is open: byte limits count from the
    /// bytes relayed so far, times from `now`. Returns false (and keeps the plan, timers running) when `imp`
    /// has the same fault settings as the plan.
    pub fn replan(&self, imp: &Impairment, now: Instant) -> bool {
        let mut p = self.plan.write().unwrap_or_else(|e| e.into_inner());
        if p.fields == fault_fields(imp) {
            return false;
        }
        *p = Plan::new(imp, now, self.relayed.load(Ordering::SeqCst));
        true
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Plan> {
        self.plan.read().unwrap_or_else(|e| e.into_inner())
    }

    /// True when no byte-triggered fault is planned (the reader can skip the accounting).
    pub fn no_byte_limits(&self) -> bool {
        self.read().byte_limits.is_empty()
    }

    /// How long to hold each FIN.
    pub fn slow_close(&self) -> Duration {
        self.read().slow_close
    }

    /// The next time-triggered fault: when, and which.
    pub fn next_timer(&self) -> Option<(Instant, FaultKind)> {
        self.read().timers.first().copied()
    }

    /// Takes the next time-triggered fault if it is due at `now`.
    pub fn take_due_timer(&self, now: Instant) -> Option<FaultKind> {
        let mut p = self.plan.write().unwrap_or_else(|e| e.into_inner());
        match p.timers.first() {
            Some(&(at, kind)) if at <= now => {
                p.timers.remove(0);
                Some(kind)
            }
            _ => None,
        }
    }

    /// At most how many of the next bytes may be read before a byte limit is reached (`usize::MAX`: no limit).
    pub fn room(&self) -> usize {
        let done = self.relayed.load(Ordering::Relaxed);
        self.read()
            .byte_limits
            .first()
            .map_or(usize::MAX, |&(n, _)| {
                n.saturating_sub(done).min(usize::MAX as u64) as usize
            })
    }

    /// Accounts `n` bytes just read; returns how many of them may be relayed and the fault that fires, if the
    /// limit was reached (the two directions may race: the limit stays exact because each takes its share
    /// with one atomic add).
    pub fn account(&self, n: usize) -> (usize, Option<FaultKind>) {
        let p = self.read();
        let before = self.relayed.fetch_add(n as u64, Ordering::SeqCst);
        let Some(&(limit, kind)) = p.byte_limits.first() else {
            return (n, None);
        };
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
        let t0 = Instant::now();
        let p = FaultPlan::from_impairment(&imp, t0);
        assert_eq!(
            p.next_timer(),
            Some((t0 + Duration::from_nanos(5_000), FaultKind::Stall))
        );
        assert_eq!(p.room(), 300);
        assert_eq!(p.account(200), (200, None));
        assert_eq!(p.room(), 100);
        assert_eq!(p.account(200), (100, Some(FaultKind::Close)));
        assert_eq!(p.account(50), (0, Some(FaultKind::Close)));
    }

    #[test]
    fn replan_counts_from_the_change_and_ignores_other_changes() {
        let t0 = Instant::now();
        let p = FaultPlan::from_impairment(&Impairment::default(), t0);
        assert!(p.no_byte_limits());
        assert_eq!(p.account(500), (500, None));
        // A change of the delay only: nothing to plan.
        let delayed = Impairment {
            delay_ns: 1_000_000,
            ..Default::default()
        };
        assert!(!p.replan(&delayed, t0));
        let later = t0 + Duration::from_secs(1);
        let faulty = Impairment {
            close_after_bytes: Some(100),
            reset_after: Some(Trigger::AfterNs(2_000)),
            ..Default::default()
        };
        assert!(p.replan(&faulty, later));
        assert_eq!(p.room(), 100);
        assert_eq!(
            p.next_timer(),
            Some((later + Duration::from_nanos(2_000), FaultKind::Reset))
        );
        assert_eq!(p.take_due_timer(later), None);
        assert_eq!(
            p.take_due_timer(later + Duration::from_millis(1)),
            Some(FaultKind::Reset)
        );
        assert_eq!(p.next_timer(), None);
        assert_eq!(p.account(150), (100, Some(FaultKind::Close)));
    }
}
