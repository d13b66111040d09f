//! The document `capture rpc` writes: per-operation rows, the slowest requests, anomalies, interval and
//! connection rows ([`RpcReport`]).

use crate::capture::rpc::Proto;
use crate::capture::rpc::driver::ConnInfo;
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// One of the slowest requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slow {
    /// Time to the response's last byte (request end to the packet that completes the response), nanoseconds
    /// (`latency_ns` in documents of older versions).
    #[serde(alias = "latency_ns")]
    pub last_byte_ns: u64,
    /// Time to the response's first byte (request end to the first packet of the response), nanoseconds
    /// (absent, read as 0, in documents of older versions).
    #[serde(default)]
    pub first_byte_ns: u64,
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Time of the request's first byte, Unix seconds.
    pub request_unix_s: f64,
    /// Client address.
    pub client: SocketAddr,
    /// Server address.
    pub server: SocketAddr,
    /// XID / message ID, when the protocol has one.
    pub xid: Option<u32>,
    /// TCP sequence number of the request's first byte.
    pub request_seq: Option<u32>,
    /// The response reported an error.
    pub error: bool,
}

impl Eq for Slow {}

impl PartialOrd for Slow {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Slow {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.last_byte_ns
            .cmp(&other.last_byte_ns)
            .then_with(|| other.request_unix_s.total_cmp(&self.request_unix_s))
    }
}

/// One row per interval (by the time the response completed). `mean_ns` .. `max_ns` are times to the
/// response's last byte, `first_byte_*` to its first byte.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IntervalRow {
    /// Start of the interval, seconds since the first transaction's request.
    pub start_s: f64,
    /// Transactions completed in the interval.
    pub count: u64,
    /// Mean time to the last byte.
    pub mean_ns: f64,
    /// Median time to the last byte.
    pub p50_ns: u64,
    /// 99th percentile of the time to the last byte.
    pub p99_ns: u64,
    /// Largest time to the last byte.
    pub max_ns: u64,
    /// Mean time to the first byte.
    pub first_byte_mean_ns: f64,
    /// Median time to the first byte.
    pub first_byte_p50_ns: u64,
    /// 99th percentile of the time to the first byte.
    pub first_byte_p99_ns: u64,
    /// Largest time to the first byte.
    pub first_byte_max_ns: u64,
}

/// Statistics of one connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnStats {
    /// The connection.
    pub conn: ConnInfo,
    /// Transactions.
    pub count: u64,
    /// Mean time to the response's last byte.
    pub mean_ns: f64,
    /// Largest time to the last byte.
    pub max_ns: u64,
    /// Mean time to the response's first byte.
    pub first_byte_mean_ns: f64,
    /// Largest time to the first byte.
    pub first_byte_max_ns: u64,
    /// Errors.
    pub errors: u64,
}

/// One operation's row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpRow {
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Responses reporting an error.
    pub errors: u64,
    /// Errors by the protocol's name for them (SMB2: the NT status), when the protocol names them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors_by_status: BTreeMap<String, u64>,
    /// Payload bytes the operation moved in all (SMB2 READ: response DataLength; WRITE: request Length),
    /// when the protocol says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Time to the response's first byte: request end to the first packet of the response (the server plus
    /// one network round trip; tshark's `rpc,srt` SRT). Absent in documents of older versions: read as an
    /// empty summary (count 0).
    #[serde(default)]
    pub first_byte: Summary,
    /// Time to the response's last byte: request end to the packet that completes the response (adds the
    /// transfer of the response). `latency` in documents of older versions.
    #[serde(alias = "latency")]
    pub last_byte: Summary,
}

impl OpRow {
    /// The time to the first byte; None in documents of older versions, which lack it.
    pub fn first_byte_known(&self) -> Option<&Summary> {
        (self.first_byte.count > 0).then_some(&self.first_byte)
    }
}

/// Count of one kind of anomaly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AnomalyRow {
    /// Protocol.
    pub proto: Proto,
    /// What.
    pub kind: String,
    /// How many.
    pub count: u64,
}

/// Everything `capture rpc` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpcReport {
    /// Per operation.
    pub ops: Vec<OpRow>,
    /// The slowest requests, slowest first.
    #[serde(default)]
    pub slowest: Vec<Slow>,
    /// Unpaired or unparseable traffic.
    #[serde(default)]
    pub anomalies: Vec<AnomalyRow>,
    /// Per-interval rows (when asked).
    #[serde(default)]
    pub intervals: Vec<IntervalRow>,
    /// Length of the interval rows, seconds (None: not asked; absent in documents of older versions).
    #[serde(default)]
    pub interval_s: Option<f64>,
    /// Per-connection rows (when asked).
    #[serde(default)]
    pub connections: Vec<ConnStats>,
    /// Transactions in all.
    pub transactions: u64,
}
