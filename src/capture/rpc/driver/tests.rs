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
                let (sa, sb): (SocketAddr, SocketAddr) = (a.parse().unwrap(), b.parse().unwrap());
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
