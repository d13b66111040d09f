//! The document `roundtrip sweep --json` writes and `roundtrip report` reads: the settings shared by the cells,
//! the sizes and rates crossed, and one load summary ([`LoadSummary`]) per cell.

use super::load::{LoadSettings, LoadSummary, load_summary};
use super::{Header, Interrupted, kind};
use crate::probe::ping::PeerKind;
use crate::probe::sweep::SweepResult;
use serde::{Deserialize, Serialize};

/// The document `roundtrip sweep --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepDoc {
    /// `format`, `format_version`, `kind` ([`kind::SWEEP`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Settings shared by the cells.
    #[serde(default)]
    pub settings: LoadSettings,
    /// Message sizes crossed, bytes.
    #[serde(default)]
    pub sizes_bytes: Vec<usize>,
    /// Offered rates crossed, messages per second.
    #[serde(default)]
    pub rates_per_s: Vec<f64>,
    /// Who answered.
    #[serde(default = "super::load::unknown_peer")]
    pub peer: PeerKind,
    /// One entry per cell that ran, sizes outer, rates inner.
    pub cells: Vec<LoadSummary>,
    /// Why the sweep stopped early, if it did.
    #[serde(default)]
    pub error: Option<String>,
    /// True when interrupted (Ctrl-C).
    #[serde(default)]
    pub cancelled: bool,
    /// How far it got when interrupted: cells completed of cells planned (absent when it ran to its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

/// A sweep cut short by Ctrl-C: completed cells of planned (the cut cell not counted), with the measuring
/// time of every cell that ran.
pub fn sweep_interrupted(r: &SweepResult, planned_cells: usize) -> Option<Interrupted> {
    r.cells.iter().any(|c| c.cancelled).then(|| {
        Interrupted::count(
            r.cells.iter().map(|c| c.elapsed).sum(),
            r.cells.iter().filter(|c| !c.cancelled).count() as u64,
            planned_cells as u64,
            "cells",
        )
    })
}

impl SweepDoc {
    /// Builds the document of a sweep.
    pub fn new(settings: LoadSettings, sizes: &[usize], rates: &[f64], r: &SweepResult) -> Self {
        SweepDoc {
            header: Header::new(kind::SWEEP),
            settings,
            sizes_bytes: sizes.to_vec(),
            rates_per_s: rates.to_vec(),
            peer: r.cells.first().map_or(PeerKind::Unknown, |c| c.peer),
            cells: r.cells.iter().map(load_summary).collect(),
            error: r.error.as_ref().map(|e| e.to_string()).or_else(|| {
                r.cells
                    .iter()
                    .find_map(|c| c.error.as_ref().map(|e| e.to_string()))
            }),
            cancelled: r.cells.iter().any(|c| c.cancelled),
            interrupted: sweep_interrupted(r, sizes.len() * rates.len()),
        }
    }
}
