//! The document `roundtrip capture flows --json` writes and `roundtrip report` reads: how the capture was
//! read, the tracker's counters, one summary per TCP connection and the in-flight/window series of one.

use super::{Environment, FORMAT, FORMAT_VERSION, kind};
use crate::capture::flows::{FlowSummary, TrackerCounters};
use crate::capture::{CaptureInfo, FlowSeries, FlowsResult};
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture flows --json` prints.
/// Every field but `flows` may be missing from a document (older versions); without `flows` it is refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowsDoc {
    /// Always [`FORMAT`].
    #[serde(default)]
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    #[serde(default)]
    pub format_version: u32,
    /// [`kind::CAPTURE_FLOWS`].
    #[serde(default)]
    pub kind: String,
    /// Where it ran.
    #[serde(default)]
    pub environment: Environment,
    /// The file (or interface) and how it was read.
    #[serde(default)]
    pub capture: CaptureInfo,
    /// Tracker counters.
    #[serde(default)]
    pub counters: TrackerCounters,
    /// One summary per TCP connection, in order of first packet.
    pub flows: Vec<FlowSummary>,
    /// In flight against the receiver's window over time for one connection (absent in documents of older
    /// versions, null when not asked for or when no connection matched).
    #[serde(default)]
    pub window_series: Option<FlowSeries>,
}

impl Default for FlowsDoc {
    fn default() -> Self {
        FlowsDoc {
            format: FORMAT.to_string(),
            format_version: FORMAT_VERSION,
            kind: kind::CAPTURE_FLOWS.to_string(),
            environment: Environment::default(),
            capture: CaptureInfo::default(),
            counters: TrackerCounters::default(),
            flows: Vec::new(),
            window_series: None,
        }
    }
}

impl FlowsDoc {
    /// The document of `result`, measured on this machine.
    pub fn new(result: FlowsResult) -> Self {
        FlowsDoc {
            environment: Environment::current(),
            capture: result.capture,
            counters: result.counters,
            flows: result.flows,
            window_series: result.window_series,
            ..FlowsDoc::default()
        }
    }
}
