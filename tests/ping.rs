//! Ping-pong against real sockets: our server, sockperf's server and client, and misbehaving peers.

mod common;

use common::procs::Kill;

use assert_cmd::Command;
use roundtrip::probe::ping::{self, NoObserver, PeerKind, PingConfig, Stop, Transport};
use roundtrip::server::{self, ServerConfig, ServerEvent};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn local_server() -> server::ServerHandle {
    server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            tcp: true,
            udp: true,
            ..Default::default()
        },
        |_| {},
    )
    .expect("start embedded server")
}

fn config(addr: SocketAddr, transport: Transport, count: u64) -> PingConfig {
    let mut c = PingConfig::new(addr);
    c.link.transport = transport;
    c.stop = Stop::Count(count);
    c.warmup = Duration::from_millis(50);
    c.link.timeout = Duration::from_secs(5);
    c
}

fn rt() -> Command {
    Command::cargo_bin("roundtrip").unwrap()
}

fn free_port() -> u16 {
    // A port free for both TCP and UDP at the time of asking.
    loop {
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = t.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Starts `sockperf server` (TCP or UDP) on a free port and waits until it answers.
fn sockperf_server(tcp: bool) -> (Kill, u16) {
    let port = free_port();
    let mut cmd = std::process::Command::new("sockperf");
    cmd.args(["server", "-i", "127.0.0.1", "-p", &port.to_string()]);
    if tcp {
        cmd.arg("--tcp");
    }
    let child = Kill(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run sockperf"),
    );
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        if !tcp || TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
    }
    if !tcp {
        std::thread::sleep(Duration::from_millis(500));
    }
    (child, port)
}

#[test]
fn tcp_and_udp_against_our_server() {
    let srv = local_server();
    let addr = srv.tcp_addr().unwrap();
    for transport in [Transport::Tcp, Transport::Udp] {
        let r = ping::run(&config(addr, transport, 500), &mut NoObserver).unwrap();
        assert!(r.error.is_none(), "{transport}: {:?}", r.error);
        assert_eq!(r.sent, 500);
        assert_eq!(r.peer, PeerKind::Roundtrip);
        // UDP on loopback may in principle drop; TCP never.
        if transport == Transport::Tcp {
            assert_eq!(r.received, 500);
        }
        assert_eq!(r.rtt.len(), r.received);
        let s = r.rtt.summary();
        assert!(
            s.min_ns > 0 && s.min_ns <= s.p50_ns && s.p50_ns <= s.p99_ns && s.p99_ns <= s.max_ns
        );
        // Server timestamps were negotiated: the turnaround is part of each RTT.
        assert_eq!(r.server.len(), r.received);
        assert!(r.server.summary().max_ns <= s.max_ns);
    }
    assert!(srv.answered() >= 1000);
}

#[test]
fn sizes_at_the_limits() {
    let srv = local_server();
    let addr = srv.tcp_addr().unwrap();
    for (transport, size) in [
        (Transport::Tcp, 14),
        (Transport::Tcp, 200_000),
        (Transport::Udp, 14),
        (Transport::Udp, 65_507),
    ] {
        let mut c = config(addr, transport, 20);
        c.size = size;
        let r = ping::run(&c, &mut NoObserver).unwrap();
        assert!(r.error.is_none(), "{transport} {size}: {:?}", r.error);
        assert!(r.received > 0, "{transport} {size}");
        assert_eq!(r.server.len(), if size >= 30 { r.received } else { 0 });
    }
}

#[test]
fn sockperf_client_measures_against_our_server() {
    if !common::have("sockperf") {
        return;
    }
    let srv = local_server();
    let port = srv.tcp_addr().unwrap().port().to_string();
    for proto in [&["--tcp"][..], &[][..]] {
        let out = std::process::Command::new("sockperf")
            .args([
                "ping-pong",
                "-i",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "1",
                "-m",
                "64",
            ])
            .args(proto)
            .output()
            .expect("run sockperf");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "sockperf {proto:?} failed: {text}");
        let received: u64 = text
            .split("ReceivedMessages=")
            .nth(1)
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no ReceivedMessages in sockperf output: {text}"));
        assert!(
            received > 100,
            "sockperf {proto:?} received {received}: {text}"
        );
        assert!(text.contains("# dropped messages = 0"), "{text}");
    }
}

#[test]
fn our_ping_against_a_sockperf_server() {
    if !common::have("sockperf") {
        return;
    }
    for tcp in [true, false] {
        let (_server, port) = sockperf_server(tcp);
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let t = if tcp { Transport::Tcp } else { Transport::Udp };
        let r = ping::run(&config(addr, t, 300), &mut NoObserver).unwrap();
        assert!(r.error.is_none(), "{t}: {:?}", r.error);
        assert_eq!(r.peer, PeerKind::Sockperf, "{t}");
        assert!(r.received >= 290, "{t}: {} of 300", r.received);
        assert!(r.server.is_empty(), "a sockperf server sends no timestamps");
        // The CLI reports the same kind of peer.
        let out = rt()
            .args([
                "ping",
                &format!("127.0.0.1:{port}"),
                "-c",
                "50",
                "--warmup",
                "0",
                "--json",
            ])
            .args(if tcp { vec![] } else { vec!["--udp"] })
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["peer"], "sockperf");
    }
}

/// Starts the `roundtrip server` binary on a free port and returns it with its port.
fn server_binary() -> (Kill, u16) {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("roundtrip"))
        .args(["server", "--bind", "127.0.0.1", "--port", "0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    err.read_line(&mut line).unwrap();
    let port: u16 = line
        .split("tcp 127.0.0.1:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no port in '{line}'"));
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = err.read_to_string(&mut sink);
    });
    (Kill(child), port)
}

#[test]
fn cli_ping_json_document_and_full_log() {
    let (_srv, port) = server_binary();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rtt.csv");
    for udp in [false, true] {
        let mut cmd = rt();
        cmd.args([
            "ping",
            &format!("127.0.0.1:{port}"),
            "-c",
            "300",
            "--warmup",
            "0",
            "--json",
        ])
        .arg("--full-log")
        .arg(&log)
        .args(["--size", "100", "--report-interval", "50ms"])
        .timeout(Duration::from_secs(60));
        if udp {
            cmd.arg("--udp");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["format"], "roundtrip");
        assert_eq!(doc["kind"], "ping");
        assert_eq!(doc["peer"], "roundtrip");
        assert_eq!(
            doc["settings"]["transport"],
            if udp { "udp" } else { "tcp" }
        );
        assert_eq!(doc["settings"]["size_bytes"], 100);
        assert_eq!(doc["settings"]["stop"]["count"], 300);
        let s = &doc["summary"];
        assert_eq!(s["sent"], 300);
        for k in [
            "received",
            "lost",
            "duplicated",
            "out_of_order",
            "elapsed_s",
        ] {
            assert!(s[k].is_number(), "summary.{k}");
        }
        for k in [
            "count",
            "min_ns",
            "mean_ns",
            "stddev_ns",
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "p99_9_ns",
            "p99_99_ns",
            "max_ns",
        ] {
            assert!(s["rtt"][k].is_number(), "summary.rtt.{k}");
        }
        assert!(s["server_turnaround"]["p50_ns"].is_number());
        let received = s["received"].as_u64().unwrap();
        assert_eq!(s["rtt"]["count"].as_u64().unwrap(), received);
        let buckets: u64 = doc["histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["count"].as_u64().unwrap())
            .sum();
        assert_eq!(buckets, received);
        assert!(!doc["intervals"].as_array().unwrap().is_empty());
        let row = &doc["intervals"][0];
        for k in ["end_s", "round_trips", "mb_per_s", "p50_ns", "p99_ns"] {
            assert!(row[k].is_number(), "intervals[0].{k}");
        }
        // One CSV row per recorded round trip.
        let csv = std::fs::read_to_string(&log).unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next(), Some("seq,send_ns,recv_ns,rtt_ns,server_ns"));
        let rows: Vec<&str> = lines.collect();
        assert_eq!(rows.len() as u64, received);
        for r in &rows {
            let f: Vec<u64> = r.split(',').map(|x| x.parse().unwrap()).collect();
            assert_eq!(f[2] - f[1], f[3], "rtt = recv - send in {r}");
        }
    }
}

#[test]
fn cli_text_summary_and_histogram() {
    let (_srv, port) = server_binary();
    let out = rt()
        .args([
            "ping",
            &format!("127.0.0.1:{port}"),
            "-c",
            "200",
            "--warmup",
            "0",
            "--histogram",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("round trips (RTT), not one-way"), "{text}");
    assert!(text.contains("sent 200  received 200  lost 0"), "{text}");
    for col in [
        "min", "mean", "stddev", "p50", "p90", "p99", "p99.9", "p99.99", "max",
    ] {
        assert!(text.contains(col), "{col} missing: {text}");
    }
    assert!(text.contains("RTT distribution"), "{text}");
    assert!(text.contains('█'), "{text}");
}

/// Against a roundtrip server the result opens with the answer (the line after the heading, with -q) and
/// the HTML report carries the same sentence.
#[test]
fn cli_answer_leads_text_and_html() {
    let (_srv, port) = server_binary();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("ping.html");
    let out = rt()
        .args([
            "ping",
            &format!("127.0.0.1:{port}"),
            "-c",
            "200",
            "--warmup",
            "0",
            "-q",
            "--report",
            html.to_str().unwrap(),
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("roundtrip ping tcp "), "{text}");
    assert!(
        lines[1].starts_with("of the ")
            && lines[1].contains(" median round trip, ")
            && lines[1].ends_with(" the server (its own timestamps)"),
        "the second line is not the answer: {text}"
    );
    assert!(lines[2].starts_with("--- tcp "), "{text}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(&format!("<p class=\"answer\">{}</p>", lines[1])),
        "the page lacks {}",
        lines[1]
    );
}

#[test]
fn demo_prints_one_table() {
    let out = rt()
        .args(["demo", "--duration", "200ms"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for row in [
        "tcp ping-pong     64 B",
        "tcp ping-pong  1.0 KiB",
        "udp ping-pong     64 B",
        "udp ping-pong  1.0 KiB",
    ] {
        assert!(text.contains(row), "{row} missing:\n{text}");
    }
}

// ---- bad input -------------------------------------------------------------------------------------------

fn fails_with(args: &[&str], needle: &str) -> String {
    let out = rt()
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in: {err}"
    );
    err
}

#[test]
fn bad_arguments_are_refused_before_any_io() {
    fails_with(
        &["ping", "127.0.0.1", "--size", "0"],
        "not between 14 bytes and 256 KiB",
    );
    fails_with(&["ping", "127.0.0.1", "--size", "-5"], "negative");
    fails_with(
        &["ping", "127.0.0.1", "--size", "13"],
        "not between 14 bytes and 256 KiB",
    );
    fails_with(
        &["ping", "127.0.0.1", "--udp", "--size", "70000"],
        "not between 14 bytes and 65507 bytes",
    );
    fails_with(&["ping", "127.0.0.1", "--count", "0"], "at least 1");
    fails_with(&["ping", "127.0.0.1", "--count", "-3"], "negative");
    fails_with(&["ping", "127.0.0.1", "--duration", "0s"], "more than 0");
    fails_with(
        &["ping", "127.0.0.1", "--duration", "10"],
        "unit is required",
    );
    fails_with(&["ping", "127.0.0.1", "--rate", "0"], "more than 0");
    fails_with(&["ping", "127.0.0.1", "--interval", "-1ms"], "negative");
    fails_with(&["ping", "127.0.0.1:0"], "invalid port");
    fails_with(
        &["ping", "127.0.0.1", "--count", "5", "--duration", "1s"],
        "cannot be used with",
    );
}

#[test]
fn unknown_host() {
    fails_with(
        &["ping", "no-such-host.invalid", "-c", "1"],
        "cannot resolve 'no-such-host.invalid'",
    );
}

#[test]
fn refused_port() {
    let port = free_port();
    let err = fails_with(
        &["ping", &format!("127.0.0.1:{port}"), "-c", "1"],
        "Connection refused",
    );
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("start `roundtrip server`"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn udp_without_answers_counts_loss_and_does_not_hang() {
    // A bound socket that never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let out = rt()
        .args([
            "ping",
            &format!("127.0.0.1:{port}"),
            "--udp",
            "-c",
            "3",
            "--timeout",
            "200ms",
            "--warmup",
            "0",
            "--json",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["summary"]["sent"], 3);
    assert_eq!(doc["summary"]["lost"], 3);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("none answered"), "{err}");
    drop(silent);
}

#[test]
fn udp_to_a_closed_port_says_so() {
    let port = free_port();
    let out = rt()
        .args([
            "ping",
            &format!("127.0.0.1:{port}"),
            "--udp",
            "-c",
            "3",
            "--timeout",
            "200ms",
            "--warmup",
            "0",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

/// A TCP server that echoes `answers` messages properly, then misbehaves as `then` says.
fn fake_server(answers: usize, then: fn(&mut TcpStream, &[u8])) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        // The hello: echo it, as sockperf does.
        let mut hello = [0u8; roundtrip::wire::sockperf::HELLO_LEN];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&hello).unwrap();
        let mut m = [0u8; 64];
        for _ in 0..answers {
            if s.read_exact(&mut m).is_err() {
                return;
            }
            m[9] &= !1;
            s.write_all(&m).unwrap();
        }
        if s.read_exact(&mut m).is_ok() {
            then(&mut s, &m);
        }
        std::thread::sleep(Duration::from_millis(200));
    });
    addr
}

fn ping_fake(addr: SocketAddr) -> (serde_json::Value, String) {
    let out = rt()
        .args([
            "ping",
            &addr.to_string(),
            "-c",
            "100",
            "--warmup",
            "0",
            "--timeout",
            "1s",
            "--json",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("partial results still printed");
    (doc, String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn server_dying_mid_run_keeps_partial_results() {
    let addr = fake_server(5, |_, _| {});
    let (doc, err) = ping_fake(addr);
    assert_eq!(doc["summary"]["received"], 5);
    assert_eq!(doc["summary"]["rtt"]["count"], 5);
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("closed the connection after 5 answers")
    );
    assert!(err.contains(&addr.to_string()), "{err}");
}

#[test]
fn garbage_and_huge_length_from_a_peer() {
    let addr = fake_server(3, |s, _| {
        let _ = s.write_all(&[0xff; 64]); // length field 0xffffffff
    });
    let (doc, err) = ping_fake(addr);
    assert_eq!(doc["summary"]["received"], 3);
    assert!(err.contains("invalid answer"), "{err}");
    let addr = fake_server(2, |s, m| {
        let mut wrong = m.to_vec();
        wrong[7] ^= 0x55; // another sequence number
        let _ = s.write_all(&wrong);
    });
    let (doc, err) = ping_fake(addr);
    assert_eq!(doc["summary"]["received"], 2);
    assert!(err.contains("expected the echo of message"), "{err}");
}

#[test]
fn stalled_tcp_server_times_out_with_results() {
    let addr = fake_server(4, |_, _| std::thread::sleep(Duration::from_secs(5)));
    let (doc, err) = ping_fake(addr);
    assert_eq!(doc["summary"]["received"], 4);
    assert!(err.contains("no answer from tcp"), "{err}");
}

#[test]
fn server_drops_a_misbehaving_client_and_serves_the_others() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let srv = server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            tcp: true,
            udp: true,
            ..Default::default()
        },
        move |e| ev.lock().unwrap().push(e),
    )
    .unwrap();
    let addr = srv.tcp_addr().unwrap();
    // A good client in the middle of a run...
    let good = std::thread::spawn(move || {
        ping::run(&config(addr, Transport::Tcp, 3000), &mut NoObserver).unwrap()
    });
    // ...while bad ones announce 4 GB, a length below the header, or send UDP garbage.
    for bad in [
        [0u8, 0, 0, 0, 0, 0, 0, 1, 0, 3, 0xff, 0xff, 0xff, 0xff],
        [0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 0, 0, 0, 2],
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&bad).unwrap();
        let mut buf = [0u8; 16];
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(
            s.read(&mut buf).unwrap_or(0),
            0,
            "the server closes a bad client"
        );
    }
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.send_to(b"garbage", srv.udp_addr().unwrap()).unwrap();
    let r = good.join().unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.received, 3000);
    // And it still answers new clients.
    let r = ping::run(&config(addr, Transport::Udp, 10), &mut NoObserver).unwrap();
    assert!(r.received > 0);
    std::thread::sleep(Duration::from_millis(300));
    let events = events.lock().unwrap();
    let reasons: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Disconnected {
                reason: Some(r), ..
            } => Some(r.to_string()),
            _ => None,
        })
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("exceeds the maximum message size")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("smaller than the 14-byte header")),
        "{reasons:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ServerEvent::Datagram { .. }))
    );
}

#[test]
fn server_logs_connects_and_disconnects() {
    let (mut srv, port) = {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("roundtrip"))
            .args(["server", "--bind", "127.0.0.1", "--port", "0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        let port: u16 = line
            .split("tcp 127.0.0.1:")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        ((Kill(child), err), port)
    };
    // The second line says what the server is open to.
    let mut exposure = String::new();
    srv.1.read_line(&mut exposure).unwrap();
    assert!(
        exposure.contains("reachable from this host only (loopback)")
            && exposure.contains("OPEN to anyone")
            && exposure.contains("16384 clients"),
        "{exposure}"
    );
    let r = ping::run(
        &config(([127, 0, 0, 1], port).into(), Transport::Tcp, 10),
        &mut NoObserver,
    )
    .unwrap();
    assert_eq!(r.received, 10);
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut l = String::new();
        srv.1.read_line(&mut l).unwrap();
        lines.push(l);
    }
    assert!(
        lines[0].contains("tcp client 127.0.0.1:") && lines[0].contains("connected"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("disconnected after ") && lines[1].contains(" messages, "),
        "{lines:?}"
    );
    let _ = srv.0;
}

#[test]
fn ctrl_c_prints_the_results_so_far() {
    let (_srv, port) = server_binary();
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("roundtrip"))
        .args([
            "ping",
            &format!("127.0.0.1:{port}"),
            "-t",
            "60s",
            "--warmup",
            "0",
            "-q",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("received") && text.contains("p99.99"),
        "{text}"
    );
}

#[test]
fn closed_stdout_exits_zero() {
    let (_srv, port) = server_binary();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("roundtrip"))
        .args([
            "ping",
            &format!("127.0.0.1:{port}"),
            "-t",
            "2s",
            "--warmup",
            "0",
            "--report-interval",
            "100ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is gone now, as with `| head -1`.
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn paced_rate_is_kept() {
    let srv = local_server();
    let mut c = config(srv.tcp_addr().unwrap(), Transport::Tcp, 20);
    c.interval = Some(Duration::from_millis(20));
    let r = ping::run(&c, &mut NoObserver).unwrap();
    assert_eq!(r.received, 20);
    // 20 sends 20 ms apart cannot take less than 19 intervals (a lower bound, not a timing threshold).
    assert!(r.elapsed >= Duration::from_millis(380), "{:?}", r.elapsed);
}

#[test]
fn ipv6_loopback_against_a_dual_stack_server() {
    if UdpSocket::bind("[::1]:0").is_err() {
        common::skip("no IPv6 loopback on this machine");
        return;
    }
    let srv = server::start(
        &ServerConfig {
            bind: None,
            port: 0,
            tcp: true,
            udp: true,
            ..Default::default()
        },
        |_| {},
    )
    .unwrap();
    let port = srv.tcp_addr().unwrap().port();
    for (host, t) in [
        ("[::1]", Transport::Tcp),
        ("[::1]", Transport::Udp),
        ("127.0.0.1", Transport::Udp),
    ] {
        let addr: SocketAddr = format!("{host}:{port}").parse().unwrap();
        let r = ping::run(&config(addr, t, 50), &mut NoObserver).unwrap();
        assert!(
            r.error.is_none() && r.received > 0,
            "{host} {t}: {:?}",
            r.error
        );
    }
    fails_with(
        &["ping", "127.0.0.1", "-6", "-c", "1"],
        "has no IPv6 address",
    );
}

/// A server bound to the unspecified address answers UDP from the address the client sent to, so a
/// client's connected socket (every roundtrip client, every agent) accepts the answers: 127.0.0.2 here
/// (before, the answers came from 127.0.0.1 and were all dropped).
#[test]
fn udp_answers_come_from_the_address_the_client_sent_to() {
    for bind in [None, Some(std::net::IpAddr::from([0, 0, 0, 0]))] {
        let srv = server::start(
            &ServerConfig {
                bind,
                port: 0,
                ..Default::default()
            },
            |_| {},
        )
        .expect("start embedded server");
        let port = srv.udp_addr().unwrap().port();
        let addr = SocketAddr::from(([127, 0, 0, 2], port));
        let r = ping::run(&config(addr, Transport::Udp, 200), &mut NoObserver).unwrap();
        assert_eq!(r.peer, PeerKind::Roundtrip, "bind {bind:?}");
        assert!(
            r.received > r.sent / 2,
            "bind {bind:?}: {} of {} answered",
            r.received,
            r.sent
        );
    }
}
