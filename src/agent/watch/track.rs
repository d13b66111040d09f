//! The watcher's sink: connection tracking for the network figures (handshake RTT, retransmissions, response
//! bytes, the client's time between requests) and the recording of every answered request.
//!
//! Orientation ([`driver::orient`], the decoders' own rule, so both agree): a connection whose SYN is seen has
//! the SYN's sender as its client. A connection already open when watching started is oriented by the
//! protocol's own direction of its first payload where the framing tells (a PostgreSQL frontend or backend
//! message, a MySQL command or reply, a RESP command array or reply, an HTTP request or status line, an
//! ONC-RPC call or reply, a DNS query or response), else by port: the side on a service port the decoders
//! know (5432, 3306, 6379, 2049, 80, ...) is the server, else the lower port.
//! `roundtrip_watch_connections_total{oriented_by="handshake"|"protocol"|"port"}` counts them.
//!
//! Network RTT samples come from the handshake (SYN to the client's ACK) and, for every connection, from ACK
//! timing the way `capture flows` takes it (the newest first-sent segment an advancing ACK covers, none after
//! a retransmission): the time from the client's data segment to the server's ACK that covers it, when that
//! ACK is a pure ACK (no payload, no FIN) and came after more than one full client segment's worth of bytes
//! (more than the largest client segment seen, at least 536), which a receiver acknowledges at once: a pure ACK
//! after less may be a delayed ACK whose timer ran out before a slow response. That is the round trip from the capture point to the server's
//! kernel, which acknowledges before the application answers; an ACK that rides on the response waited for
//! the application and gives no sample, and the client's ACKs of responses (delayed ACKs, or riding on the
//! next request) give none either. One segment waits per connection (the newest), so the memory per
//! connection stays fixed.

use super::{Health, OpKey, Protocols, ServerKey, Shared, WatchSpec, ops};
use crate::capture::flows::sequence::seq_le;
use crate::capture::live::LiveCounters;
use crate::capture::read::Packet;
use crate::capture::rpc::Sink;
use crate::capture::rpc::driver::{self, ConnInfo, L4, ProtoChoice, Segment, flags};
use crate::capture::rpc::{Anomaly, FxHashMap, Status, Transaction};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A gap longer than this between a response and the next request of a connection is idle time, not the
/// client's work.
pub const MAX_CLIENT_GAP: Duration = Duration::from_secs(1);

/// The smallest receive MSS a receiver assumes (Linux's default): data below it never forces an immediate ACK.
pub const MIN_RCV_MSS: u32 = 536;

/// Bytes of the watcher's own state per tracked connection (the table entry, key included).
pub const CONN_BYTES: usize = std::mem::size_of::<(Key, Conn)>() + 8;

type Key = (IpAddr, u16, IpAddr, u16, u32);

fn key(a: SocketAddr, b: SocketAddr, ifindex: u32) -> Key {
    if (a.ip(), a.port()) <= (b.ip(), b.port()) {
        (a.ip(), a.port(), b.ip(), b.port(), ifindex)
    } else {
        (b.ip(), b.port(), a.ip(), a.port(), ifindex)
    }
}

#[derive(Debug)]
struct Conn {
    server: SocketAddr,
    syn_ts: Option<Duration>,
    rtt_done: bool,
    /// Highest sequence number + length seen, per direction (0: from the client).
    high: [Option<u32>; 2],
    fin: [bool; 2],
    last_ts: Duration,
    /// Response bytes since the last answered request.
    resp_bytes: u64,
    /// The client's newest first-sent data segment waiting for the server's ACK: (end, time seen).
    pending: Option<(u32, Duration)>,
    /// Client payload bytes since the server's last ACK, and the largest client segment seen (at least
    /// [`MIN_RCV_MSS`]): the receiver acknowledges at once only past one full segment.
    unacked: u32,
    max_seg: u32,
    /// Retransmissions not yet counted to a server series.
    last_response: Option<Duration>,
}

/// The [`Sink`] of one watcher.
pub struct Tracker {
    idx: usize,
    labels: Arc<[(String, String)]>,
    protocols: Protocols,
    choice: ProtoChoice,
    client_label: bool,
    max: usize,
    conns: FxHashMap<Key, Conn>,
    shared: Arc<Shared>,
    counters: Option<Arc<LiveCounters>>,
    /// Kernel counters of the captures that ended (a reopened capture starts from 0).
    base: (u64, u64),
    packets: u64,
    evictions: u64,
    oriented: [u64; 3],
    ifindex: u32,
    /// Samples waiting for the next publication: (server, rtt) and (server, retransmissions).
    rtts: Vec<(SocketAddr, Duration)>,
    retrans: Vec<SocketAddr>,
    last_publish: Instant,
}

impl Tracker {
    /// For watcher `idx` of `spec`, publishing into `shared`.
    pub fn new(
        idx: usize,
        spec: &WatchSpec,
        labels: Arc<[(String, String)]>,
        shared: Arc<Shared>,
    ) -> Tracker {
        Tracker {
            idx,
            labels,
            protocols: spec.protocols.clone(),
            choice: spec.choice(),
            client_label: spec.client_label,
            max: spec.max_connections.max(1),
            conns: FxHashMap::default(),
            shared,
            counters: None,
            base: (0, 0),
            packets: 0,
            evictions: 0,
            oriented: [0; 3],
            ifindex: 0,
            rtts: Vec::new(),
            retrans: Vec::new(),
            last_publish: Instant::now(),
        }
    }

    /// The kernel counters of the capture being read.
    pub fn set_counters(&mut self, c: Option<Arc<LiveCounters>>) {
        self.counters = c;
    }

    /// The capture ended: keep its kernel counters, forget its connections.
    pub fn end_capture(&mut self) {
        if let Some(c) = self.counters.take() {
            self.base.0 += c.packets();
            self.base.1 += c.drops();
        }
        self.conns.clear();
        self.publish();
    }

    fn evict(&mut self) {
        let mut by_age: Vec<(Duration, Key)> =
            self.conns.iter().map(|(k, c)| (c.last_ts, *k)).collect();
        let n = (by_age.len() / 8).max(1).min(by_age.len());
        if n == 0 {
            return;
        }
        by_age.select_nth_unstable_by_key(n - 1, |x| x.0);
        for (_, k) in by_age.into_iter().take(n) {
            self.conns.remove(&k);
            self.evictions += 1;
        }
    }

    fn publish(&mut self) {
        self.last_publish = Instant::now();
        let (kp, kd) = self
            .counters
            .as_ref()
            .map_or((0, 0), |c| (c.packets(), c.drops()));
        let cpu = thread_cpu_seconds();
        let labels = self.labels.clone();
        let mut st = self.shared.lock();
        let b = st.buckets;
        for (server, rtt) in self.rtts.drain(..) {
            let k = st.server_key(ServerKey {
                labels: labels.clone(),
                server: server.to_string(),
            });
            if let Some(s) = st.servers.get_mut(&k) {
                s.total.rtt.record(rtt, b);
            }
        }
        for server in self.retrans.drain(..) {
            let k = st.server_key(ServerKey {
                labels: labels.clone(),
                server: server.to_string(),
            });
            if let Some(s) = st.servers.get_mut(&k) {
                s.total.retransmissions += 1;
            }
        }
        let h: &mut Health = &mut st.health[self.idx];
        h.packets = self.packets;
        h.kernel_drops = self.base.1 + kd;
        let _ = kp;
        h.connections = self.conns.len() as u64;
        h.evictions = self.evictions;
        h.oriented = self.oriented;
        if let Some(c) = cpu {
            h.cpu_s = c;
        }
        st.maybe_snapshot(Instant::now());
    }

    fn wanted(&self, proto: crate::capture::rpc::Proto) -> bool {
        match &self.protocols {
            Protocols::Auto => true,
            Protocols::Only(v) => v.contains(&proto),
        }
    }
}

/// CPU time of the calling thread, seconds.
fn thread_cpu_seconds() -> Option<f64> {
    crate::sys::thread_cpu_time().ok().map(|d| d.as_secs_f64())
}

impl Sink for Tracker {
    fn transaction(&mut self, conn: &ConnInfo, t: Transaction) {
        if !self.wanted(conn.proto) {
            return;
        }
        let k = key(conn.client, conn.server, self.ifindex);
        let mut bytes = 0;
        let mut gap = None;
        if let Some(c) = self.conns.get_mut(&k) {
            bytes = std::mem::take(&mut c.resp_bytes);
            if let Some(r) = c.last_response
                && t.request_ts > r
                && t.request_ts - r <= MAX_CLIENT_GAP
            {
                gap = Some(t.request_ts - r);
            }
            c.last_response = Some(t.response_end_ts.max(t.response_ts));
        }
        let op = ops::label(conn.proto, &t.op);
        let okey = OpKey {
            labels: self.labels.clone(),
            server: conn.server.to_string(),
            proto: conn.proto.name(),
            op,
            client: self.client_label.then(|| conn.client.ip().to_string()),
        };
        let d = t.first_byte();
        let error = t.status == Status::Error;
        let mut st = self.shared.lock();
        let b = st.buckets;
        let (okey, folded) = st.op_key(okey);
        if folded {
            st.folded += 1;
        }
        if let Some(o) = st.ops.get_mut(&okey) {
            o.duration.record(d, b);
            if error {
                o.error += 1;
            } else {
                o.ok += 1;
            }
            o.response_bytes += bytes;
        }
        let skey = ServerKey {
            labels: okey.labels,
            server: okey.server,
        };
        if let Some(s) = st.servers.get_mut(&skey) {
            s.total.duration.record(d, b);
            if error {
                s.total.errors += 1;
            }
            if let Some(g) = gap {
                s.total.client_gap.record(g, b);
            }
        }
    }

    fn anomaly(&mut self, _conn: &ConnInfo, _a: Anomaly) {}

    fn packet(&mut self, p: &Packet<'_>, seg: &Segment<'_>) {
        self.packets += 1;
        self.ifindex = p.interface;
        let L4::Tcp {
            seq,
            ack: ackno,
            flags: f,
        } = seg.l4
        else {
            return;
        };
        let (src, ts) = (seg.src(), seg.ts());
        let k = key(src, seg.dst(), p.interface);
        let syn = f & flags::SYN != 0;
        let ack = f & flags::ACK != 0;
        if !self.conns.contains_key(&k) {
            if seg.payload.is_empty() && seg.wire_len == 0 && !syn {
                return;
            }
            if self.conns.len() >= self.max {
                self.evict();
            }
            let o = driver::orient(seg, self.choice);
            let server = o.server;
            self.oriented[o.how as usize] += 1;
            self.conns.insert(
                k,
                Conn {
                    server,
                    syn_ts: (syn && !ack).then_some(ts),
                    rtt_done: false,
                    high: [None; 2],
                    fin: [false; 2],
                    last_ts: ts,
                    resp_bytes: 0,
                    pending: None,
                    unacked: 0,
                    max_seg: MIN_RCV_MSS,
                    last_response: None,
                },
            );
        }
        let Some(c) = self.conns.get_mut(&k) else {
            return;
        };
        c.last_ts = ts;
        let from_server = src == c.server;
        let dir = usize::from(from_server);
        if syn && !ack && c.syn_ts.is_none() {
            c.syn_ts = Some(ts);
        }
        // The client's ACK that completes the handshake: SYN to it is one round trip through this point.
        if !syn && ack && !from_server && !c.rtt_done {
            if let Some(t0) = c.syn_ts {
                self.rtts.push((c.server, ts.saturating_sub(t0)));
            }
            c.rtt_done = true;
        }
        // The server's ACK of the client's newest data segment: a sample when nothing rides on it.
        if from_server
            && ack
            && let Some((end, t0)) = c.pending
            && seq_le(end, ackno)
        {
            if seg.wire_len == 0
                && f & (flags::FIN | flags::SYN | flags::RST) == 0
                && c.unacked > c.max_seg
            {
                self.rtts.push((c.server, ts.saturating_sub(t0)));
            }
            c.pending = None;
        }
        if from_server && ack {
            c.unacked = 0;
        } else if !from_server {
            c.unacked = c.unacked.saturating_add(seg.wire_len);
            c.max_seg = c.max_seg.max(seg.wire_len);
        }
        let len = seg.wire_len + u32::from(syn) + u32::from(f & flags::FIN != 0);
        if len > 0 {
            let end = seq.wrapping_add(len);
            match c.high[dir] {
                Some(h) if (end.wrapping_sub(h) as i32) <= 0 => {
                    self.retrans.push(c.server);
                    // Karn: the ACK of a retransmitted segment times neither copy.
                    if !from_server {
                        c.pending = None;
                    }
                }
                _ => {
                    c.high[dir] = Some(end);
                    if !from_server && seg.wire_len > 0 {
                        c.pending = Some((end, ts));
                    }
                }
            }
        }
        if from_server {
            c.resp_bytes += u64::from(seg.wire_len);
        }
        if f & flags::FIN != 0 {
            c.fin[dir] = true;
        }
        if f & flags::RST != 0 || c.fin.iter().all(|x| *x) {
            self.conns.remove(&k);
        }
        if self.rtts.len() + self.retrans.len() > 1024 {
            self.publish();
        }
    }

    fn tick(&mut self, _now: Duration) {
        if self.last_publish.elapsed() >= Duration::from_millis(200) {
            self.publish();
        }
    }
}

// docs/agent-watch.md says at most 200 bytes per connection of the watcher's own state.
const _: () = assert!(CONN_BYTES <= 200);
