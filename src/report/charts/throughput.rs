//! The `throughput` report: rate over time and against message size.

use super::draw::{Options, Run, early, heading, typed};
use crate::doc::throughput::ThroughputDoc;
use crate::report::html::{Figure, Section, Table};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Chart, Mark, Series, Unit};
use crate::units::{fmt_bytes, fmt_nanos};

pub(super) fn throughput(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<ThroughputDoc> = typed(runs)?;
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
                fmt_bytes(x.size_bytes as u64),
                fmt_nanos(x.total.length_s * 1e9),
                x.total.messages.to_string(),
                format!("{:.1} Mbit/s", x.total.mbit_per_s),
            ]);
            early(
                &mut sec,
                &format!("{} {}", r.label, fmt_bytes(x.size_bytes as u64)),
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
                fmt_bytes(x.size_bytes as u64)
            } else {
                format!("{} {}", r.label, fmt_bytes(x.size_bytes as u64))
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
