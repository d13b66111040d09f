//! The `capture match` report: both ends of the same requests, and the path between them.

use super::draw::{
    Options, Run, bar_axis, categories, group_refs, grouped_hbars, heading, series_name,
    summary_row, summary_table, typed,
};
use crate::capture::matching::{OpMatch, PairedBy};
use crate::doc::capture_match::MatchDoc;
use crate::report::html::{Figure, Section};
use crate::report::load::LoadError;
use crate::stats::Summary;

pub(super) fn capture_match(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<MatchDoc> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Client and server captures matched", runs),
        ..Default::default()
    };
    let mut t = summary_table(
        "Latency of the matched requests at each end",
        "operation, end",
    );
    for (r, d) in runs.iter().zip(&docs) {
        for o in d.report.ops.iter().filter(|o| o.matched > 0) {
            t.rows.push(summary_row(
                &r.label,
                &format!("{} at server", o.op),
                o.server,
            ));
            t.rows.push(summary_row(
                &r.label,
                &format!("{} at client", o.op),
                o.client,
            ));
        }
        sec.notes.push(format!("{}: {}", r.label, d.verdict));
        // Documents of older versions have no pairing counts (all zero here): no note for them.
        if let Some(p) = Some(d.report.paired_by).filter(|p| *p != PairedBy::default()) {
            sec.notes.push(format!(
                "{}: paired by XID {}, by TCP sequence number {}, by content (leading request bytes) {}, by \
                 order {}",
                r.label, p.xid, p.tcp_seq, p.content, p.order
            ));
        }
    }
    sec.tables.push(t);
    let cats = categories(docs.iter().flat_map(|d| {
        d.report
            .ops
            .iter()
            .filter(|o| o.matched > 0)
            .map(|o| o.op.as_str())
    }));
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for (r, d) in runs.iter().zip(&docs) {
        type Pick = fn(&OpMatch) -> Option<u64>;
        let stats: [(&str, Pick); 6] = [
            ("server first p50", |o| first_byte(o.server_first_byte)),
            ("client first p50", |o| first_byte(o.client_first_byte)),
            ("server p50", |o| Some(o.server.p50_ns)),
            ("client p50", |o| Some(o.client.p50_ns)),
            ("server p99", |o| Some(o.server.p99_ns)),
            ("client p99", |o| Some(o.client.p99_ns)),
        ];
        for (what, pick) in stats {
            let v: Vec<f64> = cats
                .iter()
                .map(|c| {
                    d.report
                        .ops
                        .iter()
                        .find(|o| &o.op == c && o.matched > 0)
                        .and_then(pick)
                        .map_or(f64::NAN, |v| v as f64)
                })
                .collect();
            if v.iter().all(|x| x.is_nan()) {
                continue;
            }
            let name = series_name(runs, &r.label, what);
            groups.push((name, v));
        }
    }
    let y = bar_axis("latency", &groups);
    let refs = group_refs(&groups);
    let mut c = grouped_hbars(
        "Latency at the server and at the client",
        &cats.iter().map(String::as_str).collect::<Vec<_>>(),
        &refs,
        y,
        opts,
    );
    c.note = Some(
        "Time to the first response byte (first) and to the last (p50, p99), at each end; the difference \
         between the two ends is the path between the capture points."
            .into(),
    );
    sec.figures.push(Figure {
        id: "bars".into(),
        chart: c,
    });
    Ok(sec)
}

/// A first-byte median, or none: documents of older versions have no first-byte times (a zero count here).
fn first_byte(s: Summary) -> Option<u64> {
    (s.count > 0).then_some(s.p50_ns)
}
