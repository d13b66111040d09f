//! Chart builders chosen by what a result holds, and the one place that decides which `kind` of result can be
//! drawn.
//!
//! # Adding a kind
//!
//! Each command's `--json` document has a `kind`. To draw a new kind (the builders of the kinds other than
//! `ping` and `sweep` are in [`crate::report::kinds`]):
//! 1. write a `fn my_kind(runs: &[Run], opts: &Options) -> Result<Section, LoadError>` that reads its own typed
//!    input with [`Loaded::typed`] (a `#[derive(Deserialize)]` struct of just the fields it draws, so a missing
//!    field becomes a one-line error naming it) and returns the section's tables and figures, built with the
//!    shared builders below ([`latency_over_time`], [`distribution`], [`percentile_curve`], [`grouped_bars`])
//!    or directly with [`crate::report::svg`];
//! 2. add one line to [`KINDS`].
//!
//! Several results of the same kind are given to one call, so every builder overlays them for comparison.
#![forbid(unsafe_code)]

use super::downsample::per_pixel;
use super::html::{Figure, Page, RunInfo, Section, Table};
use super::kinds;
use super::load::{FullLogSeries, LoadError, Loaded, PhaseLog};
use super::svg::{Axis, Chart, Mark, ScaleKind, Series, Unit};
use super::text::{SUMMARY_COLUMNS, summary_cells};
use crate::stats::Summary;
use serde::Deserialize;

/// One result to draw.
#[derive(Debug, Clone)]
pub struct Run {
    /// Name in legends and tables.
    pub label: String,
    /// The checked document.
    pub doc: Loaded,
    /// Its full log, when one was given.
    pub full_log: Option<FullLogSeries>,
    /// Its `db --full-log`, when one was given (db results).
    pub phase_log: Option<PhaseLog>,
}

impl Run {
    /// What the page prints about this run.
    pub fn info(&self) -> RunInfo {
        RunInfo {
            label: self.label.clone(),
            source: self.doc.path.clone(),
            kind: self.doc.kind.clone(),
            hostname: self.doc.environment.hostname.clone(),
            kernel: self.doc.environment.kernel.clone(),
            version: self.doc.environment.roundtrip_version.clone(),
            started_unix_s: self.doc.started_unix_s,
            settings: self.doc.settings(),
            full_log: self
                .full_log
                .as_ref()
                .map(|f| (f.path.clone(), f.rows))
                .or_else(|| self.phase_log.as_ref().map(|f| (f.path.clone(), f.rows))),
        }
    }
}

/// Drawing choices.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Histogram counts on a log axis (shows rare slow round trips next to the bulk).
    pub log_counts: bool,
    /// Chart width in pixels.
    pub width: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            log_counts: false,
            width: 960,
        }
    }
}

/// Builds the section for every result of one kind.
pub type Builder = fn(&[Run], &Options) -> Result<Section, LoadError>;

/// A kind of result that can be drawn.
#[derive(Debug, Clone, Copy)]
pub struct KindReport {
    /// The document's `kind`.
    pub kind: &'static str,
    /// Its builder.
    pub build: Builder,
}

/// Every kind that can be drawn: the extension point (see the module documentation).
pub const KINDS: &[KindReport] = &[
    KindReport {
        kind: "ping",
        build: ping,
    },
    KindReport {
        kind: "sweep",
        build: sweep,
    },
    KindReport {
        kind: "connect",
        build: kinds::connect,
    },
    KindReport {
        kind: "icmp",
        build: kinds::icmp,
    },
    KindReport {
        kind: "load",
        build: kinds::load,
    },
    KindReport {
        kind: "throughput",
        build: kinds::throughput,
    },
    KindReport {
        kind: "compare",
        build: kinds::compare,
    },
    KindReport {
        kind: "db",
        build: kinds::db,
    },
    KindReport {
        kind: "capture-stats",
        build: kinds::capture_stats,
    },
    KindReport {
        kind: "capture-flows",
        build: kinds::capture_flows,
    },
    KindReport {
        kind: "capture-timeline",
        build: kinds::capture_timeline,
    },
    KindReport {
        kind: "capture-rpc",
        build: kinds::capture_rpc,
    },
    KindReport {
        kind: "capture-match",
        build: kinds::capture_match,
    },
    KindReport {
        kind: "tcp",
        build: super::tcpwatch::tcp,
    },
];

/// Fails with a clear message when no builder draws this document's kind.
pub fn check_kind(doc: &Loaded) -> Result<(), LoadError> {
    if KINDS.iter().any(|k| k.kind == doc.kind) {
        Ok(())
    } else {
        Err(LoadError::UnknownKind {
            path: doc.path.clone(),
            kind: doc.kind.clone(),
            known: KINDS.iter().map(|k| k.kind).collect::<Vec<_>>().join(", "),
        })
    }
}

/// Builds the sections for all runs: one per kind, in the order the kinds first appear.
pub fn build(runs: &[Run], opts: &Options) -> Result<Vec<Section>, LoadError> {
    let mut out = Vec::new();
    let mut kinds: Vec<&str> = Vec::new();
    for r in runs {
        check_kind(&r.doc)?;
        if !kinds.contains(&r.doc.kind.as_str()) {
            kinds.push(&r.doc.kind);
        }
    }
    for kind in kinds {
        let group: Vec<Run> = runs
            .iter()
            .filter(|r| r.doc.kind == kind)
            .cloned()
            .collect();
        let k = KINDS.iter().find(|k| k.kind == kind).expect("checked");
        out.push((k.build)(&group, opts)?);
    }
    Ok(out)
}

/// The whole page for these runs: environment and settings of each, then one section per kind.
pub fn page(title: &str, runs: &[Run], opts: &Options) -> Result<Page, LoadError> {
    let sections = build(runs, opts)?;
    Ok(Page {
        title: title.to_string(),
        generated_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        runs: runs.iter().map(Run::info).collect(),
        sections,
    })
}

// ---------------------------------------------------------------------------------------------------------
// Typed inputs (only the fields the charts read; extra fields are ignored).

/// A latency summary as written in documents.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct SummaryIn {
    /// Number of values.
    pub count: u64,
    /// Smallest.
    pub min_ns: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Standard deviation.
    pub stddev_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p99_9_ns: u64,
    /// 99.99th percentile.
    pub p99_99_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

impl From<SummaryIn> for Summary {
    fn from(s: SummaryIn) -> Summary {
        Summary {
            count: s.count,
            min_ns: s.min_ns,
            mean_ns: s.mean_ns,
            stddev_ns: s.stddev_ns,
            p50_ns: s.p50_ns,
            p90_ns: s.p90_ns,
            p99_ns: s.p99_ns,
            p99_9_ns: s.p99_9_ns,
            p99_99_ns: s.p99_99_ns,
            max_ns: s.max_ns,
        }
    }
}

/// One histogram bucket as written in documents (20 per decade).
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct BucketIn {
    /// Upper bound, ns.
    pub le_ns: u64,
    /// Values in the bucket.
    pub count: u64,
}

/// One percentile-curve point as written in documents.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct PercentileIn {
    /// 0..=100.
    pub percentile: f64,
    /// Value, ns.
    pub value_ns: u64,
}

/// One per-interval row as written in documents.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct IntervalIn {
    /// End of the interval, seconds since the start of the measured phase.
    pub end_s: f64,
    /// Length, seconds.
    pub length_s: f64,
    /// Round trips in it.
    pub round_trips: u64,
    /// Median RTT.
    pub p50_ns: u64,
    /// 99th percentile RTT.
    pub p99_ns: u64,
    /// Largest RTT.
    pub max_ns: u64,
}

/// The counts of a ping document.
#[derive(Debug, Clone, Deserialize)]
pub struct PingSummaryIn {
    /// Sent.
    pub sent: u64,
    /// Answered.
    pub received: u64,
    /// Never answered.
    pub lost: u64,
    /// Measured phase, seconds.
    pub elapsed_s: f64,
    /// RTT statistics.
    pub rtt: SummaryIn,
    /// Server turnaround statistics.
    #[serde(default)]
    pub server_turnaround: Option<SummaryIn>,
}

/// What the ping report reads from a `ping --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct PingIn {
    /// Counts and statistics.
    pub summary: PingSummaryIn,
    /// Per-interval rows.
    pub intervals: Vec<IntervalIn>,
    /// RTT histogram.
    pub histogram: Vec<BucketIn>,
    /// RTT percentile curve.
    pub percentiles: Vec<PercentileIn>,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
}

// ---------------------------------------------------------------------------------------------------------
// The ping report.

fn ping(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<PingIn> = runs
        .iter()
        .map(|r| r.doc.typed::<PingIn>())
        .collect::<Result<_, _>>()?;
    let mut sec = Section {
        heading: if runs.len() == 1 {
            format!("Ping: {}", runs[0].label)
        } else {
            format!("Ping: {} results compared", runs.len())
        },
        ..Default::default()
    };

    let mut head = vec!["result".to_string()];
    head.extend(SUMMARY_COLUMNS.iter().map(|s| s.to_string()));
    head.extend(["sent", "lost"].map(String::from));
    let mut rtt = Table {
        caption: "Round-trip time".into(),
        head,
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        let mut row = vec![r.label.clone()];
        row.extend(summary_cells(&Summary::from(d.summary.rtt)));
        row.push(d.summary.sent.to_string());
        row.push(d.summary.lost.to_string());
        rtt.rows.push(row);
    }
    sec.tables.push(rtt);
    if docs.iter().any(|d| d.summary.server_turnaround.is_some()) {
        let mut head = vec!["result".to_string()];
        head.extend(SUMMARY_COLUMNS.iter().map(|s| s.to_string()));
        let mut t = Table {
            caption: "Server turnaround (time spent inside the server, from its own timestamps)"
                .into(),
            head,
            rows: Vec::new(),
        };
        for (r, d) in runs.iter().zip(&docs) {
            if let Some(s) = d.summary.server_turnaround {
                let mut row = vec![r.label.clone()];
                row.extend(summary_cells(&Summary::from(s)));
                t.rows.push(row);
            }
        }
        sec.tables.push(t);
    }
    for (r, d) in runs.iter().zip(&docs) {
        if let Some(e) = &d.error {
            sec.notes
                .push(format!("{}: the run ended early: {e}", r.label));
        }
    }

    let time: Vec<TimeSource> = runs
        .iter()
        .zip(&docs)
        .map(|(r, d)| TimeSource {
            label: &r.label,
            full_log: r.full_log.as_ref(),
            intervals: &d.intervals,
        })
        .collect();
    sec.figures.push(Figure {
        id: "rtt-time".into(),
        chart: latency_over_time("RTT over time", &time, opts),
    });
    let hists: Vec<(&str, &[BucketIn])> = runs
        .iter()
        .zip(&docs)
        .map(|(r, d)| (r.label.as_str(), d.histogram.as_slice()))
        .collect();
    sec.figures.push(Figure {
        id: "distribution".into(),
        chart: distribution("RTT distribution", &hists, opts),
    });
    let curves: Vec<(&str, &[PercentileIn])> = runs
        .iter()
        .zip(&docs)
        .map(|(r, d)| (r.label.as_str(), d.percentiles.as_slice()))
        .collect();
    sec.figures.push(Figure {
        id: "percentiles".into(),
        chart: percentile_curve("RTT by percentile", &curves, opts),
    });
    if runs.len() > 1 {
        let cats = ["p50", "p90", "p99", "p99.9", "p99.99", "max"];
        let groups: Vec<(&str, Vec<f64>)> = runs
            .iter()
            .zip(&docs)
            .map(|(r, d)| {
                let s = d.summary.rtt;
                let v = [
                    s.p50_ns,
                    s.p90_ns,
                    s.p99_ns,
                    s.p99_9_ns,
                    s.p99_99_ns,
                    s.max_ns,
                ];
                (
                    r.label.as_str(),
                    v.iter()
                        .map(|&x| if s.count == 0 { f64::NAN } else { x as f64 })
                        .collect(),
                )
            })
            .collect();
        sec.figures.push(Figure {
            id: "compare".into(),
            chart: grouped_bars(
                "RTT percentiles side by side",
                &cats,
                &groups,
                Axis::log("RTT", Unit::Nanos),
                opts,
            ),
        });
    }
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// The sweep report: latency against offered rate (or message size), one line per size (or rate).

/// One cell of a sweep as written in documents.
#[derive(Debug, Clone, Deserialize)]
pub struct SweepCellIn {
    /// Message size.
    pub size_bytes: u64,
    /// Offered rate, messages per second.
    pub rate_per_s: f64,
    /// Achieved rate.
    pub achieved_rate_per_s: f64,
    /// Whether the offered rate was held.
    pub rate_held: bool,
    /// Latency measured from the scheduled send time (no coordinated omission).
    pub latency_from_scheduled: SummaryIn,
}

/// What the sweep report reads from a `sweep --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct SweepIn {
    /// Every (size, rate) cell.
    pub cells: Vec<SweepCellIn>,
}

fn sweep(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<SweepIn> = runs
        .iter()
        .map(|r| r.doc.typed::<SweepIn>())
        .collect::<Result<_, _>>()?;
    let mut sec = Section {
        heading: format!(
            "Sweep: {}",
            runs.iter()
                .map(|r| r.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        ..Default::default()
    };
    let mut head = vec![
        "result".to_string(),
        "size".into(),
        "offered".into(),
        "achieved".into(),
    ];
    head.extend(SUMMARY_COLUMNS.iter().map(|s| s.to_string()));
    let mut t = Table {
        caption: "Latency from the scheduled send time, per cell".into(),
        head,
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        for c in &d.cells {
            let mut row = vec![
                r.label.clone(),
                crate::units::fmt_bytes(c.size_bytes),
                format!("{:.0}/s", c.rate_per_s),
                format!(
                    "{:.0}/s{}",
                    c.achieved_rate_per_s,
                    if c.rate_held { "" } else { " (not held)" }
                ),
            ];
            row.extend(summary_cells(&Summary::from(c.latency_from_scheduled)));
            t.rows.push(row);
        }
    }
    sec.tables.push(t);
    sec.figures.push(Figure {
        id: "sweep".into(),
        chart: sweep_chart(runs, &docs, opts),
    });
    Ok(sec)
}

/// p50 (solid) and p99 (dashed) latency against the swept dimension with more values (rate or size), one pair
/// of lines per value of the other dimension and per result.
pub fn sweep_chart(runs: &[Run], docs: &[SweepIn], opts: &Options) -> Chart {
    let mut rates: Vec<f64> = docs
        .iter()
        .flat_map(|d| d.cells.iter().map(|c| c.rate_per_s))
        .collect();
    let mut sizes: Vec<u64> = docs
        .iter()
        .flat_map(|d| d.cells.iter().map(|c| c.size_bytes))
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    sizes.sort_unstable();
    sizes.dedup();
    let by_rate = rates.len() >= sizes.len();
    let (lo, hi) = docs
        .iter()
        .flat_map(|d| &d.cells)
        .fold((f64::INFINITY, 0.0f64), |(a, b), c| {
            let s = c.latency_from_scheduled;
            (a.min(s.p50_ns as f64), b.max(s.p99_ns as f64))
        });
    let x = if by_rate {
        Axis::log("offered rate (messages/s)", Unit::Count)
    } else {
        Axis::log("message size", Unit::Bytes)
    };
    let mut chart = Chart::new(
        if by_rate {
            "Latency vs offered rate"
        } else {
            "Latency vs message size"
        },
        x,
        latency_axis("latency from scheduled send", lo, hi, 20.0),
    );
    chart.width = opts.width;
    let mut color = 0;
    for (r, d) in runs.iter().zip(docs) {
        let groups: Vec<String> = if by_rate {
            sizes.iter().map(|s| crate::units::fmt_bytes(*s)).collect()
        } else {
            rates.iter().map(|r| format!("{r:.0}/s")).collect()
        };
        for (gi, g) in groups.iter().enumerate() {
            let mut cells: Vec<&SweepCellIn> = d
                .cells
                .iter()
                .filter(|c| {
                    if by_rate {
                        c.size_bytes == sizes[gi]
                    } else {
                        c.rate_per_s == rates[gi]
                    }
                })
                .filter(|c| c.latency_from_scheduled.count > 0)
                .collect();
            if cells.is_empty() {
                continue;
            }
            let xv = |c: &SweepCellIn| {
                if by_rate {
                    c.rate_per_s
                } else {
                    c.size_bytes as f64
                }
            };
            cells.sort_by(|a, b| xv(a).total_cmp(&xv(b)));
            let name = if runs.len() > 1 {
                format!("{} {g}", r.label)
            } else {
                g.clone()
            };
            let p50: Vec<(f64, f64)> = cells
                .iter()
                .map(|c| (xv(c), c.latency_from_scheduled.p50_ns as f64))
                .collect();
            let p99 = cells
                .iter()
                .map(|c| (xv(c), c.latency_from_scheduled.p99_ns as f64))
                .collect();
            chart.push(Series::new("", color, Mark::Points(p50.clone())));
            chart.push(Series::new(format!("{name} p50"), color, Mark::Line(p50)));
            chart.push(Series::new(format!("{name} p99"), color, Mark::Line(p99)).dashed());
            color += 1;
        }
    }
    chart.note = Some(
        "Solid: median; dashed: 99th percentile. Latency counts from the scheduled send time."
            .into(),
    );
    chart
}

// ---------------------------------------------------------------------------------------------------------
// Shared builders.

/// Where a latency-over-time series comes from.
#[derive(Debug, Clone, Copy)]
pub struct TimeSource<'a> {
    /// Legend name.
    pub label: &'a str,
    /// Every sample, when a full log exists.
    pub full_log: Option<&'a FullLogSeries>,
    /// Per-interval percentiles (drawn when there is no full log, and as the median line over it).
    pub intervals: &'a [IntervalIn],
}

/// A log latency axis when the values span more than a factor of `ratio`, else linear from zero.
pub(crate) fn latency_axis(label: &str, lo: f64, hi: f64, ratio: f64) -> Axis {
    if lo > 0.0 && hi / lo > ratio {
        Axis::log(label, Unit::Nanos)
    } else {
        Axis::linear(label, Unit::Nanos)
    }
}

/// RTT against time: every sample (min and max per pixel column) when a full log exists, else the
/// per-interval p50..p99 band with p50 and max lines.
pub fn latency_over_time(title: &str, sources: &[TimeSource], opts: &Options) -> Chart {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    let mut x_end = 0.0f64;
    for s in sources {
        if let Some(f) = s.full_log {
            if let Some((a, b)) = f.columns.extremes() {
                lo = lo.min(a);
                hi = hi.max(b);
            }
            x_end = x_end.max(f.columns.width() * f.columns.columns().len() as f64);
        } else {
            for i in s.intervals {
                lo = lo.min(i.p50_ns as f64);
                hi = hi.max(i.max_ns as f64);
            }
        }
        if let Some(last) = s.intervals.last() {
            x_end = x_end.max(last.end_s);
        }
    }
    let mut x = Axis::linear("time since start", Unit::Seconds);
    x.min = Some(0.0);
    if x_end > 0.0 {
        x.max = Some(x_end);
    }
    let mut chart = Chart::new(title, x, latency_axis("RTT", lo, hi, 20.0));
    chart.width = opts.width;
    let mut sampled = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        let name = |what: &str| {
            if sources.len() == 1 {
                what.to_string()
            } else {
                format!("{}: {what}", s.label)
            }
        };
        if let Some(f) = s.full_log {
            chart.push(Series::new(
                name("every round trip"),
                i,
                Mark::Columns(f.columns.ranges()),
            ));
            sampled.push(format!("{} ({} rows)", f.path, f.rows));
            let p50: Vec<(f64, f64)> = step_points(s.intervals, |r| r.p50_ns);
            if !p50.is_empty() {
                chart.push(
                    Series::new(name("median per interval"), i + 4, Mark::Step(p50)).dashed(),
                );
            }
        } else {
            // One band and two staircases per stretch of consecutive intervals with round trips, so nothing
            // is drawn across an interval without any.
            for (k, seg) in segments(s.intervals).iter().enumerate() {
                let named = |what: &str| if k == 0 { name(what) } else { String::new() };
                let band: Vec<(f64, f64, f64)> = seg
                    .iter()
                    .flat_map(|r| {
                        let start = (r.end_s - r.length_s).max(0.0);
                        [
                            (start, r.p50_ns as f64, r.p99_ns as f64),
                            (r.end_s, r.p50_ns as f64, r.p99_ns as f64),
                        ]
                    })
                    .collect();
                chart.push(Series::new(named("p50 to p99"), i, Mark::Band(band)));
                chart.push(Series::new(
                    named("median"),
                    i,
                    Mark::Step(step_points(seg, |r| r.p50_ns)),
                ));
                chart.push(
                    Series::new(named("max"), i, Mark::Step(step_points(seg, |r| r.max_ns)))
                        .dashed(),
                );
            }
        }
    }
    // Merge the full-log columns down to one stroke per pixel column now that the scale is known.
    if let Some(xs) = chart.x_scale() {
        for s in &mut chart.series {
            if let Mark::Columns(c) = &mut s.mark {
                *c = per_pixel(c, |v| xs.map(v), |p| xs.invert(p));
            }
        }
    }
    chart.note = Some(if sampled.is_empty() {
        "Per report interval: band from the median to the 99th percentile, dashed line the interval's maximum."
            .to_string()
    } else {
        format!(
            "Every round trip from {}: min to max per pixel column (no extreme dropped).",
            sampled.join(", ")
        )
    });
    chart
}

/// Stretches of consecutive interval rows that have round trips (a row without any, or a gap in time, ends
/// a stretch).
fn segments(rows: &[IntervalIn]) -> Vec<Vec<IntervalIn>> {
    let mut out: Vec<Vec<IntervalIn>> = Vec::new();
    let mut prev_end: Option<f64> = None;
    for r in rows {
        if r.round_trips == 0 {
            prev_end = None;
            continue;
        }
        let start = (r.end_s - r.length_s).max(0.0);
        match (prev_end, out.last_mut()) {
            (Some(e), Some(last)) if (e - start).abs() < 1e-9 => last.push(*r),
            _ => out.push(vec![*r]),
        }
        prev_end = Some(r.end_s);
    }
    out
}

/// Staircase points for interval rows: each value holds from the interval's start to its end.
pub(crate) fn step_points(rows: &[IntervalIn], v: impl Fn(&IntervalIn) -> u64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for r in rows.iter().filter(|r| r.round_trips > 0) {
        let start = (r.end_s - r.length_s).max(0.0);
        match out.last() {
            Some(&(x, _)) if (x - start).abs() < 1e-9 => {
                out.pop();
            }
            _ => {}
        }
        out.push((start, v(r) as f64));
        out.push((r.end_s, v(r) as f64));
    }
    out
}

/// The RTT distribution from histogram buckets (20 per decade) on a log time axis. One result: counts;
/// several: the share of each result's round trips per bucket, overlaid.
pub fn distribution(title: &str, hists: &[(&str, &[BucketIn])], opts: &Options) -> Chart {
    let factor = 10f64.powf(1.0 / 20.0);
    let share = hists.len() > 1;
    let y_label = if share {
        "share of round trips"
    } else {
        "round trips"
    };
    let y = match (opts.log_counts, share) {
        (true, true) => Axis::log(y_label, Unit::Percent),
        (true, false) => Axis::log(y_label, Unit::Count),
        (false, true) => Axis::linear(y_label, Unit::Percent),
        (false, false) => Axis::linear(y_label, Unit::Count),
    };
    let mut chart = Chart::new(title, Axis::log("RTT", Unit::Nanos), y);
    chart.width = opts.width;
    for (i, (label, buckets)) in hists.iter().enumerate() {
        let total: u64 = buckets.iter().map(|b| b.count).sum();
        let bins: Vec<(f64, f64, f64)> = buckets
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| {
                let hi = b.le_ns as f64;
                let v = if share {
                    100.0 * b.count as f64 / total.max(1) as f64
                } else {
                    b.count as f64
                };
                (hi / factor, hi, v)
            })
            .collect();
        chart.push(Series::new(*label, i, Mark::Histogram(bins)));
    }
    chart.note = Some(format!(
        "Buckets of 20 per decade of RTT{}.",
        if opts.log_counts {
            "; counts on a log axis so single slow round trips show"
        } else {
            ""
        }
    ));
    chart
}

/// The percentile curve on a log 1/(1-p) axis, as HdrHistogram plots it; the last point of each curve is the
/// maximum, drawn one halving of the tail beyond the last finite percentile.
pub fn percentile_curve(title: &str, curves: &[(&str, &[PercentileIn])], opts: &Options) -> Chart {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for (_, c) in curves {
        for p in c.iter() {
            lo = lo.min(p.value_ns as f64);
            hi = hi.max(p.value_ns as f64);
        }
    }
    let mut chart = Chart::new(
        title,
        Axis::log("percentile", Unit::TailPercentile),
        latency_axis("RTT", lo, hi, 50.0),
    );
    chart.width = opts.width;
    for (i, (label, c)) in curves.iter().enumerate() {
        chart.push(Series::new(*label, i, Mark::Line(percentile_points(c))));
        if let Some(max) = percentile_points(c).last() {
            chart.push(Series::new("", i, Mark::Points(vec![*max])));
        }
    }
    chart.note = Some(
        "x: 1/(1-p), so each step right is ten times rarer; the dot at the end of a curve is the maximum."
            .to_string(),
    );
    chart
}

/// (1/(1-p), value) for every finite percentile, then the maximum one halving of the tail further right.
pub fn percentile_points(c: &[PercentileIn]) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = c
        .iter()
        .filter(|p| p.percentile >= 0.0 && p.percentile < 100.0)
        .map(|p| (1.0 / (1.0 - p.percentile / 100.0), p.value_ns as f64))
        .collect();
    if let Some(max) = c.iter().find(|p| p.percentile >= 100.0) {
        let x = pts.last().map_or(2.0, |&(x, _)| x * 2.0);
        pts.push((x, max.value_ns as f64));
    }
    pts
}

/// Grouped bars: one group per category, one bar per result (for `compare`/`db` phases, percentiles, ...).
pub fn grouped_bars(
    title: &str,
    categories: &[&str],
    groups: &[(&str, Vec<f64>)],
    y: Axis,
    opts: &Options,
) -> Chart {
    let mut chart = Chart::new(title, Axis::linear("", Unit::Plain), y);
    chart.width = opts.width;
    chart.categories = Some(categories.iter().map(|s| s.to_string()).collect());
    for (i, (label, v)) in groups.iter().enumerate() {
        chart.push(Series::new(*label, i, Mark::Bars(v.clone())));
    }
    if chart.y.scale == ScaleKind::Linear {
        chart.y.zero = true;
    }
    chart
}

/// Grouped horizontal bars: one row of bars per category, the value axis `x` along the bottom (for many
/// categories or long names: `compare` probes, `db` phases, `capture rpc` operations).
pub fn grouped_hbars(
    title: &str,
    categories: &[&str],
    groups: &[(&str, Vec<f64>)],
    x: Axis,
    opts: &Options,
) -> Chart {
    let mut chart = grouped_bars(title, categories, groups, x, opts);
    chart.horizontal = true;
    chart.fit_height_to_categories();
    chart
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kinds_are_named() {
        let doc = super::super::load::parse(
            "s.json",
            br#"{"format":"roundtrip","format_version":1,"kind":"model-tps"}"#,
        )
        .unwrap();
        let e = check_kind(&doc).unwrap_err().to_string();
        assert!(
            e.contains("\"model-tps\" result, which has no report yet (reports exist for: ping, sweep, connect,"),
            "{e}"
        );
    }

    #[test]
    fn percentile_points_put_max_last() {
        let c = [
            PercentileIn {
                percentile: 0.0,
                value_ns: 10,
            },
            PercentileIn {
                percentile: 50.0,
                value_ns: 20,
            },
            PercentileIn {
                percentile: 99.0,
                value_ns: 90,
            },
            PercentileIn {
                percentile: 100.0,
                value_ns: 500,
            },
        ];
        let p = percentile_points(&c);
        assert_eq!(p[0], (1.0, 10.0));
        assert_eq!(p[1], (2.0, 20.0));
        assert!((p[2].0 - 100.0).abs() < 1e-9);
        assert!((p[3].0 - 200.0).abs() < 1e-9 && p[3].1 == 500.0);
    }
}
