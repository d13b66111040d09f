use super::decode::decode;
use super::flows::{FlowTracker, TrackerConfig};
use super::read::CaptureReader;
use super::*;

#[test]
fn filter_syntax() {
    let (a, b) = Filter::parse_flow("10.0.0.1:40000-10.0.0.2:80").unwrap();
    assert_eq!(a, "10.0.0.1:40000".parse().unwrap());
    assert_eq!(b.port(), 80);
    let (a, _) = Filter::parse_flow("[::1]:5201,[::1]:40000").unwrap();
    assert_eq!(a.port(), 5201);
    assert!(Filter::parse_flow("[::1]:5201-[::2]:1").is_ok());
    assert!(matches!(
        Filter::parse_flow("10.0.0.1:0-10.0.0.2:80"),
        Err(FilterError::FlowEndpoints(_, _))
    ));
    assert!(matches!(
        Filter::parse_flow("10.0.0.1:80,10.0.0.1:80"),
        Err(FilterError::FlowEndpoints(_, _))
    ));
    assert!(matches!(
        Filter::parse_flow("10.0.0.1-10.0.0.2"),
        Err(FilterError::Flow(_))
    ));
    assert!(Filter::parse_host("::1").is_ok());
    assert!(Filter::parse_host("[::1]").is_ok());
    assert!(matches!(
        Filter::parse_host("localhost"),
        Err(FilterError::Host(_))
    ));
}

#[test]
fn filter_matches_either_direction() {
    use decode::tests::ipv4_tcp;
    let p = ipv4_tcp(
        [1, 1, 1, 1],
        [2, 2, 2, 2],
        40000,
        80,
        0,
        0,
        decode::flags::ACK,
        b"",
    );
    let d = decode(read::LinkType::RAW, &p, p.len() as u32).unwrap();
    let f = |host: Option<&str>, port: Option<u16>, flow: Option<&str>| Filter {
        host: host.map(|h| Filter::parse_host(h).unwrap()),
        port,
        flow: flow.map(|x| Filter::parse_flow(x).unwrap()),
        expr: None,
    };
    assert!(f(None, None, None).matches(Some(&d)));
    assert!(f(None, None, None).matches(None));
    assert!(!f(Some("1.1.1.1"), None, None).matches(None));
    assert!(f(Some("2.2.2.2"), Some(80), None).matches(Some(&d)));
    assert!(!f(Some("2.2.2.3"), None, None).matches(Some(&d)));
    assert!(!f(None, Some(81), None).matches(Some(&d)));
    assert!(f(None, None, Some("2.2.2.2:80-1.1.1.1:40000")).matches(Some(&d)));
    assert!(!f(None, None, Some("2.2.2.2:80-1.1.1.1:40001")).matches(Some(&d)));
}

/// Random and truncated bytes never panic the reader, the decoder or the tracker.
#[test]
fn random_and_truncated_input_never_panics() {
    use read::tests::{epb, idb, pcap_header, pcap_record, shb};
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pkt = decode::tests::ipv4_tcp(
        [1, 2, 3, 4],
        [5, 6, 7, 8],
        1,
        2,
        3,
        4,
        decode::flags::SYN,
        b"abc",
    );
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    for big in [false, true] {
        let mut f = pcap_header(big, false, 101, 65535);
        f.extend(pcap_record(big, 1, 2, &pkt, pkt.len() as u32));
        f.extend(pcap_record(big, 1, 3, &pkt, pkt.len() as u32));
        seeds.push(f);
        let mut f = shb(big);
        f.extend(idb(big, 101, 0, Some(9)));
        f.extend(epb(big, 0, 5, &pkt, pkt.len() as u32));
        seeds.push(f);
    }
    let run = |bytes: Vec<u8>| {
        let Ok(mut r) = CaptureReader::from_reader(Box::new(std::io::Cursor::new(bytes))) else {
            return;
        };
        let mut tr = FlowTracker::new(TrackerConfig::default());
        while let Some(p) = r.next_packet() {
            if let Ok(d) = decode(p.link, p.data, p.orig_len) {
                tr.process(p.ts_ns, p.orig_len, &d);
            }
        }
        let _ = tr.finish_all(None);
    };
    for seed in &seeds {
        for cut in 0..seed.len() {
            run(seed[..cut].to_vec());
        }
        for _ in 0..600 {
            let mut m = seed.clone();
            for _ in 0..(rnd() % 6 + 1) {
                let i = (rnd() as usize) % m.len();
                m[i] = rnd() as u8;
            }
            run(m);
        }
    }
    // Pure noise through every link type decoder.
    for _ in 0..5000 {
        let n = (rnd() % 120) as usize;
        let b: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
        for link in [0u16, 1, 101, 108, 113, 228, 229, 276] {
            let _ = decode(read::LinkType(link), &b, rnd() as u32);
        }
    }
}
