//! Per-operation latency statistics of matched transactions: count, errors, the summary of
//! [`crate::stats::LatencyHistogram`], the N slowest requests with their timestamps, per-interval rows and
//! optional per-connection rows.
#![forbid(unsafe_code)]

use super::driver::ConnInfo;
use super::{Anomaly, AnomalyKind, Proto, Sink, Status, Transaction};
use crate::stats::{LatencyHistogram, PairedHistogram, Summary};
use crate::units::nanos;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::time::Duration;

/// One of the slowest requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slow {
    /// Time to the response's last byte (request end to the packet that completes the response), nanoseconds
    /// (`latency_ns` in documents of older versions).
    #[serde(alias = "latency_ns")]
    pub last_byte_ns: u64,
    /// Time to the response's first byte (request end to the first packet of the response), nanoseconds
    /// (absent, read as 0, in documents of older versions).
    #[serde(default)]
    pub first_byte_ns: u64,
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Time of the request's first byte, Unix seconds.
    pub request_unix_s: f64,
    /// Client address.
    pub client: SocketAddr,
    /// Server address.
    pub server: SocketAddr,
    /// XID / message ID, when the protocol has one.
    pub xid: Option<u32>,
    /// TCP sequence number of the request's first byte.
    pub request_seq: Option<u32>,
    /// The response reported an error.
    pub error: bool,
}

impl Eq for Slow {}

impl PartialOrd for Slow {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Slow {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.last_byte_ns
            .cmp(&other.last_byte_ns)
            .then_with(|| other.request_unix_s.total_cmp(&self.request_unix_s))
    }
}

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

/// One row per interval (by the time the response completed). `mean_ns` .. `max_ns` are times to the
/// response's last byte, `first_byte_*` to its first byte.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IntervalRow {
    /// Start of the interval, seconds since the first transaction's request.
    pub start_s: f64,
    /// Transactions completed in the interval.
    pub count: u64,
    /// Mean time to the last byte.
    pub mean_ns: f64,
    /// Median time to the last byte.
    pub p50_ns: u64,
    /// 99th percentile of the time to the last byte.
    pub p99_ns: u64,
    /// Largest time to the last byte.
    pub max_ns: u64,
    /// Mean time to the first byte.
    pub first_byte_mean_ns: f64,
    /// Median time to the first byte.
    pub first_byte_p50_ns: u64,
    /// 99th percentile of the time to the first byte.
    pub first_byte_p99_ns: u64,
    /// Largest time to the first byte.
    pub first_byte_max_ns: u64,
}

/// Statistics of one connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnStats {
    /// The connection.
    pub conn: ConnInfo,
    /// Transactions.
    pub count: u64,
    /// Mean time to the response's last byte.
    pub mean_ns: f64,
    /// Largest time to the last byte.
    pub max_ns: u64,
    /// Mean time to the response's first byte.
    pub first_byte_mean_ns: f64,
    /// Largest time to the first byte.
    pub first_byte_max_ns: u64,
    /// Errors.
    pub errors: u64,
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

/// Rows of the live intervals that ended: each interval's start and its per-operation rows.
pub type LiveRows = Vec<(Duration, Vec<OpInterval>)>;

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

#[cfg(test)]
mod live_tests {
    use super::*;
    use crate::capture::rpc::Carrier;

    /// A pseudo-random sequence (xorshift), the same every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Live interval rows as comparable text.
    fn text(rows: &LiveRows) -> String {
        serde_json::to_string(rows).unwrap()
    }

    /// Counting each request in its live interval's histogram only (the totals get the interval's buckets
    /// when it ends) reports what counting it in both the totals and a separate [`LiveIntervals`] did: the
    /// same rows at the same moments and the same totals, with responses whose first and last bytes differ
    /// (past the point where the totals give the first byte buckets of their own), quiet intervals and ticks.
    #[test]
    fn live_rows_and_totals_equal_recording_twice() {
        let config = StatsConfig {
            top: 5,
            interval: Some(Duration::from_millis(700)),
            by_conn: true,
            live_interval: None,
        };
        let mut both = RpcStats::new(config);
        let mut old_rows = LiveIntervals::new(Duration::from_secs(1));
        let mut once = RpcStats::new(StatsConfig {
            live_interval: Some(Duration::from_secs(1)),
            ..config
        });
        let (mut got, mut want) = (String::new(), String::new());
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let ops: [(Proto, &'static str); 3] = [
            (Proto::Pgsql, "SELECT"),
            (Proto::Pgsql, "INSERT"),
            (Proto::Redis, "GET"),
        ];
        let mut now = Duration::from_secs(1_700_000_000);
        for i in 0..20_000u64 {
            let r = rng.next();
            now += Duration::from_micros(r % 700);
            if i % 5000 == 4999 {
                now += Duration::from_secs(3); // quiet intervals
            }
            let (proto, op) = ops[(r >> 20) as usize % 3];
            let conn = ConnInfo {
                id: r % 4,
                client: "10.0.0.1:40000".parse().unwrap(),
                server: "10.0.0.2:5432".parse().unwrap(),
                proto,
                carrier: Carrier::Tcp,
            };
            let last = Duration::from_nanos(1 + (r >> 30) % 5_000_000);
            // SELECT's responses mostly span packets; the others' rarely.
            let differ = if op == "SELECT" {
                !r.is_multiple_of(3)
            } else {
                r.is_multiple_of(50)
            };
            let first = if differ { last / 3 } else { last };
            let t = Transaction {
                conn: conn.id,
                op: op.into(),
                request_ts: now.saturating_sub(last + Duration::from_micros(5)),
                request_end_ts: now.saturating_sub(last),
                response_ts: now.saturating_sub(last) + first,
                response_end_ts: now,
                request_seq: Some(i as u32),
                xid: None,
                content: None,
                bytes: None,
                error: None,
                status: if r.is_multiple_of(97) {
                    Status::Error
                } else {
                    Status::Ok
                },
            };
            both.add(&conn, &t);
            want += &text(&old_rows.close_before(t.response_end_ts));
            old_rows.add(&conn, &t);
            once.add(&conn, &t);
            got += &text(&once.take_live_rows());
            if i.is_multiple_of(777) {
                let tick = now + Duration::from_millis(r % 1500);
                want += &text(&old_rows.close_before(tick));
                got += &text(&once.live_close_before(tick));
            }
        }
        want += &text(&old_rows.close_all());
        got += &text(&once.live_close_all());
        assert_eq!(got, want);
        let (a, b) = (both.finish(), once.finish());
        assert_eq!(a.ops.iter().map(|o| o.last_byte.count).sum::<u64>(), 20_000);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
    }
}

#[cfg(test)]
mod nanos_tests {
    use super::*;

    /// `byte_times` gives `nanos` of the first and last byte times, on either side of the year 2514 and with
    /// responses before their requests.
    #[test]
    fn byte_times_are_nanos_of_the_durations() {
        let at = [
            Duration::ZERO,
            Duration::new(1, 999_999_999),
            Duration::new(1_700_000_000, 5),
            Duration::new((1 << 34) - 1, 999_999_999),
            Duration::new(1 << 34, 0),
            Duration::new(18_446_744_073, 709_551_615),
            Duration::MAX,
        ];
        for &a in &at {
            for &b in &at {
                for &c in &at {
                    let t = Transaction {
                        conn: 0,
                        op: "X".into(),
                        request_ts: a,
                        request_end_ts: a,
                        response_ts: b,
                        response_end_ts: c,
                        request_seq: None,
                        xid: None,
                        content: None,
                        bytes: None,
                        error: None,
                        status: Status::Ok,
                    };
                    assert_eq!(
                        byte_times(&t),
                        (nanos(t.first_byte()), nanos(t.last_byte())),
                        "{a:?} {b:?} {c:?}"
                    );
                }
            }
        }
    }

    /// The slowest requests kept are the `top` slowest (the earliest first among equal times), whatever the
    /// order they come in, and none when `top` is 0.
    #[test]
    fn slowest_are_the_top_slowest() {
        let conn = ConnInfo {
            id: 1,
            client: "10.0.0.1:40000".parse().unwrap(),
            server: "10.0.0.2:5432".parse().unwrap(),
            proto: Proto::Pgsql,
            carrier: crate::capture::rpc::Carrier::Tcp,
        };
        for top in [0usize, 1, 3, 10] {
            let mut stats = RpcStats::new(StatsConfig {
                top,
                ..StatsConfig::default()
            });
            let mut x = 0x2545_f491_4f6c_dd1d_u64;
            let mut all = Vec::new();
            for i in 0..2000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let last = match i {
                    7 | 8 => u64::MAX / 4,
                    _ => x % 1000,
                };
                let req = Duration::from_secs(1_700_000_000) + Duration::from_millis(i);
                let t = Transaction {
                    conn: 1,
                    op: "SELECT".into(),
                    request_ts: req,
                    request_end_ts: req,
                    response_ts: req + Duration::from_nanos(last),
                    response_end_ts: req + Duration::from_nanos(last),
                    request_seq: Some(i as u32),
                    xid: None,
                    content: None,
                    bytes: None,
                    error: None,
                    status: Status::Ok,
                };
                all.push((last, Reverse(i)));
                stats.add(&conn, &t);
            }
            all.sort_unstable_by(|a, b| b.cmp(a));
            let want: Vec<(u64, Option<u32>)> = all
                .iter()
                .take(top)
                .map(|&(l, Reverse(i))| (l, Some(i as u32)))
                .collect();
            let got: Vec<(u64, Option<u32>)> = stats
                .finish()
                .slowest
                .iter()
                .map(|s| (s.last_byte_ns, s.request_seq))
                .collect();
            assert_eq!(got, want, "top {top}");
        }
    }

    #[test]
    fn nanos_is_as_nanos_saturated() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::new(1, 999_999_999),
            Duration::new(18_446_744_073, 709_551_615),
            Duration::new(18_446_744_073, 709_551_616),
            Duration::new(18_446_744_074, 0),
            Duration::MAX,
        ] {
            assert_eq!(
                nanos(d),
                u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                "{d:?}"
            );
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

/// One operation's row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpRow {
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Responses reporting an error.
    pub errors: u64,
    /// Errors by the protocol's name for them (SMB2: the NT status), when the protocol names them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors_by_status: BTreeMap<String, u64>,
    /// Payload bytes the operation moved in all (SMB2 READ: response DataLength; WRITE: request Length),
    /// when the protocol says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Time to the response's first byte: request end to the first packet of the response (the server plus
    /// one network round trip; tshark's `rpc,srt` SRT). Absent in documents of older versions: read as an
    /// empty summary (count 0).
    #[serde(default)]
    pub first_byte: Summary,
    /// Time to the response's last byte: request end to the packet that completes the response (adds the
    /// transfer of the response). `latency` in documents of older versions.
    #[serde(alias = "latency")]
    pub last_byte: Summary,
}

impl OpRow {
    /// The time to the first byte; None in documents of older versions, which lack it.
    pub fn first_byte_known(&self) -> Option<&Summary> {
        (self.first_byte.count > 0).then_some(&self.first_byte)
    }
}

/// Count of one kind of anomaly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AnomalyRow {
    /// Protocol.
    pub proto: Proto,
    /// What.
    pub kind: String,
    /// How many.
    pub count: u64,
}

/// Everything `capture rpc` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpcReport {
    /// Per operation.
    pub ops: Vec<OpRow>,
    /// The slowest requests, slowest first.
    #[serde(default)]
    pub slowest: Vec<Slow>,
    /// Unpaired or unparseable traffic.
    #[serde(default)]
    pub anomalies: Vec<AnomalyRow>,
    /// Per-interval rows (when asked).
    #[serde(default)]
    pub intervals: Vec<IntervalRow>,
    /// Length of the interval rows, seconds (None: not asked; absent in documents of older versions).
    #[serde(default)]
    pub interval_s: Option<f64>,
    /// Per-connection rows (when asked).
    #[serde(default)]
    pub connections: Vec<ConnStats>,
    /// Transactions in all.
    pub transactions: u64,
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
    end: Duration,
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
    fn close_folding(
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

    fn close_all_folding(
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
    fn add_ns(&mut self, conn: &ConnInfo, t: &Transaction, ns: u64) {
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
