//! Reading a capture file into the matchers: issue 6's reader and decoder feed the [`Driver`].
#![forbid(unsafe_code)]

use super::driver::{DriverCounts, L4, ProtoChoice, Segment, Sink};
use super::stats::{Collect, RpcReport, RpcStats, StatsConfig};
use super::tlskeys::KeyLog;
use super::{Driver, Proto};
use crate::capture::decode::Transport;
use crate::capture::{CaptureError, CaptureInfo, Filter, Packets};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Feeds every TCP/UDP packet of `path` that passes `filter` to a driver, then closes what is still open.
pub fn feed(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    sink: &mut dyn Sink,
) -> Result<(CaptureInfo, DriverCounts), CaptureError> {
    feed_with(path, filter, Driver::new(choice), sink)
}

/// [`feed`], decrypting TLS with the session keys of `keylog`.
pub fn feed_keylog(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    keylog: Option<Arc<KeyLog>>,
    sink: &mut dyn Sink,
) -> Result<(CaptureInfo, DriverCounts), CaptureError> {
    let mut driver = Driver::new(choice);
    driver.set_keylog(keylog);
    feed_with(path, filter, driver, sink)
}

/// [`feed`] through a driver set up by the caller (e.g. [`Driver::with_content`], [`Driver::set_keylog`]).
pub fn feed_with(
    path: &Path,
    filter: &Filter,
    mut driver: Driver,
    sink: &mut dyn Sink,
) -> Result<(CaptureInfo, DriverCounts), CaptureError> {
    let mut pk = Packets::open_filtered(path, filter)?;
    let mut matched = 0u64;
    while let Some((p, d)) = pk.next_decoded() {
        let Some(d) = d else { continue };
        if !filter.matches(Some(&d)) {
            continue;
        }
        let (sp, dp, l4) = match d.transport {
            Transport::Tcp(t) => (
                t.src_port,
                t.dst_port,
                L4::Tcp {
                    seq: t.seq,
                    ack: t.ack,
                    flags: t.flags,
                },
            ),
            Transport::Udp(u) => (u.src_port, u.dst_port, L4::Udp),
            Transport::Other(_) => continue,
        };
        matched += 1;
        let seg = Segment {
            ts: Duration::from_nanos(p.ts_ns.max(0) as u64),
            src: SocketAddr::new(d.src, sp),
            dst: SocketAddr::new(d.dst, dp),
            l4,
            payload: d.payload,
            wire_len: d.payload_len.max(d.payload.len() as u32),
        };
        driver.segment(&seg, sink);
    }
    driver.finish(sink);
    let counts = driver.counts();
    let mut info = pk.finish();
    info.packets_matched = matched;
    Ok((info, counts))
}

/// Result of `capture rpc`.
#[derive(Debug, Clone, Serialize)]
pub struct RpcResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// Protocol forced on the command line, if any.
    pub forced_proto: Option<Proto>,
    /// What the driver saw.
    pub counts: DriverCounts,
    /// Per-operation statistics, slowest requests, anomalies.
    pub report: RpcReport,
}

/// `capture rpc`: per-operation request/response latency of one capture.
pub fn run_rpc(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    config: StatsConfig,
) -> Result<RpcResult, CaptureError> {
    run_rpc_keylog(path, filter, choice, config, None)
}

/// [`run_rpc`], decrypting TLS with the session keys of `keylog`.
pub fn run_rpc_keylog(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    config: StatsConfig,
    keylog: Option<Arc<KeyLog>>,
) -> Result<RpcResult, CaptureError> {
    let mut stats = RpcStats::new(config);
    let (capture, counts) = feed_keylog(path, filter, choice, keylog, &mut stats)?;
    Ok(RpcResult {
        capture,
        forced_proto: match choice {
            ProtoChoice::Force(p) => Some(p),
            ProtoChoice::Auto => None,
        },
        counts,
        report: stats.finish(),
    })
}

/// Every transaction of one capture with its connection and the hash of its request's leading bytes (for
/// `capture match`).
pub fn collect(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
) -> Result<(CaptureInfo, Collect), CaptureError> {
    let mut c = Collect::default();
    let (info, _) = feed_with(path, filter, Driver::new(choice).with_content(), &mut c)?;
    Ok((info, c))
}
