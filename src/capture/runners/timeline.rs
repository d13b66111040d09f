//! `capture timeline`: every packet of one TCP connection ([`run_timeline`], [`run_timeline_on`]).

use crate::capture::flows::{self, FlowSummary, FlowTracker, PacketInfo, TrackerConfig};
use crate::capture::{CaptureError, CaptureInfo, Filter, Next, Packets, decode, seqgraph};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::Path;

/// One line of `capture timeline`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimelineRow {
    /// Packet time, Unix ns.
    pub ts_ns: i64,
    /// Time since the previous packet of the connection.
    pub delta_ns: u64,
    /// Direction.
    pub direction: flows::Dir,
    /// Flags, tcpdump style.
    pub flags: String,
    /// Relative sequence number.
    pub seq: u32,
    /// Relative acknowledgement number.
    pub ack: Option<u32>,
    /// Payload length.
    pub len: u32,
    /// Advertised window (scaled).
    pub window_bytes: u64,
    /// Bytes in flight from the sender after this packet.
    pub in_flight_bytes: Option<u64>,
    /// Notes: retransmission, out-of-order, dup-ack, zero-window, keep-alive.
    pub notes: Vec<Cow<'static, str>>,
    /// SACK blocks (left, right edge), relative to the other side's initial sequence number.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub sack: Vec<[u32; 2]>,
}

/// Which direction's data the time-sequence graph draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFrom {
    /// The direction that carried more payload.
    Busier,
    /// The client's data (the side that sent the SYN).
    Client,
    /// The server's data.
    Server,
}

/// Result of `capture timeline`.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// The connection shown (its summary), when one matched.
    pub flow: Option<FlowSummary>,
    /// One row per packet of that connection (empty when not asked for).
    pub rows: Vec<TimelineRow>,
    /// Its time-sequence graph, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq_graph: Option<seqgraph::SeqGraph>,
}

fn notes(i: &PacketInfo) -> Vec<&'static str> {
    let mut n = Vec::new();
    if i.retransmission {
        n.push("retransmission");
    }
    if i.out_of_order {
        n.push("out-of-order");
    }
    if i.dup_ack {
        n.push("dup-ack");
    }
    if i.zero_window {
        n.push("zero-window");
    }
    if i.keep_alive {
        n.push("keep-alive");
    }
    n
}

/// `capture timeline`: every packet of one TCP connection (the first connection that passes `filter`) when
/// `keep_rows`, and with `graph` its time-sequence graph.
pub fn run_timeline(
    path: &Path,
    filter: &Filter,
    config: TrackerConfig,
    graph: Option<DataFrom>,
    keep_rows: bool,
) -> Result<TimelineResult, CaptureError> {
    Ok(run_timeline_on(
        Packets::open_filtered(path, filter)?,
        filter,
        config,
        graph,
        keep_rows,
        None,
    ))
}

/// Live: receives each row of the connection followed, with its client and server, as it comes.
pub type OnRow<'a> = &'a mut dyn FnMut(&TimelineRow, SocketAddr, SocketAddr);

/// [`run_timeline`] on any packet source; `on_row` (live) gets every row as it comes, whether or not
/// `keep_rows` keeps them for the result.
pub fn run_timeline_on(
    mut pk: Packets,
    filter: &Filter,
    config: TrackerConfig,
    graph: Option<DataFrom>,
    keep_rows: bool,
    mut on_row: Option<OnRow<'_>>,
) -> TimelineResult {
    let live = pk.is_live();
    let by_if = pk.keys_by_interface();
    let mut tr = FlowTracker::new(TrackerConfig {
        key_by_interface: by_if,
        ..config
    });
    let mut chosen: Option<u64> = None;
    let mut rows = Vec::new();
    // Both directions are collected while reading (the busier one is known only at the end).
    let mut graphs = graph.map(|_| {
        [
            seqgraph::SeqGraphBuilder::new(flows::Dir::ClientToServer),
            seqgraph::SeqGraphBuilder::new(flows::Dir::ServerToClient),
        ]
    });
    let mut prev_ts: Option<i64> = None;
    let mut matched = 0u64;
    while let Some(ev) = pk.next_event(true) {
        let Next::Packet(p, d) = ev else { continue };
        let Some(d) = d else { continue };
        if d.tcp().is_none() || !filter.matches(Some(&d)) {
            continue;
        }
        let ts = p.ts_ns;
        let len = p.orig_len;
        if by_if {
            tr.set_interface(p.interface);
        }
        let Some(info) = tr.process(ts, len, &d) else {
            continue;
        };
        if chosen.is_none()
            && live
            && filter.flow.is_none()
            && info.flags & (decode::flags::SYN | decode::flags::ACK) != decode::flags::SYN
        {
            // Live without --flow: follow the first connection that starts, not one caught midway.
            continue;
        }
        let id = *chosen.get_or_insert(info.flow_id);
        if info.flow_id != id {
            continue;
        }
        if let Some(g) = &mut graphs {
            for b in g.iter_mut() {
                b.add(ts, &info, &d);
            }
        }
        let want_row = keep_rows || on_row.is_some();
        let sack = match (d.tcp(), info.rel_ack) {
            _ if !want_row => Vec::new(),
            (Some(t), Some(rel_ack)) if t.sack_count > 0 => {
                let base = t.ack.wrapping_sub(rel_ack);
                t.sack[..usize::from(t.sack_count).min(t.sack.len())]
                    .iter()
                    .map(|&(l, r)| [l.wrapping_sub(base), r.wrapping_sub(base)])
                    .collect()
            }
            _ => Vec::new(),
        };
        matched += 1;
        let delta = prev_ts.map_or(0, |p| ts.saturating_sub(p).max(0) as u64);
        prev_ts = Some(ts);
        if !want_row {
            continue;
        }
        let row = TimelineRow {
            ts_ns: ts,
            delta_ns: delta,
            direction: info.dir,
            flags: decode::flags_text(info.flags),
            seq: info.rel_seq,
            ack: info.rel_ack,
            len: info.payload_len,
            window_bytes: info.window,
            in_flight_bytes: info.in_flight,
            notes: notes(&info).into_iter().map(Cow::Borrowed).collect(),
            sack,
        };
        if let Some(f) = on_row.as_mut() {
            let (src, dst) = match d.ports() {
                Some((sp, dp)) => (SocketAddr::new(d.src, sp), SocketAddr::new(d.dst, dp)),
                None => continue,
            };
            let (c, s) = if info.dir == flows::Dir::ClientToServer {
                (src, dst)
            } else {
                (dst, src)
            };
            f(&row, c, s);
        }
        if keep_rows {
            rows.push(row);
        }
    }
    pk.info.packets_matched = matched;
    let (flows, _) = tr.finish_all(None);
    let flow = chosen.and_then(|id| flows.into_iter().find(|f| f.id == id));
    let seq_graph = match (graphs, graph, &flow) {
        (Some([c2s, s2c]), Some(from), Some(f)) => Some(match from {
            DataFrom::Client => c2s.finish(f, "asked"),
            DataFrom::Server => s2c.finish(f, "asked"),
            DataFrom::Busier => match f.bulk().0 {
                flows::Dir::ClientToServer => c2s.finish(f, "busier"),
                flows::Dir::ServerToClient => s2c.finish(f, "busier"),
            },
        }),
        _ => None,
    };
    TimelineResult {
        capture: pk.finish(),
        flow,
        rows,
        seq_graph,
    }
}
