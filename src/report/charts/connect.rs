//! The `connect` report: handshake times over time, distribution and percentiles; refusals and timeouts.

use super::draw::{
    Options, Run, early, heading, sample_figures, summary_row, summary_table, typed,
};
use crate::doc::connect::ConnectDoc;
use crate::probe::connect::PortState;
use crate::report::html::Section;
use crate::report::load::LoadError;

/// The handshake samples of a connect document: (seconds since start, ns) of every open attempt.
pub fn connect_samples(d: &ConnectDoc) -> Vec<(f64, u64)> {
    d.samples(PortState::Open)
}

pub(super) fn connect(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<ConnectDoc> = typed(runs)?;
    let mut sec = Section {
        heading: heading("TCP handshake", runs),
        ..Default::default()
    };
    let mut t = summary_table("Handshake times", "answer");
    for (r, d) in runs.iter().zip(&docs) {
        t.rows
            .push(summary_row(&r.label, "SYN -> SYN-ACK (open)", d.handshake));
        if d.refused.count > 0 {
            t.rows
                .push(summary_row(&r.label, "SYN -> RST (closed)", d.refused));
        }
        early(&mut sec, &r.label, &d.error);
    }
    sec.tables.push(t);
    let samples: Vec<Vec<(f64, u64)>> = docs.iter().map(connect_samples).collect();
    if samples.iter().all(Vec::is_empty) && docs.iter().any(|d| d.refused.count > 0) {
        // Nothing listened: the RST answers are the round trips there are.
        let refused: Vec<Vec<(f64, u64)>> =
            docs.iter().map(|d| d.samples(PortState::Closed)).collect();
        sec.notes
            .push("No handshake completed: the charts show the SYN -> RST times.".into());
        sample_figures(&mut sec, "SYN -> RST time", runs, &refused, opts);
    } else {
        sample_figures(&mut sec, "handshake time", runs, &samples, opts);
    }
    Ok(sec)
}
