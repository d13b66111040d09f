//! Fuzzes the packet decoder for every supported link type: the first byte picks the link type, the next
//! four give the on-wire length, the rest is the captured packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::capture::decode::decode;
use roundtrip::capture::read::LinkType;

const LINKS: [u16; 8] = [0, 1, 101, 108, 113, 228, 229, 276];

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let link = LinkType(LINKS[data[0] as usize % LINKS.len()]);
    let wire = u32::from_le_bytes([data[1], data[2], data[3], data[4]]);
    let pkt = &data[5..];
    if let Ok(d) = decode(link, pkt, wire) {
        assert!(d.payload.len() <= pkt.len());
        assert!(d.payload.len() as u64 <= d.payload_len as u64);
    }
});
