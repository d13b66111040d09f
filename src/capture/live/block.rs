//! Reading packets out of one TPACKET_V3 block (bytes the kernel handed to user space), safely.
//!
//! Layouts (linux/if_packet.h): the block starts with `tpacket_block_desc` (`block_status` at byte 8, `num_pkts` at 12,
//! `offset_to_first_pkt` at 16); each packet starts with `tpacket3_hdr` (`tp_next_offset` 0, `tp_sec` 4,
//! `tp_nsec` 8, `tp_snaplen` 12, `tp_len` 16, `tp_mac` 24), followed at byte 48 by `sockaddr_ll`
//! (`sll_protocol` 2, `sll_ifindex` 4, `sll_hatype` 8, `sll_pkttype` 10). Every offset is checked against the
//! block: a malformed block ends the block, it never panics.
#![forbid(unsafe_code)]

/// One packet's header fields and where its bytes are in the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHdr {
    /// Offset of the next packet's header from this one's (0: none).
    pub next_offset: u32,
    /// Kernel timestamp, nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// Bytes captured.
    pub snaplen: u32,
    /// Length on the wire.
    pub len: u32,
    /// Start of the captured bytes, from the start of the block.
    pub data_at: usize,
    /// `sll_protocol` (host order): the EtherType.
    pub protocol: u16,
    /// `sll_ifindex`.
    pub ifindex: i32,
    /// `sll_hatype` (ARPHRD_*).
    pub hatype: u16,
    /// `sll_pkttype` (PACKET_HOST, PACKET_OUTGOING, ...).
    pub pkttype: u8,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The block's status word (`hdr.block_status`, byte 8): `TP_STATUS_USER`, and `TP_STATUS_BLK_TMO` when the
/// retire timer handed the block over before it was full.
pub fn block_status(b: &[u8]) -> Option<u32> {
    u32_at(b, 8)
}

/// (packets in the block, offset of the first).
pub fn block_header(b: &[u8]) -> Option<(u32, usize)> {
    Some((u32_at(b, 12)?, u32_at(b, 16)? as usize))
}

/// Bytes of `tpacket3_hdr` and the `sockaddr_ll` fields read from it (up to `sll_pkttype`).
const HDR: usize = 48 + 11;

/// The packet header at `at`, when it and its data lie inside the block. One bounds check for the header
/// (the fields are read from a fixed-size array) and one for the data: this runs for every packet.
#[inline]
pub fn frame(b: &[u8], at: usize) -> Option<FrameHdr> {
    let h: &[u8; HDR] = b.get(at..at.checked_add(HDR)?)?.try_into().ok()?;
    let u32_ne = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u16_ne = |i: usize| u16::from_ne_bytes([h[i], h[i + 1]]);
    let snaplen = u32_ne(12);
    let data_at = at.checked_add(usize::from(u16_ne(24)))?;
    if data_at.checked_add(snaplen as usize)? > b.len() {
        return None;
    }
    let sll = 48;
    Some(FrameHdr {
        next_offset: u32_ne(0),
        ts_ns: i64::from(u32_ne(4)) * 1_000_000_000 + i64::from(u32_ne(8)),
        snaplen,
        len: u32_ne(16),
        data_at,
        protocol: u16::from_be_bytes([h[sll + 2], h[sll + 3]]),
        ifindex: u32_ne(sll + 4) as i32,
        hatype: u16_ne(sll + 8),
        pkttype: h[sll + 10],
    })
}

/// The Linux cooked v2 header (LINKTYPE_LINUX_SLL2, 20 bytes) libpcap writes for `any`: protocol, interface
/// index, ARPHRD type, packet type; the link address is left empty (SOCK_DGRAM does not give it in the ring).
pub fn sll2_header(h: &FrameHdr) -> [u8; 20] {
    let mut o = [0u8; 20];
    o[0..2].copy_from_slice(&h.protocol.to_be_bytes());
    o[4..8].copy_from_slice(&(h.ifindex as u32).to_be_bytes());
    o[8..10].copy_from_slice(&h.hatype.to_be_bytes());
    o[10] = h.pkttype;
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_with(pkts: &[&[u8]]) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[12..16].copy_from_slice(&(pkts.len() as u32).to_ne_bytes());
        b[16..20].copy_from_slice(&48u32.to_ne_bytes());
        let mut at = 48;
        for (i, p) in pkts.iter().enumerate() {
            let mac = 48 + 20 + 2;
            let next = if i + 1 == pkts.len() {
                0
            } else {
                ((mac + p.len() + 15) & !15) as u32
            };
            b[at..at + 4].copy_from_slice(&next.to_ne_bytes());
            b[at + 4..at + 8].copy_from_slice(&7u32.to_ne_bytes());
            b[at + 8..at + 12].copy_from_slice(&5u32.to_ne_bytes());
            b[at + 12..at + 16].copy_from_slice(&(p.len() as u32).to_ne_bytes());
            b[at + 16..at + 20].copy_from_slice(&(p.len() as u32 + 10).to_ne_bytes());
            b[at + 24..at + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
            b[at + 48 + 2..at + 48 + 4].copy_from_slice(&0x0800u16.to_be_bytes());
            b[at + 48 + 4..at + 48 + 8].copy_from_slice(&3i32.to_ne_bytes());
            b[at + 48 + 10] = 4;
            b[at + mac..at + mac + p.len()].copy_from_slice(p);
            at += next as usize;
        }
        b
    }

    #[test]
    fn frames_are_read_and_bounded() {
        let b = block_with(&[b"hello", b"world!"]);
        let (n, first) = block_header(&b).unwrap();
        assert_eq!((n, first), (2, 48));
        let f = frame(&b, first).unwrap();
        assert_eq!(f.ts_ns, 7_000_000_005);
        assert_eq!(&b[f.data_at..f.data_at + f.snaplen as usize], b"hello");
        assert_eq!(
            (f.len, f.protocol, f.ifindex, f.pkttype),
            (15, 0x0800, 3, 4)
        );
        let g = frame(&b, first + f.next_offset as usize).unwrap();
        assert_eq!(&b[g.data_at..g.data_at + g.snaplen as usize], b"world!");
        let h = sll2_header(&g);
        assert_eq!(&h[0..2], &[8, 0]);
        assert_eq!(&h[4..8], &[0, 0, 0, 3]);
        // Headers pointing outside the block give None, never a panic.
        assert!(frame(&b, 4090).is_none());
        let mut bad = b.clone();
        bad[48 + 12..48 + 16].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(frame(&bad, 48).is_none());
        assert!(block_header(&b[..10]).is_none());
    }
}
