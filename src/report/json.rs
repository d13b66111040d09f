//! JSON documents. Field names are stable; every duration carries its unit in its name (`_ns`, `_s`).
//!
//! Every document has `format` ([`FORMAT`]), `format_version`, `kind` (the command) and `environment`, so that
//! readers such as a report renderer can tell what they were given.

pub use crate::doc::ping::{PingDoc, PingSettings, PingSummary, ping_summary};
pub use crate::doc::{
    Envelope, Environment, FORMAT, FORMAT_VERSION, Header, Interrupted, envelope_bytes, to_bytes,
};
