//! What the engine's threads send each other: jobs for the worker pools ([`super::pool`]) and messages for
//! the event loop ([`super::stream`]). Both sides use these types; neither side's module is imported by the
//! other.

use super::{Entry, Failure};
use crate::agent::TargetSpec;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Instant;

/// Work for a pool thread.
pub(super) enum Job {
    /// Finish a connection for loop slot `slot`, generation `cgen`: the hello / key handshake on a TCP
    /// connection the loop made, or a UDP socket and its handshake; all before `deadline`.
    Connect {
        slot: u32,
        cgen: u32,
        link: Pending,
        deadline: Instant,
    },
    /// Run one probe of a connect, ICMP or database target due at `due`.
    Probe {
        entry: Arc<Entry>,
        spec: Arc<TargetSpec>,
        due: Instant,
    },
}

/// What a connection job starts from.
pub(super) enum Pending {
    /// A connected TCP stream (the loop connected it without blocking).
    Tcp(TcpStream),
    /// The UDP peer's address.
    Udp(SocketAddr),
}

/// A connection made by a worker, ready for the loop.
pub(super) enum Connection {
    /// A TCP connection past its handshake, non-blocking.
    Tcp(TcpStream),
    /// A connected UDP socket past its handshake, non-blocking.
    Udp(UdpSocket),
}

/// What the engine and the workers tell the loop.
pub(super) enum Msg {
    /// A new target; its first probe is due at `first`.
    Add {
        entry: Arc<Entry>,
        spec: Arc<TargetSpec>,
        first: Instant,
    },
    /// A kept target whose spec changed.
    Update { id: u64, spec: Arc<TargetSpec> },
    /// A target removed.
    Remove { id: u64 },
    /// A worker finished making a connection.
    Connected {
        slot: u32,
        cgen: u32,
        result: Result<Connection, Failure>,
    },
    /// Stop.
    Stop,
}
