//! The drawing primitives every kind's builder shares: what a run is, the drawing options, the typed pieces
//! every document has (summaries, histograms, percentile curves, interval rows), and the shared builders
//! (latency over time, distribution, percentile curve, bars).

use crate::report::downsample::{MinMaxColumns, per_pixel};
use crate::report::html::{Figure, RunInfo, Section, Table};
use crate::report::load::{FULL_LOG_COLUMNS, FullLogSeries, LoadError, Loaded, PhaseLog};
use crate::report::svg::{Axis, Chart, Mark, ScaleKind, Series, Unit};
use crate::report::text::{SUMMARY_COLUMNS, summary_cells};
use crate::stats::{Bucket, LatencyHistogram, PercentilePoint, Summary};
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

// ---------------------------------------------------------------------------------------------------------
/// One interval of a latency-over-time chart (a ping interval row, a `capture rpc -i` row, ...).
#[derive(Debug, Clone, Copy)]
pub struct TimeRow {
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

impl From<&crate::probe::ping::IntervalRow> for TimeRow {
    fn from(r: &crate::probe::ping::IntervalRow) -> Self {
        TimeRow {
            end_s: r.end_s,
            length_s: r.length_s,
            round_trips: r.round_trips,
            p50_ns: r.p50_ns,
            p99_ns: r.p99_ns,
            max_ns: r.max_ns,
        }
    }
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
    pub intervals: &'a [TimeRow],
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
fn segments(rows: &[TimeRow]) -> Vec<Vec<TimeRow>> {
    let mut out: Vec<Vec<TimeRow>> = Vec::new();
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
pub(crate) fn step_points(rows: &[TimeRow], v: impl Fn(&TimeRow) -> u64) -> Vec<(f64, f64)> {
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
pub fn distribution(title: &str, hists: &[(&str, &[Bucket])], opts: &Options) -> Chart {
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
pub fn percentile_curve(
    title: &str,
    curves: &[(&str, &[PercentilePoint])],
    opts: &Options,
) -> Chart {
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
pub fn percentile_points(c: &[PercentilePoint]) -> Vec<(f64, f64)> {
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

// ---------------------------------------------------------------------------------------------------------
// Shared by the builders of several kinds.

pub(super) fn typed<T: for<'de> Deserialize<'de>>(runs: &[Run]) -> Result<Vec<T>, LoadError> {
    runs.iter().map(|r| r.doc.typed::<T>()).collect()
}

pub(super) fn heading(what: &str, runs: &[Run]) -> String {
    format!(
        "{what}: {}",
        runs.iter()
            .map(|r| r.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub(super) fn summary_table(caption: &str, first: &str) -> Table {
    let mut head = vec!["result".to_string(), first.to_string()];
    head.extend(SUMMARY_COLUMNS.iter().map(|s| s.to_string()));
    Table {
        caption: caption.into(),
        head,
        rows: Vec::new(),
    }
}

pub(super) fn summary_row(label: &str, what: &str, s: Summary) -> Vec<String> {
    let mut row = vec![label.to_string(), what.to_string()];
    row.extend(summary_cells(&s));
    row
}

/// A latency axis for bars: log when the values span more than a factor of 20, else linear from zero.
pub(super) fn bar_axis(label: &str, groups: &[(String, Vec<f64>)]) -> Axis {
    let (lo, hi) = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    latency_axis(label, lo, hi, 20.0)
}

/// Bars of (min, p50, p99) per category, one group of three bars per result: `rows[result][category]`.
pub(super) fn min_p50_p99_bars(
    title: &str,
    categories: &[String],
    runs: &[Run],
    rows: &[Vec<Option<Summary>>],
    opts: &Options,
) -> Chart {
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for (r, cats) in runs.iter().zip(rows) {
        for (stat, pick) in [
            ("min", (|s: &Summary| s.min_ns) as fn(&Summary) -> u64),
            ("p50", |s| s.p50_ns),
            ("p99", |s| s.p99_ns),
        ] {
            let name = series_name(runs, &r.label, stat);
            let v = cats
                .iter()
                .map(|s| match s {
                    Some(s) if s.count > 0 => pick(s) as f64,
                    _ => f64::NAN,
                })
                .collect();
            groups.push((name, v));
        }
    }
    let y = bar_axis("latency", &groups);
    let cats: Vec<&str> = categories.iter().map(String::as_str).collect();
    let refs = group_refs(&groups);
    let mut c = grouped_hbars(title, &cats, &refs, y, opts);
    c.note = Some(
        "Bars per row: smallest, median and 99th percentile; a missing bar: nothing measured."
            .into(),
    );
    c
}

/// Samples (seconds since start, nanoseconds) as a full-log-like series, so the over-time chart draws every
/// sample (min and max per pixel column).
pub(super) fn sample_series(what: &str, samples: &[(f64, u64)]) -> FullLogSeries {
    let mut cols = MinMaxColumns::new(1e-6, FULL_LOG_COLUMNS);
    for &(t, v) in samples {
        cols.add(t, v as f64);
    }
    FullLogSeries {
        path: what.to_string(),
        rows: samples.len() as u64,
        columns: cols,
    }
}

/// Histogram buckets and percentile curve of raw samples, as the documents write them.
pub(super) fn hist_of(samples: &[(f64, u64)]) -> (Vec<Bucket>, Vec<PercentilePoint>) {
    let mut h = LatencyHistogram::new();
    for &(_, v) in samples {
        h.record_ns(v);
    }
    let b = h
        .buckets(20)
        .iter()
        .map(|b| Bucket {
            le_ns: b.le_ns,
            count: b.count,
        })
        .collect();
    (b, h.percentile_curve())
}

/// A series' name: `what`, after the run's `label` when several runs are compared.
pub(super) fn series_name(runs: &[Run], label: &str, what: &str) -> String {
    if runs.len() == 1 {
        what.to_string()
    } else {
        format!("{label} {what}")
    }
}

/// Bar groups (name, values) as [`grouped_bars`] and [`grouped_hbars`] take them.
pub(super) fn group_refs(groups: &[(String, Vec<f64>)]) -> Vec<(&str, Vec<f64>)> {
    groups
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect()
}

/// The three latency charts (over time, distribution, percentiles) from every sample of each run.
pub(super) fn sample_figures(
    sec: &mut Section,
    what: &str,
    runs: &[Run],
    samples: &[Vec<(f64, u64)>],
    opts: &Options,
) {
    let series: Vec<FullLogSeries> = samples.iter().map(|s| sample_series(what, s)).collect();
    let time: Vec<TimeSource> = runs
        .iter()
        .zip(&series)
        .map(|(r, f)| TimeSource {
            label: &r.label,
            full_log: Some(f),
            intervals: &[],
        })
        .collect();
    let mut cap = what.to_string();
    if let Some(f) = cap.get_mut(0..1) {
        f.make_ascii_uppercase();
    }
    let mut c = latency_over_time(&format!("{cap} over time"), &time, opts);
    c.y.label = what.to_string();
    for s in &mut c.series {
        s.name = s.name.replace("every round trip", "every sample");
    }
    c.note = Some(format!(
        "Every sample ({}): min to max per pixel column (no extreme dropped).",
        samples
            .iter()
            .map(|s| s.len().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    sec.figures.push(Figure {
        id: "rtt-time".into(),
        chart: c,
    });
    let hp: Vec<(Vec<Bucket>, Vec<PercentilePoint>)> = samples.iter().map(|s| hist_of(s)).collect();
    let hists: Vec<(&str, &[Bucket])> = runs
        .iter()
        .zip(&hp)
        .map(|(r, (b, _))| (r.label.as_str(), b.as_slice()))
        .collect();
    let mut c = distribution(&format!("{cap} distribution"), &hists, opts);
    c.x.label = what.to_string();
    sec.figures.push(Figure {
        id: "distribution".into(),
        chart: c,
    });
    let curves: Vec<(&str, &[PercentilePoint])> = runs
        .iter()
        .zip(&hp)
        .map(|(r, (_, p))| (r.label.as_str(), p.as_slice()))
        .collect();
    let mut c = percentile_curve(&format!("{cap} by percentile"), &curves, opts);
    c.y.label = what.to_string();
    sec.figures.push(Figure {
        id: "percentiles".into(),
        chart: c,
    });
}

pub(super) fn early(sec: &mut Section, label: &str, e: &Option<String>) {
    if let Some(e) = e {
        sec.notes.push(format!("{label}: the run ended early: {e}"));
    }
}

pub(super) fn categories<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    }
    out
}
