//! `capture flows` over a file, one live reader or a fanout group ([`run_flows`], [`run_flows_on`],
//! [`run_flows_fanout`]), and the in-flight / window series of one connection ([`flow_series`]).

use crate::capture::flows::{
    self, FlowSummary, FlowTracker, StreamSink, TrackerConfig, TrackerCounters,
};
use crate::capture::{CaptureError, CaptureInfo, Filter, Next, Packets, decode, merge_infos};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::Path;

/// Result of `capture flows`.
#[derive(Debug, Clone, Serialize)]
pub struct FlowsResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// Tracker counters.
    pub counters: TrackerCounters,
    /// One summary per TCP connection, in order of first packet.
    pub flows: Vec<FlowSummary>,
    /// In flight against the receiver's window over time for one connection (see [`flow_series`]); `None`
    /// when not asked for or when no TCP connection matched.
    pub window_series: Option<FlowSeries>,
}

/// Buckets of a [`FlowSeries`]: about one per pixel column of a report chart.
pub const FLOW_SERIES_BUCKETS: usize = 800;

/// One time bucket of a [`FlowSeries`]: the smallest and largest value seen in it (empty buckets are left out).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct SeriesBucket {
    /// Start of the bucket, seconds since the connection's first packet.
    pub start_s: f64,
    /// Smallest bytes in flight after a data segment of the data direction, when one was sent in the bucket.
    pub in_flight_min_bytes: Option<u64>,
    /// Largest bytes in flight in the bucket.
    pub in_flight_max_bytes: Option<u64>,
    /// Smallest window (scaled) advertised by the receiving side in the bucket.
    pub window_min_bytes: Option<u64>,
    /// Largest window advertised by the receiving side in the bucket.
    pub window_max_bytes: Option<u64>,
}

/// Bytes in flight of one connection's data direction against the window its receiver advertised, over
/// time: a bounded series (at most [`FLOW_SERIES_BUCKETS`] buckets of equal length over the connection's
/// life), min and max per bucket, so no extreme is dropped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowSeries {
    /// The connection's number (as in `flows`).
    pub flow_id: u64,
    /// The client end.
    pub client: SocketAddr,
    /// The server end.
    pub server: SocketAddr,
    /// The data direction drawn (the one that carried more payload).
    pub direction: flows::Dir,
    /// Why this connection: "only" (one matched) or "largest" (most payload bytes of several).
    pub chosen: Cow<'static, str>,
    /// Length of one bucket, seconds.
    pub bucket_s: f64,
    /// Non-empty buckets in time order.
    pub buckets: Vec<SeriesBucket>,
}

/// Reads `path` again for the connection of `flows` that carried the most payload and returns its
/// [`FlowSeries`] (None when `flows` is empty). `filter` is the one the flows were found with.
pub fn flow_series(
    path: &Path,
    filter: &Filter,
    config: TrackerConfig,
    flows: &[FlowSummary],
) -> Result<Option<FlowSeries>, CaptureError> {
    let Some(f) = flows.iter().max_by_key(|f| {
        (
            f.client_to_server.payload_bytes + f.server_to_client.payload_bytes,
            std::cmp::Reverse(f.id),
        )
    }) else {
        return Ok(None);
    };
    let (dir, _) = f.bulk();
    let n = FLOW_SERIES_BUCKETS;
    let span_ns = (f.last_ts_ns - f.first_ts_ns).max(1);
    let bucket_ns = (span_ns as f64 / n as f64).max(1.0);
    let only = Filter {
        flow: Some((f.client, f.server)),
        ..filter.clone()
    };
    #[derive(Clone, Copy, Default)]
    struct Acc {
        fl: Option<(u64, u64)>,
        win: Option<(u64, u64)>,
    }
    fn widen(r: &mut Option<(u64, u64)>, v: u64) {
        *r = Some(match *r {
            Some((a, b)) => (a.min(v), b.max(v)),
            None => (v, v),
        });
    }
    let mut acc = vec![Acc::default(); n];
    let mut pk = Packets::open_filtered(path, &only)?;
    let mut tr = FlowTracker::new(config);
    while let Some((p, d)) = pk.next_decoded() {
        let Some(d) = d else { continue };
        if p.ts_ns < f.first_ts_ns || p.ts_ns > f.last_ts_ns || !only.matches(Some(&d)) {
            continue;
        }
        let Some(info) = tr.process(p.ts_ns, p.orig_len, &d) else {
            continue;
        };
        let i = (((p.ts_ns - f.first_ts_ns) as f64 / bucket_ns) as usize).min(n - 1);
        if info.dir == dir {
            if info.payload_len > 0
                && let Some(v) = info.in_flight
            {
                widen(&mut acc[i].fl, v);
            }
        } else {
            widen(&mut acc[i].win, info.window);
        }
    }
    let buckets = acc
        .iter()
        .enumerate()
        .filter(|(_, a)| a.fl.is_some() || a.win.is_some())
        .map(|(i, a)| SeriesBucket {
            start_s: i as f64 * bucket_ns / 1e9,
            in_flight_min_bytes: a.fl.map(|x| x.0),
            in_flight_max_bytes: a.fl.map(|x| x.1),
            window_min_bytes: a.win.map(|x| x.0),
            window_max_bytes: a.win.map(|x| x.1),
        })
        .collect();
    Ok(Some(FlowSeries {
        flow_id: f.id,
        client: f.client,
        server: f.server,
        direction: dir,
        chosen: Cow::Borrowed(if flows.len() == 1 { "only" } else { "largest" }),
        bucket_s: bucket_ns / 1e9,
        buckets,
    }))
}

/// `capture flows`: one summary per TCP connection. `sink`, when given, receives every connection's payload
/// in order.
pub fn run_flows(
    path: &Path,
    filter: &Filter,
    config: TrackerConfig,
    sink: Option<&mut dyn StreamSink>,
) -> Result<FlowsResult, CaptureError> {
    Ok(run_flows_on(
        Packets::open_filtered(path, filter)?,
        filter,
        config,
        sink,
        &mut |_| {},
    ))
}

/// Live: finished connections kept for the final table (the oldest are dropped past it, and counted).
pub const LIVE_MAX_FINISHED: usize = 100_000;

/// [`run_flows`] on any packet source. On a live one `on_end` gets each connection's summary when it ends
/// (FIN/RST and linger, idle timeout, or the connection cap), and the final table keeps the last
/// [`LIVE_MAX_FINISHED`].
pub fn run_flows_on(
    pk: Packets,
    filter: &Filter,
    config: TrackerConfig,
    sink: Option<&mut dyn StreamSink>,
    on_end: &mut dyn FnMut(&FlowSummary),
) -> FlowsResult {
    flows_on(pk, filter, config, None, sink, on_end)
}

/// [`run_flows_on`] on the captures of one `PACKET_FANOUT` group (`--threads N`, see [`live`]): one thread per
/// capture, each running [`run_flows_on`]'s loop with its own tracker (the kernel hands every packet of a
/// connection to the same capture, so each connection is tracked whole by one thread). Connections are numbered
/// from one shared counter; `on_end` gets each connection as it ends, from whichever thread (one at a time);
/// the result is every thread's connections in number order, their counters added and the captures' counts
/// and kernel counters summed ([`merge_infos`]). `config.max_open` is per thread.
pub fn run_flows_fanout(
    group: Vec<Packets>,
    filter: &Filter,
    config: TrackerConfig,
    on_end: &mut (dyn FnMut(&FlowSummary) + Send),
) -> FlowsResult {
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};
    let ids = Arc::new(AtomicU64::new(1));
    let on_end = Mutex::new(on_end);
    let results: Vec<FlowsResult> = std::thread::scope(|sc| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|pk| {
                let (ids, on_end) = (ids.clone(), &on_end);
                sc.spawn(move || {
                    let mut each = |f: &FlowSummary| {
                        let mut g = on_end.lock().unwrap_or_else(|e| e.into_inner());
                        (*g)(f)
                    };
                    flows_on(pk, filter, config, Some(ids), None, &mut each)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut counters = TrackerCounters::default();
    let mut flows = Vec::new();
    let mut infos = Vec::new();
    for r in results {
        counters.add(&r.counters);
        flows.extend(r.flows);
        infos.push(r.capture);
    }
    flows.sort_by_key(|f| f.id);
    FlowsResult {
        capture: merge_infos(infos),
        counters,
        flows,
        window_series: None,
    }
}

fn flows_on(
    mut pk: Packets,
    filter: &Filter,
    config: TrackerConfig,
    ids: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    mut sink: Option<&mut dyn StreamSink>,
    on_end: &mut dyn FnMut(&FlowSummary),
) -> FlowsResult {
    let by_if = pk.keys_by_interface();
    // The flow table reads TCP options only on SYNs (MSS and window scale).
    pk.set_tcp_options(decode::TcpOptions::SynOnly);
    let mut tr = FlowTracker::new(TrackerConfig {
        key_by_interface: by_if,
        ..config
    });
    if let Some(ids) = ids {
        tr.share_ids(ids);
    }
    let live = pk.is_live();
    let mut kept: std::collections::VecDeque<FlowSummary> = std::collections::VecDeque::new();
    let mut dropped = 0u64;
    let mut matched = 0u64;
    while let Some(ev) = pk.next_event(true) {
        let Next::Packet(p, d) = ev else { continue };
        let Some(d) = d else { continue };
        if !filter.matches(Some(&d)) {
            continue;
        }
        matched += 1;
        if by_if {
            tr.set_interface(p.interface);
        }
        tr.process_with(p.ts_ns, p.orig_len, &d, flows::reborrow(&mut sink));
        if live {
            for f in tr.take_finished() {
                on_end(&f);
                if kept.len() >= LIVE_MAX_FINISHED {
                    kept.pop_front();
                    dropped += 1;
                }
                kept.push_back(f);
            }
        }
    }
    pk.info.packets_matched = matched;
    let (mut flows, counters) = tr.finish_all(sink);
    if live {
        let _ = dropped;
        let mut all: Vec<FlowSummary> = kept.into_iter().collect();
        all.append(&mut flows);
        all.sort_by_key(|s| s.id);
        flows = all;
    }
    FlowsResult {
        capture: pk.finish(),
        counters,
        flows,
        window_series: None,
    }
}
