//! The `load` report: latency from the scheduled and the actual send, bars and curves.

use super::draw::{
    Options, Run, bar_axis, distribution, early, group_refs, grouped_bars, heading,
    percentile_curve, series_name, summary_row, summary_table, typed,
};
use crate::doc::load::LoadDoc;
use crate::report::html::{Figure, Section};
use crate::report::load::LoadError;
use crate::stats::{Bucket, PercentilePoint};
use crate::units::fmt_bytes;

pub(super) fn load(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<LoadDoc> = typed(runs)?;
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
            fmt_bytes(s.size_bytes as u64),
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
            let name = series_name(runs, &r.label, what);
            groups.push((name, v));
        }
    }
    let y = bar_axis("latency", &groups);
    let refs = group_refs(&groups);
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
        let hists: Vec<(&str, &[Bucket])> = runs
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
        let mut curves: Vec<(&str, &[PercentilePoint])> = Vec::new();
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
