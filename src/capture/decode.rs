//! Packet decoding: link layer (Ethernet with VLAN/QinQ tags, Linux cooked v1/v2, raw IP, BSD null/loopback),
//! IPv4, IPv6 (with extension headers), TCP (with options) and UDP.
//!
//! Decoding never allocates and never fails loudly: a packet is decoded as far as its captured bytes go.
//! Lengths come from the IP header, not from the captured bytes, so snaplen-cut packets (`tcpdump -s 96`)
//! still give correct payload lengths as long as the headers themselves were captured.
#![forbid(unsafe_code)]

use super::read::LinkType;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// TCP flag bits.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
    /// ECE.
    pub const ECE: u8 = 0x40;
    /// CWR.
    pub const CWR: u8 = 0x80;
}

/// Flags in tcpdump's notation (`S.`, `P.`, `F.`, `R`, ...).
pub fn flags_text(f: u8) -> String {
    let mut s = String::with_capacity(6);
    for (bit, c) in [
        (flags::SYN, 'S'),
        (flags::FIN, 'F'),
        (flags::PSH, 'P'),
        (flags::RST, 'R'),
        (flags::URG, 'U'),
        (flags::ECE, 'E'),
        (flags::CWR, 'W'),
    ] {
        if f & bit != 0 {
            s.push(c);
        }
    }
    if f & flags::ACK != 0 {
        s.push('.');
    }
    if s.is_empty() {
        s.push_str("none");
    }
    s
}

/// A TCP segment's header fields and options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tcp {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (meaningful when ACK is set).
    pub ack: u32,
    /// Flag bits ([`flags`]).
    pub flags: u8,
    /// Window field as sent (unscaled).
    pub window: u16,
    /// TCP header length in bytes.
    pub header_len: u16,
    /// MSS option.
    pub mss: Option<u16>,
    /// Window scale option (shift count).
    pub wscale: Option<u8>,
    /// SACK permitted option.
    pub sack_permitted: bool,
    /// Number of SACK blocks, and the blocks (left, right edges).
    pub sack_count: u8,
    /// SACK blocks; the first `sack_count` are valid.
    pub sack: [(u32, u32); 4],
    /// Timestamps option (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
}

/// A UDP datagram's header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Udp {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

/// The transport layer of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TCP.
    Tcp(Tcp),
    /// UDP.
    Udp(Udp),
    /// Another IP protocol (number), or a non-first fragment, or a transport header cut by the snaplen.
    Other(u8),
}

/// A decoded IP packet. Addresses are kept as 16 bytes (IPv4 in the first 4) to stay `Copy` and cheap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// 4 or 6.
    pub ip_version: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// The transport header.
    pub transport: Transport,
    /// Transport payload length taken from the IP header (correct even when the capture was cut).
    pub payload_len: u32,
    /// The part of the payload that was captured (may be shorter than `payload_len`).
    pub payload: &'a [u8],
    /// Number of VLAN tags removed.
    pub vlan_tags: u8,
    /// Linux cooked packet type (0 to us, 4 outgoing, ...), when the link type has one.
    pub sll_pkttype: Option<u8>,
}

impl Decoded<'_> {
    /// The TCP header, when this is TCP.
    pub fn tcp(&self) -> Option<&Tcp> {
        match &self.transport {
            Transport::Tcp(t) => Some(t),
            _ => None,
        }
    }
    /// Source and destination ports of TCP or UDP.
    pub fn ports(&self) -> Option<(u16, u16)> {
        match self.transport {
            Transport::Tcp(t) => Some((t.src_port, t.dst_port)),
            Transport::Udp(u) => Some((u.src_port, u.dst_port)),
            Transport::Other(_) => None,
        }
    }
}

/// Why a packet could not be decoded down to IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotIp {
    /// The link type is not supported.
    UnsupportedLink(LinkType),
    /// Not IPv4 or IPv6 (ARP, LLDP, ...): the EtherType or address family.
    OtherProtocol(u32),
    /// The headers were cut (by the snaplen or corruption) before the IP addresses.
    Truncated,
    /// The IP header is invalid.
    BadIp,
}

impl fmt::Display for NotIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotIp::UnsupportedLink(l) => write!(f, "unsupported link type {l}"),
            NotIp::OtherProtocol(p) => write!(f, "not IP (protocol {p:#06x})"),
            NotIp::Truncated => f.write_str("headers cut short"),
            NotIp::BadIp => f.write_str("invalid IP header"),
        }
    }
}

#[inline]
fn be16(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

#[inline]
fn be32(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *b.get(i)?,
        *b.get(i + 1)?,
        *b.get(i + 2)?,
        *b.get(i + 3)?,
    ]))
}

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;

/// Which TCP options the decoder parses. Parsing them is a loop over up to 40 bytes per segment; an analysis
/// that never reads them (request/response matching) or reads them only on SYNs (MSS and window scale, for
/// the flow table) skips that work. Options not parsed are left at their defaults (`None`, 0, `false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TcpOptions {
    /// Every option of every segment (the default).
    #[default]
    All,
    /// Only on segments with SYN set; other segments' options are left empty.
    SynOnly,
    /// None: every segment's options are left empty.
    Skip,
}

/// Decodes one packet of link type `link`. `orig_len` is the on-wire length (used when an IPv4 header says
/// length 0, as TSO captures do).
#[inline]
pub fn decode(link: LinkType, data: &[u8], orig_len: u32) -> Result<Decoded<'_>, NotIp> {
    let mut slot = None;
    decode_into(link, data, orig_len, TcpOptions::All, &mut slot).map(|d| *d)
}

/// [`decode`] with the TCP options `opts` says, written into the caller's `slot` (left as it was on `Err`)
/// and inlined into the caller (the per-packet loop of [`crate::capture::Packets`]). The 136-byte
/// [`Decoded`] is built once, where it is read: returned by value it was moved through `Result`, `Option`
/// and the packet event, about 60 instructions per packet of a `capture rpc` run.
#[inline(always)]
pub(crate) fn decode_into<'a, 's>(
    link: LinkType,
    data: &'a [u8],
    orig_len: u32,
    opts: TcpOptions,
    slot: &'s mut Option<Decoded<'a>>,
) -> Result<&'s mut Decoded<'a>, NotIp> {
    let mut vlan_tags = 0u8;
    let mut sll_pkttype = None;
    // Ethernet (files, and live on most interfaces, loopback included) is tested first: in the `match` it
    // went through a tree of comparisons.
    let (ethertype, off) = if link == LinkType::ETHERNET {
        let mut et = be16(data, 12).ok_or(NotIp::Truncated)?;
        let mut off = 14;
        while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
            et = be16(data, off + 2).ok_or(NotIp::Truncated)?;
            off += 4;
            vlan_tags = vlan_tags.saturating_add(1);
        }
        (et, off)
    } else {
        link_header(link, data, &mut sll_pkttype)?
    };
    let ip = data.get(off..).ok_or(NotIp::Truncated)?;
    let link_len = off as u32;
    let d = match ethertype {
        ETH_IPV4 => decode_ipv4(ip, orig_len.saturating_sub(link_len), opts, slot)?,
        ETH_IPV6 => decode_ipv6(ip, orig_len.saturating_sub(link_len), opts, slot)?,
        other => return Err(NotIp::OtherProtocol(other as u32)),
    };
    d.vlan_tags = vlan_tags;
    d.sll_pkttype = sll_pkttype;
    Ok(d)
}

/// The EtherType and length of a link header other than Ethernet's, and the Linux cooked packet type.
#[inline(always)]
fn link_header(
    link: LinkType,
    data: &[u8],
    sll_pkttype: &mut Option<u8>,
) -> Result<(u16, usize), NotIp> {
    Ok(match link {
        LinkType::LINUX_SLL => {
            *sll_pkttype = data.get(1).copied();
            (be16(data, 14).ok_or(NotIp::Truncated)?, 16)
        }
        LinkType::LINUX_SLL2 => {
            *sll_pkttype = data.get(10).copied();
            (be16(data, 0).ok_or(NotIp::Truncated)?, 20)
        }
        LinkType::NULL | LinkType::LOOP => {
            let b = data.get(..4).ok_or(NotIp::Truncated)?;
            let fam_le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let fam_be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            // The family is in the capturing host's byte order: take whichever reading is small.
            let fam = if link == LinkType::LOOP || fam_le > 0xffff {
                fam_be
            } else {
                fam_le
            };
            let et = match fam {
                2 => ETH_IPV4,
                10 | 24 | 28 | 30 => ETH_IPV6,
                other => return Err(NotIp::OtherProtocol(other)),
            };
            (et, 4)
        }
        LinkType::RAW => (ip_ethertype(data.first().copied())?, 0),
        LinkType::IPV4 => (ETH_IPV4, 0),
        LinkType::IPV6 => (ETH_IPV6, 0),
        other => return Err(NotIp::UnsupportedLink(other)),
    })
}

fn ip_ethertype(first: Option<u8>) -> Result<u16, NotIp> {
    match first.ok_or(NotIp::Truncated)? >> 4 {
        4 => Ok(ETH_IPV4),
        6 => Ok(ETH_IPV6),
        _ => Err(NotIp::BadIp),
    }
}

#[inline(always)]
fn decode_ipv4<'a, 's>(
    ip: &'a [u8],
    wire_len: u32,
    opts: TcpOptions,
    slot: &'s mut Option<Decoded<'a>>,
) -> Result<&'s mut Decoded<'a>, NotIp> {
    let b0 = *ip.first().ok_or(NotIp::Truncated)?;
    if b0 >> 4 != 4 {
        return Err(NotIp::BadIp);
    }
    let ihl = ((b0 & 0x0f) as usize) * 4;
    if ihl < 20 {
        return Err(NotIp::BadIp);
    }
    if ip.len() < 20 {
        return Err(NotIp::Truncated);
    }
    let mut total = be16(ip, 2).ok_or(NotIp::Truncated)? as u32;
    if total == 0 {
        total = wire_len; // TSO: the stack leaves the length to the NIC
    }
    if total < ihl as u32 {
        return Err(NotIp::BadIp);
    }
    let frag = be16(ip, 6).ok_or(NotIp::Truncated)?;
    let proto = ip[9];
    let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
    let l4_len = total - ihl as u32;
    let first_fragment = frag & 0x1fff == 0;
    let l4 = ip.get(ihl..).unwrap_or(&[]);
    let d = slot.insert(Decoded {
        ip_version: 4,
        src,
        dst,
        transport: Transport::Other(proto),
        payload_len: l4_len,
        payload: &[],
        vlan_tags: 0,
        sll_pkttype: None,
    });
    if first_fragment {
        decode_l4(d, proto, l4, l4_len, opts);
    }
    Ok(d)
}

fn decode_ipv6<'a, 's>(
    ip: &'a [u8],
    wire_len: u32,
    opts: TcpOptions,
    slot: &'s mut Option<Decoded<'a>>,
) -> Result<&'s mut Decoded<'a>, NotIp> {
    let b0 = *ip.first().ok_or(NotIp::Truncated)?;
    if b0 >> 4 != 6 {
        return Err(NotIp::BadIp);
    }
    if ip.len() < 40 {
        return Err(NotIp::Truncated);
    }
    let mut plen = be16(ip, 4).ok_or(NotIp::Truncated)? as u32;
    if plen == 0 {
        plen = wire_len.saturating_sub(40); // jumbogram or TSO
    }
    let mut next = ip[6];
    let mut a = [0u8; 16];
    a.copy_from_slice(&ip[8..24]);
    let src = IpAddr::V6(Ipv6Addr::from(a));
    a.copy_from_slice(&ip[24..40]);
    let dst = IpAddr::V6(Ipv6Addr::from(a));
    let mut off = 40usize;
    let mut remaining = plen;
    let mut fragmented_tail = false;
    // Extension headers: hop-by-hop, routing, fragment, destination options, AH, mobility, HIP, shim6.
    let mut guard = 0;
    loop {
        guard += 1;
        if guard > 16 {
            break;
        }
        let hlen = match next {
            0 | 43 | 60 | 135 | 139 | 140 => {
                let Some(&l) = ip.get(off + 1) else {
                    return Ok(slot.insert(v6(src, dst, Transport::Other(next), remaining)));
                };
                (l as u32 + 1) * 8
            }
            44 => {
                if let Some(fo) = be16(ip, off + 2)
                    && fo & 0xfff8 != 0
                {
                    fragmented_tail = true;
                }
                8
            }
            51 => {
                let Some(&l) = ip.get(off + 1) else {
                    return Ok(slot.insert(v6(src, dst, Transport::Other(next), remaining)));
                };
                (l as u32 + 2) * 4
            }
            _ => break,
        };
        let Some(&n) = ip.get(off) else {
            return Ok(slot.insert(v6(src, dst, Transport::Other(next), remaining)));
        };
        next = n;
        off += hlen as usize;
        remaining = remaining.saturating_sub(hlen);
        if fragmented_tail {
            return Ok(slot.insert(v6(src, dst, Transport::Other(next), remaining)));
        }
    }
    let l4 = ip.get(off..).unwrap_or(&[]);
    let d = slot.insert(v6(src, dst, Transport::Other(next), remaining));
    decode_l4(d, next, l4, remaining, opts);
    Ok(d)
}

fn v6<'a>(src: IpAddr, dst: IpAddr, transport: Transport, payload_len: u32) -> Decoded<'a> {
    Decoded {
        ip_version: 6,
        src,
        dst,
        transport,
        payload_len,
        payload: &[],
        vlan_tags: 0,
        sll_pkttype: None,
    }
}

/// Decodes TCP or UDP from `l4` (captured bytes) into `d`, whose transport the caller set to
/// `Transport::Other(proto)` with `l4_len` (the length the IP header gives) and no payload: left so when `l4`
/// holds no valid TCP/UDP header. Written in place: the 72-byte TCP header is not moved through return values.
#[inline]
fn decode_l4<'a>(d: &mut Decoded<'a>, proto: u8, l4: &'a [u8], l4_len: u32, opts: TcpOptions) {
    match proto {
        6 => {
            let Some((h, header_len)) = tcp_header(l4) else {
                return;
            };
            let plen = l4_len.saturating_sub(u32::from(header_len));
            let start = usize::from(header_len).min(l4.len());
            let end = (usize::from(header_len) + plen as usize).min(l4.len());
            d.payload_len = plen;
            d.payload = &l4[start..end.max(start)];
            d.transport = Transport::Tcp(tcp_fixed(h, header_len));
            // Options last: the call that parses them is then a tail call, and the usual segment (options
            // skipped, or none) saves no registers around it.
            if let Transport::Tcp(t) = &mut d.transport {
                fill_options(t, l4, header_len, opts);
            }
        }
        17 => {
            if let (Some(s), Some(p)) = (be16(l4, 0), be16(l4, 2))
                && l4.len() >= 8
            {
                let plen = l4_len.saturating_sub(8);
                let end = (8 + plen as usize).min(l4.len());
                d.transport = Transport::Udp(Udp {
                    src_port: s,
                    dst_port: p,
                });
                d.payload_len = plen;
                d.payload = &l4[8..end];
            }
        }
        _ => {}
    }
}

/// Decodes a TCP header and its options; `None` when the fixed header was not captured or is invalid.
pub fn decode_tcp(b: &[u8]) -> Option<Tcp> {
    let (h, header_len) = tcp_header(b)?;
    let mut t = tcp_fixed(h, header_len);
    fill_options(&mut t, b, header_len, TcpOptions::All);
    Some(t)
}

/// The TCP header's fixed part and its length, when that part was captured and the length is valid.
#[inline(always)]
fn tcp_header(b: &[u8]) -> Option<(&[u8; 20], u16)> {
    let h: &[u8; 20] = b.get(..20)?.try_into().ok()?;
    let header_len = u16::from(h[12] >> 4) * 4;
    (header_len >= 20).then_some((h, header_len))
}

/// The fields of the fixed TCP header `h` ([`tcp_header`] gave `header_len`), options left empty: one
/// literal, so the 72-byte [`Tcp`] is written once (not defaulted, then filled).
#[inline(always)]
fn tcp_fixed(h: &[u8; 20], header_len: u16) -> Tcp {
    Tcp {
        src_port: u16::from_be_bytes([h[0], h[1]]),
        dst_port: u16::from_be_bytes([h[2], h[3]]),
        seq: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
        ack: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
        flags: h[13],
        window: u16::from_be_bytes([h[14], h[15]]),
        header_len,
        mss: None,
        wscale: None,
        sack_permitted: false,
        sack_count: 0,
        sack: [(0, 0); 4],
        timestamps: None,
    }
}

/// Fills `t`'s options from the TCP header `b` (of `header_len` bytes), as far as `opts` says.
#[inline(always)]
fn fill_options(t: &mut Tcp, b: &[u8], header_len: u16, opts: TcpOptions) {
    let parse = match opts {
        TcpOptions::All => true,
        TcpOptions::SynOnly => t.flags & flags::SYN != 0,
        TcpOptions::Skip => false,
    };
    if parse && header_len > 20 {
        parse_options(t, &b[20..(header_len as usize).min(b.len())]);
    }
}

/// Fills `t`'s option fields from `opts` (the options as far as they were captured).
fn parse_options(t: &mut Tcp, opts: &[u8]) {
    let mut i = 0;
    while i < opts.len() {
        let kind = opts[i];
        match kind {
            0 => break,
            1 => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let Some(&len) = opts.get(i + 1) else { break };
        let len = len as usize;
        if len < 2 || i + len > opts.len() {
            break;
        }
        let v = &opts[i + 2..i + len];
        match (kind, len) {
            (2, 4) => t.mss = be16(v, 0),
            (3, 3) => t.wscale = Some(v[0]),
            (4, 2) => t.sack_permitted = true,
            (5, _) => {
                let mut n = 0;
                for blk in v.chunks_exact(8).take(4) {
                    if let (Some(l), Some(r)) = (be32(blk, 0), be32(blk, 4)) {
                        t.sack[n] = (l, r);
                        n += 1;
                    }
                }
                t.sack_count = n as u8;
            }
            (8, 10) => t.timestamps = be32(v, 0).zip(be32(v, 4)),
            _ => {}
        }
        i += len;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 + TCP packet with options (MSS, SACK permitted, timestamps, window scale on SYNs).
    #[allow(clippy::too_many_arguments)]
    pub fn ipv4_tcp(
        src: [u8; 4],
        dst: [u8; 4],
        sp: u16,
        dp: u16,
        seq: u32,
        ack: u32,
        fl: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        let opts: &[u8] = if fl & flags::SYN != 0 {
            &[
                2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
            ]
        } else {
            &[1, 1, 8, 10, 0, 0, 0, 2, 0, 0, 0, 1]
        };
        let thl = 20 + opts.len();
        let total = 20 + thl + payload.len();
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ];
        p.extend(src);
        p.extend(dst);
        p.extend(sp.to_be_bytes());
        p.extend(dp.to_be_bytes());
        p.extend(seq.to_be_bytes());
        p.extend(ack.to_be_bytes());
        p.push(((thl / 4) as u8) << 4);
        p.push(fl);
        p.extend(512u16.to_be_bytes());
        p.extend([0, 0, 0, 0]);
        p.extend(opts);
        p.extend(payload);
        p
    }

    /// An IPv6 + hop-by-hop + TCP packet.
    pub fn ipv6_tcp(sp: u16, dp: u16, seq: u32, fl: u8, payload: &[u8]) -> Vec<u8> {
        let mut tcp = Vec::new();
        tcp.extend(sp.to_be_bytes());
        tcp.extend(dp.to_be_bytes());
        tcp.extend(seq.to_be_bytes());
        tcp.extend(0u32.to_be_bytes());
        tcp.extend([0x50, fl, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend(payload);
        let hbh = [6u8, 0, 1, 4, 0, 0, 0, 0]; // next = TCP, len 0 (8 bytes), PadN
        let plen = (hbh.len() + tcp.len()) as u16;
        let mut p = vec![0x60, 0, 0, 0];
        p.extend(plen.to_be_bytes());
        p.extend([0u8, 64]); // next header = hop-by-hop
        p.extend(Ipv6Addr::LOCALHOST.octets());
        p.extend("::2".parse::<Ipv6Addr>().unwrap().octets());
        p.extend(hbh);
        p.extend(tcp);
        p
    }

    fn eth(et: u16, vlans: usize, ip: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        for _ in 0..vlans {
            p.extend([0x81, 0x00, 0x00, 0x05]);
        }
        p.extend(et.to_be_bytes());
        p.extend(ip);
        p
    }

    #[test]
    fn ethernet_vlan_qinq_ipv4_tcp_options() {
        let ip = ipv4_tcp(
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            40000,
            80,
            1000,
            0,
            flags::SYN,
            b"",
        );
        for vlans in 0..3 {
            let p = eth(0x0800, vlans, &ip);
            let d = decode(LinkType::ETHERNET, &p, p.len() as u32).unwrap();
            assert_eq!(d.vlan_tags as usize, vlans);
            assert_eq!(d.src, "10.0.0.1".parse::<IpAddr>().unwrap());
            let t = d.tcp().unwrap();
            assert_eq!((t.src_port, t.dst_port, t.seq), (40000, 80, 1000));
            assert_eq!(t.mss, Some(1460));
            assert_eq!(t.wscale, Some(7));
            assert!(t.sack_permitted);
            assert_eq!(t.timestamps, Some((1, 0)));
            assert_eq!(d.payload_len, 0);
        }
    }

    #[test]
    fn snaplen_cut_keeps_ip_lengths() {
        let ip = ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            2,
            5,
            6,
            flags::ACK | flags::PSH,
            &[9u8; 1400],
        );
        let p = eth(0x0800, 0, &ip);
        let cut = &p[..96];
        let d = decode(LinkType::ETHERNET, cut, p.len() as u32).unwrap();
        assert_eq!(d.payload_len, 1400);
        assert_eq!(d.payload.len(), 96 - 14 - 20 - 32);
        assert_eq!(d.tcp().unwrap().timestamps, Some((2, 1)));
        // Cut inside the TCP header: IP is still decoded, transport is "other".
        let d = decode(LinkType::ETHERNET, &p[..40], p.len() as u32).unwrap();
        assert_eq!(d.transport, Transport::Other(6));
        // Cut inside the IP header.
        assert_eq!(
            decode(LinkType::ETHERNET, &p[..20], 1000),
            Err(NotIp::Truncated)
        );
    }

    #[test]
    fn sll_v1_v2_null_both_orders_raw() {
        let ip = ipv4_tcp(
            [127, 0, 0, 1],
            [127, 0, 0, 1],
            5,
            6,
            0,
            0,
            flags::ACK,
            b"hi",
        );
        let mut sll = vec![0, 4, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00];
        sll.extend(&ip);
        let d = decode(LinkType::LINUX_SLL, &sll, sll.len() as u32).unwrap();
        assert_eq!((d.payload, d.sll_pkttype), (&b"hi"[..], Some(4)));
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        sll2.extend(&ip);
        let d = decode(LinkType::LINUX_SLL2, &sll2, sll2.len() as u32).unwrap();
        assert_eq!((d.payload, d.sll_pkttype), (&b"hi"[..], Some(0)));
        let v6 = ipv6_tcp(6379, 50000, 7, flags::ACK, b"+OK\r\n");
        for fam in [[2u8, 0, 0, 0], [0, 0, 0, 2]] {
            let mut p = fam.to_vec();
            p.extend(&ip);
            assert_eq!(
                decode(LinkType::NULL, &p, p.len() as u32)
                    .unwrap()
                    .ip_version,
                4
            );
        }
        for fam in [[30u8, 0, 0, 0], [0, 0, 0, 30], [24, 0, 0, 0], [0, 0, 0, 28]] {
            let mut p = fam.to_vec();
            p.extend(&v6);
            let d = decode(LinkType::NULL, &p, p.len() as u32).unwrap();
            assert_eq!(d.ip_version, 6);
            assert_eq!(d.payload, b"+OK\r\n");
            assert_eq!(d.tcp().unwrap().src_port, 6379);
        }
        assert_eq!(
            decode(LinkType::RAW, &v6, v6.len() as u32)
                .unwrap()
                .payload_len,
            5
        );
        assert_eq!(
            decode(LinkType::RAW, &ip, ip.len() as u32)
                .unwrap()
                .payload_len,
            2
        );
        let arp = eth(0x0806, 0, &[0; 28]);
        assert_eq!(
            decode(LinkType::ETHERNET, &arp, 42),
            Err(NotIp::OtherProtocol(0x0806))
        );
        assert!(matches!(
            decode(LinkType(147), &arp, 42),
            Err(NotIp::UnsupportedLink(_))
        ));
    }

    #[test]
    fn ipv4_tso_zero_length_and_fragments() {
        let mut ip = ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            1,
            2,
            5,
            6,
            flags::ACK,
            &[0u8; 100],
        );
        ip[2] = 0;
        ip[3] = 0;
        let d = decode(LinkType::RAW, &ip, ip.len() as u32).unwrap();
        assert_eq!(d.payload_len, 100);
        ip[2] = 0;
        ip[3] = 152;
        ip[6] = 0x00;
        ip[7] = 0x10; // fragment offset 16
        let d = decode(LinkType::RAW, &ip, ip.len() as u32).unwrap();
        assert_eq!(d.transport, Transport::Other(6));
    }

    #[test]
    fn flags_text_is_tcpdump_style() {
        assert_eq!(flags_text(flags::SYN), "S");
        assert_eq!(flags_text(flags::SYN | flags::ACK), "S.");
        assert_eq!(flags_text(flags::PSH | flags::ACK), "P.");
        assert_eq!(flags_text(flags::FIN | flags::ACK), "F.");
        assert_eq!(flags_text(flags::RST), "R");
    }
}
