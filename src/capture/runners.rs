//! The drivers of the capture analyses: each reads a [`Packets`](super::Packets) source once, applies a
//! [`Filter`](super::Filter) and returns typed results. Their items are re-exported from [`capture`](super).

pub mod flows;
pub mod stats;
pub mod timeline;
