//! From decoded packets to protocol matchers: connection tracking, client/server roles, protocol choice and
//! TCP reassembly (in sequence order, retransmissions dropped, out-of-order segments held back within a bound,
//! bytes the capture lacks reported as gaps so the parsers resynchronise instead of failing).
//!
//! Memory is bounded by the open connections, the out-of-order bytes held per direction ([`MAX_OOO_BYTES`])
//! and the requests still waiting for their response.
//!
//! Here: the packet types, the per-connection state and the [`Driver`] that routes and reassembles. The
//! connection table's keys and their hashing are in `key`, which end is the client in [`orient`](orient()).
#![forbid(unsafe_code)]

mod key;
mod orient;

use key::{Key, Key4, Passthrough, WideKey};
pub use orient::{Orientation, Oriented, orient};

use super::tlskeys::KeyLog;
use super::{Carrier, ConnMatcher, Dir, FxHashMap, Out, Proto, Sink, detect};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Out-of-order bytes held per direction before the hole is declared lost.
pub const MAX_OOO_BYTES: usize = 4 << 20;
/// Out-of-order segments held per direction before the hole is declared lost.
pub const MAX_OOO_SEGMENTS: usize = 2048;
/// UDP address pairs idle this long are closed (their open requests reported).
pub const UDP_IDLE: Duration = Duration::from_secs(120);
/// [`UDP_IDLE`] in nanoseconds (the driver keeps time as nanoseconds).
const UDP_IDLE_NS: u64 = UDP_IDLE.as_nanos() as u64;

/// TCP flag bits.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// The transport header of a decoded packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// TCP with its sequence number, acknowledgement number and flags.
    Tcp {
        /// Sequence number of the first payload byte (of the SYN for a SYN).
        seq: u32,
        /// Acknowledgement number (meaningful with the ACK flag).
        ack: u32,
        /// Flag bits ([`flags`]).
        flags: u8,
    },
    /// UDP.
    Udp,
}

/// One decoded packet, as the capture reader gives it: time in nanoseconds and addresses and ports apart, as
/// the driver keys and compares them per packet ([`Segment::ts`], [`Segment::src`] and [`Segment::dst`] give
/// them as `Duration` and `SocketAddr`).
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// Capture timestamp in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Source address.
    pub src_ip: IpAddr,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// TCP or UDP header fields.
    pub l4: L4,
    /// The payload bytes that are in the capture.
    pub payload: &'a [u8],
    /// Payload length on the wire (more than `payload.len()` when the snap length cut the packet).
    pub wire_len: u32,
}

impl<'a> Segment<'a> {
    /// A segment at `ts` (in whole nanoseconds, saturating past `u64::MAX`) from `src` to `dst`.
    pub fn new(
        ts: Duration,
        src: SocketAddr,
        dst: SocketAddr,
        l4: L4,
        payload: &'a [u8],
        wire_len: u32,
    ) -> Self {
        Segment {
            ts_ns: crate::units::nanos(ts),
            src_ip: src.ip(),
            dst_ip: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
            l4,
            payload,
            wire_len,
        }
    }

    /// Capture timestamp (since the Unix epoch).
    #[inline]
    pub fn ts(&self) -> Duration {
        Duration::from_nanos(self.ts_ns)
    }

    /// Source address and port.
    #[inline]
    pub fn src(&self) -> SocketAddr {
        SocketAddr::new(self.src_ip, self.src_port)
    }

    /// Destination address and port.
    #[inline]
    pub fn dst(&self) -> SocketAddr {
        SocketAddr::new(self.dst_ip, self.dst_port)
    }
}

/// What the driver knows about one connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnInfo {
    /// Connection number (order of first appearance).
    pub id: u64,
    /// Client address.
    pub client: SocketAddr,
    /// Server address.
    pub server: SocketAddr,
    /// Protocol parsed.
    pub proto: Proto,
    /// TCP or UDP.
    pub carrier: Carrier,
}

/// Which protocol to parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtoChoice {
    /// By port, then by content; generic turns for unknown TCP, UDP ignored.
    #[default]
    Auto,
    /// This protocol for every connection (UDP only for NFS and DNS).
    Force(Proto),
}

#[derive(Debug, Default)]
struct Half {
    /// Next expected sequence number.
    next: Option<u32>,
    /// Segments ahead of `next` (time in nanoseconds, bytes, length on the wire): offset from `next` at
    /// insertion time is not stable, so keyed by stream offset (as `pos`).
    ooo: BTreeMap<u64, (u64, Vec<u8>, u32)>,
    /// Stream offset of `next` (from the first sequence number seen, or the SYN's).
    pos: u64,
    ooo_bytes: usize,
    fin: bool,
}

struct Conn {
    info: ConnInfo,
    /// Index 0: the side that sends requests (the client).
    client_is_src_of_key: bool,
    matcher: Option<Box<dyn ConnMatcher + Send>>,
    halves: [Half; 2],
    /// Time of the last packet, in nanoseconds.
    last_ts: u64,
    /// The protocol was fixed by port or by force; otherwise decided on the first payload.
    decided: bool,
    /// The matcher may still hand over the clear-text matcher inside its TLS layer
    /// ([`ConnMatcher::take_plain`]): TCP, until it has (the one handed over is clear text, with no layer).
    layered: bool,
}

/// Counters of what the driver saw.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DriverCounts {
    /// Packets given to the driver.
    pub packets: u64,
    /// Payload bytes on the wire.
    pub payload_bytes: u64,
    /// Connections (and UDP address pairs) seen.
    pub connections: u64,
    /// TCP segments that only repeated bytes already delivered.
    pub retransmitted_segments: u64,
    /// Bytes reported to the parsers as missing.
    pub gap_bytes: u64,
    /// TCP connections that carried TLS.
    pub tls_connections: u64,
    /// TLS connections decrypted with keys from the key log.
    pub tls_decrypted: u64,
    /// TLS connections a key log was given for but had no (working) key: timed as turns.
    pub tls_no_key: u64,
    /// Connections closed early because the connection cap was reached (live capture), the longest silent
    /// first; their open requests are reported as unanswered.
    #[serde(skip_serializing_if = "is_zero")]
    pub evicted_connections: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl DriverCounts {
    /// Adds the counts of another driver (the threads of a fanout group: each saw its own connections).
    pub fn add(&mut self, o: &DriverCounts) {
        self.packets += o.packets;
        self.payload_bytes += o.payload_bytes;
        self.connections += o.connections;
        self.retransmitted_segments += o.retransmitted_segments;
        self.gap_bytes += o.gap_bytes;
        self.tls_connections += o.tls_connections;
        self.tls_decrypted += o.tls_decrypted;
        self.tls_no_key += o.tls_no_key;
        self.evicted_connections += o.evicted_connections;
    }
}

/// Routes decoded packets to per-connection matchers.
pub struct Driver {
    choice: ProtoChoice,
    /// Connections between IPv4 ends (one hash lookup of two words per packet).
    conns: HashMap<Key4, Conn, BuildHasherDefault<Passthrough>>,
    /// The other connections.
    wide: FxHashMap<WideKey, Conn>,
    next_id: u64,
    out: Out,
    counts: DriverCounts,
    /// Latest packet time, in nanoseconds.
    last_ts: u64,
    /// Time (nanoseconds) past which the next packet sweeps idle UDP pairs: [`UDP_IDLE`] after the last sweep.
    next_sweep: u64,
    content: bool,
    keylog: Option<Arc<KeyLog>>,
    max_conns: usize,
    interface: u32,
    /// Connection numbers shared with the other drivers of a fanout group ([`Driver::share_ids`]).
    ids: Option<Arc<AtomicU64>>,
}

impl Driver {
    /// Also hash each TCP request's leading bytes into [`Transaction::content`] (for `capture match`).
    pub fn with_content(mut self) -> Self {
        self.content = true;
        self
    }

    /// Decrypts TLS with the session keys of this key log.
    pub fn set_keylog(&mut self, keylog: Option<Arc<KeyLog>>) {
        self.keylog = keylog;
    }

    fn make_matcher(&self, proto: Proto, carrier: Carrier) -> Box<dyn ConnMatcher + Send> {
        build_matcher(proto, carrier, self.content, &self.keylog)
    }

    /// A driver choosing protocols as `choice` says.
    pub fn new(choice: ProtoChoice) -> Self {
        Driver {
            choice,
            conns: HashMap::default(),
            wide: FxHashMap::default(),
            next_id: 0,
            out: Out::default(),
            counts: DriverCounts::default(),
            last_ts: 0,
            next_sweep: UDP_IDLE_NS,
            content: false,
            keylog: None,
            max_conns: usize::MAX,
            interface: 0,
            ids: None,
        }
    }

    /// Numbers connections from `ids` (shared with the drivers of the other threads of a fanout group), so
    /// each connection has one number among all of them; the counter starts at the first number (0).
    pub fn share_ids(&mut self, ids: Arc<AtomicU64>) {
        self.ids = Some(ids);
    }

    /// Live capture on `any`: the interface of the next segment, so a segment seen on two interfaces of a
    /// forwarding host is two connections' packets, not a retransmission. Files leave it 0.
    #[inline]
    pub fn set_interface(&mut self, ifindex: u32) {
        self.interface = ifindex;
    }

    /// Tracks at most `n` connections at once; past it the eighth that has been silent longest is closed
    /// (counted in [`DriverCounts::evicted_connections`]). Unlimited unless set (live capture sets it).
    pub fn set_max_connections(&mut self, n: usize) {
        self.max_conns = n.max(1);
    }

    /// Every connection with its key, in no particular order.
    fn keyed(&self) -> impl Iterator<Item = (Key, &Conn)> {
        let v4 = self.conns.iter().map(|(k, c)| (Key::V4(*k), c));
        v4.chain(self.wide.iter().map(|(k, c)| (Key::Wide(*k), c)))
    }

    fn remove(&mut self, k: &Key) -> Option<Conn> {
        match k {
            Key::V4(k) => self.conns.remove(k),
            Key::Wide(k) => self.wide.remove(k),
        }
    }

    fn evict_oldest(&mut self, now: u64, sink: &mut dyn Sink) {
        let mut by_age: Vec<(u64, u64, Key)> = self
            .keyed()
            .map(|(k, c)| (c.last_ts, c.info.id, k))
            .collect();
        let n = (by_age.len() / 8).max(1).min(by_age.len());
        if n == 0 {
            return;
        }
        by_age.select_nth_unstable_by_key(n - 1, |x| (x.0, x.1));
        by_age.truncate(n);
        // Closed in that order, not the map's: what they report comes out the same whatever the hash.
        by_age.sort_unstable_by_key(|x| (x.0, x.1));
        for (_, _, k) in by_age {
            if let Some(mut c) = self.remove(&k) {
                self.counts.evicted_connections += 1;
                self.close(&mut c, now, sink);
            }
        }
    }

    /// What was seen so far.
    pub fn counts(&self) -> DriverCounts {
        self.counts
    }

    /// Connections currently tracked.
    pub fn open_connections(&self) -> usize {
        self.conns.len() + self.wide.len()
    }

    #[inline]
    fn flush(out: &mut Out, info: &ConnInfo, sink: &mut dyn Sink) {
        if !out.transactions.is_empty() {
            sink.transactions(info, &mut out.transactions);
        }
        if !out.anomalies.is_empty() {
            for a in out.anomalies.drain(..) {
                sink.anomaly(info, a);
            }
        }
    }

    /// Feeds one decoded packet.
    pub fn segment(&mut self, s: &Segment<'_>, sink: &mut dyn Sink) {
        self.counts.packets += 1;
        self.counts.payload_bytes += u64::from(s.wire_len);
        let now = s.ts_ns;
        self.last_ts = self.last_ts.max(now);
        let (udp, tcp_flags) = match s.l4 {
            L4::Tcp { flags, .. } => (false, flags),
            L4::Udp => (true, 0),
        };
        let syn_only = tcp_flags & (flags::SYN | flags::ACK) == flags::SYN;
        // One hash lookup for a packet of a known connection; the rest is the slow path.
        let found = match Key4::of(s, udp, self.interface) {
            Some((k, src_is_a)) => self.conns.get_mut(&k).map(|c| (c, src_is_a)),
            None => Self::find_wide(&mut self.wide, s, udp, self.interface),
        };
        let (conn, src_is_a) = match found {
            // (a SYN on a pair in use is a new connection on a reused address pair)
            Some((c, a)) if !(syn_only && c.halves.iter().any(|h| h.next.is_some())) => (c, a),
            _ => match self.open_conn(s, udp, tcp_flags, sink) {
                Some((Key::V4(k), c, a)) => (self.conns.entry(k).insert_entry(c).into_mut(), a),
                Some((Key::Wide(k), c, a)) => (self.wide.entry(k).insert_entry(c).into_mut(), a),
                None => return,
            },
        };
        conn.last_ts = now;
        let dir = if src_is_a == conn.client_is_src_of_key {
            Dir::Request
        } else {
            Dir::Response
        };
        self.out.conn = conn.info.id;
        if !conn.decided && !s.payload.is_empty() {
            let carrier = conn.info.carrier;
            if let Some(p) = detect::by_content(dir, s.payload, carrier) {
                conn.info.proto = p;
                conn.matcher = Some(build_matcher(p, carrier, self.content, &self.keylog));
                conn.layered = carrier == Carrier::Tcp;
            }
            conn.decided = true;
        }
        let Some(m) = conn.matcher.as_mut() else {
            return;
        };
        let ts = s.ts();
        let mut closed = false;
        match s.l4 {
            L4::Udp => {
                m.on_data(dir, ts, 0, s.payload, &mut self.out);
                if (s.payload.len() as u32) < s.wire_len {
                    m.on_gap(
                        dir,
                        ts,
                        (s.wire_len as usize - s.payload.len()) as u64,
                        &mut self.out,
                    );
                }
            }
            L4::Tcp { seq, ack, flags: f } => {
                // What the other side acknowledges but the capture never showed is a gap (only a hole before
                // held segments counts: otherwise the bytes may still come).
                if f & flags::ACK != 0 {
                    let other = 1 - dir.index();
                    let h = &mut conn.halves[other];
                    if !h.ooo.is_empty()
                        && let Some(next) = h.next
                    {
                        let ahead = ack.wrapping_sub(next) as i32;
                        if ahead > 0 {
                            let odir = if other == 0 {
                                Dir::Request
                            } else {
                                Dir::Response
                            };
                            Self::acked_hole(
                                h,
                                odir,
                                ts,
                                next,
                                ahead as u64,
                                m.as_mut(),
                                &mut self.out,
                                &mut self.counts,
                            );
                        }
                    }
                }
                let h = &mut conn.halves[dir.index()];
                let mut seq = seq;
                if f & flags::SYN != 0 {
                    seq = seq.wrapping_add(1);
                    h.next = Some(seq);
                    h.pos = 0;
                }
                if !s.payload.is_empty() || s.wire_len > 0 {
                    let next = *h.next.get_or_insert(seq);
                    let rel = seq.wrapping_sub(next) as i32;
                    if rel > 0 {
                        Self::ahead_of_next(
                            h,
                            dir,
                            s,
                            seq,
                            rel as u64,
                            m.as_mut(),
                            &mut self.out,
                            &mut self.counts,
                        );
                    } else {
                        let skip = (-rel) as u32;
                        if skip >= s.wire_len {
                            self.counts.retransmitted_segments += 1;
                        } else {
                            let cut = (skip as usize).min(s.payload.len());
                            Self::deliver(
                                h,
                                dir,
                                ts,
                                seq.wrapping_add(skip),
                                &s.payload[cut..],
                                s.wire_len - skip,
                                m.as_mut(),
                                &mut self.out,
                            );
                            Self::drain_ooo(h, dir, m.as_mut(), &mut self.out);
                        }
                    }
                }
                // Both FINs seen (each set by a FIN) or a RST: closed.
                if f & (flags::FIN | flags::RST) != 0 {
                    if f & flags::FIN != 0 {
                        h.fin = true;
                    }
                    closed = f & flags::RST != 0 || conn.halves.iter().all(|h| h.fin);
                }
            }
        }
        if conn.info.proto == Proto::Tls
            && let Some(p) = conn.matcher.as_ref().and_then(|m| m.tls()?.inner)
        {
            conn.info.proto = p;
        }
        if !self.out.transactions.is_empty() || !self.out.anomalies.is_empty() {
            // A TLS layer around a protocol that ruled TLS out hands over its matcher: one call less a segment
            // (and, once it has, none to ask it: 9 instructions per request).
            if conn.layered
                && let Some(p) = conn.matcher.as_mut().and_then(|m| m.take_plain())
            {
                conn.matcher = Some(p);
                conn.layered = false;
            }
            Self::flush(&mut self.out, &conn.info, sink);
        }
        if closed {
            let (k, _) = Key::of(s, udp, self.interface);
            let mut c = self.remove(&k).expect("present");
            self.close(&mut c, now, sink);
        }
        if now > self.next_sweep {
            self.next_sweep = now.saturating_add(UDP_IDLE_NS);
            self.sweep_udp(now, sink);
        }
    }

    /// The connection of a segment whose ends are not both IPv4 ([`WideKey`]), and whether its source is
    /// the key's `a` end. Out of line, so the IPv4 lookup stays small in [`segment`](Self::segment).
    #[inline(never)]
    fn find_wide<'m>(
        wide: &'m mut FxHashMap<WideKey, Conn>,
        s: &Segment<'_>,
        udp: bool,
        ifindex: u32,
    ) -> Option<(&'m mut Conn, bool)> {
        let (k, src_is_a) = WideKey::of(s, udp, ifindex);
        wide.get_mut(&k).map(|c| (c, src_is_a))
    }

    /// The slow path of [`segment`](Self::segment): a packet of no tracked connection (or a SYN reusing a
    /// tracked pair, whose old connection closes). The connection to track for it, if any, with its key and
    /// whether its source is the key's `a` end. Kept out of line so the per-packet path stays small (and its
    /// one hash lookup inlined).
    #[inline(never)]
    fn open_conn(
        &mut self,
        s: &Segment<'_>,
        udp: bool,
        tcp_flags: u8,
        sink: &mut dyn Sink,
    ) -> Option<(Key, Conn, bool)> {
        let (k, src_is_a) = Key::of(s, udp, self.interface);
        if let Some(mut c) = self.remove(&k) {
            self.close(&mut c, s.ts_ns, sink);
        }
        if !udp && s.payload.is_empty() && tcp_flags & (flags::SYN) == 0 {
            return None; // a bare ACK/FIN/RST of a connection we never saw carry data
        }
        if self.open_connections() >= self.max_conns {
            self.evict_oldest(s.ts_ns, sink);
        }
        Some((k, self.new_conn(s, src_is_a, udp)?, src_is_a))
    }

    /// The other side acknowledged `ahead` bytes past `next` while segments are held out of order: the bytes
    /// up to the first held segment (or the ack) are gone. Out of line: rare.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn acked_hole(
        h: &mut Half,
        dir: Dir,
        ts: Duration,
        next: u32,
        ahead: u64,
        m: &mut (dyn ConnMatcher + Send),
        out: &mut Out,
        counts: &mut DriverCounts,
    ) {
        let first_off = *h.ooo.keys().next().expect("non-empty");
        let hole = (first_off - h.pos).min(ahead);
        if hole > 0 {
            counts.gap_bytes += hole;
            m.on_gap(dir, ts, hole, out);
            h.next = Some(next.wrapping_add(hole as u32));
            h.pos += hole;
        }
        Self::drain_ooo(h, dir, m, out);
    }

    /// A segment `rel` bytes ahead of the next expected byte: held back, or when too much is held the hole is
    /// given up and the segment delivered. Out of line: rare.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn ahead_of_next(
        h: &mut Half,
        dir: Dir,
        s: &Segment<'_>,
        seq: u32,
        rel: u64,
        m: &mut (dyn ConnMatcher + Send),
        out: &mut Out,
        counts: &mut DriverCounts,
    ) {
        if h.ooo.len() < MAX_OOO_SEGMENTS && h.ooo_bytes + s.payload.len() <= MAX_OOO_BYTES {
            let off = h.pos + rel;
            h.ooo_bytes += s.payload.len();
            h.ooo
                .entry(off)
                .or_insert((s.ts_ns, s.payload.to_vec(), s.wire_len));
        } else {
            // Give up on the hole.
            let ts = s.ts();
            counts.gap_bytes += rel;
            m.on_gap(dir, ts, rel, out);
            h.next = Some(seq);
            h.pos += rel;
            Self::deliver(h, dir, ts, seq, s.payload, s.wire_len, m, out);
            Self::drain_ooo(h, dir, m, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn deliver(
        h: &mut Half,
        dir: Dir,
        ts: Duration,
        seq: u32,
        payload: &[u8],
        wire_len: u32,
        m: &mut (dyn ConnMatcher + Send),
        out: &mut Out,
    ) {
        let payload = &payload[..payload.len().min(wire_len as usize)];
        if !payload.is_empty() {
            m.on_data(dir, ts, seq, payload, out);
        }
        let missing = wire_len as u64 - payload.len() as u64;
        if missing > 0 {
            m.on_gap(dir, ts, missing, out);
        }
        h.next = Some(seq.wrapping_add(wire_len));
        h.pos += wire_len as u64;
    }

    #[inline]
    fn drain_ooo(h: &mut Half, dir: Dir, m: &mut (dyn ConnMatcher + Send), out: &mut Out) {
        // Nothing held back (the common case): no tree walk.
        if h.ooo.is_empty() {
            return;
        }
        Self::drain_held(h, dir, m, out);
    }

    #[inline(never)]
    fn drain_held(h: &mut Half, dir: Dir, m: &mut (dyn ConnMatcher + Send), out: &mut Out) {
        while let Some((&off, _)) = h.ooo.iter().next() {
            if off > h.pos {
                break;
            }
            let (ts, data, wire) = h.ooo.remove(&off).expect("present");
            h.ooo_bytes -= data.len();
            let skip = h.pos - off;
            if skip >= wire as u64 {
                continue;
            }
            let next = h.next.unwrap_or(0);
            let cut = (skip as usize).min(data.len());
            let ts = Duration::from_nanos(ts);
            Self::deliver(h, dir, ts, next, &data[cut..], wire - skip as u32, m, out);
        }
    }

    fn new_conn(&mut self, s: &Segment<'_>, src_is_a: bool, udp: bool) -> Option<Conn> {
        let carrier = if udp { Carrier::Udp } else { Carrier::Tcp };
        let or = orient(s, self.choice);
        let (client, server) = (or.client, or.server);
        let src_is_client = client == s.src();
        let (proto, decided) = match self.choice {
            ProtoChoice::Force(p) => (p, true),
            ProtoChoice::Auto => match detect::by_port(server.port(), carrier).or(or.proto) {
                Some(p) => (p, true),
                None => (Proto::Generic, false),
            },
        };
        if udp && !matches!(proto, Proto::Nfs | Proto::Dns | Proto::Sockperf) && decided {
            return None;
        }
        let matcher = if decided || !udp {
            Some(self.make_matcher(proto, carrier))
        } else {
            None
        };
        let id = match &self.ids {
            Some(ids) => ids.fetch_add(1, Ordering::Relaxed),
            None => {
                self.next_id += 1;
                self.next_id - 1
            }
        };
        self.counts.connections += 1;
        Some(Conn {
            info: ConnInfo {
                id,
                client,
                server,
                proto,
                carrier,
            },
            client_is_src_of_key: src_is_client == src_is_a,
            matcher,
            halves: [Half::default(), Half::default()],
            last_ts: s.ts_ns,
            decided,
            layered: carrier == Carrier::Tcp,
        })
    }

    /// Closes `c` at `ts` (nanoseconds; its last packet's time if later).
    fn close(&mut self, c: &mut Conn, ts: u64, sink: &mut dyn Sink) {
        self.out.conn = c.info.id;
        if let Some(m) = c.matcher.as_mut() {
            let t = Duration::from_nanos(ts);
            for (i, h) in c.halves.iter_mut().enumerate() {
                let dir = if i == 0 { Dir::Request } else { Dir::Response };
                if let Some((&off, _)) = h.ooo.iter().next() {
                    let hole = off - h.pos;
                    m.on_gap(dir, t, hole, &mut self.out);
                    self.counts.gap_bytes += hole;
                    h.next = Some(h.next.unwrap_or(0).wrapping_add(hole as u32));
                    h.pos = off;
                    Self::drain_ooo(h, dir, m.as_mut(), &mut self.out);
                }
            }
            m.on_close(Duration::from_nanos(ts.max(c.last_ts)), &mut self.out);
            if let Some(t) = m.tls().filter(|t| t.seen) {
                self.counts.tls_connections += 1;
                self.counts.tls_decrypted += t.decrypted as u64;
                self.counts.tls_no_key += t.no_key as u64;
            }
        }
        Self::flush(&mut self.out, &c.info, sink);
    }

    fn sweep_udp(&mut self, now: u64, sink: &mut dyn Sink) {
        let mut idle: Vec<(u64, Key)> = self
            .keyed()
            .filter(|(k, c)| k.udp() && now.saturating_sub(c.last_ts) > UDP_IDLE_NS)
            .map(|(k, c)| (c.info.id, k))
            .collect();
        // In connection order, not the map's: what they report comes out the same whatever the hash.
        idle.sort_unstable_by_key(|x| x.0);
        for (_, k) in idle {
            if let Some(mut c) = self.remove(&k) {
                let last = c.last_ts;
                self.close(&mut c, last, sink);
            }
        }
    }

    /// The capture ended: every connection still open is closed (open requests are reported).
    pub fn finish(&mut self, sink: &mut dyn Sink) {
        let mut all: Vec<Conn> = self.conns.drain().map(|(_, c)| c).collect();
        all.extend(self.wide.drain().map(|(_, c)| c));
        all.sort_by_key(|c| c.info.id);
        let end = self.last_ts;
        for mut c in all {
            self.close(&mut c, end, sink);
        }
    }
}

/// A matcher for `proto`: on TCP inside a TLS layer that takes over when a TLS handshake starts, and with
/// request fingerprints when `content` ([`Driver::with_content`]).
fn build_matcher(
    proto: Proto,
    carrier: Carrier,
    content: bool,
    keylog: &Option<Arc<KeyLog>>,
) -> Box<dyn ConnMatcher + Send> {
    let m: Box<dyn ConnMatcher + Send> = match (proto, carrier) {
        (Proto::Tls, _) => Box::new(super::tls::Tls::new(keylog.clone())),
        (_, Carrier::Tcp) => Box::new(super::tls::Tls::wrap(
            proto,
            proto.matcher(carrier),
            keylog.clone(),
        )),
        (_, Carrier::Udp) => proto.matcher(carrier),
    };
    if content && carrier == Carrier::Tcp {
        Box::new(super::Fingerprint::new(m))
    } else {
        m
    }
}

#[cfg(test)]
mod tests;
