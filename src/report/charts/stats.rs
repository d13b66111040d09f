//! The `capture stats` report: packets, bytes and retransmissions per interval.

use super::draw::{Options, Run, categories, heading, typed};
use crate::doc::capture_stats::StatsDoc;
use crate::report::html::{Figure, Section, Table};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Chart, Mark, Series, Unit};

pub(super) fn capture_stats(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<StatsDoc> = typed(runs)?;
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
            crate::report::svg::label(d.total.bits_per_s, Unit::BitsPerSecond),
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
                .map(|x| x.direction.name().to_string())
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str),
        );
        for dir in &dirs {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            for row in d.rows.iter().filter(|x| x.direction.name() == dir) {
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
