//! TCP connection tracking at the capture point.
//!
//! For every connection: handshake RTT, RTT samples from a data segment to the ACK that covers it (as seen
//! where the capture was taken), bytes in flight, the advertised window (scaled), whether the sender was held
//! back by that window (receiver-limited) or stayed below it while sending full segments
//! (sender/congestion-limited), segments per ACK, retransmissions, duplicate ACKs and zero windows.
//!
//! The rules for retransmission, out-of-order, duplicate ACK, zero window and bytes in flight follow
//! Wireshark's TCP analysis so the counts can be checked against `tshark` (see the tests).
//!
//! Memory: state is kept for open connections only. A connection is finished (turned into a compact
//! [`FlowSummary`]) after RST or FIN from both sides plus [`TrackerConfig::closed_linger`] of silence, after
//! [`TrackerConfig::idle_timeout`] of silence, or when a new SYN reuses its four-tuple. RTT and in-flight
//! histograms are created only for directions that carry data.
//!
//! Issue 7 builds on [`FlowTracker::process_with`]: a [`StreamSink`] receives each direction's payload in
//! sequence order (retransmitted bytes removed, out-of-order segments held back, bounded, holes reported as gaps).
//!
//! Why one file of ~950 lines: what stays here is the tracker's table and the per-connection state it updates
//! (`Flow::update` and the summary a flow becomes), read as one state machine; the concerns that stand alone
//! (sequence tracking, RTT, window and limit classification, reassembly, diagnosis) are the submodules.
#![forbid(unsafe_code)]

mod diagnose;
mod reassembly;
mod rtt;
pub(crate) mod sequence;
mod window;

pub use diagnose::diagnose;
use reassembly::{Reassembly, flush_reassembly, reassemble};
use rtt::Samples;
use sequence::{Marks, Pending};

use super::decode::{Decoded, Tcp, flags};
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A small, fast hasher for flow keys (the FxHash mix); flow keys are not attacker-chosen hash-flooding
/// material worth SipHash's cost per packet.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64)
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64)
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// Direction of a packet within its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// From the client (the side that sent the SYN; without a handshake, the side with the higher port).
    ClientToServer,
    /// From the server.
    ServerToClient,
}

impl Dir {
    fn idx(self) -> usize {
        match self {
            Dir::ClientToServer => 0,
            Dir::ServerToClient => 1,
        }
    }
    /// The arrow used in tables: `>` client to server, `<` server to client.
    pub fn arrow(self) -> &'static str {
        match self {
            Dir::ClientToServer => ">",
            Dir::ServerToClient => "<",
        }
    }
}

/// The two ends of a connection, in a canonical order (so both directions map to the same key). Addresses
/// are kept as integers: comparing and hashing them is a large share of the per-packet cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    lo_ip: u128,
    hi_ip: u128,
    lo_port: u16,
    hi_port: u16,
    v6: bool,
    /// Interface index, when connections are keyed by interface too (live `any`); else 0.
    ifindex: u32,
}

#[inline]
fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

impl FlowKey {
    /// The key of a packet from `src` to `dst`, and whether `src` is the canonical low end.
    #[inline]
    pub fn new(src: SocketAddr, dst: SocketAddr) -> (FlowKey, bool) {
        let (a, b) = (
            (ip_bits(src.ip()), src.port()),
            (ip_bits(dst.ip()), dst.port()),
        );
        let v6 = src.is_ipv6();
        if a <= b {
            (
                FlowKey {
                    lo_ip: a.0,
                    hi_ip: b.0,
                    lo_port: a.1,
                    hi_port: b.1,
                    v6,
                    ifindex: 0,
                },
                true,
            )
        } else {
            (
                FlowKey {
                    lo_ip: b.0,
                    hi_ip: a.0,
                    lo_port: b.1,
                    hi_port: a.1,
                    v6,
                    ifindex: 0,
                },
                false,
            )
        }
    }
}

/// Settings of the tracker.
#[derive(Debug, Clone, Copy)]
pub struct TrackerConfig {
    /// A connection silent this long (capture time) is finished.
    pub idle_timeout: Duration,
    /// A closed (RST, or FIN both ways) connection is finished after this much silence.
    pub closed_linger: Duration,
    /// Unacknowledged segments remembered per direction for RTT samples (older ones give no sample).
    pub max_pending_segments: usize,
    /// Out-of-order payload bytes held per direction for the stream hook before a gap is declared.
    pub max_reassembly_bytes: usize,
    /// Key connections by interface too (live capture on `any`: a forwarding host sees one segment on two
    /// interfaces; those copies are two packets of two connections, not a retransmission). Set it with
    /// [`FlowTracker::set_interface`] before each packet.
    pub key_by_interface: bool,
    /// Connections tracked at once; past it the eighth that has been silent longest is finished early
    /// (counted in [`TrackerCounters::cap_evictions`]). Unlimited for files; live capture sets it.
    pub max_open: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            idle_timeout: Duration::from_secs(300),
            closed_linger: Duration::from_secs(5),
            max_pending_segments: 16_384,
            max_reassembly_bytes: 4 << 20,
            key_by_interface: false,
            max_open: usize::MAX,
        }
    }
}

/// What the tracker says about one TCP packet (what `capture timeline` prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    /// Connection number (1, 2, ... in order of first packet).
    pub flow_id: u64,
    /// Direction.
    pub dir: Dir,
    /// TCP flags.
    pub flags: u8,
    /// Sequence number relative to the sender's initial sequence number.
    pub rel_seq: u32,
    /// Acknowledgement number relative to the receiver's initial sequence number (when ACK is set).
    pub rel_ack: Option<u32>,
    /// Payload length from the IP header.
    pub payload_len: u32,
    /// Advertised window in bytes, scaled when the handshake negotiated scaling.
    pub window: u64,
    /// Bytes in flight from this packet's sender after it (data packets, once the receiver has ACKed).
    pub in_flight: Option<u64>,
    /// A retransmission (Wireshark's rule: data below the highest sequence sent, not a keep-alive).
    pub retransmission: bool,
    /// Out of order rather than retransmitted (arrived soon after the highest segment).
    pub out_of_order: bool,
    /// A duplicate ACK.
    pub dup_ack: bool,
    /// Advertises a zero window.
    pub zero_window: bool,
    /// A keep-alive.
    pub keep_alive: bool,
}

/// Receives each direction's payload in sequence order (issue 7: request/response matching).
pub trait StreamSink {
    /// `data` continues direction `dir` of connection `flow_id` at stream offset `offset` (0 = first byte
    /// after the SYN, or the first byte seen when the handshake was not captured).
    fn data(&mut self, flow_id: u64, dir: Dir, ts_ns: i64, offset: u64, data: &[u8]);
    /// `len` bytes at `offset` will never be delivered (not captured: snaplen, loss at the capture point).
    fn gap(&mut self, flow_id: u64, dir: Dir, offset: u64, len: u64);
    /// The connection is finished; nothing more will come for it.
    fn finished(&mut self, summary: &FlowSummary) {
        let _ = summary;
    }
}

/// Reborrows an optional sink for a shorter call.
pub fn reborrow<'b>(s: &'b mut Option<&mut dyn StreamSink>) -> Option<&'b mut dyn StreamSink> {
    match s {
        Some(x) => Some(&mut **x),
        None => None,
    }
}

#[derive(Debug, Default)]
struct Half {
    seen: bool,
    base_known: bool,
    base: u32,
    syn: bool,
    fin: bool,
    next_seq: u32,
    has_next: bool,
    last_data_ts: i64,
    acked: bool,
    last_ack: u32,
    last_ack_ts: i64,
    dup_ack_run: u32,
    first_seq: u32,
    last_win: u16,
    has_win: bool,
    wscale_opt: Option<u8>,
    mss_opt: Option<u16>,
    max_payload: u32,
    window: u64,
    packets: u64,
    wire_bytes: u64,
    payload_bytes: u64,
    data_segments: u64,
    retransmissions: u64,
    retransmitted_bytes: u64,
    out_of_order: u64,
    dup_acks: u64,
    zero_windows: u64,
    advancing_acks: u64,
    window_min: u64,
    window_max: u64,
    in_flight_max: u64,
    in_flight: Samples,
    rtt: Samples,
    pending: VecDeque<Pending>,
    receiver_limited: u64,
    sender_limited: u64,
    app_limited: u64,
    reasm: Option<Box<Reassembly>>,
}

#[derive(Debug)]
struct Flow {
    id: u64,
    client: SocketAddr,
    server: SocketAddr,
    first_ts: i64,
    last_ts: i64,
    half: [Half; 2],
    scale_ok: bool,
    syn_ts: Option<i64>,
    synack_ts: Option<i64>,
    hs_ack_ts: Option<i64>,
    reset: Option<Dir>,
    closed: bool,
    /// Interface index when keyed by interface (live `any`), else 0.
    ifindex: u32,
}

/// Bytes in flight and window use of one direction, and the RTT of its data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirSummary {
    /// Packets sent.
    pub packets: u64,
    /// On-wire bytes sent (frame lengths).
    pub wire_bytes: u64,
    /// TCP payload bytes sent, retransmissions included.
    pub payload_bytes: u64,
    /// Segments with payload.
    pub data_segments: u64,
    /// Retransmitted segments.
    pub retransmissions: u64,
    /// Retransmitted payload bytes.
    pub retransmitted_bytes: u64,
    /// Out-of-order segments.
    pub out_of_order: u64,
    /// Duplicate ACKs sent by this side.
    pub dup_acks: u64,
    /// Zero windows advertised by this side.
    pub zero_windows: u64,
    /// ACKs sent by this side that acknowledged new data.
    pub acks: u64,
    /// This side's data segments per ACK from the other side that acknowledged new data.
    pub segments_per_ack: Option<f64>,
    /// RTT from this side's data to the other side's ACK covering it, measured at the capture point.
    pub rtt: Summary,
    /// Largest bytes in flight from this side.
    pub in_flight_max_bytes: u64,
    /// Median bytes in flight from this side (over its data segments).
    pub in_flight_p50_bytes: u64,
    /// Smallest window advertised by this side (scaled).
    pub window_min_bytes: u64,
    /// Largest window advertised by this side (scaled).
    pub window_max_bytes: u64,
    /// MSS option this side announced.
    pub mss: Option<u16>,
    /// Window scale this side announced.
    pub wscale: Option<u8>,
    /// Whether the windows above are in bytes: false when the handshake (both SYNs, where the window scale is
    /// announced) was not captured, so the windows are the raw 16-bit fields, unscaled, and their real size
    /// is unknown (up to 2^14 times larger).
    #[serde(default)]
    pub window_scale_known: bool,
    /// Data segments sent while in flight was within one MSS of the receiver's window.
    pub receiver_limited_segments: u64,
    /// Full-sized data segments sent with in flight below the receiver's window.
    pub sender_limited_segments: u64,
    /// Short data segments sent with in flight below the receiver's window.
    pub app_limited_segments: u64,
}

/// The three-way handshake as seen at the capture point.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Handshake {
    /// SYN to SYN-ACK: the round trip between the capture point and the server.
    pub syn_to_synack_ns: u64,
    /// SYN-ACK to the ACK: the round trip between the capture point and the client.
    pub synack_to_ack_ns: Option<u64>,
    /// SYN to ACK (Wireshark's iRTT); the SYN to SYN-ACK part alone when the ACK was not seen.
    pub rtt_ns: u64,
}

/// One finished connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowSummary {
    /// Connection number, in order of first packet.
    pub id: u64,
    /// The client end.
    pub client: SocketAddr,
    /// The server end.
    pub server: SocketAddr,
    /// Whether the handshake was captured (otherwise client/server are guessed from the ports).
    pub handshake_seen: bool,
    /// First packet, Unix nanoseconds.
    pub first_ts_ns: i64,
    /// Last packet, Unix nanoseconds.
    pub last_ts_ns: i64,
    /// Last minus first packet.
    pub duration_s: f64,
    /// Handshake timing.
    pub handshake: Option<Handshake>,
    /// "closed" (FIN both ways), "reset_by_client", "reset_by_server" or "open".
    pub state: Cow<'static, str>,
    /// Client to server.
    pub client_to_server: DirSummary,
    /// Server to client.
    pub server_to_client: DirSummary,
    /// One line saying what limited the connection.
    pub diagnosis: String,
    /// Interface index of the connection's packets, when connections are keyed by interface (live `any`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<u32>,
}

impl FlowSummary {
    /// The direction that carried more payload.
    pub fn bulk(&self) -> (Dir, &DirSummary) {
        if self.server_to_client.payload_bytes > self.client_to_server.payload_bytes {
            (Dir::ServerToClient, &self.server_to_client)
        } else {
            (Dir::ClientToServer, &self.client_to_server)
        }
    }
    /// Total packets both ways.
    pub fn packets(&self) -> u64 {
        self.client_to_server.packets + self.server_to_client.packets
    }
}

/// Counters of the whole tracking run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct TrackerCounters {
    /// TCP packets processed.
    pub tcp_packets: u64,
    /// Largest number of connections open at once.
    pub max_open_flows: u64,
    /// Connections finished by idle timeout.
    pub idle_evictions: u64,
    /// Connections finished early because [`TrackerConfig::max_open`] were open (the longest silent first).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub cap_evictions: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TrackerCounters {
    /// Adds the counters of another tracker (a thread of a fanout group); `max_open_flows` becomes the sum of
    /// each one's peak (an upper bound of the connections open at once).
    pub fn add(&mut self, o: &TrackerCounters) {
        self.tcp_packets += o.tcp_packets;
        self.max_open_flows += o.max_open_flows;
        self.idle_evictions += o.idle_evictions;
        self.cap_evictions += o.cap_evictions;
    }
}

/// Tracks TCP connections; feed it decoded packets in capture order.
#[derive(Debug)]
pub struct FlowTracker {
    config: TrackerConfig,
    open: HashMap<FlowKey, Box<Flow>, FxBuild>,
    finished: Vec<FlowSummary>,
    next_id: u64,
    last_sweep: i64,
    now: i64,
    counters: TrackerCounters,
    keep_finished: bool,
    interface: u32,
    /// Connection numbers shared with the other trackers of a fanout group ([`FlowTracker::share_ids`]).
    ids: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl FlowTracker {
    /// A tracker that keeps every finished connection's summary (see `finished`).
    pub fn new(config: TrackerConfig) -> Self {
        FlowTracker {
            config,
            open: HashMap::default(),
            finished: Vec::new(),
            next_id: 1,
            last_sweep: i64::MIN,
            now: i64::MIN,
            counters: TrackerCounters::default(),
            keep_finished: true,
            interface: 0,
            ids: None,
        }
    }

    /// Numbers connections from `ids` (shared with the trackers of the other threads of a fanout group), so
    /// each connection has one number among all of them; the counter holds the next number (start it at 1).
    pub fn share_ids(&mut self, ids: std::sync::Arc<std::sync::atomic::AtomicU64>) {
        self.ids = Some(ids);
    }

    /// The interface of the next packet (used when [`TrackerConfig::key_by_interface`]).
    #[inline]
    pub fn set_interface(&mut self, ifindex: u32) {
        self.interface = ifindex;
    }

    /// Stops keeping finished summaries (they still go to a sink's [`StreamSink::finished`]).
    pub fn discard_finished(&mut self) {
        self.keep_finished = false;
    }

    /// Connections currently open.
    pub fn open_flows(&self) -> usize {
        self.open.len()
    }

    /// Counters so far.
    pub fn counters(&self) -> TrackerCounters {
        self.counters
    }

    /// Processes one packet; returns what it means for its connection, or `None` when it is not TCP.
    pub fn process(&mut self, ts_ns: i64, wire_len: u32, d: &Decoded<'_>) -> Option<PacketInfo> {
        self.process_with(ts_ns, wire_len, d, None)
    }

    /// Like [`process`](Self::process), also delivering payload in order to `sink`.
    pub fn process_with(
        &mut self,
        ts_ns: i64,
        wire_len: u32,
        d: &Decoded<'_>,
        mut sink: Option<&mut dyn StreamSink>,
    ) -> Option<PacketInfo> {
        let t = *d.tcp()?;
        self.counters.tcp_packets += 1;
        if ts_ns > self.now {
            self.now = ts_ns;
        }
        if self.now.saturating_sub(self.last_sweep) >= 1_000_000_000 {
            self.last_sweep = self.now;
            self.sweep(reborrow(&mut sink));
        }
        let src = SocketAddr::new(d.src, t.src_port);
        let dst = SocketAddr::new(d.dst, t.dst_port);
        let (mut key, _) = FlowKey::new(src, dst);
        if self.config.key_by_interface {
            key.ifindex = self.interface;
        }
        let is_syn = t.flags & (flags::SYN | flags::ACK) == flags::SYN;
        // A new SYN on a finished-looking or different connection starts a new one.
        if is_syn && let Some(f) = self.open.get(&key) {
            // A retransmitted SYN (same sequence number) belongs to the same connection; anything else
            // starts a new one.
            let reuse = f.closed
                || f.reset.is_some()
                || f.client != src
                || !f.half[0].syn
                || f.half[0].base != t.seq;
            if reuse && let Some(f) = self.open.remove(&key) {
                self.finish(f, reborrow(&mut sink));
            }
        }
        if self.open.len() >= self.config.max_open && !self.open.contains_key(&key) {
            self.evict_oldest(reborrow(&mut sink));
        }
        // One hash lookup per packet.
        let open_before = self.open.len() as u64;
        let flow = match self.open.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let (client, server) = if t.flags & flags::SYN != 0 {
                    if t.flags & flags::ACK == 0 {
                        (src, dst)
                    } else {
                        (dst, src)
                    }
                } else if t.src_port > t.dst_port || (t.src_port == t.dst_port && src > dst) {
                    (src, dst)
                } else {
                    (dst, src)
                };
                let id = match &self.ids {
                    Some(ids) => ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    None => {
                        self.next_id += 1;
                        self.next_id - 1
                    }
                };
                self.counters.max_open_flows = self.counters.max_open_flows.max(open_before + 1);
                v.insert(Box::new(Flow {
                    id,
                    client,
                    server,
                    first_ts: ts_ns,
                    last_ts: ts_ns,
                    half: [Half::default(), Half::default()],
                    scale_ok: false,
                    syn_ts: None,
                    synack_ts: None,
                    hs_ack_ts: None,
                    reset: None,
                    closed: false,
                    ifindex: key.ifindex,
                }))
            }
        };
        let cfg = self.config;
        let dir = if src == flow.client {
            Dir::ClientToServer
        } else {
            Dir::ServerToClient
        };
        let info = flow.update(&cfg, ts_ns, wire_len, dir, &t, d, sink);
        Some(info)
    }

    /// Finishes the eighth of the open connections that has been silent longest (at least one).
    fn evict_oldest(&mut self, mut sink: Option<&mut dyn StreamSink>) {
        let mut by_age: Vec<(i64, u64, FlowKey)> = self
            .open
            .iter()
            .map(|(k, f)| (f.last_ts, f.id, *k))
            .collect();
        let n = (by_age.len() / 8).max(1).min(by_age.len());
        if n == 0 {
            return;
        }
        by_age.select_nth_unstable_by_key(n - 1, |x| (x.0, x.1));
        for (_, _, k) in by_age.into_iter().take(n) {
            if let Some(f) = self.open.remove(&k) {
                self.counters.cap_evictions += 1;
                self.finish(f, reborrow(&mut sink));
            }
        }
    }

    /// Takes the summaries of the connections finished so far (live: print them as they end, keep memory
    /// bounded); [`finish_all`](Self::finish_all) returns only the rest.
    pub fn take_finished(&mut self) -> Vec<FlowSummary> {
        std::mem::take(&mut self.finished)
    }

    fn sweep(&mut self, mut sink: Option<&mut dyn StreamSink>) {
        let now = self.now;
        let idle = i64::try_from(self.config.idle_timeout.as_nanos()).unwrap_or(i64::MAX);
        let linger = i64::try_from(self.config.closed_linger.as_nanos()).unwrap_or(i64::MAX);
        let expired: Vec<FlowKey> = self
            .open
            .iter()
            .filter(|(_, f)| {
                let silent = now.saturating_sub(f.last_ts);
                silent > idle || ((f.closed || f.reset.is_some()) && silent > linger)
            })
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            if let Some(f) = self.open.remove(&k) {
                if !(f.closed || f.reset.is_some()) {
                    self.counters.idle_evictions += 1;
                }
                self.finish(f, reborrow(&mut sink));
            }
        }
    }

    fn finish(&mut self, mut f: Box<Flow>, sink: Option<&mut dyn StreamSink>) {
        if let Some(sink) = sink {
            for dir in [Dir::ClientToServer, Dir::ServerToClient] {
                flush_reassembly(&mut f.half[dir.idx()], f.id, dir, sink);
            }
            let s = f.summary();
            sink.finished(&s);
            if self.keep_finished {
                self.finished.push(s);
            }
        } else if self.keep_finished {
            self.finished.push(f.summary());
        }
    }

    /// Ends tracking: finishes every open connection and returns all summaries in order of first packet.
    pub fn finish_all(
        mut self,
        mut sink: Option<&mut dyn StreamSink>,
    ) -> (Vec<FlowSummary>, TrackerCounters) {
        let open: Vec<Box<Flow>> = self.open.drain().map(|(_, f)| f).collect();
        for f in open {
            self.finish(f, reborrow(&mut sink));
        }
        self.finished.sort_by_key(|s| s.id);
        (self.finished, self.counters)
    }
}

impl Flow {
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        cfg: &TrackerConfig,
        ts: i64,
        wire_len: u32,
        dir: Dir,
        t: &Tcp,
        d: &Decoded<'_>,
        sink: Option<&mut dyn StreamSink>,
    ) -> PacketInfo {
        self.last_ts = self.last_ts.max(ts);
        let s = dir.idx();
        let o = 1 - s;
        let fl = t.flags;
        let syn = fl & flags::SYN != 0;
        let fin = fl & flags::FIN != 0;
        let rst = fl & flags::RST != 0;
        let ackf = fl & flags::ACK != 0;
        let plen = d.payload_len;
        let seglen = plen + syn as u32 + fin as u32;
        let end = t.seq.wrapping_add(seglen);

        // Handshake bookkeeping.
        if syn {
            if !ackf {
                self.syn_ts.get_or_insert(ts);
            } else if self.synack_ts.is_none() {
                self.synack_ts = Some(ts);
            }
            let h = &mut self.half[s];
            if !h.syn {
                h.syn = true;
                h.base = t.seq;
                h.base_known = true;
                h.seen = true;
                h.wscale_opt = t.wscale;
                h.mss_opt = t.mss;
            }
            if ackf {
                self.scale_ok = self.half[o].wscale_opt.is_some() && t.wscale.is_some();
            }
        } else if dir == Dir::ClientToServer
            && ackf
            && self.synack_ts.is_some()
            && self.hs_ack_ts.is_none()
            && self.half[1].syn
            && t.ack == self.half[1].base.wrapping_add(1)
        {
            self.hs_ack_ts = Some(ts);
        }
        if rst && self.reset.is_none() {
            self.reset = Some(dir);
        }

        // The window in bytes is known once both SYNs were seen (their scale options, or none); a capture
        // that starts mid-connection has raw window fields of an unknown scale.
        let window_known = self.half[0].syn && self.half[1].syn;
        let (h, oh) = {
            let (a, b) = self.half.split_at_mut(1);
            if s == 0 {
                (&mut a[0], &mut b[0])
            } else {
                (&mut b[0], &mut a[0])
            }
        };
        if !h.seen {
            h.seen = true;
            if !h.base_known {
                h.base = t.seq;
                h.base_known = true;
            }
        }
        if ackf && !oh.base_known {
            // The receiver has not sent yet: number its sequence space from this ACK, as Wireshark does.
            oh.base = t.ack;
            oh.base_known = true;
        }
        h.packets += 1;
        h.wire_bytes += wire_len as u64;
        h.payload_bytes += plen as u64;
        if plen > 0 {
            h.data_segments += 1;
            h.max_payload = h.max_payload.max(plen);
        }

        // Keep-alive, retransmission, out-of-order, duplicate ACK, zero window (Wireshark's rules).
        let irtt = match (self.syn_ts, self.hs_ack_ts) {
            (Some(a), Some(b)) if b > a => b - a,
            _ => 3_000_000,
        };
        let marks = sequence::classify(h, oh, t, plen, seglen, end, ts, irtt);
        let Marks {
            keep_alive,
            retransmission,
            out_of_order,
            dup_ack,
            zero_window,
        } = marks;
        let window = h.advertise(t.window, self.scale_ok && !syn, rst);
        // Sequence space and RTT bookkeeping for this side's data.
        h.advance(
            t.seq,
            seglen,
            end,
            ts,
            retransmission || out_of_order,
            cfg.max_pending_segments,
        );
        // This packet's ACK covers the other side's data.
        if ackf && !rst {
            h.on_ack(oh, t.ack, ts);
        }
        let in_flight = h.in_flight(oh, plen, syn || fin, retransmission, window_known);
        if fin {
            h.fin = true;
        }
        if rst || (h.fin && oh.fin) {
            self.closed = true;
        }

        let rel_seq = t.seq.wrapping_sub(h.base);
        let rel_ack = ackf.then(|| t.ack.wrapping_sub(oh.base));

        if let Some(sink) = sink
            && plen > 0
        {
            // Stream offsets start after the SYN.
            let seq = t.seq.wrapping_add(syn as u32);
            reassemble(h, cfg, self.id, dir, ts, seq, plen, d.payload, sink);
        }

        PacketInfo {
            flow_id: self.id,
            dir,
            flags: fl,
            rel_seq,
            rel_ack,
            payload_len: plen,
            window,
            in_flight,
            retransmission,
            out_of_order,
            dup_ack,
            zero_window,
            keep_alive,
        }
    }

    fn dir_summary(&self, s: usize) -> DirSummary {
        let h = &self.half[s];
        let oh = &self.half[1 - s];
        DirSummary {
            packets: h.packets,
            wire_bytes: h.wire_bytes,
            payload_bytes: h.payload_bytes,
            data_segments: h.data_segments,
            retransmissions: h.retransmissions,
            retransmitted_bytes: h.retransmitted_bytes,
            out_of_order: h.out_of_order,
            dup_acks: h.dup_acks,
            zero_windows: h.zero_windows,
            acks: h.advancing_acks,
            segments_per_ack: (h.data_segments > 0 && oh.advancing_acks > 0)
                .then(|| h.data_segments as f64 / oh.advancing_acks as f64),
            rtt: h.rtt.summary(),
            in_flight_max_bytes: h.in_flight_max,
            in_flight_p50_bytes: h.in_flight.summary().p50_ns,
            window_min_bytes: h.window_min,
            window_max_bytes: h.window_max,
            mss: h.mss_opt,
            wscale: h.wscale_opt,
            window_scale_known: h.syn && oh.syn,
            receiver_limited_segments: h.receiver_limited,
            sender_limited_segments: h.sender_limited,
            app_limited_segments: h.app_limited,
        }
    }

    fn summary(&self) -> FlowSummary {
        let handshake = match (self.syn_ts, self.synack_ts) {
            (Some(a), Some(b)) if b >= a => {
                let second = self.hs_ack_ts.filter(|&c| c >= b).map(|c| (c - b) as u64);
                Some(Handshake {
                    syn_to_synack_ns: (b - a) as u64,
                    synack_to_ack_ns: second,
                    rtt_ns: (b - a) as u64 + second.unwrap_or(0),
                })
            }
            _ => None,
        };
        let state = match self.reset {
            Some(Dir::ClientToServer) => "reset_by_client",
            Some(Dir::ServerToClient) => "reset_by_server",
            None if self.closed => "closed",
            None => "open",
        };
        let mut s = FlowSummary {
            id: self.id,
            client: self.client,
            server: self.server,
            handshake_seen: self.syn_ts.is_some(),
            first_ts_ns: self.first_ts,
            last_ts_ns: self.last_ts,
            duration_s: (self.last_ts - self.first_ts) as f64 / 1e9,
            handshake,
            state: Cow::Borrowed(state),
            client_to_server: self.dir_summary(0),
            server_to_client: self.dir_summary(1),
            diagnosis: String::new(),
            interface: (self.ifindex != 0).then_some(self.ifindex),
        };
        s.diagnosis = diagnose(&s);
        s
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::ClientToServer => "client->server",
            Dir::ServerToClient => "server->client",
        })
    }
}

/// A stateless guess of a packet's direction for `capture stats --by-direction`: a SYN comes from the client,
/// a SYN-ACK from the server, otherwise the lower port is the server's. `None` for non-TCP/UDP packets.
pub fn guess_dir(d: &Decoded<'_>) -> Option<Dir> {
    let (sp, dp) = d.ports()?;
    if let Some(t) = d.tcp()
        && t.flags & flags::SYN != 0
    {
        return Some(if t.flags & flags::ACK == 0 {
            Dir::ClientToServer
        } else {
            Dir::ServerToClient
        });
    }
    let client_is_src = match sp.cmp(&dp) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => addr_gt(d.src, d.dst),
    };
    Some(if client_is_src {
        Dir::ClientToServer
    } else {
        Dir::ServerToClient
    })
}

fn addr_gt(a: IpAddr, b: IpAddr) -> bool {
    a > b
}

#[cfg(test)]
mod tests;
