//! `capture stats` over a file, one live reader or a fanout group ([`run_stats`], [`run_stats_on`],
//! [`run_stats_fanout`]).

use crate::capture::decode::Decoded;
use crate::capture::stats::{StatsDir, StatsEngine, StatsRow};
use crate::capture::{
    CaptureError, CaptureInfo, Filter, MAX_STATS_ROWS, Next, Packets, flows, live, merge_infos,
};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// Result of `capture stats`.
#[derive(Debug, Clone, Serialize)]
pub struct StatsResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// Interval length.
    pub interval_s: f64,
    /// First packet (Unix ns).
    pub first_ts_ns: Option<i64>,
    /// Last packet (Unix ns).
    pub last_ts_ns: Option<i64>,
    /// Per-interval rows.
    pub rows: Vec<StatsRow>,
    /// The whole capture (rates over first to last packet).
    pub total: StatsRow,
}

/// Live: an interval's row is handed out once the ring has been read this long past the interval's end (a
/// tick carries the time up to which every packet the kernel had put in the ring was read, see
/// [`live`]'s "Late packets"): the margin covers a packet stamped before that time that was still in the
/// kernel's receive backlog when the counters were read.
pub const LIVE_GRACE_NS: i64 = 50_000_000;

/// `capture stats`: per-interval packet counts, rates and sizes.
pub fn run_stats(
    path: &Path,
    filter: &Filter,
    interval: Duration,
    by_direction: bool,
) -> Result<StatsResult, CaptureError> {
    run_stats_on(
        Packets::open_filtered(path, filter)?,
        filter,
        interval,
        by_direction,
        &mut |_, _| {},
    )
}

/// [`run_stats`] on any packet source. On a live one, `on_rows` gets the rows of each interval once it ended,
/// with the interval's start (Unix ns); files never call it. Rows are bounded in total (files and live alike):
/// past [`MAX_STATS_ROWS`] packets are no longer counted and the run ends in [`CaptureError::TooManyRows`].
pub fn run_stats_on(
    mut pk: Packets,
    filter: &Filter,
    interval: Duration,
    by_direction: bool,
    on_rows: &mut dyn FnMut(&[StatsRow], i64),
) -> Result<StatsResult, CaptureError> {
    let mut eng = StatsEngine::new(interval, by_direction);
    // The rows are bounded in total (MAX_STATS_ROWS): once the span read so far needs more, packets are no
    // longer counted (memory stays what it is) and the rest of the file is only read for its last
    // timestamp, so that the refusal can name the interval that fits.
    let per: u128 = if by_direction { 3 } else { 1 };
    let limit_ns = (interval.as_nanos().max(1) * (MAX_STATS_ROWS as u128 / per - 2))
        .min(i64::MAX as u128) as i64;
    let mut over: Option<(i64, i64)> = None; // (first, latest) once over the cap
    let mut take = |eng: &mut StatsEngine, ts: i64, len: u32, dir: StatsDir| {
        if let Some((_, latest)) = over.as_mut() {
            *latest = (*latest).max(ts);
            return;
        }
        if let Some(first) = eng.first_ts_ns()
            && ts.saturating_sub(first) > limit_ns
        {
            over = Some((first, ts.max(eng.last_ts_ns().unwrap_or(ts))));
            return;
        }
        eng.add(ts, len, dir);
    };
    // A decoded packet's direction, when the rows are by direction.
    let dir_of = |d: Option<&Decoded<'_>>| {
        if by_direction {
            StatsDir::from_dir(d.and_then(flows::guess_dir))
        } else {
            StatsDir::All
        }
    };
    if !pk.is_live() && filter.fields_empty() && !by_direction {
        // Fast path: no decoding at all.
        let mut n = 0u64;
        while let Some(p) = pk.next_raw() {
            take(&mut eng, p.ts_ns, p.orig_len, StatsDir::All);
            n += 1;
        }
        pk.info.packets_matched = n;
    } else if !pk.is_live() {
        while let Some((p, d)) = pk.next_decoded() {
            if !filter.matches(d.as_ref()) {
                continue;
            }
            take(&mut eng, p.ts_ns, p.orig_len, dir_of(d.as_ref()));
            pk.matched();
        }
    } else {
        if let Some(src) = &pk.info.source {
            eng.set_origin(src.started_unix_ns);
        }
        let decode_it = !filter.fields_empty() || by_direction;
        let mut matched = 0u64;
        while let Some(ev) = pk.next_event(decode_it) {
            match ev {
                Next::Tick(now) => {
                    let rows = eng.completed(now - LIVE_GRACE_NS);
                    if !rows.is_empty() {
                        let start =
                            eng.origin_ns().unwrap_or(0) + (rows[0].start_s * 1e9).round() as i64;
                        on_rows(&rows, start);
                    }
                }
                Next::Packet(p, d) => {
                    if !filter.matches(d.as_ref()) {
                        continue;
                    }
                    take(&mut eng, p.ts_ns, p.orig_len, dir_of(d.as_ref()));
                    matched += 1;
                }
            }
        }
        pk.info.packets_matched = matched;
        // The last, partial interval too (through the end of the capture).
        {
            let end = eng
                .last_ts_ns()
                .unwrap_or(i64::MIN)
                .max(live::now_unix_ns());
            let rows = eng.completed(end.saturating_add(interval.as_nanos() as i64));
            if !rows.is_empty() {
                let start = eng.origin_ns().unwrap_or(0) + (rows[0].start_s * 1e9).round() as i64;
                on_rows(&rows, start);
            }
        }
    }
    finish_stats(eng, over, interval, by_direction, || pk.finish())
}

/// [`run_stats_on`] on the captures of one `PACKET_FANOUT` group (`--threads N`, see [`live`]): one thread
/// per capture, each with its own [`StatsEngine`]; every [`live::TICK`] each moves its counts into a shared
/// engine, and the intervals every thread has passed are handed to `on_rows`. Counters add, so the rows and
/// totals are those of one thread reading every packet.
pub fn run_stats_fanout(
    group: Vec<Packets>,
    filter: &Filter,
    interval: Duration,
    by_direction: bool,
    on_rows: &mut (dyn FnMut(&[StatsRow], i64) + Send),
) -> Result<StatsResult, CaptureError> {
    use std::sync::Mutex;
    let n = group.len();
    let origin = group
        .first()
        .and_then(|p| p.info.source.as_ref())
        .map(|s| s.started_unix_ns);
    let mut master = StatsEngine::new(interval, by_direction);
    if let Some(o) = origin {
        master.set_origin(o);
    }
    struct Shared<'a> {
        master: StatsEngine,
        marks: Vec<i64>,
        on_rows: &'a mut (dyn FnMut(&[StatsRow], i64) + Send),
    }
    impl Shared<'_> {
        fn emit(&mut self, before: i64) {
            let rows = self.master.completed(before);
            if !rows.is_empty() {
                let start =
                    self.master.origin_ns().unwrap_or(0) + (rows[0].start_s * 1e9).round() as i64;
                (self.on_rows)(&rows, start);
            }
        }
    }
    let shared = Mutex::new(Shared {
        master,
        marks: vec![i64::MIN; n],
        on_rows,
    });
    let per: u128 = if by_direction { 3 } else { 1 };
    let limit_ns = (interval.as_nanos().max(1) * (MAX_STATS_ROWS as u128 / per - 2))
        .min(i64::MAX as u128) as i64;
    let decode_it = !filter.fields_empty() || by_direction;
    let results: Vec<(CaptureInfo, Option<(i64, i64)>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = group
            .into_iter()
            .enumerate()
            .map(|(i, mut pk)| {
                let shared = &shared;
                sc.spawn(move || {
                    let mut eng = StatsEngine::new(interval, by_direction);
                    if let Some(o) = origin {
                        eng.set_origin(o);
                    }
                    let mut over: Option<(i64, i64)> = None;
                    let mut matched = 0u64;
                    let sync = |eng: &mut StatsEngine, mark: i64| {
                        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                        eng.drain_into(&mut s.master);
                        s.marks[i] = mark;
                        let low = s.marks.iter().copied().min().unwrap_or(mark);
                        if low != i64::MIN && low != i64::MAX {
                            s.emit(low - LIVE_GRACE_NS);
                        }
                    };
                    while let Some(ev) = pk.next_event(decode_it) {
                        match ev {
                            Next::Tick(now) => sync(&mut eng, now),
                            Next::Packet(p, d) => {
                                if !filter.matches(d.as_ref()) {
                                    continue;
                                }
                                let dir = if by_direction {
                                    StatsDir::from_dir(d.as_ref().and_then(flows::guess_dir))
                                } else {
                                    StatsDir::All
                                };
                                matched += 1;
                                if let Some((_, latest)) = over.as_mut() {
                                    *latest = (*latest).max(p.ts_ns);
                                    continue;
                                }
                                if let Some(first) = eng.first_ts_ns()
                                    && p.ts_ns.saturating_sub(first) > limit_ns
                                {
                                    over = Some((first, p.ts_ns));
                                    continue;
                                }
                                eng.add(p.ts_ns, p.orig_len, dir);
                            }
                        }
                    }
                    sync(&mut eng, i64::MAX);
                    let mut info = pk.finish();
                    info.packets_matched = matched;
                    (info, over)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut shared = shared.into_inner().unwrap_or_else(|e| e.into_inner());
    let end = shared
        .master
        .last_ts_ns()
        .unwrap_or(i64::MIN)
        .max(live::now_unix_ns());
    shared.emit(end.saturating_add(interval.as_nanos() as i64));
    let eng = shared.master;
    let over = results
        .iter()
        .filter_map(|r| r.1)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    finish_stats(eng, over, interval, by_direction, || {
        merge_infos(results.into_iter().map(|r| r.0).collect())
    })
}

/// The end of a stats run, one reader or a fanout group: the row bound checked over the time the capture
/// covered (`over`, a file's own first and last packet times when known, else the engine's), then the rows,
/// the totals and the capture's description (`capture`, taken only when the check passed).
fn finish_stats(
    eng: StatsEngine,
    over: Option<(i64, i64)>,
    interval: Duration,
    by_direction: bool,
    capture: impl FnOnce() -> CaptureInfo,
) -> Result<StatsResult, CaptureError> {
    let first = eng.first_ts_ns();
    let last = eng.last_ts_ns();
    let span = match (over, first, last) {
        (Some((a, b)), _, _) | (None, Some(a), Some(b)) => Some(b.saturating_sub(a).max(0) as u64),
        _ => None,
    };
    if let Some(e) = span.and_then(|s| stats_rows_check(s, interval, by_direction)) {
        return Err(e);
    }
    let (rows, total) = eng.finish();
    Ok(StatsResult {
        capture: capture(),
        interval_s: interval.as_secs_f64(),
        first_ts_ns: first,
        last_ts_ns: last,
        rows,
        total,
    })
}

/// The [`CaptureError::TooManyRows`] for `span_ns` at `interval`, or None when the rows fit.
fn stats_rows_check(span_ns: u64, interval: Duration, by_direction: bool) -> Option<CaptureError> {
    let per = if by_direction { 3 } else { 1 };
    let iv = (interval.as_nanos().max(1)).min(u64::MAX as u128) as u64;
    // Rows: the intervals the span touches (one more than span / interval, one more for the alignment of
    // the first), for each direction.
    let rows = (span_ns / iv).saturating_add(2).saturating_mul(per);
    (rows > MAX_STATS_ROWS).then(|| CaptureError::TooManyRows {
        interval_ns: iv,
        span_ns,
        smallest_ns: (span_ns / (MAX_STATS_ROWS / per - 2)).max(1) + 1,
    })
}
