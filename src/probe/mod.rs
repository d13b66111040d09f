//! Measurement engines. Each returns typed results and reports progress through an observer; none prints.

pub mod compare;
pub mod connect;
pub mod hello;
pub mod icmp;
pub mod link;
pub mod load;
pub mod ping;
pub mod rxtime;
pub mod stream;
pub mod sweep;
pub mod target;
pub mod tcpinfo;
pub mod throughput;
