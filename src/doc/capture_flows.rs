//! The document `roundtrip capture flows --json` writes and `roundtrip report` reads: how the capture was
//! read, the tracker's counters, one summary per TCP connection and the in-flight/window series of one.

use super::{Header, kind};
use crate::capture::flows::{FlowSummary, TrackerCounters};
use crate::capture::{CaptureInfo, FlowSeries, FlowsResult};
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture flows --json` prints.
/// Every field but `flows` may be missing from a document (older versions); without `flows` it is refused.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FlowsDoc {
    /// `format`, `format_version`, `kind` ([`kind::CAPTURE_FLOWS`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
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

impl FlowsDoc {
    /// The document of `result`, measured on this machine.
    pub fn new(result: FlowsResult) -> Self {
        FlowsDoc {
            header: Header::new(kind::CAPTURE_FLOWS),
            capture: result.capture,
            counters: result.counters,
            flows: result.flows,
            window_series: result.window_series,
        }
    }
}
