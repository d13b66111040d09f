//! The document `roundtrip icmp --json` writes and `roundtrip report` reads: settings, counts, the RTT summary
//! and every echo request.

use super::{Header, Interrupted};
use crate::probe::icmp::{IcmpSocket, Probe, ProbeOutcome};
use crate::stats::Summary;
use serde::{Deserialize, Serialize};

/// The document `roundtrip icmp --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IcmpDoc {
    /// `format`, `format_version`, `kind` ([`kind::ICMP`](super::kind::ICMP)) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start of the run, Unix seconds.
    pub started_unix_s: f64,
    /// Target as the user gave it.
    pub target: String,
    /// Resolved address.
    pub address: String,
    /// The socket that was used.
    pub socket: IcmpSocket,
    /// Payload bytes per request.
    pub payload_bytes: usize,
    /// Requests asked for.
    pub count: u64,
    /// Time between requests.
    pub interval_ns: u64,
    /// Reply timeout.
    pub timeout_ns: u64,
    /// Time the name lookup took; null for a literal address.
    pub dns_ns: Option<u64>,
    /// Echo requests sent.
    pub sent: u64,
    /// Replies.
    pub received: u64,
    /// Never answered.
    pub lost: u64,
    /// ICMP errors instead of replies.
    pub errors: u64,
    /// RTT statistics.
    pub rtt: Summary,
    /// Every probe.
    pub probes: Vec<Probe>,
    /// Why the run ended early, if it did.
    pub error: Option<String>,
    /// True when interrupted (Ctrl-C).
    pub cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

impl Default for IcmpDoc {
    fn default() -> Self {
        IcmpDoc {
            header: Header::default(),
            started_unix_s: 0.0,
            target: String::new(),
            address: String::new(),
            socket: IcmpSocket::Datagram,
            payload_bytes: 0,
            count: 0,
            interval_ns: 0,
            timeout_ns: 0,
            dns_ns: None,
            sent: 0,
            received: 0,
            lost: 0,
            errors: 0,
            rtt: Summary::default(),
            probes: Vec::new(),
            error: None,
            cancelled: false,
            interrupted: None,
        }
    }
}

impl IcmpDoc {
    /// The RTT samples: (seconds since start, ns) of every reply.
    pub fn samples(&self) -> Vec<(f64, u64)> {
        self.probes
            .iter()
            .filter_map(|p| match p.outcome {
                ProbeOutcome::Reply { rtt_ns, .. } => Some((p.at_ns as f64 / 1e9, rtt_ns)),
                _ => None,
            })
            .collect()
    }
}
