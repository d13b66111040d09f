//! An application's structure as read from a capture: per TCP connection, its request/response turns (from
//! the rpc decoders when one recognises the protocol, else generic turns), what each request waited for, the
//! client's think time, the server's time and the bytes moved; plus the network as it was (baseline RTT,
//! receiver window, MSS). Both the prediction (`capture whatif`) and the replay (`roundtrip replay`) read this.

use std::net::SocketAddr;
use std::time::Duration;

/// The structure of every TCP connection of a capture.
#[derive(Debug, Clone, Default)]
pub struct AppProfile {
    /// Connections in the order they started.
    pub connections: Vec<ConnProfile>,
    /// First to last packet of the capture.
    pub duration: Duration,
    /// What could not be read and how it was worked around (no handshake, one direction, snaplen cut, ...).
    pub notes: Vec<String>,
}

/// How the baseline round-trip time of a connection was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RttSource {
    /// SYN -> SYN-ACK -> ACK seen in the capture.
    Handshake,
    /// Data -> ACK timing (no handshake in the capture).
    AckTiming,
    /// Nothing to measure it from.
    Unknown,
}

/// One TCP connection's structure.
#[derive(Debug, Clone)]
pub struct ConnProfile {
    /// The side that opened the connection (or sent the first request).
    pub client: SocketAddr,
    /// The side that answered.
    pub server: SocketAddr,
    /// Protocol whose decoder read the turns ("smb2", "pgsql", ..., or "generic").
    pub protocol: String,
    /// Offset of the connection's first packet from the capture's first packet.
    pub start: Duration,
    /// First to last packet of this connection.
    pub duration: Duration,
    /// Round-trip time of the network in the capture, and how it was found.
    pub rtt: Duration,
    /// How [`ConnProfile::rtt`] was found.
    pub rtt_source: RttSource,
    /// Largest receiver window each side advertised (scaled), bytes: [client, server].
    pub max_window: [u64; 2],
    /// Maximum segment size seen (or announced), bytes.
    pub mss: u32,
    /// Request/response turns in request order.
    pub turns: Vec<Turn>,
}

/// One request and its response.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Operation name from the decoder ("READ", "SELECT", "turn").
    pub op: String,
    /// Request's first byte, as an offset from the connection's first packet.
    pub request_start: Duration,
    /// Request bytes (application payload).
    pub request_bytes: u64,
    /// Response bytes (application payload).
    pub response_bytes: u64,
    /// Index (in [`ConnProfile::turns`]) of the turn whose response this request waited for: the latest
    /// response that ended before this request started. None for the first turn or when nothing had ended.
    pub waits_for: Option<usize>,
    /// Client time between the end of the response it waited for (or the connection start) and this
    /// request's first byte.
    pub think: Duration,
    /// Server time: response's first byte - request's last byte - one network RTT (never negative).
    pub server: Duration,
    /// Requests outstanding when this one was sent (itself included).
    pub outstanding: u32,
}
