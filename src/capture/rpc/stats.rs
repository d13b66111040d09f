//! Per-operation latency statistics of matched transactions: count, errors, the summary of
//! [`crate::stats::LatencyHistogram`], the N slowest requests with their timestamps, per-interval rows and
//! optional per-connection rows.
#![forbid(unsafe_code)]

use super::driver::{ConnInfo, Sink};
use super::{Anomaly, AnomalyKind, Proto, Status, Transaction};
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
    anomalies: BTreeMap<(Proto, AnomalyKind), u64>,
    intervals: Vec<IntervalRow>,
    cur: Option<(Duration, PairedHistogram)>,
    origin: Option<Duration>,
    conns: BTreeMap<u64, ConnStats>,
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
            anomalies: BTreeMap::new(),
            intervals: Vec::new(),
            cur: None,
            origin: None,
            conns: BTreeMap::new(),
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
    pub fn add(&mut self, conn: &ConnInfo, t: &Transaction) {
        self.transactions += 1;
        let ns = nanos(t.last_byte());
        let first_ns = nanos(t.first_byte());
        let error = t.status == Status::Error;
        let hit = |o: &OpStats| o.proto == conn.proto && same_op(&o.op, &t.op);
        let idx = if self.ops.get(self.last_op).is_some_and(hit) {
            self.last_op
        } else if let Some(i) = self.ops.iter().position(hit) {
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
        if let Some(live) = &mut self.live {
            // The intervals that ended before this response: their buckets go to the totals.
            let ops = &mut self.ops;
            let rows =
                live.close_folding(t.response_end_ts, &mut |p, op, h| fold_live(ops, p, op, h));
            self.live_rows.extend(rows);
            live.add(conn, t);
            self.ops[idx]
                .times
                .record_ns_without_last_bucket(first_ns, ns);
        } else {
            self.ops[idx].times.record_ns(first_ns, ns);
        }
        let e = &mut self.ops[idx];
        e.errors += error as u64;
        if let (true, Some(name)) = (error, &t.error) {
            *e.error_names.entry(name.to_string()).or_insert(0) += 1;
        }
        if let Some(b) = t.bytes {
            e.bytes = Some(e.bytes.unwrap_or(0).saturating_add(b));
        }
        if self.config.top > 0 {
            let worth = self.slowest.len() < self.config.top
                || self
                    .slowest
                    .peek()
                    .is_some_and(|Reverse(s)| s.last_byte_ns < ns);
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
                    error,
                }));
                if self.slowest.len() > self.config.top {
                    self.slowest.pop();
                }
            }
        }
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
            ops: Vec::new(),
            last_op: 0,
        }
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
        match self.start {
            Some(start) if start + self.interval > now => Vec::new(),
            _ => self.close_ended(now, fold),
        }
    }

    fn close_ended(
        &mut self,
        now: Duration,
        fold: &mut dyn FnMut(Proto, &str, &LatencyHistogram),
    ) -> LiveRows {
        let mut out = Vec::new();
        let Some(mut start) = self.start else {
            self.start = Some(self.floor(now));
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
        self.start = Some(start);
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
        if self.start.is_none() {
            self.start = Some(self.floor(t.response_end_ts));
        }
        let ns = nanos(t.last_byte());
        let hit = |o: &(Proto, Cow<'static, str>, LatencyHistogram, u64)| {
            o.0 == conn.proto && same_op(&o.1, &t.op)
        };
        let i = if self.ops.get(self.last_op).is_some_and(hit) {
            self.last_op
        } else if let Some(i) = self.ops.iter().position(hit) {
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
