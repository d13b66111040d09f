//! roundtrip: measure the round trip an application really pays on a network, find where the time goes, and
//! show what it would cost somewhere else.
//!
//! This crate is the engine: every capability returns typed results and never prints. The `roundtrip` binary
//! (in `src/main.rs` and `src/cli/`) parses arguments and renders results through [`report`].
//!
//! - [`agent`]: `roundtrip agent`, continuous probing of many targets with Prometheus metrics.
//! - [`mesh`]: `roundtrip mesh`, the all-pairs matrix of a fleet, from Prometheus or from the agents.
//! - [`probe`]: measurement engines (ping-pong over TCP/UDP, ...).
//! - [`server`]: the sockperf-compatible responder.
//! - [`wire`]: message formats.
//! - [`stats`]: HDR histograms and summaries.
//! - [`doc`]: the result documents (`--json`) every command writes and `roundtrip report` reads.
//! - [`report`]: exporters (text, JSON, CSV).
//! - [`tcpwatch`]: the kernel's view of live TCP connections (sock_diag), sampled.
//! - [`whatif`]: an application's structure from a capture, its run time at another RTT, its replay.
//! - [`replay`]: an application's captured structure played against `roundtrip server --allow-replay`.
//! - [`terminal`]: text from the network or a file escaped before it reaches a terminal.
//! - [`units`]: strict parsing and formatting of durations, sizes and rates.

pub mod agent;
pub mod capture;
pub mod db;
pub mod doc;
pub mod mesh;
pub mod model;
pub mod probe;
pub mod proxy;
pub mod replay;
pub mod report;
pub mod server;
pub mod stats;
pub mod tcpwatch;
pub mod terminal;
pub mod units;
pub mod whatif;
pub mod wire;
