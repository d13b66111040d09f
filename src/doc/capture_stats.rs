//! The document `roundtrip capture stats --json` writes and `roundtrip report` reads: how the capture was
//! read, the interval, the first and last packet, one row per interval (and direction) and the whole capture.

use super::{Header, kind};
use crate::capture::stats::StatsRow;
use crate::capture::{CaptureInfo, StatsResult};
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture stats --json` prints.
/// The envelope and the capture may be missing from a document (older versions); without the interval, the
/// rows or the total it is refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatsDoc {
    /// `format`, `format_version`, `kind` ([`kind::CAPTURE_STATS`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// The file (or interface) and how it was read.
    #[serde(default)]
    pub capture: CaptureInfo,
    /// Interval length, seconds.
    pub interval_s: f64,
    /// First packet (Unix ns).
    #[serde(default)]
    pub first_ts_ns: Option<i64>,
    /// Last packet (Unix ns).
    #[serde(default)]
    pub last_ts_ns: Option<i64>,
    /// Per-interval rows.
    pub rows: Vec<StatsRow>,
    /// The whole capture (rates over first to last packet).
    pub total: StatsRow,
}

impl StatsDoc {
    /// The document of `result`, measured on this machine.
    pub fn new(result: StatsResult) -> Self {
        StatsDoc {
            header: Header::new(kind::CAPTURE_STATS),
            capture: result.capture,
            interval_s: result.interval_s,
            first_ts_ns: result.first_ts_ns,
            last_ts_ns: result.last_ts_ns,
            rows: result.rows,
            total: result.total,
        }
    }
}
