//! `roundtrip report`: draw saved `--json` results (and their full logs) into one HTML page or one SVG chart;
//! and [`PictureArgs`], the `--report`/`--svg` options every measuring command flattens into its arguments.

use super::output::{Exit, note, out};
use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use roundtrip::output_file;
use roundtrip::report::charts::{self, Options, Run};
use roundtrip::report::json::to_bytes;
use roundtrip::report::{html, load};
use std::path::{Path, PathBuf};

/// Which chart `--svg` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChartId {
    /// Latency by percentile on a log 1/(1-p) axis (ping, connect, icmp, load).
    Percentiles,
    /// Latency histogram (ping, connect, icmp, load).
    Distribution,
    /// Latency over time (ping, connect, icmp).
    RttTime,
    /// Percentiles of several ping results side by side (needs two or more results).
    Compare,
    /// Side-by-side bars: compare probes, db phases, load percentiles, capture match operations.
    Bars,
    /// Latency against offered rate or message size (sweep).
    Sweep,
    /// Throughput per interval (throughput).
    ThroughputTime,
    /// Throughput against message size (throughput with several sizes).
    ThroughputSize,
    /// Latency per operation (capture rpc).
    Ops,
    /// Bytes in flight against the advertised window over time, one connection (capture flows).
    Flow,
    /// On-wire rate per interval (capture stats).
    Traffic,
    /// Sequence number over time, one connection (capture timeline).
    TimeSequence,
    /// The kernel's RTT over time, first connection drawn (tcp).
    TcpRtt,
    /// cwnd, in flight and windows over time, limited periods shaded, first connection drawn (tcp).
    TcpWindow,
}

impl ChartId {
    /// The chart's name, as `--chart` spells it.
    pub fn id(self) -> &'static str {
        match self {
            ChartId::Percentiles => "percentiles",
            ChartId::Distribution => "distribution",
            ChartId::RttTime => "rtt-time",
            ChartId::Compare => "compare",
            ChartId::Bars => "bars",
            ChartId::Sweep => "sweep",
            ChartId::ThroughputTime => "throughput-time",
            ChartId::ThroughputSize => "throughput-size",
            ChartId::Ops => "ops",
            ChartId::Flow => "flow",
            ChartId::Traffic => "traffic",
            ChartId::TimeSequence => "time-sequence",
            ChartId::TcpRtt => "tcp-rtt",
            ChartId::TcpWindow => "tcp-window",
        }
    }
}

/// Picture options shared by every measuring command (`#[command(flatten)]`).
#[derive(Debug, Clone, Args)]
pub struct PictureArgs {
    /// Also write a self-contained HTML report: settings, environment, tables and the charts this command's
    /// result allows (see README, Reports).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Also write one chart as a standalone SVG file (which one: --chart).
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// The chart --svg writes [default: percentiles where drawn, else the result's first chart].
    #[arg(long, value_enum, requires = "svg")]
    pub chart: Option<ChartId>,
    /// Histogram counts on a log axis, so single slow round trips show beside the bulk.
    #[arg(long)]
    pub log_counts: bool,
}

impl PictureArgs {
    /// True when a picture was asked for.
    pub fn wanted(&self) -> bool {
        self.report.is_some() || self.svg.is_some()
    }

    /// Checks the output paths before any I/O: their folders exist and they differ.
    pub fn validate(&self) -> anyhow::Result<()> {
        for p in self.report.iter().chain(self.svg.iter()) {
            check_output(p)?;
        }
        if let (Some(a), Some(b)) = (&self.report, &self.svg)
            && a == b
        {
            bail!(
                "--report and --svg both name {}: give two different files",
                a.display()
            );
        }
        Ok(())
    }

    /// Draws `runs` and writes the requested files, printing one note per file to stderr.
    pub fn write(&self, title: &str, runs: &[Run]) -> anyhow::Result<()> {
        let opts = Options {
            log_counts: self.log_counts,
            ..Options::default()
        };
        let page = charts::page(title, runs, &opts)?;
        // Pick the SVG's chart first, so a wrong --chart writes nothing.
        let svg = match &self.svg {
            Some(path) => {
                let figures = || page.sections.iter().flat_map(|s| &s.figures);
                let want = match self.chart {
                    Some(c) => c.id(),
                    None if figures().any(|f| f.id == "percentiles") => "percentiles",
                    None => figures().next().map_or("percentiles", |f| f.id.as_str()),
                };
                let Some(fig) = figures().find(|f| f.id == want) else {
                    let have: Vec<&str> = figures().map(|f| f.id.as_str()).collect();
                    if have.is_empty() {
                        let why = page
                            .sections
                            .iter()
                            .flat_map(|s| &s.notes)
                            .next()
                            .map_or("nothing was measured", |n| n.trim_end_matches('.'))
                            .to_string();
                        bail!(
                            "no chart can be drawn from these results for {} ({why}); drop --svg",
                            path.display()
                        );
                    }
                    bail!(
                        "no {want} chart for these results (charts drawn: {}); pick another with --chart",
                        have.join(", ")
                    );
                };
                Some((path, fig.chart.render(true)))
            }
            None => None,
        };
        if let Some(path) = &self.report {
            output_file::write(path, html::render(&page).as_bytes())
                .with_context(|| format!("cannot write the report {}", path.display()))?;
            note(format!("report: {}", path.display()));
        }
        if let Some((path, text)) = svg {
            output_file::write(path, text.as_bytes())
                .with_context(|| format!("cannot write the SVG {}", path.display()))?;
            note(format!("svg: {}", path.display()));
        }
        Ok(())
    }
}

/// Checks an output path before any I/O (see [`roundtrip::output_file::probe`]): a regular file, a new name in
/// a folder that exists and can be written, a FIFO or `-` (standard output, taken from the command's own
/// results: [`super::output::take_stdout`]); a symbolic link, a directory, a device or a socket is refused.
pub fn check_output(p: &Path) -> anyhow::Result<()> {
    if output_file::probe(p)? == output_file::Kind::Stdout {
        super::output::take_stdout()?;
    }
    Ok(())
}

/// A full log written by this run that can be read back for the report: a regular file (not `-`, not a FIFO).
pub fn readable_log(p: Option<&Path>) -> Option<&Path> {
    p.filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
}

/// Arguments of `roundtrip report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Results saved with `roundtrip ... --json > FILE.json`; several are overlaid for comparison.
    #[arg(required = true, value_name = "RESULT.json")]
    results: Vec<PathBuf>,
    /// Full log (`--full-log` CSV) of a result, to draw every round trip; the first --full-log goes with the
    /// first result, the second with the second, ...
    #[arg(long, value_parser = super::args::input_file, value_name = "CSV")]
    full_log: Vec<PathBuf>,
    /// Name of a result in legends and tables (default: its file name), in the order of the results.
    #[arg(long, value_name = "NAME")]
    name: Vec<String>,
    /// Write the HTML report here (- for standard output; a symbolic link is refused).
    #[arg(short = 'o', long, value_name = "FILE.html")]
    output: Option<PathBuf>,
    /// Page title.
    #[arg(long, default_value = "roundtrip report")]
    title: String,
    #[command(flatten)]
    pictures: SvgOnly,
}

/// The picture options of `roundtrip report` (its HTML file is `-o`).
#[derive(Debug, Args)]
struct SvgOnly {
    /// Write one chart as a standalone SVG file (which one: --chart).
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
    /// The chart --svg writes [default: percentiles where drawn, else the result's first chart].
    #[arg(long, value_enum, requires = "svg")]
    chart: Option<ChartId>,
    /// Histogram counts on a log axis, so single slow round trips show beside the bulk.
    #[arg(long)]
    log_counts: bool,
}

/// Runs `roundtrip report`.
pub fn run(a: ReportArgs) -> anyhow::Result<Exit> {
    let pictures = PictureArgs {
        report: a.output.clone(),
        svg: a.pictures.svg.clone(),
        chart: a.pictures.chart,
        log_counts: a.pictures.log_counts,
    };
    if !pictures.wanted() {
        return Err(super::output::refused(
            "nothing to write: give -o FILE.html (and/or --svg FILE.svg)",
        ));
    }
    if a.full_log.len() > a.results.len() {
        return Err(super::output::refused(format!(
            "{} --full-log files for {} results: each --full-log goes with the result at the same position",
            a.full_log.len(),
            a.results.len()
        )));
    }
    if a.name.len() > a.results.len() {
        return Err(super::output::refused(format!(
            "{} --name values for {} results: give at most one name per result",
            a.name.len(),
            a.results.len()
        )));
    }
    pictures.validate().map_err(super::output::refused)?;

    let mut runs = Vec::new();
    for (i, path) in a.results.iter().enumerate() {
        let doc = load::load(path)?;
        charts::check_kind(&doc)?;
        let (full_log, phase_log) = match a.full_log.get(i) {
            Some(p) => read_log(p, &doc)?,
            None => (None, None),
        };
        let label = a.name.get(i).cloned().unwrap_or_else(|| {
            path.file_stem().map_or_else(
                || path.display().to_string(),
                |s| s.to_string_lossy().into(),
            )
        });
        runs.push(Run {
            label,
            doc,
            full_log,
            phase_log,
        });
    }
    pictures.write(&a.title, &runs)?;
    Ok(Exit::Ok)
}

/// Draws a whole document (envelope included) when pictures were asked for, then prints it as JSON when
/// `json` is set.
pub fn draw_and_print_doc<T: serde::Serialize>(
    pictures: &PictureArgs,
    json: bool,
    doc: &T,
    label: &str,
) -> anyhow::Result<()> {
    if pictures.wanted() {
        after_run(pictures, doc, None, label)?;
    }
    if json {
        out(to_bytes(doc))?;
    }
    Ok(())
}

/// Draws the result a command just measured (its `--json` document, and its full log when one was written).
pub fn after_run<T: serde::Serialize>(
    pictures: &PictureArgs,
    doc: &T,
    full_log: Option<&Path>,
    label: &str,
) -> anyhow::Result<()> {
    let value = serde_json::to_value(doc).context("preparing the report")?;
    let doc = load::from_value("this run", value)?;
    let (full_log, phase_log) = match readable_log(full_log) {
        Some(p) => read_log(p, &doc)?,
        None => (None, None),
    };
    let runs = [Run {
        label: label.to_string(),
        doc,
        full_log,
        phase_log,
    }];
    pictures.write(&format!("roundtrip {}: {label}", runs[0].doc.kind), &runs)
}

/// Reads a full log of `ping` or `db` and checks that it goes with the result's kind.
fn read_log(
    path: &Path,
    doc: &load::Loaded,
) -> anyhow::Result<(Option<load::FullLogSeries>, Option<load::PhaseLog>)> {
    match load::load_any_log(path)? {
        load::AnyLog::Ping(f) if doc.kind == "ping" => Ok((Some(f), None)),
        load::AnyLog::Db(f) if doc.kind == "db" => Ok((None, Some(f))),
        log => bail!(
            "{} is a {} full log but {} holds a \"{}\" result: give each --full-log after the result it was written with",
            path.display(),
            if matches!(log, load::AnyLog::Ping(_)) {
                "ping"
            } else {
                "db"
            },
            doc.path,
            doc.kind
        ),
    }
}
