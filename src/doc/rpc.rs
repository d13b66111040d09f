//! The document `roundtrip capture rpc --json` writes and `roundtrip report` reads: the capture file, the
//! protocol forced on the command line, what the driver saw, and the per-operation report. Documents of older
//! versions still load: an operation's `latency` reads as `last_byte`, a slow request's `latency_ns` as
//! `last_byte_ns`, and a missing `first_byte` as an empty summary
//! ([`OpRow::first_byte_known`](crate::capture::rpc::stats::OpRow::first_byte_known) says None).

use super::{Header, kind};
use crate::capture::CaptureInfo;
use crate::capture::rpc::Proto;
use crate::capture::rpc::driver::DriverCounts;
use crate::capture::rpc::run::RpcResult;
use crate::capture::rpc::stats::RpcReport;
use serde::{Deserialize, Serialize};

/// The document `roundtrip capture rpc --json` prints. `report` is required (a document without it names the
/// part it lacks); the rest reads as empty when absent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpcDoc {
    /// `format`, `format_version`, `kind` ([`kind::CAPTURE_RPC`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// The file and how it was read.
    #[serde(default)]
    pub capture: CaptureInfo,
    /// Protocol forced on the command line, if any.
    #[serde(default)]
    pub forced_proto: Option<Proto>,
    /// What the driver saw.
    #[serde(default)]
    pub counts: DriverCounts,
    /// Per-operation statistics, slowest requests, anomalies.
    pub report: RpcReport,
}

impl RpcDoc {
    /// The document of `result`, measured on this machine.
    pub fn new(result: RpcResult) -> Self {
        RpcDoc {
            header: Header::new(kind::CAPTURE_RPC),
            capture: result.capture,
            forced_proto: result.forced_proto,
            counts: result.counts,
            report: result.report,
        }
    }
}
