//! The all-pairs matrix `roundtrip mesh` builds (from Prometheus or from the agents) and the agent's page
//! shows: one cell per source -> target pair. Drawn by `report::heatmap`.

use crate::units::fmt_duration;
use std::collections::BTreeMap;
use std::time::Duration;

/// One source -> target cell.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cell {
    /// Median RTT over the window (None: no answered probe).
    pub p50: Option<Duration>,
    /// 99th percentile RTT.
    pub p99: Option<Duration>,
    /// Fraction of probes that failed, 0..=1 (None: no probe in the window).
    pub loss: Option<f64>,
    /// Probes in the window.
    pub probes: u64,
}

/// A source x target matrix.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix {
    /// Row names, in display order.
    pub sources: Vec<String>,
    /// Column names, in display order.
    pub targets: Vec<String>,
    /// Cells by (source, target); a missing pair is shown empty.
    pub cells: BTreeMap<(String, String), Cell>,
    /// The window the cells cover.
    pub window: Duration,
    /// Where the numbers come from (e.g. "Prometheus http://...", "agent 10.0.0.1").
    pub origin: String,
}

/// Formats a window the way Prometheus and users write it: `5m`, `1h`, `90s`, `1500ms` (else as
/// [`fmt_duration`]).
pub fn fmt_window(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) || ms == 0 {
        return fmt_duration(d);
    }
    if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}
