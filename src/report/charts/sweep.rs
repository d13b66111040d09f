//! The `sweep` report: latency against offered rate (or message size), one line per size (or rate).

use super::draw::{Options, Run, latency_axis};
use crate::doc::load::LoadSummary;
use crate::doc::sweep::SweepDoc;
use crate::report::html::{Figure, Section, Table};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Chart, Mark, Series, Unit};
use crate::report::text::{SUMMARY_COLUMNS, summary_cells};

pub(super) fn sweep(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<SweepDoc> = runs
        .iter()
        .map(|r| r.doc.typed::<SweepDoc>())
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
                crate::units::fmt_bytes(c.size_bytes as u64),
                format!("{:.0}/s", c.rate_per_s),
                format!(
                    "{:.0}/s{}",
                    c.achieved_rate_per_s,
                    if c.rate_held { "" } else { " (not held)" }
                ),
            ];
            row.extend(summary_cells(&c.latency_from_scheduled));
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
pub fn sweep_chart(runs: &[Run], docs: &[SweepDoc], opts: &Options) -> Chart {
    let mut rates: Vec<f64> = docs
        .iter()
        .flat_map(|d| d.cells.iter().map(|c| c.rate_per_s))
        .collect();
    let mut sizes: Vec<usize> = docs
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
            sizes
                .iter()
                .map(|s| crate::units::fmt_bytes(*s as u64))
                .collect()
        } else {
            rates.iter().map(|r| format!("{r:.0}/s")).collect()
        };
        for (gi, g) in groups.iter().enumerate() {
            let mut cells: Vec<&LoadSummary> = d
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
            let xv = |c: &LoadSummary| {
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
