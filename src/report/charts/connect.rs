//! The `connect` report: handshake times over time, distribution and percentiles; refusals and timeouts.

use super::draw::{
    Options, Run, early, heading, sample_figures, summary_row, summary_table, typed,
};
use crate::report::html::Section;
use crate::report::load::LoadError;
use crate::stats::Summary;
use serde::Deserialize;

/// One attempt of a `connect` document.
#[derive(Debug, Clone, Deserialize)]
pub struct AttemptIn {
    /// "open", "closed", "filtered" or "unreachable".
    pub state: String,
    /// SYN to answer, when one came.
    pub time_ns: Option<u64>,
    /// Start of the attempt since the start of the run.
    pub at_ns: u64,
}

/// What the connect report reads from a `connect --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct ConnectIn {
    /// SYN -> SYN-ACK statistics.
    pub handshake: Summary,
    /// SYN -> RST statistics.
    pub refused: Summary,
    /// Every attempt.
    pub attempts: Vec<AttemptIn>,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
}

/// The handshake samples of a connect document: (seconds since start, ns) of every open attempt.
pub fn connect_samples(d: &ConnectIn) -> Vec<(f64, u64)> {
    attempt_samples(d, "open")
}

/// (seconds since start, ns) of every attempt that ended in `state` with a time.
fn attempt_samples(d: &ConnectIn, state: &str) -> Vec<(f64, u64)> {
    d.attempts
        .iter()
        .filter(|a| a.state == state)
        .filter_map(|a| a.time_ns.map(|t| (a.at_ns as f64 / 1e9, t)))
        .collect()
}

pub(super) fn connect(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<ConnectIn> = typed(runs)?;
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
            docs.iter().map(|d| attempt_samples(d, "closed")).collect();
        sec.notes
            .push("No handshake completed: the charts show the SYN -> RST times.".into());
        sample_figures(&mut sec, "SYN -> RST time", runs, &refused, opts);
    } else {
        sample_figures(&mut sec, "handshake time", runs, &samples, opts);
    }
    Ok(sec)
}
