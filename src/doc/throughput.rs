//! The document `roundtrip throughput --json` writes and `roundtrip report` reads: settings, who answered and,
//! per message size, the rates over the measuring window, per interval and per stream, and what the receiving
//! side counted.

use super::{Header, Interrupted, kind};
use crate::probe::ping::{PeerKind, Transport};
use crate::probe::throughput::{Direction, Loss, RateRow, StreamTotal, ThroughputResult};
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::time::{Duration, UNIX_EPOCH};

/// Settings of a throughput run, as recorded in its document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThroughputSettings {
    /// Target as the user gave it.
    pub target: String,
    /// Resolved address.
    pub address: String,
    /// "tcp" or "udp".
    pub transport: Transport,
    /// Message sizes, bytes.
    pub sizes_bytes: Vec<usize>,
    /// Parallel streams.
    pub streams: usize,
    /// Measuring time per size.
    pub duration_s: f64,
    /// Which way the data flowed.
    pub direction: Direction,
    /// Sync mode (each message answered before the next).
    pub sync: bool,
}

impl Default for ThroughputSettings {
    fn default() -> Self {
        ThroughputSettings {
            target: String::new(),
            address: String::new(),
            transport: Transport::Tcp,
            sizes_bytes: Vec::new(),
            streams: 0,
            duration_s: 0.0,
            direction: Direction::ClientToServer,
            sync: false,
        }
    }
}

/// One size of a throughput document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThroughputRunDoc {
    /// Message size, bytes.
    pub size_bytes: usize,
    /// Over the measuring window, all streams; counted by the sender (in sync mode: acknowledged messages).
    pub total: RateRow,
    /// Per-interval rows.
    pub intervals: Vec<RateRow>,
    /// Per stream.
    pub streams: Vec<StreamTotal>,
    /// Messages the receiving side counted over the whole run, when known.
    pub received_messages: Option<u64>,
    /// Bytes the receiving side counted over the whole run, when known.
    pub received_bytes: Option<u64>,
    /// UDP loss, when counted.
    pub loss: Option<Loss>,
    /// Why the receiver's count or the loss is missing.
    pub receiver_note: Option<String>,
    /// Round-trip times in sync mode.
    pub rtt: Option<Summary>,
    /// Why this size ended early, if it did.
    pub error: Option<String>,
}

/// The document `roundtrip throughput --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputDoc {
    /// `format`, `format_version`, `kind` ([`kind::THROUGHPUT`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start, Unix seconds.
    #[serde(default)]
    pub started_unix_s: f64,
    /// Settings.
    #[serde(default)]
    pub settings: ThroughputSettings,
    /// Who answered.
    #[serde(default = "super::load::unknown_peer")]
    pub peer: PeerKind,
    /// One entry per size.
    pub runs: Vec<ThroughputRunDoc>,
    /// True when interrupted (Ctrl-C).
    #[serde(default)]
    pub cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

/// A throughput run cut short by Ctrl-C: measuring time done (all sizes) of the time asked for (the duration
/// times the number of sizes).
pub fn throughput_interrupted(
    r: &ThroughputResult,
    sizes: usize,
    duration: Duration,
) -> Option<Interrupted> {
    r.cancelled.then(|| {
        Interrupted::duration(
            Duration::from_secs_f64(
                r.runs
                    .iter()
                    .map(|run| run.total.length_s)
                    .sum::<f64>()
                    .max(0.0),
            ),
            duration * u32::try_from(sizes).unwrap_or(u32::MAX),
        )
    })
}

impl ThroughputDoc {
    /// Builds the document of a throughput result.
    pub fn new(target: &str, r: &ThroughputResult, sizes: &[usize], duration: Duration) -> Self {
        ThroughputDoc {
            header: Header::new(kind::THROUGHPUT),
            started_unix_s: r
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            settings: ThroughputSettings {
                target: target.to_string(),
                address: r.addr.to_string(),
                transport: r.transport,
                sizes_bytes: sizes.to_vec(),
                streams: r.streams,
                duration_s: duration.as_secs_f64(),
                direction: r.direction,
                sync: r.sync,
            },
            peer: r.peer,
            runs: r
                .runs
                .iter()
                .map(|run| ThroughputRunDoc {
                    size_bytes: run.size,
                    total: run.total,
                    intervals: run.intervals.clone(),
                    streams: run.streams.clone(),
                    received_messages: run.received.map(|x| x.0),
                    received_bytes: run.received.map(|x| x.1),
                    loss: run.loss,
                    receiver_note: run.receiver_note.map(str::to_string),
                    rtt: (!run.rtt.is_empty()).then(|| run.rtt.summary()),
                    error: run.error.as_ref().map(|e| e.to_string()),
                })
                .collect(),
            cancelled: r.cancelled,
            interrupted: throughput_interrupted(r, sizes.len(), duration),
        }
    }
}
