//! `roundtrip mesh (--prometheus URL | --agent URL...)`: the all-pairs matrix of a fleet of agents, rows =
//! sources, columns = targets, each cell p50 / p99 RTT and loss, as text, JSON or an HTML heat map.

use super::args;
use super::output::{Exit, error_line, note, out, out_text};
use anyhow::Context;
use clap::Args;
use roundtrip::mesh::{self, Filter, Mesh, agents, prometheus};
use roundtrip::report::heatmap;
use roundtrip::report::json;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `roundtrip mesh`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("from").required(true).args(["prometheus", "agent"]))]
pub struct MeshArgs {
    /// Read the matrix from this Prometheus server's HTTP API (http:// only), e.g. http://127.0.0.1:9090.
    #[arg(long, value_name = "URL", conflicts_with = "agent")]
    prometheus: Option<String>,
    /// Read this agent's /api/results (its --metrics address, e.g. http://10.0.0.1:9911); repeat for each
    /// agent: each is one row, over its own window.
    #[arg(long, value_name = "URL")]
    agent: Vec<String>,
    /// The span of results the cells cover (Prometheus; the agents report over their own --span) [default: 5m].
    #[arg(long, alias = "window", value_name = "DURATION", value_parser = span)]
    span: Option<Duration>,
    /// The probe kind shown: tcp, udp, connect, icmp or db.
    #[arg(long, default_value = "tcp", value_parser = mesh::PROBES)]
    probe: String,
    /// Only this message size (bytes); default every size (Prometheus combines them).
    #[arg(long, value_name = "BYTES", value_parser = size)]
    size: Option<u32>,
    /// Give up on a server that has not answered a request within this time.
    #[arg(long, default_value = "10s", value_parser = args::positive_duration, allow_hyphen_values = true)]
    timeout: Duration,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the matrix as a self-contained HTML heat map.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
}

/// The default of --span.
const DEFAULT_WINDOW: Duration = Duration::from_secs(300);

fn span(s: &str) -> Result<Duration, String> {
    let d = args::duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!("span '{s}' must be at least 1s"));
    }
    if prometheus::promql_range(d).is_none() {
        return Err(format!("span '{s}' must be a whole number of milliseconds"));
    }
    Ok(d)
}

fn size(s: &str) -> Result<u32, String> {
    let n = args::size(s)?;
    u32::try_from(n).map_err(|_| format!("size '{s}' is too large"))
}

/// Runs `roundtrip mesh`.
pub fn run(a: MeshArgs) -> anyhow::Result<Exit> {
    // Everything that can be checked without the network first.
    if let Some(p) = &a.report {
        super::report::check_output(p).map_err(super::output::refused)?;
    }
    for u in a.prometheus.iter().chain(a.agent.iter()) {
        if let Err(e) = mesh::http::Url::parse(u) {
            return Err(super::output::refused(e));
        }
    }
    let filter = Filter {
        probe: a.probe.clone(),
        size: a.size,
    };
    let m: Mesh = match &a.prometheus {
        Some(url) => prometheus::read(url, &filter, a.span.unwrap_or(DEFAULT_WINDOW), a.timeout)?,
        None => {
            if a.span.is_some() {
                note(
                    "note: --span applies to --prometheus; each agent reports over its own span (its --span)",
                );
            }
            agents::read(&a.agent, &filter, a.timeout)?
        }
    };
    for n in &m.notes {
        note(format!("note: {n}"));
    }
    if let Some(path) = &a.report {
        roundtrip::output_file::write(
            path,
            heatmap::render("roundtrip mesh", &m.matrix).as_bytes(),
        )
        .with_context(|| format!("cannot write the report {}", path.display()))?;
        note(format!("report: {}", path.display()));
    }
    if a.json {
        out(json::envelope_bytes("mesh", doc(&m, &filter)))?;
    } else {
        out_text(roundtrip::report::text::mesh::text(&m.matrix, &filter))?;
    }
    for e in &m.failed {
        error_line(e);
    }
    Ok(if m.failed.is_empty() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

#[derive(Serialize)]
struct Doc<'a> {
    origin: &'a str,
    window_seconds: f64,
    probe: &'a str,
    size_bytes: Option<u32>,
    sources: &'a [String],
    targets: &'a [String],
    cells: Vec<CellDoc<'a>>,
    notes: &'a [String],
    failed: Vec<String>,
}

#[derive(Serialize)]
struct CellDoc<'a> {
    source: &'a str,
    target: &'a str,
    p50_seconds: Option<f64>,
    p99_seconds: Option<f64>,
    loss: Option<f64>,
    probes: u64,
}

fn doc<'a>(m: &'a Mesh, filter: &'a Filter) -> Doc<'a> {
    let mx = &m.matrix;
    let mut cells = Vec::with_capacity(mx.cells.len());
    // In display order, rows then columns.
    for s in &mx.sources {
        for t in &mx.targets {
            if let Some(c) = mx.cells.get(&(s.clone(), t.clone())) {
                cells.push(CellDoc {
                    source: s,
                    target: t,
                    p50_seconds: c.p50.map(|d| d.as_secs_f64()),
                    p99_seconds: c.p99.map(|d| d.as_secs_f64()),
                    loss: c.loss,
                    probes: c.probes,
                });
            }
        }
    }
    Doc {
        origin: &mx.origin,
        window_seconds: mx.window.as_secs_f64(),
        probe: &filter.probe,
        size_bytes: filter.size,
        sources: &mx.sources,
        targets: &mx.targets,
        cells,
        notes: &m.notes,
        failed: m.failed.iter().map(|e| e.to_string()).collect(),
    }
}
