//! From decoded packets to protocol matchers: connection tracking, client/server roles, protocol choice and
//! TCP reassembly (in sequence order, retransmissions dropped, out-of-order segments held back within a bound,
//! bytes the capture lacks reported as gaps so the parsers resynchronise instead of failing).
//!
//! Memory is bounded by the open connections, the out-of-order bytes held per direction ([`MAX_OOO_BYTES`])
//! and the requests still waiting for their response.
#![forbid(unsafe_code)]

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

/// A connection's two ends in canonical order (the `a` end the lower), its interface (0 unless keyed by
/// interface) and UDP or not. Both ends IPv4 on an interface below 2^31 (every file, every real interface
/// index) is a [`Key4`], two words in a map of its own; anything else a [`WideKey`]. (The lookup of two
/// words is inlined into [`Driver::segment`]; one map on this enum had an out-of-line lookup of 71
/// instructions per packet: 2,428 -> 2,351 instructions per pgbench request inside the analysis.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    /// Both ends IPv4.
    V4(Key4),
    /// An end IPv6, or an interface index from 2^31 on.
    Wide(WideKey),
}

/// Both ends IPv4: each end as address and port in 48 bits (ordered by address, then port, as
/// [`WideKey`] orders them). `lo`: `a` (bits 0..48) and the port of `b` (bits 48..64); `hi`: the address of
/// `b` (bits 32..64), UDP (bit 31) and the interface (bits 0..31).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key4 {
    lo: u64,
    hi: u64,
}

/// Any end IPv6: addresses as 128-bit numbers (IPv4 in the low 32 bits), the `a` end the lower
/// (IPv6?, address, port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WideKey {
    a: u128,
    b: u128,
    /// Port of `a` (high 16 bits), port of `b` (low 16 bits).
    ports: u32,
    ifindex: u32,
    /// Bit 0: UDP; bit 1: `a` is IPv6; bit 2: `b` is IPv6.
    flags: u8,
}

/// One FxHash step.
#[inline]
fn fx(h: u64, w: u64) -> u64 {
    (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

impl std::hash::Hash for Key4 {
    /// One folded multiply of the two words (foldhash's mixing step, with the digits of pi as seeds): every
    /// input bit reaches both the bucket (the low bits) and the control tag (the top 7 bits) of the table;
    /// [`Passthrough`] takes the word as the hash. (About 5 instructions per packet, where three Fx steps
    /// and a rotation took 12.)
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let p = u128::from(self.lo ^ 0x243f_6a88_85a3_08d3)
            * u128::from(self.hi ^ 0x1319_8a2e_0370_7344);
        h.write_u64(p as u64 ^ (p >> 64) as u64);
    }
}

/// The hasher of the [`Key4`] map: the key mixes its own bits, so the one word it writes is the hash.
#[derive(Debug, Default, Clone, Copy)]
struct Passthrough(u64);

impl std::hash::Hasher for Passthrough {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = fx(self.0, u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, w: u64) {
        self.0 = w;
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

impl std::hash::Hash for WideKey {
    /// One word: every field folded in, then the well-mixed high bits rotated down, since the table's bucket
    /// comes from the low bits and FxHash's low bits only see its input's low bits (the ports would not count).
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let w = fx(
            fx(u64::from(self.flags), self.a as u64),
            (self.a >> 64) as u64,
        );
        let w = fx(fx(w, self.b as u64), (self.b >> 64) as u64);
        let w = fx(w, u64::from(self.ports) << 32 | u64::from(self.ifindex));
        h.write_u64(w.rotate_left(26));
    }
}

impl Key4 {
    /// The key of segment `s` (UDP if `udp`, seen on interface `ifindex`) and whether its source is the `a`
    /// end; None unless both ends are IPv4 and `ifindex` is below 2^31.
    #[inline]
    fn of(s: &Segment<'_>, udp: bool, ifindex: u32) -> Option<(Key4, bool)> {
        let (IpAddr::V4(x), IpAddr::V4(y)) = (s.src_ip, s.dst_ip) else {
            return None;
        };
        if ifindex >> 31 != 0 {
            return None;
        }
        let se = u64::from(x.to_bits()) << 16 | u64::from(s.src_port);
        let de = u64::from(y.to_bits()) << 16 | u64::from(s.dst_port);
        let src_is_a = se <= de;
        let (a, b) = if src_is_a { (se, de) } else { (de, se) };
        let k = Key4 {
            lo: a | b << 48,
            hi: (b >> 16) << 32 | u64::from(udp) << 31 | u64::from(ifindex),
        };
        Some((k, src_is_a))
    }
}

impl WideKey {
    /// [`Key4::of`] for the other segments.
    fn of(s: &Segment<'_>, udp: bool, ifindex: u32) -> (WideKey, bool) {
        let end = |ip: IpAddr, port: u16| match ip {
            IpAddr::V4(a) => (false, u128::from(a.to_bits()), port),
            IpAddr::V6(a) => (true, a.to_bits(), port),
        };
        let se = end(s.src_ip, s.src_port);
        let de = end(s.dst_ip, s.dst_port);
        let src_is_a = se <= de;
        let (x, y) = if src_is_a { (se, de) } else { (de, se) };
        let k = WideKey {
            a: x.1,
            b: y.1,
            ports: u32::from(x.2) << 16 | u32::from(y.2),
            ifindex,
            flags: u8::from(udp) | u8::from(x.0) << 1 | u8::from(y.0) << 2,
        };
        (k, src_is_a)
    }
}

impl Key {
    /// The key of segment `s` (UDP if `udp`, seen on interface `ifindex`) and whether its source is the `a`
    /// end.
    fn of(s: &Segment<'_>, udp: bool, ifindex: u32) -> (Key, bool) {
        match Key4::of(s, udp, ifindex) {
            Some((k, a)) => (Key::V4(k), a),
            None => {
                let (k, a) = WideKey::of(s, udp, ifindex);
                (Key::Wide(k), a)
            }
        }
    }

    fn udp(&self) -> bool {
        match self {
            Key::V4(k) => k.hi & 1 << 31 != 0,
            Key::Wide(k) => k.flags & 1 != 0,
        }
    }
}

/// How a connection's client and server were told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Oriented {
    /// The handshake was seen: the SYN's sender is the client.
    Handshake,
    /// Caught mid-stream: the first payload is, by the protocol's own framing, a request or a response
    /// ([`detect::direction`]).
    Protocol,
    /// Caught mid-stream and the payload does not say: the side on a service port (the protocol's, else any
    /// known one) is the server, else the lower port.
    Port,
}

impl Oriented {
    /// Every way, in the order of [`Oriented::name`]'s indices.
    pub const ALL: [Oriented; 3] = [Oriented::Handshake, Oriented::Protocol, Oriented::Port];

    /// The name used in metrics and reports.
    pub fn name(self) -> &'static str {
        match self {
            Oriented::Handshake => "handshake",
            Oriented::Protocol => "protocol",
            Oriented::Port => "port",
        }
    }
}

/// The two ends of a connection, and how they were told apart ([`orient`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orientation {
    /// The side that sends requests.
    pub client: SocketAddr,
    /// The side that answers.
    pub server: SocketAddr,
    /// How.
    pub how: Oriented,
    /// The protocol whose framing told ([`Oriented::Protocol`]).
    pub proto: Option<Proto>,
}

/// The client and the server of a connection first seen in segment `s`, and how they were told apart: a SYN's
/// sender is the client (a SYN+ACK's the server); else the protocol's own direction of the payload (the
/// protocol forced by `choice`, else those of the two ports, else any); else by port. [`Driver`] orients its
/// connections so; a sink that tracks connections itself calls it to agree with the decoders.
pub fn orient(s: &Segment<'_>, choice: ProtoChoice) -> Orientation {
    let udp = matches!(s.l4, L4::Udp);
    let carrier = if udp { Carrier::Udp } else { Carrier::Tcp };
    let o = |client_is_src: bool, how: Oriented, proto: Option<Proto>| {
        let (client, server) = if client_is_src {
            (s.src(), s.dst())
        } else {
            (s.dst(), s.src())
        };
        Orientation {
            client,
            server,
            how,
            proto,
        }
    };
    if let L4::Tcp { flags: f, .. } = s.l4
        && f & flags::SYN != 0
    {
        return o(f & flags::ACK == 0, Oriented::Handshake, None);
    }
    let (sp, dp) = (s.src_port, s.dst_port);
    if !s.payload.is_empty() {
        let (by_d, by_s) = (detect::by_port(dp, carrier), detect::by_port(sp, carrier));
        let mut h = [Proto::Generic; 2];
        let n = match (choice, by_d, by_s) {
            (ProtoChoice::Force(p), _, _) => {
                h[0] = p;
                1
            }
            (ProtoChoice::Auto, Some(a), Some(b)) if a != b => {
                h = [a, b];
                2
            }
            (ProtoChoice::Auto, Some(a), _) | (ProtoChoice::Auto, None, Some(a)) => {
                h[0] = a;
                1
            }
            (ProtoChoice::Auto, None, None) => 0,
        };
        if let Some((d, p)) = detect::direction(s.payload, carrier, &h[..n]) {
            return o(d == Dir::Request, Oriented::Protocol, Some(p));
        }
    }
    let src_is_client = match (detect::by_port(dp, carrier), detect::by_port(sp, carrier)) {
        (Some(_), None) => true,
        (None, Some(_)) => false,
        _ => {
            if detect::is_service_port(dp) != detect::is_service_port(sp) {
                detect::is_service_port(dp)
            } else {
                sp >= dp
            }
        }
    };
    o(src_is_client, Oriented::Port, None)
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
    /// Also hash each TCP request's leading bytes into [`super::Transaction::content`] (for `capture match`).
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
mod cap_tests {
    use super::*;
    use crate::capture::rpc::{Anomaly, Transaction};

    #[derive(Default)]
    struct Nothing;
    impl Sink for Nothing {
        fn transaction(&mut self, _: &ConnInfo, _: Transaction) {}
        fn anomaly(&mut self, _: &ConnInfo, _: Anomaly) {}
    }

    /// A SYN flood (no answers, every SYN a new source port) never holds more than the cap.
    #[test]
    fn syn_flood_stays_under_the_connection_cap() {
        let mut d = Driver::new(ProtoChoice::Force(Proto::Generic));
        d.set_max_connections(100);
        let mut sink = Nothing;
        let dst: SocketAddr = "10.0.0.1:5432".parse().unwrap();
        for i in 0..5000u32 {
            let src = SocketAddr::new("10.9.0.1".parse().unwrap(), 1024 + (i % 60000) as u16);
            d.segment(
                &Segment::new(
                    Duration::from_micros(u64::from(i)),
                    src,
                    dst,
                    L4::Tcp {
                        seq: i,
                        ack: 0,
                        flags: flags::SYN,
                    },
                    &[],
                    0,
                ),
                &mut sink,
            );
            assert!(d.open_connections() <= 100);
        }
        assert_eq!(d.counts().connections, 5000);
        assert!(d.counts().evicted_connections >= 4900);
    }

    #[derive(Default)]
    struct Keep(Vec<(ConnInfo, Transaction)>);
    impl Sink for Keep {
        fn transaction(&mut self, c: &ConnInfo, t: Transaction) {
            self.0.push((c.clone(), t));
        }
        fn anomaly(&mut self, _: &ConnInfo, _: Anomaly) {}
    }

    /// A Redis connection caught mid-stream on a port no rule knows, its client on the lower port: the port
    /// rule would make the client the server; the RESP framing orients it, and the GET is decoded.
    #[test]
    fn a_connection_caught_mid_stream_is_oriented_by_its_protocol() {
        let client: SocketAddr = "127.0.0.1:30000".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let seg = |ts: u64, src, dst, seq, payload: &'static [u8]| {
            Segment::new(
                Duration::from_micros(ts),
                src,
                dst,
                L4::Tcp {
                    seq,
                    ack: 1,
                    flags: flags::ACK,
                },
                payload,
                payload.len() as u32,
            )
        };
        let req = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let o = orient(&seg(0, client, server, 100, req), ProtoChoice::Auto);
        assert_eq!((o.client, o.server), (client, server));
        assert_eq!((o.how, o.proto), (Oriented::Protocol, Some(Proto::Redis)));
        // The reply seen first orients it as well.
        let o = orient(&seg(0, server, client, 5, b"$-1\r\n"), ProtoChoice::Auto);
        assert_eq!(
            (o.client, o.server, o.how),
            (client, server, Oriented::Protocol)
        );
        // Payload that says nothing: by port, the lower one serving.
        let o = orient(&seg(0, client, server, 100, b"hello"), ProtoChoice::Auto);
        assert_eq!((o.server, o.how), (client, Oriented::Port));
        let mut d = Driver::new(ProtoChoice::Auto);
        let mut sink = Keep::default();
        d.segment(&seg(10, client, server, 100, req), &mut sink);
        d.segment(&seg(60, server, client, 5, b"$-1\r\n"), &mut sink);
        d.finish(&mut sink);
        assert_eq!(sink.0.len(), 1);
        let (c, t) = &sink.0[0];
        assert_eq!(
            (c.client, c.server, c.proto),
            (client, server, Proto::Redis)
        );
        assert_eq!(&*t.op, "GET");
        assert_eq!(t.first_byte(), Duration::from_micros(50));
    }

    /// `Segment::new` keeps what its accessors give back, IPv4 and IPv6.
    #[test]
    fn a_segment_gives_back_its_addresses_and_time() {
        for (src, dst) in [
            ("10.0.0.1:40000", "10.0.0.2:5432"),
            ("[fd00::1]:40000", "[fd00::2]:5432"),
        ] {
            let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
            let ts = Duration::new(1_700_000_000, 123_456_789);
            let s = Segment::new(ts, src, dst, L4::Udp, b"x", 1);
            assert_eq!((s.ts(), s.src(), s.dst()), (ts, src, dst));
            assert_eq!(s.ts_ns, 1_700_000_000_123_456_789);
        }
        // Past u64 nanoseconds (year 2554) the time saturates.
        let s = Segment::new(
            Duration::MAX,
            ([1, 2, 3, 4], 1).into(),
            ([1, 2, 3, 5], 2).into(),
            L4::Udp,
            b"",
            0,
        );
        assert_eq!(s.ts_ns, u64::MAX);
    }

    fn key_of(src: &str, dst: &str, udp: bool, ifindex: u32) -> (Key, bool) {
        let l4 = if udp {
            L4::Udp
        } else {
            L4::Tcp {
                seq: 0,
                ack: 0,
                flags: 0,
            }
        };
        let s = Segment::new(
            Duration::ZERO,
            src.parse().unwrap(),
            dst.parse().unwrap(),
            l4,
            b"",
            0,
        );
        Key::of(&s, udp, ifindex)
    }

    /// The hash the key's map gives it.
    fn hash_of(k: &Key) -> u64 {
        use std::hash::BuildHasher;
        match k {
            Key::V4(k) => BuildHasherDefault::<Passthrough>::default().hash_one(k),
            Key::Wide(k) => BuildHasherDefault::<super::super::FxHasher>::default().hash_one(k),
        }
    }

    /// Both directions of a pair are one key (the source the `a` end in one of them); family, interface,
    /// ports and UDP tell keys apart; the ends are ordered by (family, address, port); IPv4 pairs on an
    /// interface from 2^31 on have a wide key.
    #[test]
    fn keys_pair_both_directions_and_tell_pairs_apart() {
        let pairs = [
            ("10.0.0.1:40000", "10.0.0.2:5432"),
            ("10.0.0.2:40000", "10.0.0.1:5432"),
            ("10.0.0.1:5432", "10.0.0.1:40000"),
            ("10.0.0.1:40001", "10.0.0.2:5432"),
            ("[::ffff:10.0.0.1]:40000", "10.0.0.2:5432"),
            ("[::ffff:10.0.0.1]:40000", "[::ffff:10.0.0.2]:5432"),
            ("[fd00::1]:40000", "[fd00::2]:5432"),
            ("[fd00::2]:40000", "[fd00::1]:5432"),
        ];
        let mut all = Vec::new();
        for (a, b) in pairs {
            for udp in [false, true] {
                for ifindex in [0, 7, 1 << 31, u32::MAX] {
                    let (k, src_is_a) = key_of(a, b, udp, ifindex);
                    let v4 = !a.starts_with('[') && !b.starts_with('[') && ifindex < 1 << 31;
                    assert_eq!(matches!(k, Key::V4(_)), v4, "{a} {b} {ifindex}");
                    let (k2, src_is_a2) = key_of(b, a, udp, ifindex);
                    assert_eq!(k, k2, "{a} {b}");
                    assert_eq!(hash_of(&k), hash_of(&k2));
                    assert_ne!(src_is_a, src_is_a2);
                    assert_eq!(k.udp(), udp);
                    let (sa, sb): (SocketAddr, SocketAddr) =
                        (a.parse().unwrap(), b.parse().unwrap());
                    let end = |s: SocketAddr| (s.is_ipv6(), s.ip(), s.port());
                    assert_eq!(src_is_a, end(sa) <= end(sb), "{a} {b}");
                    all.push(k);
                }
            }
        }
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
        // IPv4 pairs hash the ports into the table's bucket bits (the low bits) and its control tags (the
        // top 7 bits), the client's port on either end of the key.
        for server in ["127.0.0.1:5432", "127.0.0.2:5432", "127.0.0.0:5432"] {
            let hashes: Vec<u64> = (0..64u16)
                .map(|p| hash_of(&key_of(&format!("127.0.0.1:{}", 40000 + p), server, false, 0).0))
                .collect();
            let spread = |f: &dyn Fn(u64) -> u64| {
                hashes
                    .iter()
                    .map(|&h| f(h))
                    .collect::<std::collections::HashSet<u64>>()
                    .len()
            };
            assert!(spread(&|h| h & 63) > 24, "{server}");
            assert!(spread(&|h| h >> 57) > 24, "{server}");
        }
    }

    #[derive(Default)]
    struct Ids(Vec<u64>);
    impl Sink for Ids {
        fn transaction(&mut self, c: &ConnInfo, _: Transaction) {
            self.0.push(c.id);
        }
        fn anomaly(&mut self, c: &ConnInfo, _: Anomaly) {
            self.0.push(c.id);
        }
    }

    fn dns_query(id: u16) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [id, 0x0100, 1, 0, 0, 0] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
        v
    }

    /// Idle UDP pairs are closed by the next packet past `UDP_IDLE`, in the order they were first seen (not
    /// the map's), and not before.
    #[test]
    fn idle_udp_pairs_close_in_connection_order() {
        let mut d = Driver::new(ProtoChoice::Auto);
        let mut sink = Ids::default();
        let server: SocketAddr = "10.0.0.53:53".parse().unwrap();
        let q = dns_query(1);
        for i in 0..40u16 {
            let client = SocketAddr::new([10, 1, (i % 7) as u8, i as u8].into(), 30000 + i);
            d.segment(
                &Segment::new(
                    Duration::from_millis(u64::from(i)),
                    client,
                    server,
                    L4::Udp,
                    &q,
                    q.len() as u32,
                ),
                &mut sink,
            );
        }
        // (from new clients: a second query with the same id would be reported)
        let at = |t, host| {
            let late = SocketAddr::new([10, 2, 0, host].into(), 30000);
            Segment::new(t, late, server, L4::Udp, &q, q.len() as u32)
        };
        d.segment(&at(UDP_IDLE, 1), &mut sink);
        assert!(sink.0.is_empty(), "{:?}", sink.0);
        assert_eq!(d.open_connections(), 41);
        d.segment(&at(UDP_IDLE + Duration::from_millis(100), 2), &mut sink);
        assert_eq!(sink.0, (0..40).collect::<Vec<u64>>());
        assert_eq!(d.open_connections(), 2);
    }

    /// Past the connection cap the longest silent connections are closed, oldest first.
    #[test]
    fn evicted_connections_close_oldest_first() {
        let mut d = Driver::new(ProtoChoice::Force(Proto::Generic));
        d.set_max_connections(16);
        let mut sink = Ids::default();
        let server: SocketAddr = "10.0.0.1:80".parse().unwrap();
        for i in 0..17u32 {
            let client = SocketAddr::new([10, 9, 0, (i * 37 % 251) as u8].into(), 1024 + i as u16);
            // Connections seen in id order but silent since times in the reverse order.
            let ts = Duration::from_micros(u64::from(1000 - i));
            d.segment(
                &Segment::new(
                    ts,
                    client,
                    server,
                    L4::Tcp {
                        seq: 1,
                        ack: 1,
                        flags: flags::ACK,
                    },
                    b"GET",
                    3,
                ),
                &mut sink,
            );
        }
        assert_eq!(d.counts().evicted_connections, 2);
        // Evicted: the two silent longest (15 and 14, the latest numbers), 15 first.
        let mut ids = sink.0.clone();
        ids.dedup();
        assert_eq!(ids, vec![15, 14]);
    }
}
