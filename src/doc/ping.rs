//! The document `roundtrip ping --json` writes and `roundtrip report` reads: settings, who answered, the
//! summary, per-interval rows, the RTT histogram and percentile curve.

use super::{Header, Interrupted, kind};
use crate::probe::ping::{IntervalRow, PeerKind, PingResult, Stop, Transport};
use crate::stats::{Bucket, PercentilePoint, Summary};
use serde::{Deserialize, Serialize};
use std::time::{Duration, UNIX_EPOCH};

/// Settings of a ping run, as recorded in its document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingSettings {
    /// Target as the user gave it.
    pub target: String,
    /// Resolved address.
    pub address: String,
    /// "tcp" or "udp".
    pub transport: Transport,
    /// Message size in bytes.
    pub size_bytes: usize,
    /// Stop condition.
    pub stop: Stop,
    /// Time between sends, when paced.
    pub interval_ns: Option<u64>,
    /// Warm-up length.
    pub warmup_ns: u64,
    /// Answer timeout.
    pub timeout_ns: u64,
}

/// Counts and RTT statistics of one ping run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingSummary {
    /// Measured messages sent.
    pub sent: u64,
    /// Distinct messages answered.
    pub received: u64,
    /// Messages never answered.
    pub lost: u64,
    /// Extra answers to an already answered message.
    pub duplicated: u64,
    /// Answers overtaken by the answer to a later message.
    pub out_of_order: u64,
    /// Answers that came after their timeout.
    pub late: u64,
    /// Length of the measured phase.
    pub elapsed_s: f64,
    /// Round-trip time statistics.
    pub rtt: Summary,
    /// Server turnaround statistics (roundtrip servers only).
    pub server_turnaround: Option<Summary>,
}

/// The document `roundtrip ping --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingDoc {
    /// `format`, `format_version`, `kind` ([`kind::PING`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start of the measured phase, Unix seconds.
    pub started_unix_s: f64,
    /// Settings.
    pub settings: PingSettings,
    /// Who answered.
    pub peer: PeerKind,
    /// The summary.
    pub summary: PingSummary,
    /// Per-interval rows.
    pub intervals: Vec<IntervalRow>,
    /// RTT histogram, 20 buckets per decade.
    pub histogram: Vec<Bucket>,
    /// RTT percentile curve.
    pub percentiles: Vec<PercentilePoint>,
    /// Why the run ended early, if it did.
    pub error: Option<String>,
    /// True when interrupted (Ctrl-C).
    pub cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

/// The summary part of a ping result.
pub fn ping_summary(r: &PingResult) -> PingSummary {
    PingSummary {
        sent: r.sent,
        received: r.received,
        lost: r.lost(),
        duplicated: r.duplicated,
        out_of_order: r.out_of_order,
        late: r.late,
        elapsed_s: r.elapsed.as_secs_f64(),
        rtt: r.rtt.summary(),
        server_turnaround: (!r.server.is_empty()).then(|| r.server.summary()),
    }
}

impl PingDoc {
    /// Builds the document for one ping result.
    pub fn new(
        target: &str,
        r: &PingResult,
        stop: Stop,
        interval: Option<Duration>,
        warmup: Duration,
        timeout: Duration,
    ) -> Self {
        PingDoc {
            header: Header::new(kind::PING),
            started_unix_s: r
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            settings: PingSettings {
                target: target.to_string(),
                address: r.addr.to_string(),
                transport: r.transport,
                size_bytes: r.size,
                stop,
                interval_ns: interval.map(crate::units::nanos),
                warmup_ns: crate::units::nanos(warmup),
                timeout_ns: crate::units::nanos(timeout),
            },
            peer: r.peer,
            summary: ping_summary(r),
            intervals: r.intervals.clone(),
            histogram: r.rtt.buckets(20),
            percentiles: r.rtt.percentile_curve(),
            error: r.error.as_ref().map(|e| e.to_string()),
            cancelled: r.cancelled,
            interrupted: Interrupted::of_stop(r.cancelled, stop, r.elapsed, r.sent),
        }
    }
}
