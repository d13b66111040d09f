//! The document `roundtrip tcp --json` writes and `roundtrip report` reads: the filter, every sample of every
//! matching connection, the connections that went away and one summary per connection.

use super::Header;
use crate::tcpwatch::{ConnSummary, Filter, Sample};
use serde::{Deserialize, Serialize};

/// A connection that went away during the watch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpClosed {
    /// Local address.
    pub local: String,
    /// Remote address.
    pub remote: String,
    /// The kernel's socket cookie.
    pub cookie: u64,
    /// When it was first missing, ns since the watch started.
    pub at_ns: u64,
}

/// The document `roundtrip tcp --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TcpDoc {
    /// `format`, `format_version`, `kind` ([`kind::TCP`](super::kind::TCP)) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start of the watch, Unix seconds.
    pub started_unix_s: f64,
    /// The filter as the user gave it.
    pub filter: Filter,
    /// Time between samples.
    pub interval_ns: u64,
    /// Length of the watch asked for; null until Ctrl-C.
    pub duration_ns: Option<u64>,
    /// Every sample of every matching connection, in time order.
    pub samples: Vec<Sample>,
    /// Connections that went away.
    pub closed: Vec<TcpClosed>,
    /// One summary per connection, with the verdict on the whole watch.
    pub connections: Vec<ConnSummary>,
    /// True when interrupted (Ctrl-C).
    pub cancelled: bool,
}

impl Default for TcpDoc {
    fn default() -> Self {
        TcpDoc {
            header: Header::default(),
            started_unix_s: 0.0,
            filter: Filter::default(),
            interval_ns: 0,
            duration_ns: None,
            samples: Vec::new(),
            closed: Vec::new(),
            connections: Vec::new(),
            cancelled: false,
        }
    }
}
