//! The `capture rpc` report: per-operation latency to the first and last byte, over time.

use super::draw::{
    Options, Run, TimeRow, TimeSource, categories, group_refs, grouped_hbars, heading,
    latency_over_time, series_name, summary_row, summary_table, typed,
};
use crate::capture::rpc::stats::OpRow;
use crate::doc::rpc::RpcDoc;
use crate::report::html::{Figure, Section};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Unit};

/// Operations drawn at most (the busiest); the table lists all.
pub const MAX_OPS: usize = 24;

/// The operations a chart shows: the busiest [`MAX_OPS`] over all results, as "op" (or "proto op" when
/// several protocols appear), busiest first.
pub fn chart_ops(docs: &[RpcDoc]) -> Vec<(String, String, String)> {
    let mut counts: Vec<((String, String), u64)> = Vec::new();
    for d in docs {
        for o in &d.report.ops {
            let k = (o.proto.name().to_string(), o.op.clone());
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

pub(super) fn capture_rpc(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<RpcDoc> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Requests in a capture", runs),
        ..Default::default()
    };
    for (r, d) in runs.iter().zip(&docs) {
        let a = crate::report::text::rpc::answer(&d.report.ops);
        sec.lead
            .extend(crate::report::answer::lead(&r.label, runs.len() > 1, &a));
    }
    let mut t = summary_table(
        "Time to the response's first byte per operation (request end to the first response packet)",
        "operation",
    );
    for (r, d) in runs.iter().zip(&docs) {
        for o in &d.report.ops {
            if let Some(f) = o.first_byte_known() {
                t.rows
                    .push(summary_row(&r.label, &format!("{} {}", o.proto, o.op), *f));
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
        type Pick = fn(&OpRow) -> Option<u64>;
        let stats: [(&str, Pick); 4] = [
            ("first p50", |o| o.first_byte_known().map(|f| f.p50_ns)),
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
                        .find(|x| x.proto.name() == p && &x.op == o && x.last_byte.count > 0)
                        .and_then(pick)
                        .map_or(f64::NAN, |v| v as f64)
                })
                .collect();
            if v.iter().all(|x| x.is_nan()) {
                continue;
            }
            let name = series_name(runs, &r.label, stat);
            groups.push((name, v));
        }
    }
    let refs = group_refs(&groups);
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
    let rows: Vec<Vec<TimeRow>> = docs
        .iter()
        .map(|d| match d.report.interval_s {
            Some(len) if len > 0.0 => d
                .report
                .intervals
                .iter()
                .map(|i| TimeRow {
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
