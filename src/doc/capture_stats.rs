//! The document `roundtrip capture stats --json` writes and `roundtrip report` reads: how the capture was
//! read, the interval, the first and last packet, one row per interval (and direction) and the whole capture.

use super::{Environment, FORMAT, FORMAT_VERSION, kind};
use crate::capture::stats::StatsRow;
use crate::capture::{CaptureInfo, StatsResult};
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture stats --json` prints.
/// The envelope and the capture may be missing from a document (older versions); without the interval, the
/// rows or the total it is refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatsDoc {
    /// Always [`FORMAT`].
    #[serde(default = "format")]
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    #[serde(default = "format_version")]
    pub format_version: u32,
    /// [`kind::CAPTURE_STATS`].
    #[serde(default = "stats_kind")]
    pub kind: String,
    /// Where it ran.
    #[serde(default)]
    pub environment: Environment,
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

fn format() -> String {
    FORMAT.to_string()
}

fn format_version() -> u32 {
    FORMAT_VERSION
}

fn stats_kind() -> String {
    kind::CAPTURE_STATS.to_string()
}

impl StatsDoc {
    /// The document of `result`, measured on this machine.
    pub fn new(result: StatsResult) -> Self {
        StatsDoc {
            format: format(),
            format_version: format_version(),
            kind: stats_kind(),
            environment: Environment::current(),
            capture: result.capture,
            interval_s: result.interval_s,
            first_ts_ns: result.first_ts_ns,
            last_ts_ns: result.last_ts_ns,
            rows: result.rows,
            total: result.total,
        }
    }
}
