//! The document `roundtrip capture match --json` writes and `roundtrip report` reads: how each capture was
//! read, then the match report (pairs, per-operation latency at both ends, unmatched requests, the clock
//! offset and the verdict).

use super::{Header, kind};
use crate::capture::CaptureInfo;
use crate::capture::matching::MatchReport;
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture match --json` prints. The envelope and the captures may be missing from a
/// document (older versions); without the report's `ops` and `verdict` it is refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatchDoc {
    /// `format`, `format_version`, `kind` ([`kind::CAPTURE_MATCH`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// The client-side capture and how it was read.
    #[serde(default)]
    pub client_capture: CaptureInfo,
    /// The server-side capture and how it was read.
    #[serde(default)]
    pub server_capture: CaptureInfo,
    /// The match itself.
    #[serde(flatten)]
    pub report: MatchReport,
    /// One-line conclusion in words: the command makes it from the engine's
    /// [`crate::capture::matching::Verdict`] (`report::match_verdict::words`). Written after the report's fields.
    pub verdict: String,
}

impl MatchDoc {
    /// The document of a match between the captures read as `client_capture` and `server_capture`, measured
    /// on this machine, with its verdict in words.
    pub fn new(
        client_capture: CaptureInfo,
        server_capture: CaptureInfo,
        report: MatchReport,
        verdict: String,
    ) -> Self {
        MatchDoc {
            header: Header::new(kind::CAPTURE_MATCH),
            client_capture,
            server_capture,
            report,
            verdict,
        }
    }
}
