//! `roundtrip replay` for real: a `roundtrip server --allow-replay` on loopback, directly and behind
//! `roundtrip proxy --rtt 20ms`, played application structures of known shape, and the one-line refusals of
//! servers that cannot replay.

mod common;

use common::procs::Kids;
use roundtrip::replay::{self, ReplayConfig, ReplayError};
use roundtrip::whatif::profile::{AppProfile, ConnProfile, RttSource, Turn};
use std::net::SocketAddr;
use std::time::Duration;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A connection of `turns` sequential request/response turns (each waits for the previous answer).
fn sequential(turns: usize, req: u64, resp: u64, think: Duration, server: Duration) -> ConnProfile {
    let mut c = conn();
    for i in 0..turns {
        c.turns.push(Turn {
            op: "turn".into(),
            request_start: ms(i as u64 * 10),
            request_bytes: req,
            response_bytes: resp,
            waits_for: i.checked_sub(1),
            think,
            server,
            outstanding: 1,
        });
    }
    c.duration = ms(turns as u64 * 10);
    c
}

fn conn() -> ConnProfile {
    ConnProfile {
        client: "10.0.0.1:40000".parse().unwrap(),
        server: "10.0.0.2:445".parse().unwrap(),
        protocol: "generic".into(),
        start: Duration::ZERO,
        duration: Duration::ZERO,
        rtt: ms(1),
        rtt_source: RttSource::Handshake,
        max_window: [65535, 65535],
        mss: 1448,
        turns: Vec::new(),
    }
}

fn profile(connections: Vec<ConnProfile>) -> AppProfile {
    AppProfile {
        duration: connections
            .iter()
            .map(|c| c.start + c.duration)
            .max()
            .unwrap_or_default(),
        connections,
        notes: Vec::new(),
    }
}

#[test]
fn every_byte_is_asked_for_and_answered_including_split_requests_and_answers() {
    let mut kids = Kids::default();
    let port = kids.server(&["--allow-replay"]);
    // Sizes beyond one message (256 KiB) and one answer (16 MiB), tiny ones below the minimums, and a second
    // connection starting later.
    let mut a = conn();
    for (i, (req, resp)) in [
        (600_000u64, 40u64),
        (10, 0),
        (100, 17 * 1024 * 1024),
        (64, 64),
    ]
    .into_iter()
    .enumerate()
    {
        a.turns.push(Turn {
            op: "turn".into(),
            request_start: ms(i as u64),
            request_bytes: req,
            response_bytes: resp,
            waits_for: i.checked_sub(1),
            think: Duration::ZERO,
            server: Duration::ZERO,
            outstanding: 1,
        });
    }
    let mut b = sequential(5, 200, 3000, ms(1), ms(1));
    b.start = ms(20);
    let p = profile(vec![a, b]);
    let r = replay::replay(&p, &ReplayConfig::new(addr(port))).expect("replay runs");
    assert_eq!(r.connections.len(), 2);
    let a = &r.connections[0];
    assert_eq!(a.turns, 4);
    assert_eq!(a.request_bytes.0, 600_000 + 10 + 100 + 64);
    // Requests below the 30-byte replay minimum are padded; the 17 MiB answer needs one extra request.
    assert_eq!(a.request_bytes.1, 600_000 + 30 + 100 + 64 + 30);
    assert_eq!(a.response_bytes.0, 40 + 17 * 1024 * 1024 + 64);
    assert_eq!(a.response_bytes.1, 40 + 14 + 17 * 1024 * 1024 + 64);
    let b = &r.connections[1];
    assert_eq!(b.request_bytes, (1000, 1000));
    assert_eq!(b.response_bytes, (15_000, 15_000));
    assert_eq!(b.turn_times.len(), 5);
}

#[test]
fn through_a_20ms_proxy_each_dependent_turn_pays_the_round_trip_and_pipelined_ones_share_it() {
    let mut kids = Kids::default();
    let port = kids.server(&["--allow-replay"]);
    let proxy = kids.proxy(port, &["--rtt", "20ms"]);
    let cfg = ReplayConfig::new(addr(proxy));
    let rtt = replay::measure_rtt(&cfg, 5).expect("pings through the proxy");
    assert!(rtt >= ms(20), "the proxy adds 20 ms, measured {rtt:?}");

    // 8 dependent turns, 5 ms think, 3 ms server time: at least 8 x (20 + 3) + 7 x 5 ms plus the connect.
    let seq = profile(vec![sequential(8, 100, 1000, ms(5), ms(3))]);
    let r = replay::replay(&seq, &cfg).expect("sequential replay");
    let floor = ms(8 * 23 + 7 * 5);
    // Upper bound generous: a loaded 2-core machine delays threads; a turn counted twice would be 184 ms more.
    assert!(
        r.duration >= floor && r.duration < floor + ms(150),
        "sequential replay took {:?}, expected about {floor:?}",
        r.duration
    );

    // 8 requests sent at once (none waits for an answer): one round trip for all, not eight.
    let mut c = conn();
    for _ in 0..8 {
        c.turns.push(Turn {
            op: "turn".into(),
            request_start: Duration::ZERO,
            request_bytes: 100,
            response_bytes: 1000,
            waits_for: None,
            think: Duration::ZERO,
            server: Duration::ZERO,
            outstanding: 8,
        });
    }
    let r = replay::replay(&profile(vec![c]), &cfg).expect("pipelined replay");
    assert!(
        r.duration >= ms(20) && r.duration < ms(20 * 4),
        "8 pipelined requests took {:?}: they should share one 20 ms round trip",
        r.duration
    );
}

#[test]
fn servers_that_cannot_replay_are_refused_with_one_clear_reason() {
    let mut kids = Kids::default();
    let plain = kids.server(&[]);
    let p = profile(vec![sequential(2, 100, 100, ms(0), ms(0))]);
    let e = replay::replay(&p, &ReplayConfig::new(addr(plain))).unwrap_err();
    assert!(matches!(e, ReplayError::Refused(_)), "{e}");
    assert!(e.to_string().contains("--allow-replay"), "{e}");

    // Nothing listening.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = replay::replay(&p, &ReplayConfig::new(free)).unwrap_err();
    assert!(matches!(e, ReplayError::Connect { .. }), "{e}");

    // A TCP service that is not a roundtrip server: Redis answers the hello with an error line.
    if common::service_up(6379, "redis") {
        let mut cfg = ReplayConfig::new(addr(6379));
        cfg.timeout = Duration::from_secs(2);
        let e = replay::replay(&p, &cfg).unwrap_err();
        assert!(matches!(e, ReplayError::NotRoundtrip { .. }), "{e}");
    }

    // A sockperf server echoes the hello: not a roundtrip server either.
    if common::have("sockperf") {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut sp = std::process::Command::new("sockperf")
            .args(["sr", "--tcp", "-i", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut up = false;
        for _ in 0..100 {
            if std::net::TcpStream::connect(addr(port)).is_ok() {
                up = true;
                break;
            }
            std::thread::sleep(ms(100));
        }
        let e = up.then(|| replay::replay(&p, &ReplayConfig::new(addr(port))).unwrap_err());
        let _ = sp.kill();
        let _ = sp.wait();
        let e = e.expect("sockperf server listens");
        assert!(e.to_string().contains("sockperf"), "{e}");
    }

    // Nothing to replay.
    let e = replay::replay(&profile(vec![conn()]), &ReplayConfig::new(addr(plain))).unwrap_err();
    assert!(matches!(e, ReplayError::Empty), "{e}");
}
