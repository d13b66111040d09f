//! The document `roundtrip capture timeline --json` writes and `roundtrip report` reads: how the capture was
//! read, the connection shown, one row per packet of it and its time-sequence graph.

use super::{Header, kind};
use crate::capture::flows::FlowSummary;
use crate::capture::seqgraph::SeqGraph;
use crate::capture::{CaptureInfo, TimelineResult, TimelineRow};
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture timeline --json` prints.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineDoc {
    /// `format`, `format_version`, `kind` ([`kind::CAPTURE_TIMELINE`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
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

impl TimelineDoc {
    /// The document of `result`, measured on this machine.
    pub fn new(result: TimelineResult) -> Self {
        TimelineDoc {
            header: Header::new(kind::CAPTURE_TIMELINE),
            capture: result.capture,
            flow: result.flow,
            rows: result.rows,
            seq_graph: result.seq_graph,
        }
    }
}
