//! The document `roundtrip compare --json` writes and `roundtrip report` reads: settings, one row per way of
//! measuring the round trip, the kernel's view and the conclusion.

use super::{Header, Interrupted};
use crate::probe::compare::Row;
use crate::probe::tcpinfo::TcpRtt;
use serde::{Deserialize, Serialize};

/// The document `roundtrip compare --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct CompareDoc {
    /// `format`, `format_version`, `kind` ([`kind::COMPARE`](super::kind::COMPARE)) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start of the run, Unix seconds.
    pub started_unix_s: f64,
    /// Target as the user gave it; null with the embedded server.
    pub target: Option<String>,
    /// Resolved address.
    pub address: String,
    /// True when the run started its own server.
    pub embedded_server: bool,
    /// Time the name lookup took; null for a literal address.
    pub dns_ns: Option<u64>,
    /// Measurements per row.
    pub count: u64,
    /// Time between measurements.
    pub interval_ns: u64,
    /// Answer timeout.
    pub timeout_ns: u64,
    /// Payload message size.
    pub size_bytes: usize,
    /// One row per way of measuring.
    pub rows: Vec<Row>,
    /// The kernel's RTT of the payload ping connection.
    pub tcp_info: Option<TcpRtt>,
    /// The one-line conclusion.
    pub conclusion: Option<String>,
    /// True when interrupted (Ctrl-C).
    pub cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

impl Default for CompareDoc {
    fn default() -> Self {
        CompareDoc {
            header: Header::default(),
            started_unix_s: 0.0,
            target: None,
            address: String::new(),
            embedded_server: false,
            dns_ns: None,
            count: 0,
            interval_ns: 0,
            timeout_ns: 0,
            size_bytes: 0,
            rows: Vec::new(),
            tcp_info: None,
            conclusion: None,
            cancelled: false,
            interrupted: None,
        }
    }
}
