//! The `icmp` report: echo round trips over time, distribution and percentiles.

use super::draw::{
    Options, Run, early, heading, sample_figures, summary_row, summary_table, typed,
};
use crate::report::html::Section;
use crate::report::load::LoadError;
use crate::stats::Summary;
use serde::Deserialize;

/// One probe of an `icmp` document.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeIn {
    /// Send time since the start of the run.
    pub at_ns: u64,
    /// "reply", "timeout" or "error".
    pub outcome: String,
    /// RTT of a reply.
    #[serde(default)]
    pub rtt_ns: Option<u64>,
}

/// What the ICMP report reads from an `icmp --json` document.
#[derive(Debug, Clone, Deserialize)]
pub struct IcmpIn {
    /// Echo requests sent.
    pub sent: u64,
    /// Replies.
    pub received: u64,
    /// Never answered.
    pub lost: u64,
    /// RTT statistics.
    pub rtt: Summary,
    /// Every probe.
    pub probes: Vec<ProbeIn>,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
}

/// The RTT samples of an ICMP document: (seconds since start, ns) of every reply.
pub fn icmp_samples(d: &IcmpIn) -> Vec<(f64, u64)> {
    d.probes
        .iter()
        .filter(|p| p.outcome == "reply")
        .filter_map(|p| p.rtt_ns.map(|v| (p.at_ns as f64 / 1e9, v)))
        .collect()
}

pub(super) fn icmp(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<IcmpIn> = typed(runs)?;
    let mut sec = Section {
        heading: heading("ICMP echo", runs),
        ..Default::default()
    };
    let mut t = summary_table("Round-trip time", "sent/received/lost");
    for (r, d) in runs.iter().zip(&docs) {
        t.rows.push(summary_row(
            &r.label,
            &format!("{}/{}/{}", d.sent, d.received, d.lost),
            d.rtt,
        ));
        early(&mut sec, &r.label, &d.error);
    }
    sec.tables.push(t);
    let samples: Vec<Vec<(f64, u64)>> = docs.iter().map(icmp_samples).collect();
    sample_figures(&mut sec, "RTT", runs, &samples, opts);
    Ok(sec)
}
