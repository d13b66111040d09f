//! The `icmp` report: echo round trips over time, distribution and percentiles.

use super::draw::{
    Options, Run, early, heading, sample_figures, summary_row, summary_table, typed,
};
use crate::doc::icmp::IcmpDoc;
use crate::report::html::Section;
use crate::report::load::LoadError;

/// The RTT samples of an ICMP document: (seconds since start, ns) of every reply.
pub fn icmp_samples(d: &IcmpDoc) -> Vec<(f64, u64)> {
    d.samples()
}

pub(super) fn icmp(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<IcmpDoc> = typed(runs)?;
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
