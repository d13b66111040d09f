//! Tests of connection tracking: handshake, RTT, window, retransmission and reassembly rules against
//! hand-made packets.

use super::*;
use crate::capture::decode::{decode, tests::ipv4_tcp};
use crate::capture::read::LinkType;
use crate::stats::LatencyHistogram;
use rtt::FEW;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [10, 0, 0, 2];

struct Feed {
    tr: FlowTracker,
    infos: Vec<PacketInfo>,
}
impl Feed {
    fn new() -> Self {
        Feed {
            tr: FlowTracker::new(TrackerConfig::default()),
            infos: Vec::new(),
        }
    }
    fn pkt(
        &mut self,
        ts_us: i64,
        from_client: bool,
        seq: u32,
        ack: u32,
        fl: u8,
        len: usize,
    ) -> PacketInfo {
        self.pkt_with(ts_us, from_client, seq, ack, fl, &vec![b'x'; len], None)
    }
    #[allow(clippy::too_many_arguments)]
    fn pkt_with(
        &mut self,
        ts_us: i64,
        from_client: bool,
        seq: u32,
        ack: u32,
        fl: u8,
        payload: &[u8],
        sink: Option<&mut dyn StreamSink>,
    ) -> PacketInfo {
        let p = if from_client {
            ipv4_tcp(C, S, 40000, 80, seq, ack, fl, payload)
        } else {
            ipv4_tcp(S, C, 80, 40000, seq, ack, fl, payload)
        };
        let d = decode(LinkType::RAW, &p, p.len() as u32).unwrap();
        let i = self
            .tr
            .process_with(ts_us * 1000, p.len() as u32, &d, sink)
            .unwrap();
        self.infos.push(i);
        i
    }
}

const A: u8 = flags::ACK;
const PA: u8 = flags::ACK | flags::PSH;

#[test]
fn samples_match_the_histogram_few_or_many() {
    for n in [1usize, 7, FEW, FEW + 1, 5000] {
        let mut s = Samples::default();
        let mut h = LatencyHistogram::new();
        for i in 0..n as u64 {
            let v = 1000 + (i * 7919) % 100_000;
            s.record(v);
            h.record_ns(v);
        }
        let (a, b) = (s.summary(), h.summary());
        assert_eq!((a.count, a.min_ns, a.max_ns), (b.count, b.min_ns, b.max_ns));
        for (x, y) in [(a.p50_ns, b.p50_ns), (a.p99_ns, b.p99_ns)] {
            assert!(
                (x as f64 - y as f64).abs() <= y as f64 * 1e-3,
                "n={n}: {x} vs {y}"
            );
        }
        assert!((a.mean_ns - b.mean_ns).abs() < 1e-6 * b.mean_ns);
    }
}

#[test]
fn handshake_rtt_data_rtt_in_flight_and_retransmission() {
    let mut f = Feed::new();
    f.pkt(0, true, 1000, 0, flags::SYN, 0);
    f.pkt(10_000, false, 5000, 1001, flags::SYN | A, 0);
    f.pkt(10_100, true, 1001, 5001, A, 0);
    // Client sends 3 segments of 100 bytes; the server ACKs after the second and third.
    let i = f.pkt(11_000, true, 1001, 5001, PA, 100);
    assert_eq!((i.rel_seq, i.in_flight), (1, Some(100)));
    assert_eq!(
        f.pkt(11_001, true, 1101, 5001, PA, 100).in_flight,
        Some(200)
    );
    f.pkt(11_002, true, 1201, 5001, PA, 100);
    f.pkt(21_001, false, 5001, 1201, A, 0); // RTT 10 ms for the second segment
    // The third is retransmitted after its timeout, then ACKed: no RTT sample (Karn).
    let r = f.pkt(231_002, true, 1201, 5001, PA, 100);
    assert!(r.retransmission && !r.out_of_order);
    f.pkt(241_002, false, 5001, 1301, A, 0);
    // Two duplicate ACKs and a zero window.
    let d1 = f.pkt(241_100, false, 5001, 1301, A, 0);
    assert!(d1.dup_ack);
    let fin = f.pkt(250_000, true, 1301, 5001, flags::FIN | A, 0);
    assert_eq!(fin.rel_seq, 301);
    f.pkt(250_100, false, 5001, 1302, flags::FIN | A, 0);
    f.pkt(250_200, true, 1302, 5002, A, 0);
    let (flows, counters) = f.tr.finish_all(None);
    assert_eq!(flows.len(), 1);
    assert_eq!(counters.tcp_packets, 13);
    let s = &flows[0];
    assert_eq!(s.state, "closed");
    assert_eq!(s.client, "10.0.0.1:40000".parse().unwrap());
    let hs = s.handshake.unwrap();
    assert_eq!(hs.syn_to_synack_ns, 10_000_000);
    assert_eq!(hs.synack_to_ack_ns, Some(100_000));
    let c = &s.client_to_server;
    assert_eq!(c.payload_bytes, 400);
    assert_eq!(c.data_segments, 4);
    assert_eq!(c.retransmissions, 1);
    assert_eq!(c.in_flight_max_bytes, 300);
    // Samples: SYN -> SYN-ACK and the second data segment -> its ACK (10 ms), FIN -> ACK (100 us).
    assert_eq!(c.rtt.count, 3);
    assert_eq!((c.rtt.min_ns, c.rtt.max_ns), (100_000, 10_000_000));
    assert_eq!(s.server_to_client.rtt.count, 2);
    assert_eq!(s.server_to_client.dup_acks, 1);
    // Advancing ACKs from the server: SYN-ACK, 1201, 1301 and the FIN's 1302.
    assert_eq!(s.server_to_client.acks, 4);
    assert_eq!(c.segments_per_ack, Some(1.0));
    assert!(s.diagnosis.contains("retransmission"), "{}", s.diagnosis);
}

/// Wireshark 4.0 checks for a spurious retransmission before out-of-order: data the receiver has already
/// ACKed is a retransmission however soon it follows the highest segment (seen on loopback, where the
/// handshake RTT that bounds out-of-order is tens of microseconds).
#[test]
fn spurious_retransmission_beats_out_of_order() {
    let mut f = Feed::new();
    f.pkt(0, true, 1000, 0, flags::SYN, 0);
    f.pkt(1_000, false, 5000, 1001, flags::SYN | A, 0);
    f.pkt(2_000, true, 1001, 5001, A, 0); // handshake RTT 2 ms bounds out-of-order
    f.pkt(10_000, true, 1001, 5001, PA, 100);
    f.pkt(10_100, true, 1101, 5001, PA, 100);
    f.pkt(10_200, false, 5001, 1201, A, 0);
    // 0.2 ms after the highest segment, but already ACKed: spurious, so a retransmission.
    let r = f.pkt(10_300, true, 1001, 5001, PA, 100);
    assert!(r.retransmission && !r.out_of_order);
    // Not yet ACKed and soon after the highest: out of order.
    f.pkt(10_400, true, 1301, 5001, PA, 100);
    let o = f.pkt(10_500, true, 1201, 5001, PA, 100);
    assert!(o.out_of_order && !o.retransmission);
    // New data starting one byte below the highest sequence (after a zero-window probe) is neither.
    let n = f.pkt(20_000, true, 1400, 5001, PA, 100);
    assert!(!n.out_of_order && !n.retransmission);
    let (flows, _) = f.tr.finish_all(None);
    let c = &flows[0].client_to_server;
    assert_eq!((c.retransmissions, c.out_of_order), (1, 1));
}

#[test]
fn window_scaling_zero_window_and_receiver_limit() {
    let mut f = Feed::new();
    f.pkt(0, true, 0, 0, flags::SYN, 0); // wscale 7 from the fixture
    f.pkt(100, false, 0, 1, flags::SYN | A, 0);
    let i = f.pkt(200, true, 1, 1, A, 0);
    assert_eq!(i.window, 512 << 7);
    // The SYN-ACK's window is never scaled; the server's first ACK gives the real one.
    assert_eq!(f.pkt(250, false, 1, 1, A, 0).window, 512 << 7);
    // Server window is 512 << 7 = 65536: client fills it.
    let mut seq = 1u32;
    for k in 0..50 {
        let i = f.pkt(300 + k, true, seq, 1, PA, 1460);
        seq += 1460;
        assert!(i.in_flight.is_some());
    }
    let mut zw = ipv4_tcp(S, C, 80, 40000, 1, seq, A, b"");
    zw[20 + 14] = 0;
    zw[20 + 15] = 0;
    let d = decode(LinkType::RAW, &zw, zw.len() as u32).unwrap();
    let i = f.tr.process(1_000_000, zw.len() as u32, &d).unwrap();
    assert!(i.zero_window);
    assert_eq!(i.window, 0);
    let (flows, _) = f.tr.finish_all(None);
    let s = &flows[0];
    assert_eq!(s.server_to_client.zero_windows, 1);
    assert!(s.client_to_server.receiver_limited_segments > 0);
    assert!(s.client_to_server.sender_limited_segments > 0);
    assert!(s.diagnosis.contains("zero window"), "{}", s.diagnosis);
}

#[derive(Default)]
struct Collect {
    bytes: [Vec<u8>; 2],
    gaps: Vec<(Dir, u64, u64)>,
    finished: usize,
}
impl StreamSink for Collect {
    fn data(&mut self, _id: u64, dir: Dir, _ts: i64, offset: u64, data: &[u8]) {
        assert_eq!(
            offset as usize,
            self.bytes[dir.idx()].len()
                + self
                    .gaps
                    .iter()
                    .filter(|g| g.0 == dir)
                    .map(|g| g.2 as usize)
                    .sum::<usize>()
        );
        self.bytes[dir.idx()].extend_from_slice(data);
    }
    fn gap(&mut self, _id: u64, dir: Dir, offset: u64, len: u64) {
        self.gaps.push((dir, offset, len));
    }
    fn finished(&mut self, _s: &FlowSummary) {
        self.finished += 1;
    }
}

#[test]
fn stream_hook_reorders_and_trims_retransmissions() {
    let mut f = Feed::new();
    let mut c = Collect::default();
    f.pkt_with(0, true, 99, 0, flags::SYN, b"", Some(&mut c));
    f.pkt_with(1, false, 0, 100, flags::SYN | A, b"", Some(&mut c));
    f.pkt_with(2, true, 100, 1, PA, b"hello ", Some(&mut c));
    f.pkt_with(3, true, 112, 1, PA, b"world", Some(&mut c)); // ahead: held
    f.pkt_with(4, true, 106, 1, PA, b"there ", Some(&mut c)); // fills the hole
    f.pkt_with(5, true, 103, 1, PA, b"lo there", Some(&mut c)); // overlap: trimmed away
    f.pkt_with(6, false, 1, 117, PA, b"ok", Some(&mut c));
    let (_, _) = f.tr.finish_all(Some(&mut c));
    assert_eq!(c.bytes[0], b"hello there world");
    assert_eq!(c.bytes[1], b"ok");
    assert!(c.gaps.is_empty());
    assert_eq!(c.finished, 1);
}

#[test]
fn port_reuse_starts_a_new_connection_and_closed_flows_are_evicted() {
    let mut f = Feed::new();
    f.pkt(0, true, 0, 0, flags::SYN, 0);
    f.pkt(1, false, 0, 1, flags::SYN | A, 0);
    f.pkt(2, true, 1, 1, flags::RST, 0);
    assert_eq!(f.tr.open_flows(), 1);
    let i = f.pkt(10, true, 777, 0, flags::SYN, 0);
    assert_eq!(i.flow_id, 2);
    // Ten seconds later anything closed is gone from memory.
    f.pkt(20, false, 0, 778, flags::RST | A, 0);
    f.pkt(20_000_000, true, 778, 1, A, 0);
    assert_eq!(f.tr.open_flows(), 1);
    let (flows, _) = f.tr.finish_all(None);
    assert_eq!(flows.len(), 3);
    assert_eq!(flows[0].state, "reset_by_client");
    assert_eq!(flows[1].state, "reset_by_server");
    assert!(!flows[2].handshake_seen);
}
