//! The document `roundtrip connect --json` writes and `roundtrip report` reads: settings, the verdict, per-state
//! counts, handshake and refusal summaries and every attempt.

use super::{Header, Interrupted};
use crate::probe::connect::{Attempt, ConnectMode, PortState};
use crate::stats::Summary;
use serde::{Deserialize, Serialize};

/// Per-state attempt counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectCounts {
    /// Attempts answered with SYN-ACK.
    pub open: u64,
    /// Attempts answered with RST.
    pub closed: u64,
    /// Attempts left unanswered.
    pub filtered: u64,
    /// Attempts answered with an ICMP error, or with no route.
    pub unreachable: u64,
}

/// The document `roundtrip connect --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectDoc {
    /// `format`, `format_version`, `kind` ([`kind::CONNECT`](super::kind::CONNECT)) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start of the run, Unix seconds.
    pub started_unix_s: f64,
    /// Target as the user gave it.
    pub target: String,
    /// Resolved address.
    pub address: String,
    /// How the SYN was sent.
    pub mode: ConnectMode,
    /// Attempts asked for.
    pub count: u64,
    /// Time from the start of one attempt to the start of the next.
    pub interval_ns: u64,
    /// Answer timeout.
    pub timeout_ns: u64,
    /// Time the name lookup took; null for a literal address.
    pub dns_ns: Option<u64>,
    /// What the port is, from all attempts.
    pub verdict: Option<PortState>,
    /// Per-state attempt counts.
    pub counts: ConnectCounts,
    /// SYN -> SYN-ACK times of the open attempts.
    pub handshake: Summary,
    /// SYN -> RST times of the closed attempts.
    pub refused: Summary,
    /// Every attempt.
    pub attempts: Vec<Attempt>,
    /// Why the run ended early, if it did.
    pub error: Option<String>,
    /// True when interrupted (Ctrl-C).
    pub cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

impl Default for ConnectDoc {
    fn default() -> Self {
        ConnectDoc {
            header: Header::default(),
            started_unix_s: 0.0,
            target: String::new(),
            address: String::new(),
            mode: ConnectMode::Kernel,
            count: 0,
            interval_ns: 0,
            timeout_ns: 0,
            dns_ns: None,
            verdict: None,
            counts: ConnectCounts::default(),
            handshake: Summary::default(),
            refused: Summary::default(),
            attempts: Vec::new(),
            error: None,
            cancelled: false,
            interrupted: None,
        }
    }
}

impl ConnectDoc {
    /// (seconds since start, ns) of every attempt that ended in `state` with a time.
    pub fn samples(&self, state: PortState) -> Vec<(f64, u64)> {
        self.attempts
            .iter()
            .filter(|a| a.state == state)
            .filter_map(|a| {
                a.time.map(|t| {
                    (
                        a.at.as_nanos() as f64 / 1e9,
                        u64::try_from(t.as_nanos()).unwrap_or(u64::MAX),
                    )
                })
            })
            .collect()
    }
}
