//! Chart builders for every measuring command other than `ping` and `sweep` (those live in
//! [`crate::report::charts`], which lists all builders in [`crate::report::charts::KINDS`]).
//!
//! Each builder reads only the fields it draws from the command's own `--json` document (a
//! `#[derive(Deserialize)]` struct below), so a document from another version that lacks one fails with a
//! one-line error naming the field.
#![forbid(unsafe_code)]

use super::charts::{
    BucketIn, IntervalIn, Options, PercentileIn, Run, SummaryIn, TimeSource, distribution,
    grouped_bars, grouped_hbars, latency_axis, latency_over_time, percentile_curve,
};
use super::downsample::MinMaxColumns;
use super::html::{Figure, Section, Table};
use super::load::{FULL_LOG_COLUMNS, FullLogSeries, LoadError};
use super::svg::{Axis, Chart, Mark, Series, Unit};
use super::text::{SUMMARY_COLUMNS, summary_cells};
use crate::stats::{LatencyHistogram, Summary};
use crate::units::{fmt_bytes, fmt_nanos};
use serde::Deserialize;
use serde_json::Value;

fn typed<T: for<'de> Deserialize<'de>>(runs: &[Run]) -> Result<Vec<T>, LoadError> {
    runs.iter().map(|r| r.doc.typed::<T>()).collect()
}

fn heading(what: &str, runs: &[Run]) -> String {
    format!(
        "{what}: {}",
        runs.iter()
            .map(|r| r.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn summary_table(caption: &str, first: &str) -> Table {
    let mut head = vec!["result".to_string(), first.to_string()];
    head.extend(SUMMARY_COLUMNS.iter().map(|s| s.to_string()));
    Table {
        caption: caption.into(),
        head,
        rows: Vec::new(),
    }
}

fn summary_row(label: &str, what: &str, s: SummaryIn) -> Vec<String> {
    let mut row = vec![label.to_string(), what.to_string()];
    row.extend(summary_cells(&Summary::from(s)));
    row
}

/// A latency axis for bars: log when the values span more than a factor of 20, else linear from zero.
fn bar_axis(label: &str, groups: &[(String, Vec<f64>)]) -> Axis {
    let (lo, hi) = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    latency_axis(label, lo, hi, 20.0)
}

/// Bars of (min, p50, p99) per category, one group of three bars per result: `rows[result][category]`.
fn min_p50_p99_bars(
    title: &str,
    categories: &[String],
    runs: &[Run],
    rows: &[Vec<Option<SummaryIn>>],
    opts: &Options,
) -> Chart {
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for (r, cats) in runs.iter().zip(rows) {
        for (stat, pick) in [
            ("min", (|s: &SummaryIn| s.min_ns) as fn(&SummaryIn) -> u64),
            ("p50", |s| s.p50_ns),
            ("p99", |s| s.p99_ns),
        ] {
            let name = if runs.len() == 1 {
                stat.to_string()
            } else {
                format!("{} {stat}", r.label)
            };
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
    let refs: Vec<(&str, Vec<f64>)> = groups
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    let mut c = grouped_hbars(title, &cats, &refs, y, opts);
    c.note = Some(
        "Bars per row: smallest, median and 99th percentile; a missing bar: nothing measured."
            .into(),
    );
    c
}

/// Samples (seconds since start, nanoseconds) as a full-log-like series, so the over-time chart draws every
/// sample (min and max per pixel column).
fn sample_series(what: &str, samples: &[(f64, u64)]) -> FullLogSeries {
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
fn hist_of(samples: &[(f64, u64)]) -> (Vec<BucketIn>, Vec<PercentileIn>) {
    let mut h = LatencyHistogram::new();
    for &(_, v) in samples {
        h.record_ns(v);
    }
    let b = h
        .buckets(20)
        .iter()
        .map(|b| BucketIn {
            le_ns: b.le_ns,
            count: b.count,
        })
        .collect();
    let p = h
        .percentile_curve()
        .iter()
        .map(|p| PercentileIn {
            percentile: p.percentile,
            value_ns: p.value_ns,
        })
        .collect();
    (b, p)
}

/// The three latency charts (over time, distribution, percentiles) from every sample of each run.
fn sample_figures(
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
    let hp: Vec<(Vec<BucketIn>, Vec<PercentileIn>)> = samples.iter().map(|s| hist_of(s)).collect();
    let hists: Vec<(&str, &[BucketIn])> = runs
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
    let curves: Vec<(&str, &[PercentileIn])> = runs
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

fn early(sec: &mut Section, label: &str, e: &Option<String>) {
    if let Some(e) = e {
        sec.notes.push(format!("{label}: the run ended early: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------------------
// connect

/// One attempt of a `connect` document.
#[derive(Debug, Clone, Deserialize)]
pub struct AttemptIn {
    /// "open", "closed", "filtered" or "unreachable".
    pub state: String,
    /// SYN to answer, when one came.
    pub time_ns: Option<u64>,
    /// Start of the attempt since the start of the run.
    pub at_ns: u64,
}

/// What the connect report reads from a `connect --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct ConnectIn {
    /// SYN -> SYN-ACK statistics.
    pub handshake: SummaryIn,
    /// SYN -> RST statistics.
    pub refused: SummaryIn,
    /// Every attempt.
    pub attempts: Vec<AttemptIn>,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
}

/// The handshake samples of a connect document: (seconds since start, ns) of every open attempt.
pub fn connect_samples(d: &ConnectIn) -> Vec<(f64, u64)> {
    attempt_samples(d, "open")
}

/// (seconds since start, ns) of every attempt that ended in `state` with a time.
fn attempt_samples(d: &ConnectIn, state: &str) -> Vec<(f64, u64)> {
    d.attempts
        .iter()
        .filter(|a| a.state == state)
        .filter_map(|a| a.time_ns.map(|t| (a.at_ns as f64 / 1e9, t)))
        .collect()
}

pub(crate) fn connect(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<ConnectIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("TCP handshake", runs),
        ..Default::default()
    };
    let mut t = summary_table("Handshake times", "answer");
    for (r, d) in runs.iter().zip(&docs) {
        t.rows
            .push(summary_row(&r.label, "SYN -> SYN-ACK (open)", d.handshake));
        if d.refused.count > 0 {
            t.rows
                .push(summary_row(&r.label, "SYN -> RST (closed)", d.refused));
        }
        early(&mut sec, &r.label, &d.error);
    }
    sec.tables.push(t);
    let samples: Vec<Vec<(f64, u64)>> = docs.iter().map(connect_samples).collect();
    if samples.iter().all(Vec::is_empty) && docs.iter().any(|d| d.refused.count > 0) {
        // Nothing listened: the RST answers are the round trips there are.
        let refused: Vec<Vec<(f64, u64)>> =
            docs.iter().map(|d| attempt_samples(d, "closed")).collect();
        sec.notes
            .push("No handshake completed: the charts show the SYN -> RST times.".into());
        sample_figures(&mut sec, "SYN -> RST time", runs, &refused, opts);
    } else {
        sample_figures(&mut sec, "handshake time", runs, &samples, opts);
    }
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// icmp

/// One probe of an `icmp` document.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeIn {
    /// Send time since the start of the run.
    pub at_ns: u64,
    /// "reply", "timeout" or "error".
    pub outcome: String,
    /// RTT of a reply.
    #[serde(default)]
    pub rtt_ns: Option<u64>,
}

/// What the ICMP report reads from an `icmp --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct IcmpIn {
    /// Echo requests sent.
    pub sent: u64,
    /// Replies.
    pub received: u64,
    /// Never answered.
    pub lost: u64,
    /// RTT statistics.
    pub rtt: SummaryIn,
    /// Every probe.
    pub probes: Vec<ProbeIn>,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
}

/// The RTT samples of an ICMP document: (seconds since start, ns) of every reply.
pub fn icmp_samples(d: &IcmpIn) -> Vec<(f64, u64)> {
    d.probes
        .iter()
        .filter(|p| p.outcome == "reply")
        .filter_map(|p| p.rtt_ns.map(|v| (p.at_ns as f64 / 1e9, v)))
        .collect()
}

pub(crate) fn icmp(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<IcmpIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("ICMP echo", runs),
        ..Default::default()
    };
    let mut t = summary_table("Round-trip time", "sent/received/lost");
    for (r, d) in runs.iter().zip(&docs) {
        t.rows.push(summary_row(
            &r.label,
            &format!("{}/{}/{}", d.sent, d.received, d.lost),
            d.rtt,
        ));
        early(&mut sec, &r.label, &d.error);
    }
    sec.tables.push(t);
    let samples: Vec<Vec<(f64, u64)>> = docs.iter().map(icmp_samples).collect();
    sample_figures(&mut sec, "RTT", runs, &samples, opts);
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// load

/// The summary of a `load` document.
#[derive(Debug, Clone, Deserialize)]
pub struct LoadSummaryIn {
    /// Message size.
    pub size_bytes: u64,
    /// Offered rate.
    pub rate_per_s: f64,
    /// Achieved rate.
    pub achieved_rate_per_s: f64,
    /// Whether the rate was held.
    pub rate_held: bool,
    /// Latency from the scheduled send time.
    pub latency_from_scheduled: SummaryIn,
    /// Latency from the actual send time.
    pub latency_from_sent: SummaryIn,
    /// Lateness of sends against the schedule.
    pub schedule_lag: SummaryIn,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
}

/// What the load report reads from a `load --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct LoadIn {
    /// Counts and statistics.
    pub summary: LoadSummaryIn,
    /// Histogram of the latency from the scheduled send time (absent in documents of older versions).
    #[serde(default)]
    pub histogram_from_scheduled: Vec<BucketIn>,
    /// Percentile curve from the scheduled send time.
    #[serde(default)]
    pub percentiles_from_scheduled: Vec<PercentileIn>,
    /// Percentile curve from the actual send time.
    #[serde(default)]
    pub percentiles_from_sent: Vec<PercentileIn>,
}

pub(crate) fn load(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<LoadIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Load", runs),
        ..Default::default()
    };
    let mut t = summary_table("Latency at a fixed offered rate", "measured");
    for (r, d) in runs.iter().zip(&docs) {
        let s = &d.summary;
        let label = format!(
            "{} ({}, {:.0}/s offered, {:.0}/s achieved{})",
            r.label,
            fmt_bytes(s.size_bytes),
            s.rate_per_s,
            s.achieved_rate_per_s,
            if s.rate_held { "" } else { ", not held" }
        );
        t.rows.push(summary_row(
            &label,
            "from scheduled send",
            s.latency_from_scheduled,
        ));
        t.rows
            .push(summary_row(&label, "from actual send", s.latency_from_sent));
        t.rows
            .push(summary_row(&label, "schedule lag", s.schedule_lag));
        early(&mut sec, &r.label, &s.error);
    }
    sec.tables.push(t);
    let cats = ["min", "p50", "p90", "p99", "p99.9", "max"];
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for (r, d) in runs.iter().zip(&docs) {
        for (what, s) in [
            ("from scheduled send", d.summary.latency_from_scheduled),
            ("from actual send", d.summary.latency_from_sent),
        ] {
            let v = [s.min_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.p99_9_ns, s.max_ns]
                .iter()
                .map(|&x| if s.count == 0 { f64::NAN } else { x as f64 })
                .collect();
            let name = if runs.len() == 1 {
                what.to_string()
            } else {
                format!("{} {what}", r.label)
            };
            groups.push((name, v));
        }
    }
    let y = bar_axis("latency", &groups);
    let refs: Vec<(&str, Vec<f64>)> = groups
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    let mut bars = grouped_bars(
        "Latency from the scheduled and from the actual send time",
        &cats,
        &refs,
        y,
        opts,
    );
    bars.note = Some(
        "From the scheduled send counts the wait of messages that left late (no coordinated omission)."
            .into(),
    );
    sec.figures.push(Figure {
        id: "bars".into(),
        chart: bars,
    });
    if docs.iter().any(|d| !d.histogram_from_scheduled.is_empty()) {
        let hists: Vec<(&str, &[BucketIn])> = runs
            .iter()
            .zip(&docs)
            .map(|(r, d)| (r.label.as_str(), d.histogram_from_scheduled.as_slice()))
            .collect();
        let mut c = distribution(
            "Latency distribution (from the scheduled send)",
            &hists,
            opts,
        );
        c.x.label = "latency from scheduled send".into();
        sec.figures.push(Figure {
            id: "distribution".into(),
            chart: c,
        });
        let names: Vec<(String, String)> = runs
            .iter()
            .map(|r| {
                if runs.len() == 1 {
                    ("from scheduled send".into(), "from actual send".into())
                } else {
                    (
                        format!("{} from scheduled send", r.label),
                        format!("{} from actual send", r.label),
                    )
                }
            })
            .collect();
        let mut curves: Vec<(&str, &[PercentileIn])> = Vec::new();
        for (n, d) in names.iter().zip(&docs) {
            curves.push((n.0.as_str(), d.percentiles_from_scheduled.as_slice()));
            curves.push((n.1.as_str(), d.percentiles_from_sent.as_slice()));
        }
        let mut c = percentile_curve("Latency by percentile", &curves, opts);
        c.y.label = "latency".into();
        sec.figures.push(Figure {
            id: "percentiles".into(),
            chart: c,
        });
    } else {
        sec.notes.push(
            "These documents hold no latency histogram (written by an older roundtrip): only the bars are drawn."
                .into(),
        );
    }
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// compare

/// One row of a `compare` document.
#[derive(Debug, Clone, Deserialize)]
pub struct CompareRowIn {
    /// Short label.
    pub label: String,
    /// Measurements attempted.
    pub attempts: u64,
    /// Statistics of the successful ones.
    pub summary: SummaryIn,
    /// Why some failed.
    #[serde(default)]
    pub error: Option<String>,
}

/// What the compare report reads from a `compare --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct CompareIn {
    /// One row per probe.
    pub rows: Vec<CompareRowIn>,
    /// The one-line conclusion.
    #[serde(default)]
    pub conclusion: Option<String>,
}

fn categories<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    }
    out
}

pub(crate) fn compare(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<CompareIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Compare", runs),
        ..Default::default()
    };
    let mut t = summary_table("Round trips measured several ways", "probe");
    for (r, d) in runs.iter().zip(&docs) {
        for row in &d.rows {
            let mut cells = summary_row(&r.label, &row.label, row.summary);
            cells.push(format!("{} attempted", row.attempts));
            t.rows.push(cells);
            if let Some(e) = &row.error {
                sec.notes.push(format!("{} {}: {e}", r.label, row.label));
            }
        }
        if let Some(c) = &d.conclusion {
            sec.notes.push(format!("{}: in short: {c}.", r.label));
        }
    }
    t.head.push("attempts".into());
    sec.tables.push(t);
    let cats = categories(
        docs.iter()
            .flat_map(|d| d.rows.iter().map(|r| r.label.as_str())),
    );
    let rows: Vec<Vec<Option<SummaryIn>>> = docs
        .iter()
        .map(|d| {
            cats.iter()
                .map(|c| d.rows.iter().find(|r| &r.label == c).map(|r| r.summary))
                .collect()
        })
        .collect();
    sec.figures.push(Figure {
        id: "bars".into(),
        chart: min_p50_p99_bars("Round trip per probe", &cats, runs, &rows, opts),
    });
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// db

/// The connection phases of a `db` document.
#[derive(Debug, Clone, Deserialize)]
pub struct PhasesIn {
    /// Name lookup.
    pub dns: SummaryIn,
    /// TCP handshake.
    pub tcp_handshake: SummaryIn,
    /// TLS handshake.
    pub tls: SummaryIn,
    /// Protocol startup and authentication.
    pub startup: SummaryIn,
    /// First query on a new connection.
    pub first_query: SummaryIn,
}

/// The fetch part of a `db` document.
#[derive(Debug, Clone, Deserialize)]
pub struct FetchIn {
    /// Statistics of the fetches.
    pub summary: SummaryIn,
}

/// The multi-row part of a `db --link` document.
#[derive(Debug, Clone, Deserialize)]
pub struct LinkMultiIn {
    /// Statistics of the multi-row calls.
    pub summary: SummaryIn,
}

/// What the db report reads from the `link` part of a `db --link` document.
#[derive(Debug, Clone, Deserialize)]
pub struct LinkIn {
    /// TARGET without password.
    #[serde(default)]
    pub target: String,
    /// Single-row round trips through the link.
    pub round_trip: SummaryIn,
    /// Multi-row calls through the link.
    pub multi_row: LinkMultiIn,
    /// The call as the client saw it.
    pub client_statement: SummaryIn,
}

/// What the db report reads from a `db --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct DbIn {
    /// `--link` only: the round trips through the database link.
    #[serde(default)]
    pub link: Option<LinkIn>,
    /// Connection phases.
    pub phases: PhasesIn,
    /// Protocol-level ping.
    pub ping: SummaryIn,
    /// The query.
    pub query: SummaryIn,
    /// Fetching the rows.
    pub fetch: FetchIn,
    /// Remarks of the run.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
}

impl DbIn {
    /// (phase name, statistics) in the order a session goes through them.
    pub fn phases(&self) -> Vec<(&'static str, SummaryIn)> {
        let p = &self.phases;
        let mut v = vec![
            ("dns", p.dns),
            ("tcp handshake", p.tcp_handshake),
            ("tls", p.tls),
            ("startup", p.startup),
            ("first query", p.first_query),
            ("ping", self.ping),
            ("query", self.query),
            ("fetch", self.fetch.summary),
        ];
        if let Some(l) = &self.link {
            v.push(("link round trip", l.round_trip));
            v.push(("link multi-row", l.multi_row.summary));
            v.push(("whole call at the client", l.client_statement));
        }
        v
    }
}

pub(crate) fn db(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<DbIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Database", runs),
        ..Default::default()
    };
    let mut t = summary_table("Time per phase", "phase");
    for (r, d) in runs.iter().zip(&docs) {
        for (name, s) in d.phases() {
            if s.count > 0 {
                t.rows.push(summary_row(&r.label, name, s));
            }
        }
        if let Some(l) = &d.link {
            sec.notes.push(format!(
                "{}: link to {}: round trips timed inside the local database; ping is the client -> local database leg",
                r.label, l.target
            ));
        }
        for n in &d.notes {
            sec.notes.push(format!("{}: {n}", r.label));
        }
        early(&mut sec, &r.label, &d.error);
    }
    sec.tables.push(t);
    let cats: Vec<String> = docs[0]
        .phases()
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| {
            docs.iter()
                .any(|d| d.phases().iter().any(|(m, s)| m == n && s.count > 0))
        })
        .map(String::from)
        .collect();
    let rows: Vec<Vec<Option<SummaryIn>>> = docs
        .iter()
        .map(|d| {
            cats.iter()
                .map(|c| d.phases().iter().find(|(n, _)| n == c).map(|(_, s)| *s))
                .collect()
        })
        .collect();
    sec.figures.push(Figure {
        id: "bars".into(),
        chart: min_p50_p99_bars("Time per phase", &cats, runs, &rows, opts),
    });
    if runs.iter().any(|r| r.phase_log.is_some()) {
        phase_log_figures(&mut sec, runs, opts);
    }
    Ok(sec)
}

/// Every timed operation of `db --full-log` files: durations over time (min and max per pixel column) and
/// the percentile curve of each operation.
fn phase_log_figures(sec: &mut Section, runs: &[Run], opts: &Options) {
    let (mut lo, mut hi, mut x_end) = (f64::INFINITY, 0.0f64, 0.0f64);
    for l in runs.iter().filter_map(|r| r.phase_log.as_ref()) {
        for o in &l.ops {
            if let Some((a, b)) = o.columns.extremes() {
                lo = lo.min(a);
                hi = hi.max(b);
            }
            x_end = x_end.max(o.columns.width() * o.columns.columns().len() as f64);
        }
    }
    let mut x = Axis::linear("time since start", Unit::Seconds);
    x.min = Some(0.0);
    if x_end > 0.0 {
        x.max = Some(x_end);
    }
    let mut time = Chart::new(
        "Every operation over time",
        x,
        latency_axis("duration", lo, hi, 20.0),
    );
    time.width = opts.width;
    let mut curves = Chart::new(
        "Time per operation by percentile",
        Axis::log("percentile", Unit::TailPercentile),
        latency_axis("duration", lo, hi, 50.0),
    );
    curves.width = opts.width;
    let mut color = 0;
    let mut files = Vec::new();
    for r in runs {
        let Some(l) = &r.phase_log else { continue };
        files.push(format!("{} ({} rows)", l.path, l.rows));
        for o in &l.ops {
            let name = if runs.len() == 1 {
                o.op.replace('_', " ")
            } else {
                format!("{} {}", r.label, o.op.replace('_', " "))
            };
            time.push(Series::new(
                name.clone(),
                color,
                Mark::Columns(o.columns.ranges()),
            ));
            let pts: Vec<PercentileIn> = o
                .histogram
                .percentile_curve()
                .iter()
                .map(|p| PercentileIn {
                    percentile: p.percentile,
                    value_ns: p.value_ns,
                })
                .collect();
            let line = super::charts::percentile_points(&pts);
            if let Some(max) = line.last() {
                curves.push(Series::new("", color, Mark::Points(vec![*max])));
            }
            curves.push(Series::new(name, color, Mark::Line(line)));
            color += 1;
        }
    }
    if let Some(xs) = time.x_scale() {
        for s in &mut time.series {
            if let Mark::Columns(c) = &mut s.mark {
                *c = super::downsample::per_pixel(c, |v| xs.map(v), |p| xs.invert(p));
            }
        }
    }
    time.note = Some(format!(
        "Every timed operation from {}: min to max per pixel column (no extreme dropped).",
        files.join(", ")
    ));
    curves.note = Some(
        "x: 1/(1-p), so each step right is ten times rarer; the dot at the end of a curve is the maximum."
            .into(),
    );
    sec.figures.push(Figure {
        id: "rtt-time".into(),
        chart: time,
    });
    sec.figures.push(Figure {
        id: "percentiles".into(),
        chart: curves,
    });
}

// ---------------------------------------------------------------------------------------------------------
// throughput

/// One rate row of a `throughput` document.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct RateIn {
    /// End of the span, seconds since the start of the size's run.
    pub end_s: f64,
    /// Length of the span, seconds.
    pub length_s: f64,
    /// Messages in the span.
    pub messages: u64,
    /// 10^6 bits per second.
    pub mbit_per_s: f64,
}

/// One message size of a `throughput` document.
#[derive(Debug, Clone, Deserialize)]
pub struct ThroughputRunIn {
    /// Message size.
    pub size_bytes: u64,
    /// The whole run of this size.
    pub total: RateIn,
    /// Per report interval.
    pub intervals: Vec<RateIn>,
    /// Why this size ended early.
    #[serde(default)]
    pub error: Option<String>,
}

/// What the throughput report reads from a `throughput --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct ThroughputIn {
    /// One run per message size.
    pub runs: Vec<ThroughputRunIn>,
}

pub(crate) fn throughput(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<ThroughputIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Throughput", runs),
        ..Default::default()
    };
    let mut t = Table {
        caption: "Throughput per message size".into(),
        head: ["result", "size", "time", "messages", "throughput"]
            .map(String::from)
            .to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        for x in &d.runs {
            t.rows.push(vec![
                r.label.clone(),
                fmt_bytes(x.size_bytes),
                fmt_nanos(x.total.length_s * 1e9),
                x.total.messages.to_string(),
                format!("{:.1} Mbit/s", x.total.mbit_per_s),
            ]);
            early(
                &mut sec,
                &format!("{} {}", r.label, fmt_bytes(x.size_bytes)),
                &x.error,
            );
        }
    }
    sec.tables.push(t);
    let mut x = Axis::linear("time since the start of each size", Unit::Seconds);
    x.min = Some(0.0);
    let mut c = Chart::new(
        "Throughput per interval",
        x,
        Axis::linear("throughput", Unit::BitsPerSecond),
    );
    c.width = opts.width;
    let mut color = 0;
    for (r, d) in runs.iter().zip(&docs) {
        for x in &d.runs {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            for i in &x.intervals {
                let start = (i.end_s - i.length_s).max(0.0);
                if pts.last().is_some_and(|&(x, _)| (x - start).abs() < 1e-9) {
                    pts.pop();
                }
                pts.push((start, i.mbit_per_s * 1e6));
                pts.push((i.end_s, i.mbit_per_s * 1e6));
            }
            let name = if runs.len() == 1 {
                fmt_bytes(x.size_bytes)
            } else {
                format!("{} {}", r.label, fmt_bytes(x.size_bytes))
            };
            c.push(Series::new(name, color, Mark::Step(pts)));
            color += 1;
        }
    }
    c.note = Some("One level per report interval: bits of whole messages per second.".into());
    sec.figures.push(Figure {
        id: "throughput-time".into(),
        chart: c,
    });
    if docs.iter().any(|d| d.runs.len() > 1) {
        let mut c = Chart::new(
            "Throughput vs message size",
            Axis::log("message size", Unit::Bytes),
            Axis::linear("throughput", Unit::BitsPerSecond),
        );
        c.width = opts.width;
        for (i, (r, d)) in runs.iter().zip(&docs).enumerate() {
            let mut pts: Vec<(f64, f64)> = d
                .runs
                .iter()
                .filter(|x| x.total.messages > 0)
                .map(|x| (x.size_bytes as f64, x.total.mbit_per_s * 1e6))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            c.push(Series::new("", i, Mark::Points(pts.clone())));
            c.push(Series::new(r.label.clone(), i, Mark::Line(pts)));
        }
        c.note = Some("Whole-run throughput of each message size.".into());
        sec.figures.push(Figure {
            id: "throughput-size".into(),
            chart: c,
        });
    }
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// capture rpc

/// One operation of a `capture rpc` document.
#[derive(Debug, Clone, Deserialize)]
pub struct OpIn {
    /// Protocol.
    pub proto: String,
    /// Operation.
    pub op: String,
    /// Error responses.
    pub errors: u64,
    /// Time to the response's last byte (`latency` in documents of older versions).
    #[serde(alias = "latency")]
    pub last_byte: SummaryIn,
    /// Time to the response's first byte (absent in documents of older versions).
    #[serde(default)]
    pub first_byte: Option<SummaryIn>,
}

/// One interval row of a `capture rpc -i` document.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct RpcIntervalIn {
    /// Start, seconds since the first request.
    pub start_s: f64,
    /// Transactions that completed in it.
    pub count: u64,
    /// Median latency.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Slowest.
    pub max_ns: u64,
}

/// The report part of a `capture rpc` document.
#[derive(Debug, Clone, Deserialize)]
pub struct RpcReportIn {
    /// Per operation.
    pub ops: Vec<OpIn>,
    /// Per-interval rows (with `-i`).
    #[serde(default)]
    pub intervals: Vec<RpcIntervalIn>,
    /// Their length, seconds (absent in documents of older versions).
    #[serde(default)]
    pub interval_s: Option<f64>,
    /// Transactions in all.
    pub transactions: u64,
}

/// What the rpc report reads from a `capture rpc --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct RpcIn {
    /// The analysis.
    pub report: RpcReportIn,
}

/// Operations drawn at most (the busiest); the table lists all.
pub const MAX_OPS: usize = 24;

/// The operations a chart shows: the busiest [`MAX_OPS`] over all results, as "op" (or "proto op" when
/// several protocols appear), busiest first.
pub fn chart_ops(docs: &[RpcIn]) -> Vec<(String, String, String)> {
    let mut counts: Vec<((String, String), u64)> = Vec::new();
    for d in docs {
        for o in &d.report.ops {
            let k = (o.proto.clone(), o.op.clone());
            match counts.iter_mut().find(|(c, _)| *c == k) {
                Some((_, n)) => *n += o.last_byte.count,
                None => counts.push((k, o.last_byte.count)),
            }
        }
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    counts.truncate(MAX_OPS);
    let protos = categories(counts.iter().map(|((p, _), _)| p.as_str())).len();
    counts
        .into_iter()
        .map(|((p, o), _)| {
            let name = if protos > 1 {
                format!("{p} {o}")
            } else {
                o.clone()
            };
            (p, o, name)
        })
        .collect()
}

pub(crate) fn capture_rpc(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<RpcIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Requests in a capture", runs),
        ..Default::default()
    };
    let mut t = summary_table(
        "Time to the response's first byte per operation (request end to the first response packet)",
        "operation",
    );
    for (r, d) in runs.iter().zip(&docs) {
        for o in &d.report.ops {
            if let Some(f) = o.first_byte {
                t.rows
                    .push(summary_row(&r.label, &format!("{} {}", o.proto, o.op), f));
            }
        }
    }
    if !t.rows.is_empty() {
        sec.tables.push(t);
    }
    let mut t = summary_table(
        "Time to the response's last byte per operation (request end to response end)",
        "operation",
    );
    for (r, d) in runs.iter().zip(&docs) {
        for o in &d.report.ops {
            let mut row = summary_row(&r.label, &format!("{} {}", o.proto, o.op), o.last_byte);
            row.push(o.errors.to_string());
            t.rows.push(row);
        }
    }
    t.head.push("errors".into());
    sec.tables.push(t);
    let ops = chart_ops(&docs);
    let pairs: Vec<String> = docs
        .iter()
        .flat_map(|d| d.report.ops.iter().map(|o| format!("{} {}", o.proto, o.op)))
        .collect();
    let total = categories(pairs.iter().map(String::as_str)).len();
    if total > ops.len() {
        sec.notes.push(format!(
            "The chart shows the {} busiest of {total} operations; the table lists all.",
            ops.len()
        ));
    }
    let cats: Vec<&str> = ops.iter().map(|(_, _, n)| n.as_str()).collect();
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for (r, d) in runs.iter().zip(&docs) {
        type Pick = fn(&OpIn) -> Option<u64>;
        let stats: [(&str, Pick); 4] = [
            ("first p50", |o| o.first_byte.map(|f| f.p50_ns)),
            ("last p50", |o| Some(o.last_byte.p50_ns)),
            ("last p99", |o| Some(o.last_byte.p99_ns)),
            ("last max", |o| Some(o.last_byte.max_ns)),
        ];
        for (stat, pick) in stats {
            let v: Vec<f64> = ops
                .iter()
                .map(|(p, o, _)| {
                    d.report
                        .ops
                        .iter()
                        .find(|x| &x.proto == p && &x.op == o && x.last_byte.count > 0)
                        .and_then(pick)
                        .map_or(f64::NAN, |v| v as f64)
                })
                .collect();
            if v.iter().all(|x| x.is_nan()) {
                continue;
            }
            let name = if runs.len() == 1 {
                stat.to_string()
            } else {
                format!("{} {stat}", r.label)
            };
            groups.push((name, v));
        }
    }
    let refs: Vec<(&str, Vec<f64>)> = groups
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    let mut c = grouped_hbars(
        "Latency per operation",
        &cats,
        &refs,
        Axis::log("latency", Unit::Nanos),
        opts,
    );
    c.note = Some(
        "Median time to the first response byte (first), and median, 99th percentile and slowest time to the \
         last response byte (last) of each operation, busiest first; log axis."
            .into(),
    );
    sec.figures.push(Figure {
        id: "ops".into(),
        chart: c,
    });
    let rows: Vec<Vec<IntervalIn>> = docs
        .iter()
        .map(|d| match d.report.interval_s {
            Some(len) if len > 0.0 => d
                .report
                .intervals
                .iter()
                .map(|i| IntervalIn {
                    end_s: i.start_s + len,
                    length_s: len,
                    round_trips: i.count,
                    p50_ns: i.p50_ns,
                    p99_ns: i.p99_ns,
                    max_ns: i.max_ns,
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    if rows.iter().any(|r| !r.is_empty()) {
        let time: Vec<TimeSource> = runs
            .iter()
            .zip(&rows)
            .map(|(r, i)| TimeSource {
                label: &r.label,
                full_log: None,
                intervals: i,
            })
            .collect();
        let mut c = latency_over_time("Latency over time, all operations", &time, opts);
        c.y.label = "latency".into();
        c.x.label = "time since the first request".into();
        c.note = Some(
            "Per interval (-i), by response time: band from the median to the 99th percentile, dashed line the slowest."
                .into(),
        );
        sec.figures.push(Figure {
            id: "rtt-time".into(),
            chart: c,
        });
    }
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// capture match

/// One operation of a `capture match` document.
#[derive(Debug, Clone, Deserialize)]
pub struct OpMatchIn {
    /// Protocol.
    pub proto: String,
    /// Operation.
    pub op: String,
    /// Requests found in both captures.
    pub matched: u64,
    /// Time to the last byte at the server.
    pub server: SummaryIn,
    /// Time to the last byte at the client.
    pub client: SummaryIn,
    /// Time to the first byte at the server (absent in documents of older versions).
    #[serde(default)]
    pub server_first_byte: Option<SummaryIn>,
    /// Time to the first byte at the client (absent in documents of older versions).
    #[serde(default)]
    pub client_first_byte: Option<SummaryIn>,
}

/// Pairs found by each method (absent in documents of older versions).
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct PairedByIn {
    /// By ONC-RPC XID / DNS ID.
    pub xid: u64,
    /// By TCP sequence number.
    pub tcp_seq: u64,
    /// By the request's leading bytes.
    pub content: u64,
    /// By order within a connection pair.
    pub order: u64,
}

/// What the match report reads from a `capture match --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct MatchIn {
    /// Per operation.
    pub ops: Vec<OpMatchIn>,
    /// Pairs found by each method.
    #[serde(default)]
    pub paired_by: Option<PairedByIn>,
    /// The verdict.
    pub verdict: String,
}

pub(crate) fn capture_match(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<MatchIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Client and server captures matched", runs),
        ..Default::default()
    };
    let mut t = summary_table(
        "Latency of the matched requests at each end",
        "operation, end",
    );
    for (r, d) in runs.iter().zip(&docs) {
        for o in d.ops.iter().filter(|o| o.matched > 0) {
            t.rows.push(summary_row(
                &r.label,
                &format!("{} at server", o.op),
                o.server,
            ));
            t.rows.push(summary_row(
                &r.label,
                &format!("{} at client", o.op),
                o.client,
            ));
        }
        sec.notes.push(format!("{}: {}", r.label, d.verdict));
        if let Some(p) = d.paired_by {
            sec.notes.push(format!(
                "{}: paired by XID {}, by TCP sequence number {}, by content (leading request bytes) {}, by \
                 order {}",
                r.label, p.xid, p.tcp_seq, p.content, p.order
            ));
        }
    }
    sec.tables.push(t);
    let cats = categories(docs.iter().flat_map(|d| {
        d.ops
            .iter()
            .filter(|o| o.matched > 0)
            .map(|o| o.op.as_str())
    }));
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for (r, d) in runs.iter().zip(&docs) {
        type Pick = fn(&OpMatchIn) -> Option<u64>;
        let stats: [(&str, Pick); 6] = [
            ("server first p50", |o| {
                o.server_first_byte.map(|s| s.p50_ns)
            }),
            ("client first p50", |o| {
                o.client_first_byte.map(|s| s.p50_ns)
            }),
            ("server p50", |o| Some(o.server.p50_ns)),
            ("client p50", |o| Some(o.client.p50_ns)),
            ("server p99", |o| Some(o.server.p99_ns)),
            ("client p99", |o| Some(o.client.p99_ns)),
        ];
        for (what, pick) in stats {
            let v: Vec<f64> = cats
                .iter()
                .map(|c| {
                    d.ops
                        .iter()
                        .find(|o| &o.op == c && o.matched > 0)
                        .and_then(pick)
                        .map_or(f64::NAN, |v| v as f64)
                })
                .collect();
            if v.iter().all(|x| x.is_nan()) {
                continue;
            }
            let name = if runs.len() == 1 {
                what.to_string()
            } else {
                format!("{} {what}", r.label)
            };
            groups.push((name, v));
        }
    }
    let y = bar_axis("latency", &groups);
    let refs: Vec<(&str, Vec<f64>)> = groups
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    let mut c = grouped_hbars(
        "Latency at the server and at the client",
        &cats.iter().map(String::as_str).collect::<Vec<_>>(),
        &refs,
        y,
        opts,
    );
    c.note = Some(
        "Time to the first response byte (first) and to the last (p50, p99), at each end; the difference \
         between the two ends is the path between the capture points."
            .into(),
    );
    sec.figures.push(Figure {
        id: "bars".into(),
        chart: c,
    });
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// capture stats

/// One row of a `capture stats` document.
#[derive(Debug, Clone, Deserialize)]
pub struct StatsRowIn {
    /// Start of the interval, seconds since the first packet.
    pub start_s: f64,
    /// Direction ("all" unless split).
    pub direction: Value,
    /// Packets.
    pub packets: u64,
    /// On-wire bits per second.
    pub bits_per_s: f64,
}

/// What the traffic report reads from a `capture stats --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct StatsIn {
    /// Interval length, seconds.
    pub interval_s: f64,
    /// Per-interval rows.
    pub rows: Vec<StatsRowIn>,
    /// The whole capture.
    pub total: StatsRowIn,
}

fn dir_name(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

pub(crate) fn capture_stats(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<StatsIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Traffic in a capture", runs),
        ..Default::default()
    };
    let mut t = Table {
        caption: "The whole capture".into(),
        head: ["result", "packets", "rate"].map(String::from).to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        t.rows.push(vec![
            r.label.clone(),
            d.total.packets.to_string(),
            super::svg::label(d.total.bits_per_s, Unit::BitsPerSecond),
        ]);
    }
    sec.tables.push(t);
    let mut x = Axis::linear("time since the first packet", Unit::Seconds);
    x.min = Some(0.0);
    let mut c = Chart::new(
        "On-wire rate per interval",
        x,
        Axis::linear("rate", Unit::BitsPerSecond),
    );
    c.width = opts.width;
    let mut color = 0;
    for (r, d) in runs.iter().zip(&docs) {
        let dirs = categories(
            d.rows
                .iter()
                .map(|x| dir_name(&x.direction))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str),
        );
        for dir in &dirs {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            for row in d.rows.iter().filter(|x| &dir_name(&x.direction) == dir) {
                if pts
                    .last()
                    .is_some_and(|&(x, _)| (x - row.start_s).abs() < 1e-9)
                {
                    pts.pop();
                }
                pts.push((row.start_s, row.bits_per_s));
                pts.push((row.start_s + d.interval_s, row.bits_per_s));
            }
            let mut name = if runs.len() > 1 {
                r.label.clone()
            } else {
                String::new()
            };
            if dirs.len() > 1 {
                name = format!("{name} {dir}").trim().to_string();
            }
            if name.is_empty() {
                name = "rate".into();
            }
            c.push(Series::new(name, color, Mark::Step(pts)));
            color += 1;
        }
    }
    c.note = Some("On-wire bits (frame lengths) per second, one level per interval.".into());
    sec.figures.push(Figure {
        id: "traffic".into(),
        chart: c,
    });
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// capture flows

/// One direction of a flow in a `capture flows` document.
#[derive(Debug, Clone, Deserialize)]
pub struct DirIn {
    /// Payload bytes.
    pub payload_bytes: u64,
    /// Largest bytes in flight.
    pub in_flight_max_bytes: u64,
    /// Largest advertised window.
    pub window_max_bytes: u64,
    /// Retransmitted segments.
    pub retransmissions: u64,
}

/// One flow of a `capture flows` document.
#[derive(Debug, Clone, Deserialize)]
pub struct FlowIn {
    /// Connection number.
    pub id: u64,
    /// Client end.
    pub client: String,
    /// Server end.
    pub server: String,
    /// Life of the connection, seconds.
    pub duration_s: f64,
    /// Client to server.
    pub client_to_server: DirIn,
    /// Server to client.
    pub server_to_client: DirIn,
    /// What limited it.
    pub diagnosis: String,
}

/// One bucket of the flow time series.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct SeriesBucketIn {
    /// Start, seconds since the connection's first packet.
    pub start_s: f64,
    /// Smallest in flight.
    pub in_flight_min_bytes: Option<u64>,
    /// Largest in flight.
    pub in_flight_max_bytes: Option<u64>,
    /// Smallest advertised window.
    pub window_min_bytes: Option<u64>,
    /// Largest advertised window.
    pub window_max_bytes: Option<u64>,
}

/// The flow time series of a `capture flows` document.
#[derive(Debug, Clone, Deserialize)]
pub struct FlowSeriesIn {
    /// Which connection.
    pub flow_id: u64,
    /// Its data direction, "client_to_server" or "server_to_client".
    pub direction: String,
    /// Why this one.
    pub chosen: String,
    /// Bucket length, seconds.
    pub bucket_s: f64,
    /// The buckets.
    pub buckets: Vec<SeriesBucketIn>,
}

/// What the flows report reads from a `capture flows --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct FlowsIn {
    /// One per connection.
    pub flows: Vec<FlowIn>,
    /// In flight against window over time for one connection (absent in documents of older versions).
    #[serde(default)]
    pub window_series: Option<FlowSeriesIn>,
}

/// In-flight (min to max per bucket, strokes) and the receiver's window (band from min to max per bucket,
/// max as a line) of one flow's time series.
pub fn flow_chart(title: &str, s: &FlowSeriesIn, opts: &Options) -> Chart {
    let mut x = Axis::linear("time since the connection's first packet", Unit::Seconds);
    x.min = Some(0.0);
    let mut c = Chart::new(title, x, Axis::linear("bytes", Unit::Bytes));
    c.width = opts.width;
    let mid = |b: &SeriesBucketIn| b.start_s + s.bucket_s / 2.0;
    // The window holds its value until the next packet changes it: each bucket's min..max is drawn as a
    // block from the bucket's start to the start of the next bucket with a window reading (or one bucket
    // wide for the last), so sparse captures show steps, never slopes that no packet carried.
    let readings: Vec<(f64, f64, f64)> = s
        .buckets
        .iter()
        .filter_map(|b| match (b.window_min_bytes, b.window_max_bytes) {
            (Some(lo), Some(hi)) => Some((b.start_s, lo as f64, hi as f64)),
            _ => None,
        })
        .collect();
    // The last reading holds to the end of the series (packets that carry no window, such as the other
    // side's data, still extend it).
    let series_end = s.buckets.last().map_or(0.0, |b| b.start_s + s.bucket_s);
    let mut win: Vec<(f64, f64, f64)> = Vec::with_capacity(2 * readings.len());
    for (i, &(start, lo, hi)) in readings.iter().enumerate() {
        let end = readings
            .get(i + 1)
            .map_or(series_end.max(start + s.bucket_s), |r| r.0);
        win.push((start, lo, hi));
        win.push((end, lo, hi));
    }
    let upper: Vec<(f64, f64)> = win.iter().map(|&(x, _, hi)| (x, hi)).collect();
    let fl: Vec<(f64, f64, f64)> = s
        .buckets
        .iter()
        .filter_map(|b| match (b.in_flight_min_bytes, b.in_flight_max_bytes) {
            (Some(lo), Some(hi)) => Some((mid(b), lo as f64, hi as f64)),
            _ => None,
        })
        .collect();
    c.push(Series::new(
        "advertised window (min to max)",
        1,
        Mark::Band(win),
    ));
    c.push(Series::new("advertised window max", 1, Mark::Line(upper)).dashed());
    c.push(Series::new(
        "bytes in flight (min to max)",
        0,
        Mark::Columns(fl),
    ));
    c.note = Some(format!(
        "Connection #{} ({}), {}; {} buckets of {}, min and max per bucket (no extreme dropped).",
        s.flow_id,
        s.direction.replace('_', " "),
        if s.chosen == "largest" {
            "the one with the most payload (pick another with --flow)"
        } else {
            "the only one that matched"
        },
        s.buckets.len(),
        fmt_nanos(s.bucket_s * 1e9)
    ));
    c
}

pub(crate) fn capture_flows(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<FlowsIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("TCP connections in a capture", runs),
        ..Default::default()
    };
    let mut t = Table {
        caption: "Connections (largest first, at most 20 per result)".into(),
        head: [
            "result",
            "#",
            "client",
            "server",
            "duration",
            "bytes c>s",
            "bytes s>c",
            "in flight max",
            "window max",
            "retrans",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        let mut flows: Vec<&FlowIn> = d.flows.iter().collect();
        flows.sort_by_key(|f| {
            std::cmp::Reverse(f.client_to_server.payload_bytes + f.server_to_client.payload_bytes)
        });
        for f in flows.iter().take(20) {
            let (bulk, recv) =
                if f.server_to_client.payload_bytes > f.client_to_server.payload_bytes {
                    (&f.server_to_client, &f.client_to_server)
                } else {
                    (&f.client_to_server, &f.server_to_client)
                };
            t.rows.push(vec![
                r.label.clone(),
                f.id.to_string(),
                f.client.clone(),
                f.server.clone(),
                fmt_nanos(f.duration_s * 1e9),
                fmt_bytes(f.client_to_server.payload_bytes),
                fmt_bytes(f.server_to_client.payload_bytes),
                fmt_bytes(bulk.in_flight_max_bytes),
                fmt_bytes(recv.window_max_bytes),
                (f.client_to_server.retransmissions + f.server_to_client.retransmissions)
                    .to_string(),
            ]);
            sec.notes
                .push(format!("{} #{}: {}", r.label, f.id, f.diagnosis));
        }
        match &d.window_series {
            Some(s) => sec.figures.push(Figure {
                id: if sec.figures.is_empty() {
                    "flow".into()
                } else {
                    format!("flow-{}", sec.figures.len() + 1)
                },
                chart: flow_chart(
                    &if runs.len() == 1 {
                        "Bytes in flight vs advertised window".to_string()
                    } else {
                        format!("{}: bytes in flight vs advertised window", r.label)
                    },
                    s,
                    opts,
                ),
            }),
            None if !d.flows.is_empty() => sec.notes.push(format!(
                "{}: the document has no window_series (written by an older roundtrip): run capture flows again to draw in flight against the window.",
                r.label
            )),
            None => sec
                .notes
                .push(format!("{}: no TCP connection in the capture.", r.label)),
        }
    }
    sec.tables.push(t);
    Ok(sec)
}

// ---------------------------------------------------------------------------------------------------------
// capture timeline: the TCP time-sequence graph.

/// New data of one time column of a time-sequence graph.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct SegColumnIn {
    /// Time of the column's first segment, seconds.
    pub first_s: f64,
    /// Time of its last segment.
    pub last_s: f64,
    /// Lowest sequence number.
    pub seq_lo: u64,
    /// Highest segment end.
    pub seq_hi: u64,
    /// Segments in the column.
    pub segments: u64,
}

/// One retransmitted segment.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct SegMarkIn {
    /// Time, seconds.
    pub t_s: f64,
    /// First byte.
    pub seq: u64,
    /// One past the last byte.
    pub end: u64,
}

/// One sample of the ACK line or the window edge.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct LinePointIn {
    /// Time, seconds.
    pub t_s: f64,
    /// Sequence number.
    pub value: u64,
}

/// A SACKed range.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct SackMarkIn {
    /// Time, seconds.
    pub t_s: f64,
    /// Left edge.
    pub left: u64,
    /// Right edge.
    pub right: u64,
}

/// A zero-window period.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct SpanIn {
    /// Start, seconds.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
}

/// The time-sequence graph of a `capture timeline` document.
#[derive(Debug, Clone, Deserialize)]
pub struct SeqGraphIn {
    /// Connection number.
    pub flow_id: u64,
    /// Sender of the data.
    pub sender: String,
    /// Its receiver.
    pub receiver: String,
    /// "busier" or "asked".
    pub chosen: String,
    /// Time from the connection's first to its last packet.
    pub duration_s: f64,
    /// Width of one time column.
    pub column_s: f64,
    /// The receiver's window scale shift, when negotiated.
    pub window_scale: Option<u8>,
    /// Data segments.
    pub data_segments: u64,
    /// Retransmitted segments.
    pub retransmitted_segments: u64,
    /// Receiver packets with SACK blocks.
    pub sack_packets: u64,
    /// Receiver packets with a zero window.
    pub zero_window_packets: u64,
    /// New data per column.
    pub segments: Vec<SegColumnIn>,
    /// Every retransmission.
    pub retransmissions: Vec<SegMarkIn>,
    /// The ACK line.
    pub ack: Vec<LinePointIn>,
    /// ACK + window.
    pub window_edge: Vec<LinePointIn>,
    /// SACKed ranges.
    pub sack: Vec<SackMarkIn>,
    /// Zero-window periods.
    pub zero_windows: Vec<SpanIn>,
}

/// What the timeline report reads from a `capture timeline --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct TimelineIn {
    /// The graph (absent when no TCP connection matched, or in documents of older versions).
    #[serde(default)]
    pub seq_graph: Option<SeqGraphIn>,
}

/// The time-sequence graph (Stevens/tcptrace): sequence number against time for one direction's data, with
/// the receiver's ACK line, window edge, SACK blocks and zero-window periods.
pub fn seq_chart(title: &str, g: &SeqGraphIn, opts: &Options) -> Chart {
    let mut x = Axis::linear("time since the connection's first packet", Unit::Seconds);
    x.min = Some(0.0);
    let mut c = Chart::new(
        title,
        x,
        Axis::linear("relative sequence number", Unit::Bytes),
    );
    c.width = opts.width;
    c.height = 560;
    // A line holds its last value to the end of the connection (until a packet says otherwise).
    let steps = |pts: &[LinePointIn]| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = pts.iter().map(|p| (p.t_s, p.value as f64)).collect();
        if let Some(&(t, y)) = v.last()
            && t < g.duration_s
        {
            v.push((g.duration_s, y));
        }
        v
    };
    if !g.zero_windows.is_empty() {
        c.push(Series::new(
            "zero window",
            7,
            Mark::Spans(
                g.zero_windows
                    .iter()
                    .map(|z| (z.start_s, z.end_s))
                    .collect(),
            ),
        ));
    }
    c.push(Series::new(
        "window edge (ACK + advertised window)",
        2,
        Mark::Step(steps(&g.window_edge)),
    ));
    c.push(Series::new("ACK", 3, Mark::Step(steps(&g.ack))));
    if !g.sack.is_empty() {
        c.push(Series::new(
            "SACKed",
            4,
            Mark::Columns(
                g.sack
                    .iter()
                    .map(|s| (s.t_s, s.left as f64, s.right as f64))
                    .collect(),
            ),
        ));
    }
    c.push(Series::new(
        "data segments",
        0,
        Mark::Columns(
            g.segments
                .iter()
                .map(|s| (s.first_s, s.seq_lo as f64, s.seq_hi as f64))
                .collect(),
        ),
    ));
    if !g.retransmissions.is_empty() {
        c.push(Series::new(
            "retransmissions",
            1,
            Mark::Columns(
                g.retransmissions
                    .iter()
                    .map(|r| (r.t_s, r.seq as f64, r.end as f64))
                    .collect(),
            ),
        ));
        // A dot on each, so that retransmissions stay visible where a segment is less than a pixel tall.
        c.push(Series::new(
            "",
            1,
            Mark::Points(
                g.retransmissions
                    .iter()
                    .map(|r| (r.t_s, r.seq as f64))
                    .collect(),
            ),
        ));
    }
    c.note = Some(format!(
        "Connection #{}, data {} -> {} ({}); window scale {}.",
        g.flow_id,
        g.sender,
        g.receiver,
        if g.chosen == "asked" {
            "as --data-from asked"
        } else {
            "the busier direction"
        },
        g.window_scale
            .map_or("not negotiated: windows as sent".to_string(), |s| format!(
                "{s} (x{})",
                1u64 << s
            )),
    ));
    c
}

pub(crate) fn capture_timeline(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<TimelineIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("TCP time-sequence graph", runs),
        ..Default::default()
    };
    let mut t = Table {
        caption: "What the graph shows".into(),
        head: [
            "result",
            "#",
            "data from",
            "to",
            "segments",
            "retransmitted",
            "ACKs with SACK",
            "zero-window ACKs",
            "zero-window periods",
            "drawn as",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        if let Some(g) = &d.seq_graph {
            let merged = g.segments.iter().any(|s| s.segments > 1);
            t.rows.push(vec![
                r.label.clone(),
                g.flow_id.to_string(),
                g.sender.clone(),
                g.receiver.clone(),
                g.data_segments.to_string(),
                g.retransmitted_segments.to_string(),
                g.sack_packets.to_string(),
                g.zero_window_packets.to_string(),
                g.zero_windows.len().to_string(),
                if merged {
                    format!(
                        "new data merged per {} column, every retransmission apart",
                        fmt_nanos(g.column_s * 1e9)
                    )
                } else {
                    "one stroke per segment".into()
                },
            ]);
        }
        match &d.seq_graph {
            Some(g) => sec.figures.push(Figure {
                id: if sec.figures.is_empty() {
                    "time-sequence".into()
                } else {
                    format!("time-sequence-{}", sec.figures.len() + 1)
                },
                chart: seq_chart(
                    &if runs.len() == 1 {
                        "Sequence number over time (time-sequence graph)".to_string()
                    } else {
                        format!("{}: sequence number over time", r.label)
                    },
                    g,
                    opts,
                ),
            }),
            None => sec.notes.push(format!(
                "{}: the document has no seq_graph (no TCP connection matched, or it was written by an older roundtrip): run capture timeline --json again.",
                r.label
            )),
        }
    }
    sec.tables.push(t);
    sec.notes.push("Sequence numbers are relative to the sender's first (initial) sequence number; the ACK line is the receiver's cumulative ACK, the window edge its ACK plus its advertised window (scaled by the window scale of the handshake), SACKed ranges are the blocks it reported holding beyond the ACK, shaded periods are where it advertised a zero window.".into());
    Ok(sec)
}
