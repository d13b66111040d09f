//! The `ping` report: RTT over time, its distribution and percentile curve, server turnaround.

use super::draw::{
    Options, Run, TimeRow, TimeSource, distribution, grouped_bars, latency_over_time,
    percentile_curve,
};
use crate::doc::ping::PingDoc;
use crate::report::html::{Figure, Section, Table};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Unit};
use crate::report::text::{SUMMARY_COLUMNS, summary_cells};
use crate::stats::{Bucket, PercentilePoint};

// ---------------------------------------------------------------------------------------------------------
// The ping report.

pub(super) fn ping(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<PingDoc> = runs
        .iter()
        .map(|r| r.doc.typed::<PingDoc>())
        .collect::<Result<_, _>>()?;
    let mut sec = Section {
        heading: if runs.len() == 1 {
            format!("Ping: {}", runs[0].label)
        } else {
            format!("Ping: {} results compared", runs.len())
        },
        ..Default::default()
    };

    for (r, d) in runs.iter().zip(&docs) {
        let a = crate::report::answer::ping(
            &d.summary.rtt,
            d.summary.server_turnaround.as_ref(),
            d.peer,
        );
        sec.lead
            .extend(crate::report::answer::lead(&r.label, runs.len() > 1, &a));
    }
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
        row.extend(summary_cells(&d.summary.rtt));
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
                row.extend(summary_cells(&s));
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

    let rows: Vec<Vec<TimeRow>> = docs
        .iter()
        .map(|d| d.intervals.iter().map(TimeRow::from).collect())
        .collect();
    let time: Vec<TimeSource> = runs
        .iter()
        .zip(&rows)
        .map(|(r, rows)| TimeSource {
            label: &r.label,
            full_log: r.full_log.as_ref(),
            intervals: rows,
        })
        .collect();
    sec.figures.push(Figure {
        id: "rtt-time".into(),
        chart: latency_over_time("RTT over time", &time, opts),
    });
    let hists: Vec<(&str, &[Bucket])> = runs
        .iter()
        .zip(&docs)
        .map(|(r, d)| (r.label.as_str(), d.histogram.as_slice()))
        .collect();
    sec.figures.push(Figure {
        id: "distribution".into(),
        chart: distribution("RTT distribution", &hists, opts),
    });
    let curves: Vec<(&str, &[PercentilePoint])> = runs
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
