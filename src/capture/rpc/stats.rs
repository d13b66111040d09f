//! Per-operation latency statistics of matched transactions: count, errors, the summary of
//! [`crate::stats::LatencyHistogram`], the N slowest requests with their timestamps, per-interval rows and
//! optional per-connection rows.
//!
//! Here: the aggregation ([`RpcStats`], a [`Sink`]) and [`Collect`]. The document it ends in is in `report`,
//! the live capture's per-interval rows in `live`.
#![forbid(unsafe_code)]

mod live;
mod report;

pub use live::{LiveIntervals, LiveRows, OpInterval};
pub use report::{AnomalyRow, ConnStats, IntervalRow, OpRow, RpcReport, Slow};

use super::Sink;
use super::driver::ConnInfo;
use super::{Anomaly, AnomalyKind, Proto, Status, Transaction};
use crate::stats::{LatencyHistogram, PairedHistogram};
use crate::units::nanos;
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

/// Statistics of one operation.
#[derive(Debug, Clone)]
pub struct OpStats {
    /// Protocol.
    pub proto: Proto,
    /// Operation name.
    pub op: Cow<'static, str>,
    /// Times to the response's first byte and to its last byte (mostly the same: recorded as one).
    pub times: PairedHistogram,
    /// Responses that reported an error.
    pub errors: u64,
    /// Errors by the protocol's name for them (SMB2 NT status), for the transactions that carried one.
    pub error_names: BTreeMap<String, u64>,
    /// Payload bytes moved (SMB2 READ/WRITE), None when no transaction said.
    pub bytes: Option<u64>,
}

/// True when two operation names are the same: at once when both are the same static name (the matchers'
/// common names are), else by their text.
#[inline]
fn same_op(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// The times to the response's first and to its last byte of `t`, nanoseconds (as
/// `nanos(t.first_byte())` and `nanos(t.last_byte())`).
#[inline(always)]
fn byte_times(t: &Transaction) -> (u64, u64) {
    // Below 2^34 s (the year 2514) every timestamp is below 2^64 ns: u64 nanoseconds, subtracted saturating
    // at zero, are the differences' nanoseconds, without the Duration arithmetic's carries.
    let (a, b, c) = (t.request_end_ts, t.response_ts, t.response_end_ts);
    if (a.as_secs() | b.as_secs() | c.as_secs()) >> 34 == 0 {
        let ns = |d: Duration| d.as_secs() * 1_000_000_000 + u64::from(d.subsec_nanos());
        let from = ns(a);
        return (ns(b).saturating_sub(from), ns(c).saturating_sub(from));
    }
    byte_times_late(t)
}

/// [`byte_times`] past the year 2514, out of line.
#[cold]
#[inline(never)]
fn byte_times_late(t: &Transaction) -> (u64, u64) {
    (nanos(t.first_byte()), nanos(t.last_byte()))
}

/// The least time to the last byte that may put a transaction among the `top` slowest, given those kept so
/// far: 0 while there is room, one above the fastest kept once full (`u64::MAX` when none can enter, which
/// [`RpcStats::add_slow`] checks again).
fn slow_from(top: usize, slowest: &BinaryHeap<Reverse<Slow>>) -> u64 {
    if top == 0 {
        return u64::MAX;
    }
    match slowest.peek() {
        Some(Reverse(s)) if slowest.len() >= top => s.last_byte_ns.saturating_add(1),
        _ => 0,
    }
}

/// Settings of the aggregation.
#[derive(Debug, Clone, Copy)]
pub struct StatsConfig {
    /// How many slowest requests to keep.
    pub top: usize,
    /// Length of the interval rows (None: no rows).
    pub interval: Option<Duration>,
    /// Keep per-connection rows.
    pub by_conn: bool,
    /// Live capture: per-operation rows of wall-clock intervals of this length ([`LiveIntervals`]), handed
    /// out as they end ([`RpcStats::take_live_rows`]). Each request's time to its last byte is then counted
    /// in its interval's histogram only; the operation's totals get those buckets when the interval ends.
    pub live_interval: Option<Duration>,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            top: 10,
            interval: None,
            by_conn: false,
            live_interval: None,
        }
    }
}

/// Aggregates transactions and anomalies; a [`Sink`] for the driver.
#[derive(Debug)]
pub struct RpcStats {
    config: StatsConfig,
    /// Few distinct operations: a vector searched from the last hit beats hashing the name.
    ops: Vec<OpStats>,
    last_op: usize,
    slowest: BinaryHeap<Reverse<Slow>>,
    /// A transaction whose time to the last byte is below this cannot be among the slowest ([`slow_from`]).
    slow_from: u64,
    anomalies: BTreeMap<(Proto, AnomalyKind), u64>,
    intervals: Vec<IntervalRow>,
    cur: Option<(Duration, PairedHistogram)>,
    origin: Option<Duration>,
    conns: BTreeMap<u64, ConnStats>,
    /// Live intervals, interval rows or connection rows are asked for.
    live_or_rows: bool,
    transactions: u64,
    /// The live intervals ([`StatsConfig::live_interval`]).
    live: Option<LiveIntervals>,
    /// Live interval rows ended and not taken yet.
    live_rows: LiveRows,
}

/// Adds the buckets of an ended live interval's operation to that operation's totals.
fn fold_live(ops: &mut [OpStats], proto: Proto, op: &str, h: &LatencyHistogram) {
    if let Some(o) = ops
        .iter_mut()
        .find(|o| o.proto == proto && same_op(&o.op, op))
    {
        o.times.add_last_buckets(h);
    }
}

impl RpcStats {
    /// An empty aggregation.
    pub fn new(config: StatsConfig) -> Self {
        RpcStats {
            config,
            ops: Vec::new(),
            last_op: 0,
            slowest: BinaryHeap::new(),
            slow_from: slow_from(config.top, &BinaryHeap::new()),
            anomalies: BTreeMap::new(),
            intervals: Vec::new(),
            cur: None,
            origin: None,
            conns: BTreeMap::new(),
            live_or_rows: config.live_interval.is_some()
                || config.interval.is_some()
                || config.by_conn,
            transactions: 0,
            live: config.live_interval.map(LiveIntervals::new),
            live_rows: Vec::new(),
        }
    }

    /// The live interval rows that ended since the last call (at the transactions' response ends).
    pub fn take_live_rows(&mut self) -> LiveRows {
        std::mem::take(&mut self.live_rows)
    }

    /// True when live interval rows wait to be taken.
    #[inline]
    pub fn has_live_rows(&self) -> bool {
        !self.live_rows.is_empty()
    }

    /// Live capture: the clock reached `now`; the intervals that ended before it close, with their rows
    /// (none without [`StatsConfig::live_interval`]).
    pub fn live_close_before(&mut self, now: Duration) -> LiveRows {
        let Some(live) = &mut self.live else {
            return Vec::new();
        };
        let ops = &mut self.ops;
        live.close_folding(now, &mut |p, op, h| fold_live(ops, p, op, h))
    }

    /// The end of a live capture: the current interval's rows, when it has any. Call before
    /// [`finish`](Self::finish), which reports the totals that include the interval's requests.
    pub fn live_close_all(&mut self) -> LiveRows {
        let Some(live) = &mut self.live else {
            return Vec::new();
        };
        let ops = &mut self.ops;
        live.close_all_folding(&mut |p, op, h| fold_live(ops, p, op, h))
    }

    /// Adds one transaction.
    #[inline(always)]
    pub fn add(&mut self, conn: &ConnInfo, t: &Transaction) {
        self.transactions += 1;
        let (first_ns, ns) = byte_times(t);
        // The common case costs a few comparisons: the same operation as the last transaction, no live
        // intervals, no error or byte count, not among the slowest, no interval or connection rows.
        if !self.live_or_rows
            && let Some(o) = self.ops.get_mut(self.last_op)
            && o.proto == conn.proto
            && same_op(&o.op, &t.op)
        {
            o.times.record_ns(first_ns, ns);
        } else {
            self.add_times(conn, t, first_ns, ns);
        }
        if t.status == Status::Error || t.bytes.is_some() {
            self.add_error_bytes(t);
        }
        if ns >= self.slow_from {
            self.add_slow(conn, t, first_ns, ns);
        }
    }

    /// [`add`](Self::add) past its common case: finds (or adds) the operation, counts the times in the
    /// totals or the live intervals, and in the interval and connection rows.
    #[inline(never)]
    fn add_times(&mut self, conn: &ConnInfo, t: &Transaction, first_ns: u64, ns: u64) {
        let idx = match self.ops.get(self.last_op) {
            Some(o) if o.proto == conn.proto && same_op(&o.op, &t.op) => self.last_op,
            _ => self.find_op(conn, t),
        };
        if self.live.is_some() {
            self.add_live(conn, t, idx, first_ns, ns);
        } else {
            self.ops[idx].times.record_ns(first_ns, ns);
        }
        self.add_rows(conn, t, first_ns, ns);
    }

    /// The index of `t`'s operation in `ops` (added when new), remembered as the last one.
    #[cold]
    #[inline(never)]
    fn find_op(&mut self, conn: &ConnInfo, t: &Transaction) -> usize {
        let hit = |o: &OpStats| o.proto == conn.proto && same_op(&o.op, &t.op);
        let idx = if let Some(i) = self.ops.iter().position(hit) {
            i
        } else {
            self.ops.push(OpStats {
                proto: conn.proto,
                op: t.op.clone(),
                times: PairedHistogram::new(),
                errors: 0,
                error_names: BTreeMap::new(),
                bytes: None,
            });
            self.ops.len() - 1
        };
        self.last_op = idx;
        idx
    }

    /// [`add`](Self::add) with live intervals: the intervals that ended before this response give their
    /// buckets to the totals, and the time to the last byte is counted in the current interval's buckets only.
    fn add_live(&mut self, conn: &ConnInfo, t: &Transaction, idx: usize, first_ns: u64, ns: u64) {
        let now = t.response_end_ts;
        if self.live.as_ref().is_some_and(|l| l.end <= now) {
            self.close_live_at(now);
        }
        if let Some(live) = &mut self.live {
            live.add_ns(conn, t, ns);
        }
        self.ops[idx]
            .times
            .record_ns_without_last_bucket(first_ns, ns);
    }

    /// The live intervals that ended before `now` close: their buckets go to the totals, their rows wait to
    /// be taken (out of line: once an interval).
    #[cold]
    #[inline(never)]
    fn close_live_at(&mut self, now: Duration) {
        let Some(live) = &mut self.live else {
            return;
        };
        let ops = &mut self.ops;
        let rows = live.close_folding(now, &mut |p, op, h| fold_live(ops, p, op, h));
        self.live_rows.extend(rows);
    }

    /// Counts an error (by its name when it has one) and the bytes moved, for the last operation.
    #[cold]
    #[inline(never)]
    fn add_error_bytes(&mut self, t: &Transaction) {
        let e = &mut self.ops[self.last_op];
        let error = t.status == Status::Error;
        e.errors += error as u64;
        if let (true, Some(name)) = (error, &t.error) {
            *e.error_names.entry(name.to_string()).or_insert(0) += 1;
        }
        if let Some(b) = t.bytes {
            e.bytes = Some(e.bytes.unwrap_or(0).saturating_add(b));
        }
    }

    /// Keeps `t` when it is among the slowest so far.
    #[inline(never)]
    fn add_slow(&mut self, conn: &ConnInfo, t: &Transaction, first_ns: u64, ns: u64) {
        let top = self.config.top;
        let worth = top > 0
            && (self.slowest.len() < top
                || self
                    .slowest
                    .peek()
                    .is_some_and(|Reverse(s)| s.last_byte_ns < ns));
        if worth {
            self.slowest.push(Reverse(Slow {
                last_byte_ns: ns,
                first_byte_ns: first_ns,
                proto: conn.proto,
                op: t.op.to_string(),
                request_unix_s: t.request_ts.as_secs_f64(),
                client: conn.client,
                server: conn.server,
                xid: t.xid,
                request_seq: t.request_seq,
                error: t.status == Status::Error,
            }));
            if self.slowest.len() > top {
                self.slowest.pop();
            }
        }
        self.slow_from = slow_from(top, &self.slowest);
    }

    /// Counts `t` in its interval row and its connection row, those asked for.
    fn add_rows(&mut self, conn: &ConnInfo, t: &Transaction, first_ns: u64, ns: u64) {
        if let Some(iv) = self.config.interval {
            let origin = *self.origin.get_or_insert(t.request_ts);
            let at = t.response_end_ts.saturating_sub(origin);
            let idx = at.as_nanos() / iv.as_nanos().max(1);
            let start = Duration::from_nanos((idx * iv.as_nanos()) as u64);
            let same = self.cur.as_ref().is_some_and(|(s, _)| *s == start);
            if !same {
                self.close_interval();
                self.cur = Some((start, PairedHistogram::new()));
            }
            if let Some((_, h)) = &mut self.cur {
                h.record_ns(first_ns, ns);
            }
        }
        if self.config.by_conn {
            let error = t.status == Status::Error;
            let c = self.conns.entry(conn.id).or_insert_with(|| ConnStats {
                conn: conn.clone(),
                count: 0,
                mean_ns: 0.0,
                max_ns: 0,
                first_byte_mean_ns: 0.0,
                first_byte_max_ns: 0,
                errors: 0,
            });
            c.count += 1;
            c.mean_ns += (ns as f64 - c.mean_ns) / c.count as f64;
            c.max_ns = c.max_ns.max(ns);
            c.first_byte_mean_ns += (first_ns as f64 - c.first_byte_mean_ns) / c.count as f64;
            c.first_byte_max_ns = c.first_byte_max_ns.max(first_ns);
            c.errors += error as u64;
        }
    }

    fn close_interval(&mut self) {
        if let Some((start, h)) = self.cur.take() {
            let s = h.last().summary();
            let f = h.first().summary();
            self.intervals.push(IntervalRow {
                start_s: start.as_secs_f64(),
                count: s.count,
                mean_ns: s.mean_ns,
                p50_ns: s.p50_ns,
                p99_ns: s.p99_ns,
                max_ns: s.max_ns,
                first_byte_mean_ns: f.mean_ns,
                first_byte_p50_ns: f.p50_ns,
                first_byte_p99_ns: f.p99_ns,
                first_byte_max_ns: f.max_ns,
            });
        }
    }

    /// Counts one anomaly.
    pub fn add_anomaly(&mut self, conn: &ConnInfo, a: &Anomaly) {
        *self.anomalies.entry((conn.proto, a.kind)).or_insert(0) += 1;
    }

    /// Transactions counted.
    pub fn transactions(&self) -> u64 {
        self.transactions
    }

    /// The result: operations sorted by protocol then by count (most first).
    pub fn finish(mut self) -> RpcReport {
        // The live interval still open (its rows were not asked for): its buckets go to the totals.
        self.live_close_all();
        self.close_interval();
        let mut ops: Vec<OpStats> = self.ops;
        ops.sort_by(|a, b| {
            a.proto
                .name()
                .cmp(b.proto.name())
                .then(b.times.len().cmp(&a.times.len()))
                .then(a.op.cmp(&b.op))
        });
        let mut slowest: Vec<Slow> = self.slowest.into_iter().map(|Reverse(s)| s).collect();
        slowest.sort_by(|a, b| b.cmp(a));
        RpcReport {
            ops: ops
                .into_iter()
                .map(|o| OpRow {
                    proto: o.proto,
                    op: o.op.into_owned(),
                    errors: o.errors,
                    errors_by_status: o.error_names,
                    bytes: o.bytes,
                    last_byte: o.times.last().summary(),
                    first_byte: o.times.first().summary(),
                })
                .collect(),
            slowest,
            anomalies: self
                .anomalies
                .into_iter()
                .map(|((proto, kind), count)| AnomalyRow {
                    proto,
                    kind: kind.name().to_string(),
                    count,
                })
                .collect(),
            intervals: self.intervals,
            interval_s: self.config.interval.map(|d| d.as_secs_f64()),
            connections: self.conns.into_values().collect(),
            transactions: self.transactions,
        }
    }
}

impl Sink for RpcStats {
    fn transaction(&mut self, conn: &ConnInfo, t: Transaction) {
        self.add(conn, &t);
    }
    fn transactions(&mut self, conn: &ConnInfo, ts: &mut Vec<Transaction>) {
        // Read in place: none is kept.
        for t in ts.iter() {
            self.add(conn, t);
        }
        ts.clear();
    }
    fn anomaly(&mut self, conn: &ConnInfo, a: Anomaly) {
        self.add_anomaly(conn, &a);
    }
}

/// Collects every transaction with its connection (for `capture match` and tests).
#[derive(Debug, Default)]
pub struct Collect {
    /// Transactions with their connection.
    pub transactions: Vec<(ConnInfo, Transaction)>,
    /// Anomalies with their connection's protocol.
    pub anomalies: Vec<(Proto, Anomaly)>,
}

impl Sink for Collect {
    fn transaction(&mut self, conn: &ConnInfo, t: Transaction) {
        self.transactions.push((conn.clone(), t));
    }
    fn anomaly(&mut self, conn: &ConnInfo, a: Anomaly) {
        self.anomalies.push((conn.proto, a));
    }
}

#[cfg(test)]
mod tests;
