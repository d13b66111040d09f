//! The `db` report: connection phases, ping and query round trips, fetch, the database link.

use super::draw::{
    Options, Run, early, heading, latency_axis, min_p50_p99_bars, summary_row, summary_table, typed,
};
use crate::doc::db::DbDoc;
use crate::report::html::{Figure, Section};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Chart, Mark, Series, Unit};
use crate::stats::Summary;

pub(super) fn db(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<DbDoc> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Database", runs),
        ..Default::default()
    };
    let several = runs.len() > 1;
    let mut server = crate::report::html::Table {
        caption: "Server".into(),
        head: [
            "result",
            "database",
            "address",
            "server version",
            "connections ready",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        let a = crate::report::answer::db(
            d.attribution.as_ref(),
            &d.ping,
            &d.query,
            d.link.as_ref().map(|l| &l.round_trip),
        );
        sec.lead
            .extend(crate::report::answer::lead(&r.label, several, &a));
        server.rows.push(vec![
            r.label.clone(),
            d.settings
                .scheme
                .product(d.server_version.as_deref())
                .to_string(),
            d.settings.address.clone().unwrap_or_else(|| "-".into()),
            d.server_version.clone().unwrap_or_else(|| "-".into()),
            d.connects_ok.to_string(),
        ]);
    }
    sec.tables.push(server);
    let mut t = summary_table("Time per phase", "phase");
    for (r, d) in runs.iter().zip(&docs) {
        if let Some(a) = d.attribution.as_ref().filter(|_| d.link.is_none()) {
            let l = crate::report::db::attribution_line(a);
            sec.notes.push(if several {
                format!("{}: {l}", r.label)
            } else {
                l
            });
        }
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
            sec.notes.push(if several {
                format!("{}: note: {n}", r.label)
            } else {
                format!("note: {n}")
            });
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
    let rows: Vec<Vec<Option<Summary>>> = docs
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
            let line = super::draw::percentile_points(&o.histogram.percentile_curve());
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
                *c = crate::report::downsample::per_pixel(c, |v| xs.map(v), |p| xs.invert(p));
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
