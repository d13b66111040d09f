//! Fuzzes the capture rpc driver (TCP reassembly, roles, protocol detection) with arbitrary decoded packets.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtrip::capture::rpc::driver::{Driver, L4, ProtoChoice, Segment};
use roundtrip::capture::rpc::stats::Collect;
use std::net::SocketAddr;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let ports = [2049u16, 5432, 3306, 6379, 53, 80, 1521, 40000, 40001];
    let mut d = Driver::new(ProtoChoice::Auto);
    let mut sink = Collect::default();
    let mut rest = data;
    let mut t = 0u64;
    while rest.len() >= 8 {
        let (h, tail) = rest.split_at(8);
        let len = (h[7] as usize).min(tail.len());
        let (payload, tail) = tail.split_at(len);
        t += h[6] as u64;
        let a: SocketAddr = ([10, 0, 0, 1 + (h[0] & 1)], ports[h[1] as usize % ports.len()]).into();
        let b: SocketAddr = ([10, 0, 0, 2 - (h[0] & 1)], ports[h[2] as usize % ports.len()]).into();
        let l4 = if h[0] & 2 != 0 {
            L4::Udp
        } else {
            L4::Tcp {
                seq: u32::from_le_bytes([h[3], h[4], 0, 0]) << 8,
                ack: u32::from_le_bytes([h[4], h[5], 0, 0]) << 8,
                flags: h[5],
            }
        };
        let wire = len as u32 + (h[0] >> 4) as u32 * 50;
        d.segment(
            &Segment::new(Duration::from_micros(t), a, b, l4, payload, wire),
            &mut sink,
        );
        rest = tail;
    }
    d.finish(&mut sink);
});
