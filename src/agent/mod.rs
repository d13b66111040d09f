//! `roundtrip agent`: the responder and a prober in one process, probing many targets continuously, each on
//! its own open-loop schedule, and exposing the results to Prometheus (`/metrics`), as JSON (`/api/results`)
//! and as an HTML matrix (`/`).
//!
//! - [`engine`]: the scheduler and the probers (one event loop for TCP/UDP pings over persistent
//!   connections, a small pool for connect, ICMP and database probes).
//! - [`stats`]: per-target histogram (fixed log-spaced buckets, [`BUCKET_BOUNDS`]), counters and the bounded
//!   window of recent samples.
//! - [`buckets`]: the histograms' resolution (`--buckets`), finer bounds around the original ones.
//! - [`config`]: the TOML configuration file.
//! - [`targets`]: where targets come from: `--peer`, `--peers-file` (re-read on change), `--peers-dns`
//!   (re-resolved every minute), the config file; the agent's own addresses are left out.
//! - [`metrics`]: the Prometheus text format and OpenMetrics exposition of a [`Snapshot`].
//! - [`http`]: the small HTTP server for `/metrics`, `/api/results` and `/`.

pub mod buckets;
pub mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod stats;
pub mod targets;
pub mod watch;

use crate::db::DbUrl;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The default port of the responder and of the targets given without one (sockperf's).
pub const DEFAULT_PORT: u16 = 11111;

/// Upper bounds (seconds) of the RTT histogram buckets: 10^(-5 + k/4) for k = 0..=24, from 10 us to 10 s,
/// four buckets per decade (each bound 1.78x the previous one); a `+Inf` bucket follows.
pub const BUCKET_BOUNDS: [f64; 25] = [
    1e-5,
    1.778_279_410_038_923e-5,
    3.162_277_660_168_379e-5,
    5.623_413_251_903_491e-5,
    1e-4,
    1.778_279_410_038_923e-4,
    3.162_277_660_168_379e-4,
    5.623_413_251_903_491e-4,
    1e-3,
    1.778_279_410_038_923e-3,
    3.162_277_660_168_379e-3,
    5.623_413_251_903_491e-3,
    1e-2,
    1.778_279_410_038_923e-2,
    3.162_277_660_168_379e-2,
    5.623_413_251_903_491e-2,
    1e-1,
    1.778_279_410_038_923e-1,
    3.162_277_660_168_379e-1,
    5.623_413_251_903_491e-1,
    1.0,
    1.778_279_410_038_923,
    3.162_277_660_168_379,
    5.623_413_251_903_491,
    10.0,
];

/// What a target is probed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeKind {
    /// Application-level ping-pong over a persistent TCP connection (sockperf message format), `size` bytes.
    Tcp {
        /// Message size in bytes, header included (at least 14).
        size: u32,
    },
    /// Application-level ping-pong over UDP, `size` bytes.
    Udp {
        /// Message size in bytes, header included (at least 14).
        size: u32,
    },
    /// A TCP handshake (connect, then close).
    Connect,
    /// An ICMP echo of `size` payload bytes.
    Icmp {
        /// Payload bytes.
        size: u32,
    },
    /// A database round trip through [`crate::db`] (one trivial query on a kept connection).
    Db {
        /// The URL; its password never leaves [`crate::db`] (labels use [`DbUrl::redacted`]).
        url: Box<DbUrl>,
    },
    /// The round trip from the database at `url` to a remote one through a database link, timed inside the
    /// local database ([`crate::db::link`]); the first call (link open) is not counted.
    DbLink {
        /// The local database.
        url: Box<DbUrl>,
        /// The far end; labels use [`crate::db::link::LinkTarget::label`], never its password.
        link: Box<crate::db::link::LinkTarget>,
    },
}

impl ProbeKind {
    /// The `probe` label value: `tcp`, `udp`, `connect`, `icmp`, `db` or `db-link`.
    pub fn label(&self) -> &'static str {
        match self {
            ProbeKind::Tcp { .. } => "tcp",
            ProbeKind::Udp { .. } => "udp",
            ProbeKind::Connect => "connect",
            ProbeKind::Icmp { .. } => "icmp",
            ProbeKind::Db { .. } => "db",
            ProbeKind::DbLink { .. } => "db-link",
        }
    }

    /// The `size` label value in bytes (0 for connect and db).
    pub fn size(&self) -> u32 {
        match self {
            ProbeKind::Tcp { size } | ProbeKind::Udp { size } | ProbeKind::Icmp { size } => *size,
            ProbeKind::Connect | ProbeKind::Db { .. } | ProbeKind::DbLink { .. } => 0,
        }
    }
}

/// One target with everything needed to probe it. Two specs with the same [`TargetSpec::key`] are the same
/// series: a reload that keeps the key keeps the target's counters and schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    /// The `target` label: the host as given (name or address), with `:port` unless the port is
    /// [`DEFAULT_PORT`]; for `db`, the redacted URL's host:port (never a password).
    pub target: String,
    /// The resolved address probed (the port is ignored for ICMP and db).
    pub addr: SocketAddr,
    /// The probe.
    pub probe: ProbeKind,
    /// Time between probes (open loop: probe n is due at phase + n x interval).
    pub interval: Duration,
    /// How long an answer may take before the probe counts as a `timeout` error.
    pub timeout: Duration,
    /// The user's labels (name, value), sorted by name; names are valid Prometheus label names and none of
    /// source, target, probe, size, le, reason.
    pub labels: Vec<(String, String)>,
}

/// Identity of a target series: target, probe, size and the user's labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey {
    /// The `target` label.
    pub target: String,
    /// The `probe` label.
    pub probe: &'static str,
    /// The `size` label.
    pub size: u32,
    /// The user's labels.
    pub labels: Vec<(String, String)>,
}

impl TargetSpec {
    /// This target's series identity.
    pub fn key(&self) -> TargetKey {
        TargetKey {
            target: self.target.clone(),
            probe: self.probe.label(),
            size: self.probe.size(),
            labels: self.labels.clone(),
        }
    }
}

/// Why a probe failed: the `reason` label of `roundtrip_probe_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorReason {
    /// No answer within the target's timeout.
    Timeout,
    /// The connection was refused (RST to the SYN, ICMP port unreachable).
    Refused,
    /// An established connection was reset or closed by the peer.
    Reset,
    /// No route, host or network unreachable.
    Unreachable,
    /// The peer answered something that is not the protocol (garbage, wrong echo, not a roundtrip/sockperf
    /// server, database error).
    Protocol,
    /// The pre-shared key exchange failed (the peer has no key, another key, or we have none).
    Auth,
    /// The name did not resolve (the last good addresses are kept).
    Dns,
    /// Anything else (local resource errors).
    Other,
}

impl ErrorReason {
    /// Every reason, in label order; each target exports one counter per reason (zeros included), so the
    /// series count per target is fixed.
    pub const ALL: [ErrorReason; 8] = [
        ErrorReason::Timeout,
        ErrorReason::Refused,
        ErrorReason::Reset,
        ErrorReason::Unreachable,
        ErrorReason::Protocol,
        ErrorReason::Auth,
        ErrorReason::Dns,
        ErrorReason::Other,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            ErrorReason::Timeout => "timeout",
            ErrorReason::Refused => "refused",
            ErrorReason::Reset => "reset",
            ErrorReason::Unreachable => "unreachable",
            ErrorReason::Protocol => "protocol",
            ErrorReason::Auth => "auth",
            ErrorReason::Dns => "dns",
            ErrorReason::Other => "other",
        }
    }
}

/// Series exported per target at `--buckets 1`: histogram (25 buckets + `+Inf` + `_sum` + `_count` = 28), probes
/// total (1), errors per reason (8), up (1); [`buckets::Buckets::series_per_target`] gives it at any resolution.
pub const SERIES_PER_TARGET: usize = 28 + 1 + ErrorReason::ALL.len() + 1;

/// A histogram in the bounds of one [`buckets::Buckets`] resolution (the number of counts tells which):
/// per-bucket counts (not cumulative; the last is `+Inf`), their sum in seconds and count.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Counts per bucket: `counts[k]` holds values in (bounds[k-1], bounds[k]]; the last the values above
    /// 10 s. 26 counts at `--buckets 1` (the [`BUCKET_BOUNDS`]).
    pub counts: Vec<u64>,
    /// Sum of the values, seconds.
    pub sum_s: f64,
    /// Number of values.
    pub count: u64,
}

/// Percentiles and loss over the recent window of one target.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WindowStats {
    /// The window actually covered (shorter right after start, or when the sample cap was reached).
    pub span: Duration,
    /// Probes sent in the window whose outcome is known.
    pub sent: u64,
    /// Of those, probes that failed (any reason).
    pub lost: u64,
    /// Percentiles of the answered probes' RTT (None when none answered).
    pub p50: Option<Duration>,
    /// 90th percentile.
    pub p90: Option<Duration>,
    /// 99th percentile.
    pub p99: Option<Duration>,
    /// Largest.
    pub max: Option<Duration>,
}

/// The state of one target at snapshot time.
#[derive(Debug, Clone)]
pub struct TargetSnapshot {
    /// The target.
    pub spec: Arc<TargetSpec>,
    /// RTT of every answered probe since the target was added.
    pub rtt: Histogram,
    /// Probes whose outcome is known (answered or failed).
    pub probes: u64,
    /// Failed probes per reason, indexed like [`ErrorReason::ALL`].
    pub errors: [u64; 8],
    /// Whether the last probe was answered (false before the first outcome).
    pub up: bool,
    /// The last RTT measured.
    pub last_rtt: Option<Duration>,
    /// The last error, in words (for `/api/results`; never holds a password).
    pub last_error: Option<String>,
    /// The recent window.
    pub window: WindowStats,
}

/// Everything the exporters need, taken at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When it was taken.
    pub at: SystemTime,
    /// Per target, in [`TargetKey`] order.
    pub targets: Vec<TargetSnapshot>,
    /// How late probes were sent relative to their schedule (seconds, same buckets).
    pub schedule_lag: Histogram,
}
