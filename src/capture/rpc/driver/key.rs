//! The connection table's keys: a connection's two ends in canonical order, as two words when both are
//! IPv4 ([`Key4`], hashed by one folded multiply) and as a wide key otherwise ([`WideKey`]).

use super::Segment;
use std::net::IpAddr;

/// A connection's two ends in canonical order (the `a` end the lower), its interface (0 unless keyed by
/// interface) and UDP or not. Both ends IPv4 on an interface below 2^31 (every file, every real interface
/// index) is a [`Key4`], two words in a map of its own; anything else a [`WideKey`]. (The lookup of two
/// words is inlined into [`Driver::segment`](super::Driver::segment); one map on this enum had an
/// out-of-line lookup of 71 instructions per packet: 2,428 -> 2,351 instructions per pgbench request inside
/// the analysis.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    /// Both ends IPv4.
    V4(Key4),
    /// An end IPv6, or an interface index from 2^31 on.
    Wide(WideKey),
}

/// Both ends IPv4: each end as address and port in 48 bits (ordered by address, then port, as
/// [`WideKey`] orders them). `lo`: `a` (bits 0..48) and the port of `b` (bits 48..64); `hi`: the address of
/// `b` (bits 32..64), UDP (bit 31) and the interface (bits 0..31).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key4 {
    lo: u64,
    hi: u64,
}

/// Any end IPv6: addresses as 128-bit numbers (IPv4 in the low 32 bits), the `a` end the lower
/// (IPv6?, address, port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WideKey {
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
pub(super) fn fx(h: u64, w: u64) -> u64 {
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
pub(super) struct Passthrough(u64);

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
    pub(super) fn of(s: &Segment<'_>, udp: bool, ifindex: u32) -> Option<(Key4, bool)> {
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
    pub(super) fn of(s: &Segment<'_>, udp: bool, ifindex: u32) -> (WideKey, bool) {
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
    pub(super) fn of(s: &Segment<'_>, udp: bool, ifindex: u32) -> (Key, bool) {
        match Key4::of(s, udp, ifindex) {
            Some((k, a)) => (Key::V4(k), a),
            None => {
                let (k, a) = WideKey::of(s, udp, ifindex);
                (Key::Wide(k), a)
            }
        }
    }

    pub(super) fn udp(&self) -> bool {
        match self {
            Key::V4(k) => k.hi & 1 << 31 != 0,
            Key::Wide(k) => k.flags & 1 != 0,
        }
    }
}
