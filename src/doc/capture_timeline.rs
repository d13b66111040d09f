//! The document `roundtrip capture timeline --json` writes and `roundtrip report` reads: how the capture was
//! read, the connection shown, one row per packet of it and its time-sequence graph.

use super::{Environment, FORMAT, FORMAT_VERSION, kind};
use crate::capture::flows::FlowSummary;
use crate::capture::seqgraph::SeqGraph;
use crate::capture::{CaptureInfo, TimelineResult, TimelineRow};
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture timeline --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineDoc {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    pub format_version: u32,
    /// [`kind::CAPTURE_TIMELINE`].
    pub kind: String,
    /// Where it ran.
    pub environment: Environment,
    /// The file (or interface) and how it was read.
    pub capture: CaptureInfo,
    /// The connection shown (its summary), when one matched.
    pub flow: Option<FlowSummary>,
    /// One row per packet of that connection (empty in the document a report is drawn from).
    pub rows: Vec<TimelineRow>,
    /// Its time-sequence graph (absent when not asked for, when no connection matched, or in documents of
    /// older versions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq_graph: Option<SeqGraph>,
}

impl Default for TimelineDoc {
    fn default() -> Self {
        TimelineDoc {
            format: FORMAT.to_string(),
            format_version: FORMAT_VERSION,
            kind: kind::CAPTURE_TIMELINE.to_string(),
            environment: Environment::default(),
            capture: CaptureInfo::default(),
            flow: None,
            rows: Vec::new(),
            seq_graph: None,
        }
    }
}

impl TimelineDoc {
    /// The document of `result`, measured on this machine.
    pub fn new(result: TimelineResult) -> Self {
        TimelineDoc {
            environment: Environment::current(),
            capture: result.capture,
            flow: result.flow,
            rows: result.rows,
            seq_graph: result.seq_graph,
            ..TimelineDoc::default()
        }
    }
}
