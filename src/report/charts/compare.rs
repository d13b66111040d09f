//! The `compare` report: the same round trip measured several ways, side by side.

use super::draw::{
    Options, Run, categories, heading, min_p50_p99_bars, summary_row, summary_table, typed,
};
use crate::doc::compare::CompareDoc;
use crate::report::html::{Figure, Section};
use crate::report::load::LoadError;
use crate::stats::Summary;

pub(super) fn compare(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<CompareDoc> = typed(runs)?;
    let mut sec = Section {
        heading: heading("Compare", runs),
        ..Default::default()
    };
    let mut t = summary_table("Round trips measured several ways", "probe");
    for (r, d) in runs.iter().zip(&docs) {
        for row in &d.rows {
            let mut cells = summary_row(&r.label, &row.label, row.summary);
            cells.push(format!("{} attempted", row.attempts));
            t.rows.push(cells);
            if let Some(e) = &row.error {
                sec.notes.push(format!("{} {}: {e}", r.label, row.label));
            }
        }
        if let Some(c) = &d.conclusion {
            sec.notes.push(format!("{}: in short: {c}.", r.label));
        }
    }
    t.head.push("attempts".into());
    sec.tables.push(t);
    let cats = categories(
        docs.iter()
            .flat_map(|d| d.rows.iter().map(|r| r.label.as_str())),
    );
    let rows: Vec<Vec<Option<Summary>>> = docs
        .iter()
        .map(|d| {
            cats.iter()
                .map(|c| d.rows.iter().find(|r| &r.label == c).map(|r| r.summary))
                .collect()
        })
        .collect();
    sec.figures.push(Figure {
        id: "bars".into(),
        chart: min_p50_p99_bars("Round trip per probe", &cats, runs, &rows, opts),
    });
    Ok(sec)
}
