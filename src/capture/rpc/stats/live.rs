//! Per-operation rows of a live capture's wall-clock intervals ([`LiveIntervals`]), handed out as each
//! interval ends.

use super::same_op;
use crate::capture::rpc::driver::ConnInfo;
use crate::capture::rpc::{Proto, Status, Transaction};
use crate::stats::{LatencyHistogram, Summary};
use crate::units::nanos;
use serde::Serialize;
use std::borrow::Cow;
use std::time::Duration;

/// Rows of the live intervals that ended: each interval's start and its per-operation rows.
pub type LiveRows = Vec<(Duration, Vec<OpInterval>)>;

/// One operation's row of one live interval (`capture rpc --live`, as `redis-cli --latency-history`).
#[derive(Debug, Clone, Serialize)]
pub struct OpInterval {
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Requests completed in the interval.
    pub count: u64,
    /// Responses that reported an error.
    pub errors: u64,
    /// Summary of the times to the response's last byte.
    pub last_byte: Summary,
}

/// Per-interval, per-operation rows of a live capture, by the time the response completed: an interval's rows
/// are handed out when a later response or the clock passes its end.
#[derive(Debug)]
pub struct LiveIntervals {
    interval: Duration,
    /// Start of the current interval (since the Unix epoch).
    start: Option<Duration>,
    /// End of the current interval (`start` + `interval`; zero before the first), checked per transaction.
    pub(super) end: Duration,
    ops: Vec<(Proto, Cow<'static, str>, LatencyHistogram, u64)>,
    /// The operation of the last transaction (an index into `ops`).
    last_op: usize,
}

impl LiveIntervals {
    /// Intervals of `interval`.
    pub fn new(interval: Duration) -> Self {
        LiveIntervals {
            interval: interval.max(Duration::from_millis(1)),
            start: None,
            end: Duration::ZERO,
            ops: Vec::new(),
            last_op: 0,
        }
    }

    /// The current interval starts at `start`.
    fn set_start(&mut self, start: Duration) {
        self.start = Some(start);
        self.end = start + self.interval;
    }

    fn floor(&self, t: Duration) -> Duration {
        let iv = self.interval.as_nanos();
        Duration::from_nanos((t.as_nanos() / iv * iv) as u64)
    }

    /// Closes the intervals that ended before `now`: (start, rows) for each, quiet ones with no rows.
    pub fn close_before(&mut self, now: Duration) -> Vec<(Duration, Vec<OpInterval>)> {
        self.close_folding(now, &mut |_, _, _| {})
    }

    /// [`close_before`](Self::close_before), showing `fold` each ended row's histogram first.
    #[inline]
    pub(super) fn close_folding(
        &mut self,
        now: Duration,
        fold: &mut dyn FnMut(Proto, &str, &LatencyHistogram),
    ) -> LiveRows {
        if self.end > now {
            Vec::new()
        } else {
            self.close_ended(now, fold)
        }
    }

    fn close_ended(
        &mut self,
        now: Duration,
        fold: &mut dyn FnMut(Proto, &str, &LatencyHistogram),
    ) -> LiveRows {
        let mut out = Vec::new();
        let Some(mut start) = self.start else {
            self.set_start(self.floor(now));
            return out;
        };
        while start + self.interval <= now {
            let rows = self
                .ops
                .drain(..)
                .map(|(proto, op, h, errors)| {
                    fold(proto, &op, &h);
                    OpInterval {
                        proto,
                        op: op.into_owned(),
                        count: h.len(),
                        errors,
                        last_byte: h.summary(),
                    }
                })
                .collect();
            out.push((start, rows));
            start += self.interval;
            if out.len() > 10_000 {
                start = self.floor(now);
                break;
            }
        }
        self.set_start(start);
        out
    }

    /// The end of the capture: the current interval's rows, when it has any.
    pub fn close_all(&mut self) -> Vec<(Duration, Vec<OpInterval>)> {
        self.close_all_folding(&mut |_, _, _| {})
    }

    pub(super) fn close_all_folding(
        &mut self,
        fold: &mut dyn FnMut(Proto, &str, &LatencyHistogram),
    ) -> LiveRows {
        match self.start {
            Some(s) if !self.ops.is_empty() => self.close_ended(s + self.interval, fold),
            _ => Vec::new(),
        }
    }

    /// Adds one transaction (after [`close_before`](Self::close_before) its response time).
    pub fn add(&mut self, conn: &ConnInfo, t: &Transaction) {
        self.add_ns(conn, t, nanos(t.last_byte()));
    }

    /// [`add`](Self::add) given the time to the last byte (`ns`) already.
    #[inline(always)]
    pub(super) fn add_ns(&mut self, conn: &ConnInfo, t: &Transaction, ns: u64) {
        if self.start.is_some()
            && let Some(o) = self.ops.get_mut(self.last_op)
            && o.0 == conn.proto
            && same_op(&o.1, &t.op)
        {
            o.2.record_ns(ns);
            o.3 += u64::from(t.status == Status::Error);
        } else {
            self.add_other(conn, t, ns);
        }
    }

    /// [`add_ns`](Self::add_ns) for the first transaction of an interval or of another operation than the
    /// last one.
    #[cold]
    #[inline(never)]
    fn add_other(&mut self, conn: &ConnInfo, t: &Transaction, ns: u64) {
        if self.start.is_none() {
            self.set_start(self.floor(t.response_end_ts));
        }
        let hit = |o: &(Proto, Cow<'static, str>, LatencyHistogram, u64)| {
            o.0 == conn.proto && same_op(&o.1, &t.op)
        };
        let i = if let Some(i) = self.ops.iter().position(hit) {
            i
        } else {
            self.ops
                .push((conn.proto, t.op.clone(), LatencyHistogram::new(), 0));
            self.ops.len() - 1
        };
        self.last_op = i;
        self.ops[i].2.record_ns(ns);
        self.ops[i].3 += u64::from(t.status == Status::Error);
    }
}
