//! `roundtrip replay` for real: a `roundtrip server --allow-replay` on loopback, directly and behind
//! `roundtrip proxy --rtt 20ms`, played application structures of known shape, and the one-line refusals of
//! servers that cannot replay.

mod common;

use common::db::PgbenchDb;
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
            request_transfer: Duration::ZERO,
            response_transfer: Duration::ZERO,
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
        tail: Duration::ZERO,
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
        capture: Default::default(),
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
            request_transfer: Duration::ZERO,
            response_transfer: Duration::ZERO,
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
    let floor = ms(8 * 23 + 7 * 5);
    // The upper side is the same model with the smallest round trip measured through this proxy just now,
    // plus 17 ms a turn for a loaded machine's scheduling: a turn paying its round trip and server time twice
    // (+23 ms a turn, 184 ms in all) fails every time. A run slowed past that by a load spike (one in ten
    // here at a load average of 10, once by 600 ms) is replayed again, up to 3 times: a doubled turn cannot
    // pass any of them, and the floor must hold in every one.
    let model = (rtt + ms(3)) * 8 + ms(7 * 5);
    let mut runs = Vec::new();
    for _ in 0..3 {
        let r = replay::replay(&seq, &cfg).expect("sequential replay");
        assert!(
            r.duration >= floor,
            "sequential replay took {:?}, less than the {floor:?} the delays impose",
            r.duration
        );
        runs.push(r.duration);
        if r.duration < model + ms(8 * 17) {
            break;
        }
    }
    assert!(
        *runs.last().unwrap() < model + ms(8 * 17),
        "sequential replay took {runs:?}, expected about {model:?} (measured RTT {rtt:?})"
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
            request_transfer: Duration::ZERO,
            response_transfer: Duration::ZERO,
        });
    }
    // At least one round trip; fewer than 4 of the round trips measured through this proxy (8 would be
    // each request paying its own, in every run); up to 3 runs, as above, for a load spike.
    let p = profile(vec![c]);
    let mut runs = Vec::new();
    for _ in 0..3 {
        let r = replay::replay(&p, &cfg).expect("pipelined replay");
        assert!(
            r.duration >= ms(20),
            "8 pipelined requests took {:?}",
            r.duration
        );
        runs.push(r.duration);
        if r.duration < rtt * 4 {
            break;
        }
    }
    assert!(
        *runs.last().unwrap() < rtt * 4,
        "8 pipelined requests took {runs:?}: they should share one round trip of {rtt:?}"
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

// ---- The command line, on captures of real applications made by the test ----

/// Runs `roundtrip replay ARGS...`; returns (exit code, stdout, stderr).
fn replay_cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(common::procs::bin())
        .arg("replay")
        .args(args)
        .output()
        .expect("roundtrip replay runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(stdout: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(stdout).expect("replay --json prints JSON");
    v.get("data").cloned().unwrap_or(v)
}

fn sum(v: &serde_json::Value, field: &str) -> u64 {
    v["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .map(|c| c[field].as_u64().expect(field))
        .sum()
}

/// A pgbench scratch database, or None when PostgreSQL, pgbench or psql is missing.
fn scratch_db() -> Option<PgbenchDb> {
    if !common::service_up(5432, "postgresql") || !common::have("pgbench") || !common::have("psql")
    {
        return None;
    }
    Some(PgbenchDb::create("rt_replay"))
}

/// `pgbench -c 1 -t N -S` against `port`; returns its wall time (process start included).
fn select_only(db: &PgbenchDb, port: u16, transactions: u32) -> Duration {
    let t = std::time::Instant::now();
    let out = std::process::Command::new("pgbench")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(["-c", "1", "-t", &transactions.to_string(), "-S", &db.0])
        .output()
        .expect("pgbench runs");
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

#[test]
fn a_real_pgbench_capture_replayed_through_a_20ms_proxy_takes_what_pgbench_takes_there() {
    if !common::require_root("tcpdump on loopback") || !common::have("tcpdump") {
        return;
    }
    let Some(db) = scratch_db() else {
        eprintln!("SKIPPED: PostgreSQL on 5432 or pgbench missing");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pgbench.pcap");
    let mut kids = Kids::default();
    // The capture listens on a private port (a proxy adding nothing in front of PostgreSQL), so other
    // clients of PostgreSQL on this machine stay out of it.
    let direct = kids.proxy(5432, &[]);
    let td = kids.tcpdump(&file, direct);
    select_only(&db, direct, 30);
    std::thread::sleep(ms(300));
    kids.stop(td);

    let server = kids.server(&["--allow-replay"]);
    let f = file.to_str().unwrap();
    let to = format!("127.0.0.1:{server}");
    // --generic: every payload byte of the capture, as plain request/response runs.
    let (code, out, err) = replay_cli(&[f, "--to", &to, "--json", "--generic"]);
    assert_eq!(code, 0, "{err}");
    let v = json_of(&out);
    // pgbench's check connection, then its client's: 30 selects and the start-up turns.
    assert_eq!(v["connections"].as_array().unwrap().len(), 2, "{out}");
    // Every captured byte goes and comes back; messages below the wire minimums (a 30-byte request, a
    // 14-byte answer) are padded, and the padding is counted apart.
    assert_eq!(
        sum(&v, "response_bytes_received"),
        sum(&v, "response_bytes_captured") + sum(&v, "response_padding_bytes")
    );
    assert_eq!(
        sum(&v, "request_bytes_sent"),
        sum(&v, "request_bytes_captured") + sum(&v, "request_padding_bytes")
    );

    // The same run through a 20 ms proxy, measured, and the replay through the same kind of proxy.
    let app_proxy = kids.proxy(5432, &["--rtt", "20ms"]);
    let replay_proxy = kids.proxy(server, &["--rtt", "20ms"]);
    let measured = select_only(&db, app_proxy, 30);
    let to = format!("127.0.0.1:{replay_proxy}");
    let (code, out, err) = replay_cli(&[f, "--to", &to, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json_of(&out);
    let replayed = Duration::from_secs_f64(v["replayed_seconds"].as_f64().unwrap());
    // `capture whatif`'s prediction at the measured path RTT is printed beside it.
    assert!(v["predicted_seconds"].as_f64().unwrap() > 0.5, "{out}");
    // About 40 round trips of 20 ms each way: ~0.9 s. 30% either way, generous: pgbench's wall time includes
    // its process start, and a loaded 2-core machine delays either run (bench/replay.sh has the real figure).
    let ratio = replayed.as_secs_f64() / measured.as_secs_f64();
    assert!(
        (0.7..1.3).contains(&ratio),
        "replayed {replayed:?} vs pgbench measured {measured:?} through the same 20 ms proxy"
    );
}

#[test]
fn a_real_samba_copy_is_replayed_byte_for_byte() {
    if !common::require_root("tcpdump on loopback") || !common::have("tcpdump") {
        return;
    }
    let Some(samba) = common::samba::Samba::start() else {
        eprintln!("SKIPPED: samba");
        return;
    };
    samba.put_file("f", 3 * 1024 * 1024);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("smb.pcap");
    let mut kids = Kids::default();
    let td = kids.tcpdump(&file, samba.addr.port());
    let (ok, text, _) = common::samba::Samba::client(samba.addr, "get f /dev/null");
    assert!(ok, "{text}");
    std::thread::sleep(ms(300));
    kids.stop(td);
    let server = kids.server(&["--allow-replay"]);
    let to = format!("127.0.0.1:{server}");
    let (code, out, err) = replay_cli(&[file.to_str().unwrap(), "--to", &to, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json_of(&out);
    let got = sum(&v, "response_bytes_received") - sum(&v, "response_padding_bytes");
    assert_eq!(got, sum(&v, "response_bytes_captured"));
    assert!(got >= 3 * 1024 * 1024, "the 3 MiB file came back: {got}");
}

#[test]
fn the_command_refuses_what_it_cannot_replay_with_one_line_and_exit_1() {
    if !common::require_root("tcpdump on loopback") || !common::have("tcpdump") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A real capture with payload one way only: a listener that never answers.
    let oneway = dir.path().join("oneway.pcap");
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = l.local_addr().unwrap().port();
    let mut kids = Kids::default();
    let td = kids.tcpdump(&oneway, lport);
    {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(addr(lport)).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 500]).unwrap();
        let mut b = [0u8; 500];
        s.read_exact(&mut b).unwrap();
    }
    std::thread::sleep(ms(300));
    kids.stop(td);
    let f = oneway.to_str().unwrap();

    let allowed = kids.server(&["--allow-replay"]);
    let (code, _, err) = replay_cli(&[f, "--to", &format!("127.0.0.1:{allowed}")]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("nothing to replay") && err.contains("one way only"),
        "{err}"
    );

    // A capture with turns, to point at servers that cannot replay it.
    let good = dir.path().join("good.pcap");
    let echo = kids.server(&[]);
    let td = kids.tcpdump(&good, echo);
    let st = std::process::Command::new(common::procs::bin())
        .args([
            "ping",
            &format!("127.0.0.1:{echo}"),
            "-c",
            "20",
            "--warmup",
            "0s",
        ])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    std::thread::sleep(ms(300));
    kids.stop(td);
    let g = good.to_str().unwrap();

    let plain = kids.server(&[]);
    let (code, _, err) = replay_cli(&[g, "--to", &format!("127.0.0.1:{plain}")]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("start it with `roundtrip server --allow-replay`"),
        "{err}"
    );

    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (code, _, err) = replay_cli(&[g, "--to", &free.to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("connecting to"), "{err}");

    if common::service_up(6379, "redis") {
        let (code, _, err) = replay_cli(&[g, "--to", "127.0.0.1:6379", "--timeout", "2s"]);
        assert_eq!(code, 1, "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("is not a roundtrip server"), "{err}");
    }
}
