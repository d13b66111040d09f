//! `roundtrip mesh (--prometheus URL | --agent URL...)`: the all-pairs matrix of a fleet of agents, rows =
//! sources, columns = targets, each cell p50 / p99 RTT and loss, as text, JSON or an HTML heat map.

use super::args;
use super::output::{Exit, error_line, note, out, out_text};
use anyhow::Context;
use clap::Args;
use roundtrip::mesh::{self, Filter, Mesh, agents, prometheus};
use roundtrip::report::heatmap::{self, Cell, Matrix, fmt_loss, fmt_window};
use roundtrip::report::json;
use roundtrip::units::fmt_duration;
use serde::Serialize;
use std::fmt::Write as _;
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
        out_text(text(&m.matrix, &filter))?;
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

/// One cell as text: `433us / 512us  0%`, `no answer  100%`, `-` on the diagonal, empty without data.
fn cell_text(source: &str, target: &str, c: Option<&Cell>) -> String {
    if source == target {
        return "-".into();
    }
    let Some(c) = c.filter(|c| c.p50.is_some() || c.loss.is_some()) else {
        return String::new();
    };
    let rtt = match (c.p50, c.p99) {
        (Some(p50), Some(p99)) => format!("{} / {}", fmt_duration(p50), fmt_duration(p99)),
        (Some(p50), None) => format!("{} / -", fmt_duration(p50)),
        (None, _) => "no answer".into(),
    };
    match c.loss {
        Some(l) => format!("{rtt}  {}", fmt_loss(l)),
        None => rtt,
    }
}

fn text(m: &Matrix, filter: &Filter) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "roundtrip mesh: {}, probe {}{}, window {}",
        roundtrip::terminal::escape_for_terminal(&m.origin),
        filter.probe,
        filter.size.map_or(String::new(), |n| format!(" size {n}")),
        fmt_window(m.window)
    );
    let corner = "source \\ target";
    let mut cols: Vec<Vec<String>> = Vec::with_capacity(m.targets.len() + 1);
    // Source and target names come from the agents or Prometheus: escaped for the terminal.
    let name = |n: &String| roundtrip::terminal::escape_for_terminal(n).into_owned();
    cols.push(
        std::iter::once(corner.to_string())
            .chain(m.sources.iter().map(name))
            .collect(),
    );
    for t in &m.targets {
        let mut col = vec![name(t)];
        for src in &m.sources {
            col.push(cell_text(src, t, m.cells.get(&(src.clone(), t.clone()))));
        }
        cols.push(col);
    }
    let widths: Vec<usize> = cols
        .iter()
        .map(|c| c.iter().map(|x| x.chars().count()).max().unwrap_or(0))
        .collect();
    for row in 0..=m.sources.len() {
        let mut line = String::new();
        for (i, col) in cols.iter().enumerate() {
            if i > 0 {
                line.push_str("   ");
            }
            let _ = write!(line, "{:<w$}", col[row], w = widths[i]);
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    let _ = writeln!(
        s,
        "cells: p50 / p99 RTT of the answered probes and loss (failed / all probes) over the window; \
         - = the agent itself; blank = no data"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn text_matrix_like_the_seed() {
        let names: Vec<String> = ["AD1", "AD2", "AD3"].map(String::from).to_vec();
        let us = |n| Some(Duration::from_micros(n));
        let mut cells = BTreeMap::new();
        for (s, t, p50, loss) in [
            ("AD1", "AD2", 433, 0.0),
            ("AD1", "AD3", 458, 0.0),
            ("AD2", "AD3", 135, 0.02),
        ] {
            cells.insert(
                (s.to_string(), t.to_string()),
                Cell {
                    p50: us(p50),
                    p99: us(p50 + 100),
                    loss: Some(loss),
                    probes: 300,
                },
            );
        }
        cells.insert(
            ("AD3".into(), "AD1".into()),
            Cell {
                p50: None,
                p99: None,
                loss: Some(1.0),
                probes: 300,
            },
        );
        let m = Matrix {
            sources: names.clone(),
            targets: names,
            cells,
            window: DEFAULT_WINDOW,
            origin: "Prometheus http://p:9090".into(),
        };
        let t = text(&m, &Filter::default());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "roundtrip mesh: Prometheus http://p:9090, probe tcp, window 5m"
        );
        assert_eq!(
            &lines[1..5],
            [
                "source \\ target   AD1               AD2                 AD3",
                "AD1               -                 433us / 533us  0%   458us / 558us  0%",
                "AD2                                 -                   135us / 235us  2.0%",
                "AD3               no answer  100%                       -",
            ]
        );
        assert!(lines[5].starts_with("cells: p50 / p99"));
    }
}
