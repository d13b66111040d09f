//! tcpstat's view of a capture: per interval, packets, bytes, packets/s, bit/s and the packet size
//! distribution (min / mean / max / stddev of the on-wire length), optionally split by direction.
#![forbid(unsafe_code)]

use super::flows::Dir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Direction label of a stats row.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum StatsDir {
    /// Every packet (no `--by-direction`).
    #[default]
    All,
    /// TCP/UDP from the client side (see [`super::flows::guess_dir`]).
    ClientToServer,
    /// TCP/UDP from the server side.
    ServerToClient,
    /// Packets without ports (ICMP, ARP, non-IP, ...).
    Other,
}

impl StatsDir {
    /// The name in documents (`all`, `client_to_server`, `server_to_client`, `other`).
    pub fn name(self) -> &'static str {
        match self {
            StatsDir::All => "all",
            StatsDir::ClientToServer => "client_to_server",
            StatsDir::ServerToClient => "server_to_client",
            StatsDir::Other => "other",
        }
    }
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            StatsDir::All => "all",
            StatsDir::ClientToServer => "c->s",
            StatsDir::ServerToClient => "s->c",
            StatsDir::Other => "other",
        }
    }
    /// From a guessed direction.
    pub fn from_dir(d: Option<Dir>) -> Self {
        match d {
            Some(Dir::ClientToServer) => StatsDir::ClientToServer,
            Some(Dir::ServerToClient) => StatsDir::ServerToClient,
            None => StatsDir::Other,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Acc {
    packets: u64,
    bytes: u64,
    min: u32,
    max: u32,
    sumsq: f64,
}

impl Default for Acc {
    fn default() -> Self {
        Acc {
            packets: 0,
            bytes: 0,
            min: u32::MAX,
            max: 0,
            sumsq: 0.0,
        }
    }
}

impl Acc {
    #[inline]
    fn add(&mut self, len: u32) {
        self.packets += 1;
        self.bytes += len as u64;
        self.min = self.min.min(len);
        self.max = self.max.max(len);
        let l = len as f64;
        self.sumsq += l * l;
    }
    fn merge(&mut self, o: &Acc) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sumsq += o.sumsq;
    }
}

/// One interval (and direction) of `capture stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatsRow {
    /// Start of the interval, seconds after the first packet.
    pub start_s: f64,
    /// Direction.
    pub direction: StatsDir,
    /// Packets.
    pub packets: u64,
    /// On-wire bytes.
    pub bytes: u64,
    /// Packets per second over the interval.
    pub packets_per_s: f64,
    /// Bits per second over the interval.
    pub bits_per_s: f64,
    /// Smallest packet (on-wire bytes).
    pub size_min: u32,
    /// Mean packet size.
    pub size_mean: f64,
    /// Largest packet.
    pub size_max: u32,
    /// Standard deviation of the packet size (population, as tcpstat).
    pub size_stddev: f64,
}

/// Accumulates packets into intervals.
#[derive(Debug)]
pub struct StatsEngine {
    interval_ns: i64,
    origin: Option<i64>,
    cur_key: (i64, StatsDir),
    cur: Acc,
    done: BTreeMap<(i64, StatsDir), Acc>,
    by_direction: bool,
    first_ts: i64,
    last_ts: i64,
    /// Time range of the current interval, so most packets need no division.
    cur_start: i64,
    cur_end: i64,
    /// Live: intervals before this index were handed out by [`StatsEngine::completed`].
    emitted: i64,
}

impl StatsEngine {
    /// Intervals of `interval` (more than zero); `by_direction` splits every interval by [`StatsDir`].
    pub fn new(interval: Duration, by_direction: bool) -> Self {
        StatsEngine {
            interval_ns: i64::try_from(interval.as_nanos())
                .unwrap_or(i64::MAX)
                .max(1),
            origin: None,
            cur_key: (0, StatsDir::All),
            cur: Acc::default(),
            done: BTreeMap::new(),
            by_direction,
            first_ts: i64::MAX,
            last_ts: i64::MIN,
            cur_start: i64::MAX,
            cur_end: i64::MIN,
            emitted: 0,
        }
    }

    /// Live: rows start when the capture starts (`ts_ns`), as tshark's live intervals do, so quiet seconds
    /// before the first packet are rows too; a file's rows start at its first packet (tshark's rule for files).
    pub fn set_origin(&mut self, ts_ns: i64) {
        self.origin = Some(ts_ns);
    }

    /// Start of the first interval, Unix ns (when known).
    pub fn origin_ns(&self) -> Option<i64> {
        self.origin
    }

    /// Live: the rows of the intervals that ended before `before_ns` and were not handed out yet (quiet
    /// intervals as zero rows). [`finish`](Self::finish) still returns every row.
    pub fn completed(&mut self, before_ns: i64) -> Vec<StatsRow> {
        let Some(origin) = self.origin else {
            return Vec::new();
        };
        let upto = (before_ns.saturating_sub(origin)).div_euclid(self.interval_ns);
        if upto <= self.emitted {
            return Vec::new();
        }
        self.flush();
        let secs = self.interval_ns as f64 / 1e9;
        let mut rows = Vec::new();
        for idx in self.emitted..upto {
            let before = rows.len();
            for (&(_, dir), a) in self
                .done
                .range((idx, StatsDir::All)..=(idx, StatsDir::Other))
            {
                rows.push(self.make_row(idx, dir, a, secs));
            }
            if rows.len() == before {
                let dir = if self.by_direction {
                    StatsDir::ClientToServer
                } else {
                    StatsDir::All
                };
                rows.push(self.make_row(idx, dir, &Acc::default(), secs));
            }
        }
        self.emitted = upto;
        rows
    }

    fn make_row(&self, idx: i64, dir: StatsDir, a: &Acc, secs: f64) -> StatsRow {
        let n = a.packets.max(1) as f64;
        let mean = a.bytes as f64 / n;
        let var = (a.sumsq / n - mean * mean).max(0.0);
        StatsRow {
            start_s: idx as f64 * self.interval_ns as f64 / 1e9,
            direction: dir,
            packets: a.packets,
            bytes: a.bytes,
            packets_per_s: a.packets as f64 / secs,
            bits_per_s: a.bytes as f64 * 8.0 / secs,
            size_min: if a.packets > 0 { a.min } else { 0 },
            size_mean: if a.packets > 0 { mean } else { 0.0 },
            size_max: a.max,
            size_stddev: if a.packets > 0 { var.sqrt() } else { 0.0 },
        }
    }

    /// Fanout: moves the packets counted so far into `master` (counters add; `self` keeps counting from zero,
    /// its first and last times stay), so several threads' engines make one set of rows.
    pub fn drain_into(&mut self, master: &mut StatsEngine) {
        self.flush();
        for ((idx, dir), a) in std::mem::take(&mut self.done) {
            // As in `add`: an interval already handed out counts in the first one not handed out yet.
            let idx = if master.emitted > 0 {
                idx.max(master.emitted)
            } else {
                idx
            };
            master.done.entry((idx, dir)).or_default().merge(&a);
        }
        master.first_ts = master.first_ts.min(self.first_ts);
        master.last_ts = master.last_ts.max(self.last_ts);
        if master.origin.is_none() {
            master.origin = self.origin;
        }
    }

    /// Whether rows are split by direction (the caller then has to pass a direction).
    pub fn by_direction(&self) -> bool {
        self.by_direction
    }

    /// Adds one packet of `wire_len` bytes seen at `ts_ns`.
    #[inline]
    pub fn add(&mut self, ts_ns: i64, wire_len: u32, dir: StatsDir) {
        let dir = if self.by_direction {
            dir
        } else {
            StatsDir::All
        };
        if ts_ns >= self.cur_start && ts_ns < self.cur_end && dir == self.cur_key.1 {
            // Same interval and direction as the previous packet: the common case.
            self.first_ts = self.first_ts.min(ts_ns);
            self.last_ts = self.last_ts.max(ts_ns);
            self.cur.add(wire_len);
            return;
        }
        // Intervals start at the first packet (tshark's io,stat rule), not at wall-clock boundaries.
        let origin = *self.origin.get_or_insert(ts_ns);
        self.first_ts = self.first_ts.min(ts_ns);
        self.last_ts = self.last_ts.max(ts_ns);
        let mut idx = (ts_ns.saturating_sub(origin)).div_euclid(self.interval_ns);
        if self.emitted > 0 && idx < self.emitted {
            // Live: a packet of an interval whose row was already handed out (it reached the ring later than
            // the read mark said) counts in the first interval not handed out yet, so that the rows handed
            // out add up to the totals.
            idx = self.emitted;
        }
        let key = (
            idx,
            if self.by_direction {
                dir
            } else {
                StatsDir::All
            },
        );
        if key != self.cur_key {
            self.flush();
            self.cur_key = key;
            if let Some(a) = self.done.remove(&key) {
                self.cur = a;
            }
        }
        self.cur.add(wire_len);
    }

    fn flush(&mut self) {
        if self.cur.packets > 0 {
            let a = std::mem::take(&mut self.cur);
            self.done.entry(self.cur_key).or_default().merge(&a);
        }
    }

    /// Time of the first packet (Unix ns), when any.
    pub fn first_ts_ns(&self) -> Option<i64> {
        (self.first_ts != i64::MAX).then_some(self.first_ts)
    }

    /// Time of the last packet (Unix ns), when any.
    pub fn last_ts_ns(&self) -> Option<i64> {
        (self.last_ts != i64::MIN).then_some(self.last_ts)
    }

    /// The rows, in time order (empty intervals included, as tcpstat prints them), and the whole-capture total.
    pub fn finish(mut self) -> (Vec<StatsRow>, StatsRow) {
        self.flush();
        let secs = self.interval_ns as f64 / 1e9;
        // The time a row really covers: the whole interval, except for the last one, which ends at the last
        // packet (a capture shorter than the interval is one row covering first..last packet).
        let (origin, last) = (self.origin.unwrap_or(0), self.last_ts);
        let covered = |idx: i64| -> f64 {
            let start = origin.saturating_add(idx.saturating_mul(self.interval_ns));
            let end = start.saturating_add(self.interval_ns).min(last);
            if end > start {
                (end - start) as f64 / 1e9
            } else {
                // One instant (a single packet at the row's start): no span to divide by; the interval.
                secs
            }
        };
        let row = |idx: i64, dir: StatsDir, a: &Acc, secs: f64| self.make_row(idx, dir, a, secs);
        let mut rows = Vec::new();
        let mut total = Acc::default();
        let mut prev: Option<i64> = None;
        let dirs: &[StatsDir] = if self.by_direction {
            &[
                StatsDir::ClientToServer,
                StatsDir::ServerToClient,
                StatsDir::Other,
            ]
        } else {
            &[StatsDir::All]
        };
        // Empty intervals between busy ones are printed as zero rows (up to a sane number).
        for (&(idx, dir), a) in &self.done {
            if let Some(p) = prev
                && idx > p + 1
                && idx - p < 100_000
            {
                for gap in p + 1..idx {
                    rows.push(row(gap, dirs[0], &Acc::default(), secs));
                }
            }
            prev = Some(idx);
            total.merge(a);
            rows.push(row(idx, dir, a, covered(idx)));
        }
        let span = match (self.first_ts_ns(), self.last_ts_ns()) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e9,
            _ => secs,
        };
        let mut t = row(0, StatsDir::All, &total, span);
        t.start_s = 0.0;
        (rows, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_sizes_and_gaps() {
        let mut e = StatsEngine::new(Duration::from_secs(1), false);
        let base = 1_700_000_000_500_000_000i64;
        e.add(base, 100, StatsDir::All);
        e.add(base + 100_000_000, 300, StatsDir::All);
        e.add(base + 2_600_000_000, 60, StatsDir::All);
        let (rows, total) = e.finish();
        // Rows start at the first packet (x.5 s), not at the wall-clock second: 0.0, 1.0 (empty), 2.0.
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(rows[0].packets, 2);
        assert_eq!(rows[0].bytes, 400);
        assert_eq!((rows[0].size_min, rows[0].size_max), (100, 300));
        assert_eq!(rows[0].size_mean, 200.0);
        assert_eq!(rows[0].size_stddev, 100.0);
        assert_eq!(rows[0].bits_per_s, 3200.0);
        assert_eq!(rows[1].packets, 0);
        assert_eq!(rows[2].start_s, 2.0);
        // The last row covers 2.0 s .. the last packet at 2.6 s: its rate is over 0.6 s, not a full second.
        assert!(
            (rows[2].packets_per_s - 1.0 / 0.6).abs() < 1e-9,
            "{:?}",
            rows[2]
        );
        assert!(
            (rows[2].bits_per_s - 480.0 / 0.6).abs() < 1e-6,
            "{:?}",
            rows[2]
        );
        assert_eq!(total.packets, 3);
        assert_eq!(total.bytes, 460);
    }

    #[test]
    fn by_direction_splits_and_out_of_order_times_merge() {
        let mut e = StatsEngine::new(Duration::from_millis(100), true);
        e.add(1_000_000_000, 10, StatsDir::ClientToServer);
        e.add(1_000_000_001, 20, StatsDir::ServerToClient);
        e.add(1_150_000_000, 30, StatsDir::ClientToServer);
        e.add(1_000_000_002, 40, StatsDir::ClientToServer); // earlier interval again
        let (rows, total) = e.finish();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].direction, rows[0].packets, rows[0].bytes),
            (StatsDir::ClientToServer, 2, 50)
        );
        assert_eq!(rows[1].direction, StatsDir::ServerToClient);
        assert_eq!(total.packets, 4);
    }
}
