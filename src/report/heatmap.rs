//! The all-pairs matrix as a self-contained HTML heat map: rows are sources, columns targets, each cell
//! coloured by its p50 RTT and showing p50 / p99 and loss. Used by `roundtrip mesh --report` and by the
//! agent's `/` page. (Interface fixed; rendering by the mesh work.)

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

/// Renders `matrix` as one self-contained HTML page titled `title`.
pub fn render(title: &str, matrix: &Matrix) -> String {
    let _ = (title, matrix);
    unimplemented!("heatmap")
}
