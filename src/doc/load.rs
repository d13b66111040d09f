//! The document `roundtrip load --json` writes and `roundtrip report` reads: settings, who answered, the
//! summary, the latency histogram and percentile curves. Its summary and settings are also the cells and the
//! settings of a sweep document ([`super::sweep`]).

use super::{Header, Interrupted, kind};
use crate::probe::load::LoadResult;
use crate::probe::ping::{PeerKind, Transport};
use crate::stats::{Bucket, PercentilePoint, Summary};
use serde::{Deserialize, Serialize};
use std::time::{Duration, UNIX_EPOCH};

/// Counts and statistics of one load run (also one sweep cell).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadSummary {
    /// Message size, bytes.
    pub size_bytes: usize,
    /// Offered rate, messages per second.
    pub rate_per_s: f64,
    /// Messages the schedule called for in the measuring window.
    pub scheduled: u64,
    /// Messages sent in the measuring window.
    pub sent: u64,
    /// Messages per second actually sent.
    pub achieved_rate_per_s: f64,
    /// True when every scheduled message went out within the window.
    pub rate_held: bool,
    /// Answers requested (`seq % reply_every == 0`).
    pub requested: u64,
    /// Answers received.
    pub answered: u64,
    /// Requested answers that never came.
    pub unanswered: u64,
    /// Length of the measuring window as run.
    pub elapsed_s: f64,
    /// RTT from the scheduled send time (coordinated-omission corrected).
    pub latency_from_scheduled: Summary,
    /// RTT from the actual send time (what sockperf reports).
    pub latency_from_sent: Summary,
    /// How late messages left compared to their schedule.
    pub schedule_lag: Summary,
    /// Why the run ended early, if it did.
    pub error: Option<String>,
}

/// The summary of a load result.
pub fn load_summary(r: &LoadResult) -> LoadSummary {
    LoadSummary {
        size_bytes: r.size,
        rate_per_s: r.rate,
        scheduled: r.scheduled,
        sent: r.sent,
        achieved_rate_per_s: r.achieved_rate(),
        rate_held: r.rate_held(),
        requested: r.requested,
        answered: r.answered,
        unanswered: r.unanswered(),
        elapsed_s: r.elapsed.as_secs_f64(),
        latency_from_scheduled: r.latency_scheduled.summary(),
        latency_from_sent: r.latency_sent.summary(),
        schedule_lag: r.lag.summary(),
        error: r.error.as_ref().map(|e| e.to_string()),
    }
}

/// Settings of a load run or sweep, as recorded in its document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadSettings {
    /// Target as the user gave it.
    pub target: String,
    /// Resolved address.
    pub address: String,
    /// "tcp" or "udp".
    pub transport: Transport,
    /// One answer per this many messages.
    pub reply_every: u64,
    /// Measuring time (per cell for a sweep).
    pub duration_s: f64,
    /// Warm-up time (per cell for a sweep).
    pub warmup_s: f64,
}

impl Default for LoadSettings {
    fn default() -> Self {
        LoadSettings {
            target: String::new(),
            address: String::new(),
            transport: Transport::Udp,
            reply_every: 0,
            duration_s: 0.0,
            warmup_s: 0.0,
        }
    }
}

/// Who answered, in a document that does not say.
pub(super) fn unknown_peer() -> PeerKind {
    PeerKind::Unknown
}

/// The document `roundtrip load --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadDoc {
    /// `format`, `format_version`, `kind` ([`kind::LOAD`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start of the measuring window, Unix seconds.
    #[serde(default)]
    pub started_unix_s: f64,
    /// Settings.
    #[serde(default)]
    pub settings: LoadSettings,
    /// Who answered.
    #[serde(default = "unknown_peer")]
    pub peer: PeerKind,
    /// The summary.
    pub summary: LoadSummary,
    /// Histogram of the latency from the scheduled send time, 20 buckets per decade (absent in documents of
    /// older versions).
    #[serde(default)]
    pub histogram_from_scheduled: Vec<Bucket>,
    /// Percentile curve of the latency from the scheduled send time.
    #[serde(default)]
    pub percentiles_from_scheduled: Vec<PercentilePoint>,
    /// Percentile curve of the latency from the actual send time.
    #[serde(default)]
    pub percentiles_from_sent: Vec<PercentilePoint>,
    /// True when interrupted (Ctrl-C).
    #[serde(default)]
    pub cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

impl LoadDoc {
    /// Builds the document of a load result.
    pub fn new(target: &str, r: &LoadResult, duration: Duration, warmup: Duration) -> Self {
        LoadDoc {
            header: Header::new(kind::LOAD),
            started_unix_s: r
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            settings: LoadSettings {
                target: target.to_string(),
                address: r.addr.to_string(),
                transport: r.transport,
                reply_every: r.reply_every,
                duration_s: duration.as_secs_f64(),
                warmup_s: warmup.as_secs_f64(),
            },
            peer: r.peer,
            summary: load_summary(r),
            histogram_from_scheduled: r.latency_scheduled.buckets(20),
            percentiles_from_scheduled: r.latency_scheduled.percentile_curve(),
            percentiles_from_sent: r.latency_sent.percentile_curve(),
            cancelled: r.cancelled,
            interrupted: r
                .cancelled
                .then(|| Interrupted::duration(r.elapsed, duration)),
        }
    }
}
