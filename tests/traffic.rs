//! throughput, load and sweep: real loopback runs against the embedded roundtrip server, a real sockperf
//! server, and sockperf clients against roundtrip's server; bad input and misbehaving servers.

mod common;

use common::procs::Kill;

use assert_cmd::Command;
use predicates::prelude::*;
use roundtrip::probe::load::{self, LoadConfig};
use roundtrip::probe::ping::{PeerKind, Transport};
use roundtrip::probe::stream::StreamError;
use roundtrip::probe::sweep::{self, SweepConfig};
use roundtrip::probe::throughput::{self, NoObserver, ThroughputConfig};
use roundtrip::server::{self, ServerConfig, ServerEvent, ServerHandle};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn embedded() -> (ServerHandle, SocketAddr) {
    let config = ServerConfig {
        bind: Some(IpAddr::from([127, 0, 0, 1])),
        port: 0,
        tcp: true,
        udp: true,
        ..Default::default()
    };
    let srv = server::start(&config, |_| {}).expect("embedded server");
    let addr = srv.tcp_addr().expect("tcp address");
    (srv, addr)
}

fn tp_config(addr: SocketAddr, transport: Transport, size: usize) -> ThroughputConfig {
    let mut c = ThroughputConfig::new(addr);
    c.link.transport = transport;
    c.sizes = vec![size];
    c.duration = Duration::from_millis(800);
    c.report_interval = Duration::from_millis(200);
    c.link.timeout = Duration::from_secs(5);
    c
}

fn load_config(addr: SocketAddr, transport: Transport) -> LoadConfig {
    let mut c = LoadConfig::new(addr);
    c.link.transport = transport;
    c.rate = 2000.0;
    c.reply_every = 10;
    c.duration = Duration::from_secs(1);
    c.warmup = Duration::from_millis(200);
    c.link.timeout = Duration::from_secs(5);
    c
}

/// A port nobody listens on right now, from the OS.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    // The UDP port must be free as well.
    std::net::UdpSocket::bind(("127.0.0.1", port))
        .map(|_| port)
        .unwrap_or_else(|_| free_port())
}

/// Starts `sockperf server` (TCP with `tcp`, else UDP) on 127.0.0.1 and waits until it serves.
fn sockperf_server(tcp: bool) -> Option<(Kill, SocketAddr)> {
    if !common::have("sockperf") {
        return None;
    }
    let port = free_port();
    let mut cmd = std::process::Command::new("sockperf");
    cmd.args(["server", "-i", "127.0.0.1", "-p", &port.to_string()]);
    if tcp {
        cmd.arg("--tcp");
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sockperf");
    let p = Kill(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(20);
    if tcp {
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sockperf server did not open tcp {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    } else {
        // Wait until a ping-pong message over UDP is echoed.
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut msg = [0u8; 14];
        roundtrip::wire::sockperf::Header {
            seq: 1,
            flags: roundtrip::wire::sockperf::Flags(3),
            len: 14,
        }
        .write(&mut msg);
        let mut buf = [0u8; 64];
        loop {
            let _ = s.send_to(&msg, addr);
            if s.recv(&mut buf).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sockperf server did not answer on udp {addr}"
            );
        }
    }
    Some((p, addr))
}

// ------------------------------------------------------------------ against roundtrip's server

#[test]
fn tcp_throughput_is_counted_by_the_server() {
    let (_srv, addr) = embedded();
    // Small messages are read in whole buffers; large ones header by header with their payload discarded
    // uncopied: the server's counts are exact either way, and it answers the count request after the stream.
    for size in [1024usize, 8 * 1024 + 1, 128 * 1024] {
        let r = throughput::run(&tp_config(addr, Transport::Tcp, size), &mut NoObserver).unwrap();
        assert_eq!(r.peer, PeerKind::Roundtrip);
        let run = &r.runs[0];
        assert!(run.error.is_none(), "{size}: {:?}", run.error);
        assert!(run.total.messages > 0);
        assert!(!run.intervals.is_empty());
        let (msgs, bytes) = run.received.expect("server counts");
        // Every message sent in the window reached the server (TCP), plus those sent while stopping.
        assert!(
            msgs >= run.total.messages,
            "{size}: {msgs} < {}",
            run.total.messages
        );
        assert_eq!(bytes, msgs * size as u64, "{size}");
        assert!(run.loss.is_none());
        let sum: u64 = run.intervals.iter().map(|i| i.messages).sum();
        assert_eq!(sum, run.total.messages);
    }
}

#[test]
fn udp_throughput_reports_loss_from_server_counts() {
    let (_srv, addr) = embedded();
    let r = throughput::run(&tp_config(addr, Transport::Udp, 512), &mut NoObserver).unwrap();
    let run = &r.runs[0];
    assert!(run.error.is_none(), "{:?}", run.error);
    let loss = run.loss.expect("udp loss counted");
    assert_eq!(loss.counted_by, throughput::CountedBy::Server);
    assert!(loss.sent >= run.total.messages);
    assert!(loss.received <= loss.sent && loss.received > 0);
    assert_eq!(loss.lost, loss.sent - loss.received);
}

#[test]
fn several_sizes_and_streams() {
    let (_srv, addr) = embedded();
    let mut c = tp_config(addr, Transport::Tcp, 64);
    c.sizes = vec![64, 8192];
    c.streams = 3;
    let r = throughput::run(&c, &mut NoObserver).unwrap();
    assert_eq!(r.runs.len(), 2);
    for run in &r.runs {
        assert!(run.error.is_none(), "{:?}", run.error);
        assert_eq!(run.streams.len(), 3);
        assert_eq!(
            run.streams.iter().map(|s| s.rate.messages).sum::<u64>(),
            run.total.messages
        );
        assert!(run.streams.iter().all(|s| s.rate.messages > 0));
        assert_eq!(run.total.bytes, run.total.messages * run.size as u64);
    }
}

#[test]
fn reverse_streams_from_the_server_tcp_and_udp() {
    let (_srv, addr) = embedded();
    for transport in [Transport::Tcp, Transport::Udp] {
        let mut c = tp_config(addr, transport, 1000);
        c.reverse = true;
        let r = throughput::run(&c, &mut NoObserver).unwrap();
        let run = &r.runs[0];
        assert!(run.error.is_none(), "{transport}: {:?}", run.error);
        assert!(run.total.messages > 0, "{transport}");
        let (msgs, bytes) = run.received.expect("client counts");
        assert_eq!(bytes, msgs * 1000);
        if transport == Transport::Udp {
            let loss = run.loss.expect("udp reverse loss");
            assert_eq!(loss.received, msgs);
            assert!(loss.sent >= msgs);
        }
    }
}

#[test]
fn sync_mode_measures_round_trips() {
    let (_srv, addr) = embedded();
    for transport in [Transport::Tcp, Transport::Udp] {
        let mut c = tp_config(addr, transport, 100);
        c.sync = true;
        let r = throughput::run(&c, &mut NoObserver).unwrap();
        let run = &r.runs[0];
        assert!(run.error.is_none(), "{:?}", run.error);
        assert!(run.total.messages > 0);
        // One RTT per acknowledged message (the window total may miss the last few).
        assert!(run.rtt.len() >= run.total.messages);
    }
}

#[test]
fn load_answers_exactly_every_nth_message() {
    let (srv, addr) = embedded();
    let mut c = load_config(addr, Transport::Tcp);
    c.reply_every = 7;
    c.warmup = Duration::ZERO;
    let r = load::run(&c).unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.peer, PeerKind::Roundtrip);
    // Sequence numbers start at 1; one answer per multiple of 7, plus the hello's.
    assert_eq!(r.requested, r.sent / 7);
    assert_eq!(r.answered, r.requested);
    let want = r.sent / 7 + 1;
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.answered() < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(srv.answered(), want);
    assert_eq!(r.latency_scheduled.len(), r.answered);
    assert_eq!(r.latency_sent.len(), r.answered);
    assert_eq!(r.lag.len(), r.sent);
    // Latency from the scheduled time is never below latency from the actual send.
    assert!(r.latency_scheduled.summary().min_ns >= r.latency_sent.summary().min_ns);
}

#[test]
fn load_over_udp() {
    let (_srv, addr) = embedded();
    let r = load::run(&load_config(addr, Transport::Udp)).unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.answered > 0);
    assert!(r.answered <= r.requested);
    assert_eq!(r.scheduled, 2000);
}

#[test]
fn sweep_covers_every_cell() {
    let (_srv, addr) = embedded();
    let mut base = load_config(addr, Transport::Tcp);
    base.duration = Duration::from_millis(500);
    base.warmup = Duration::from_millis(100);
    let c = SweepConfig {
        base,
        sizes: vec![64, 1024],
        rates: vec![500.0, 2000.0],
    };
    let r = sweep::run(&c, &mut sweep::NoObserver).unwrap();
    assert!(r.error.is_none());
    let cells: Vec<(usize, f64)> = r.cells.iter().map(|c| (c.size, c.rate)).collect();
    assert_eq!(
        cells,
        vec![(64, 500.0), (64, 2000.0), (1024, 500.0), (1024, 2000.0)]
    );
    assert!(r.cells.iter().all(|c| c.answered > 0 && c.error.is_none()));
}

// ------------------------------------------------------------------ interop with sockperf

#[test]
fn our_load_and_throughput_against_sockperf_server_tcp() {
    let Some((_p, addr)) = sockperf_server(true) else {
        return;
    };
    let r = load::run(&load_config(addr, Transport::Tcp)).unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.peer, PeerKind::Sockperf);
    assert!(r.answered > 0 && r.answered == r.requested);
    let t = throughput::run(&tp_config(addr, Transport::Tcp, 1024), &mut NoObserver).unwrap();
    let run = &t.runs[0];
    assert!(run.error.is_none(), "{:?}", run.error);
    assert_eq!(t.peer, PeerKind::Sockperf);
    assert!(run.total.messages > 0);
    assert!(run.received.is_none());
    let mut sync = tp_config(addr, Transport::Tcp, 64);
    sync.sync = true;
    let s = throughput::run(&sync, &mut NoObserver).unwrap();
    assert!(s.runs[0].error.is_none(), "{:?}", s.runs[0].error);
    assert!(!s.runs[0].rtt.is_empty());
}

#[test]
fn our_load_and_throughput_against_sockperf_server_udp() {
    let Some((_p, addr)) = sockperf_server(false) else {
        return;
    };
    let r = load::run(&load_config(addr, Transport::Udp)).unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.answered > 0);
    let t = throughput::run(&tp_config(addr, Transport::Udp, 256), &mut NoObserver).unwrap();
    let run = &t.runs[0];
    assert!(run.error.is_none(), "{:?}", run.error);
    assert!(run.total.messages > 0);
    // sockperf's protocol has no receiver report: loss is said to be not counted, not made up.
    assert!(run.loss.is_none());
    assert!(run.receiver_note.unwrap().contains("sockperf"));
    // --reverse needs a roundtrip server and says so.
    let mut rev = tp_config(addr, Transport::Udp, 256);
    rev.reverse = true;
    let e = throughput::run(&rev, &mut NoObserver).unwrap_err();
    assert!(matches!(e, StreamError::Unsupported { .. }), "{e}");
}

/// Runs a sockperf client against an embedded roundtrip server; returns its output and the server's events.
/// Messages and bytes of each TCP client the server saw leave.
type Seen = Arc<Mutex<Vec<(u64, u64)>>>;

fn sockperf_client(args: &[&str]) -> Option<(String, ServerHandle, Seen)> {
    if !common::have("sockperf") {
        return None;
    }
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    let config = ServerConfig {
        bind: Some(IpAddr::from([127, 0, 0, 1])),
        port: 0,
        tcp: true,
        udp: true,
        ..Default::default()
    };
    let srv = server::start(&config, move |ev| {
        if let ServerEvent::Disconnected {
            messages, bytes, ..
        } = ev
        {
            s2.lock().unwrap().push((messages, bytes));
        }
    })
    .unwrap();
    let port = srv.tcp_addr().unwrap().port().to_string();
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["-i", "127.0.0.1", "-p", &port]);
    let out = std::process::Command::new("sockperf")
        .args(&full)
        .output()
        .expect("run sockperf");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sockperf {full:?} failed:\n{text}");
    Some((text, srv, seen))
}

fn number_after(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("'{key}' not in:\n{text}"))
        + key.len();
    text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after '{key}' in:\n{text}"))
}

#[test]
fn sockperf_under_load_against_roundtrip_server() {
    for proto in [&["--tcp"][..], &[][..]] {
        let mut args = vec![
            "under-load",
            "-t",
            "2",
            "--mps",
            "2000",
            "--reply-every",
            "50",
        ];
        args.extend_from_slice(proto);
        let Some((text, srv, _)) = sockperf_client(&args) else {
            return;
        };
        let received = number_after(&text, "ReceivedMessages=");
        assert!(received > 0, "{text}");
        assert!(text.contains("Summary: Latency is"), "{text}");
        // sockperf numbers its messages from 1 and asks for an answer when seq % 50 == 0: the server answered
        // exactly those, one per 50 messages of the whole run.
        let total_run = &text[text.find("[Total Run]").expect("total run line")..];
        let sent = number_after(total_run.lines().next().unwrap(), "SentMessages=");
        let deadline = Instant::now() + Duration::from_secs(5);
        while srv.answered() < sent / 50 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(srv.answered(), sent / 50, "{proto:?}: {text}");
    }
}

#[test]
fn sockperf_throughput_against_roundtrip_server() {
    let Some((text, srv, seen)) = sockperf_client(&["throughput", "--tcp", "-t", "2", "-m", "64"])
    else {
        return;
    };
    let rate = number_after(&text, "Message Rate is ");
    assert!(rate > 0, "{text}");
    let total = number_after(&text, "Total of ");
    // sockperf throughput never asks for an answer.
    assert_eq!(srv.answered(), 0);
    srv.shutdown();
    let seen = seen.lock().unwrap();
    let got: u64 = seen.iter().map(|s| s.0).sum();
    // Everything sockperf sent (measured and warm-up) reached the server.
    assert!(got >= total, "server saw {got} of {total}");
    let Some((text, _srv, _)) = sockperf_client(&["throughput", "-t", "1", "-m", "64"]) else {
        return;
    };
    assert!(number_after(&text, "Message Rate is ") > 0);
}

// ------------------------------------------------------------------ bad input and bad servers

#[test]
fn a_rate_the_machine_cannot_send_reports_the_achieved_rate() {
    let (_srv, addr) = embedded();
    let mut c = load_config(addr, Transport::Tcp);
    // 10 million 64 KiB messages a second is 655 GB/s: no machine holds it (64-byte messages at the same
    // rate can be held over loopback, where due messages leave together in one write).
    c.rate = load::MAX_RATE;
    c.size = 65536;
    c.warmup = Duration::ZERO;
    c.duration = Duration::from_millis(500);
    let r = load::run(&c).unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(!r.rate_held());
    assert!(r.sent > 0 && r.sent < r.scheduled);
    assert!(r.achieved_rate() > 0.0 && r.achieved_rate() < c.rate);
    assert!(r.lag.summary().max_ns > 0);
    let text = roundtrip::report::traffic::load_text(&r);
    assert!(
        text.contains("rate NOT held") && text.contains("achieved"),
        "{text}"
    );
}

/// A TCP server that accepts and never reads.
fn deaf_server() -> (
    SocketAddr,
    std::thread::JoinHandle<()>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    let t = std::thread::spawn(move || {
        l.set_nonblocking(true).unwrap();
        let mut held = Vec::new();
        while !d.load(std::sync::atomic::Ordering::SeqCst) {
            if let Ok((s, _)) = l.accept() {
                held.push(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    (addr, t, done)
}

#[test]
fn a_server_that_stops_reading_ends_the_run_at_its_duration() {
    let (addr, t, done) = deaf_server();
    let mut c = tp_config(addr, Transport::Tcp, 65536);
    c.link.extensions = false;
    c.duration = Duration::from_secs(2);
    let start = Instant::now();
    let r = throughput::run(&c, &mut NoObserver).unwrap();
    let took = start.elapsed();
    let run = &r.runs[0];
    let e = run.error.as_ref().expect("stall reported");
    assert!(matches!(**e, StreamError::Stalled { .. }), "{e}");
    assert!(e.to_string().contains("stopped reading"), "{e}");
    // The run ends instead of hanging on the deaf server (15 times its duration: a hang detector, not a
    // speed figure), and what was written is bounded by the kernel's socket buffers, not by the run length:
    // nothing piles up in the client.
    assert!(took < c.duration * 15, "took {took:?}");
    assert!(
        run.total.bytes < 256 << 20,
        "{} bytes accepted",
        run.total.bytes
    );

    let mut l = load_config(addr, Transport::Tcp);
    l.link.extensions = false;
    l.rate = 50_000.0;
    l.size = 16384;
    l.warmup = Duration::ZERO;
    l.duration = Duration::from_secs(2);
    let r = load::run(&l).unwrap();
    let e = r.error.as_ref().expect("stall reported");
    assert!(matches!(**e, StreamError::Stalled { .. }), "{e}");
    assert!(!r.rate_held());
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    t.join().unwrap();
}

#[test]
fn a_server_that_vanishes_keeps_the_results_so_far() {
    let (srv, addr) = embedded();
    let mut c = tp_config(addr, Transport::Tcp, 1024);
    c.duration = Duration::from_secs(20);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        srv.shutdown();
    });
    let start = Instant::now();
    let r = throughput::run(&c, &mut NoObserver).unwrap();
    killer.join().unwrap();
    // The run ends when the server goes, 0.7 s in, not at its configured 20 s: a client that kept going
    // until its duration fails whatever the machine's speed.
    assert!(start.elapsed() < c.duration, "took {:?}", start.elapsed());
    let run = &r.runs[0];
    assert!(run.error.is_some(), "vanished server not reported");
    assert!(
        run.total.messages > 0,
        "results before the failure were lost"
    );

    let (srv, addr) = embedded();
    let mut l = load_config(addr, Transport::Tcp);
    l.duration = Duration::from_secs(20);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        srv.shutdown();
    });
    let r = load::run(&l).unwrap();
    killer.join().unwrap();
    assert!(r.error.is_some(), "vanished server not reported");
    assert!(r.sent > 0);
}

#[test]
fn nothing_listening_is_a_clear_error() {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let e = throughput::run(&tp_config(addr, Transport::Tcp, 64), &mut NoObserver).unwrap_err();
    assert!(e.to_string().contains("nothing listens"), "{e}");
    let e = load::run(&load_config(addr, Transport::Tcp)).unwrap_err();
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
}

fn roundtrip_cmd() -> Command {
    Command::cargo_bin("roundtrip").unwrap()
}

#[test]
fn zero_and_negative_sizes_and_rates_are_rejected_when_parsing() {
    // An address where nothing listens: parsing must fail before any connection is tried.
    let cases: &[&[&str]] = &[
        &["throughput", "127.0.0.1:9", "-s", "0"],
        &["tp", "127.0.0.1:9", "-s", "-64"],
        &["tp", "127.0.0.1:9", "-s", "64,0,1k"],
        &["tp", "127.0.0.1:9", "-s", "10"],
        &["tp", "127.0.0.1:9", "--streams", "0"],
        &["tp", "127.0.0.1:9", "-t", "0s"],
        &["load", "127.0.0.1:9", "--rate", "0"],
        &["load", "127.0.0.1:9", "--rate", "-100"],
        &["load", "127.0.0.1:9", "--rate", "1k", "-s", "0"],
        &["load", "127.0.0.1:9", "--rate", "1k", "--reply-every", "0"],
        &["sweep", "127.0.0.1:9", "--rates", "1k,0"],
        &["sweep", "127.0.0.1:9", "--rates", "-5"],
        &["sweep", "127.0.0.1:9", "--sizes", "64,-1"],
        &["sweep", "127.0.0.1:9", "--sizes", "0"],
    ];
    for args in cases {
        roundtrip_cmd()
            .args(*args)
            .timeout(Duration::from_secs(30))
            .assert()
            .failure()
            .code(2)
            .stderr(predicate::str::contains("invalid value"));
    }
    // Out of range for the transport: refused by validation before any I/O, exit 2.
    roundtrip_cmd()
        .args(["tp", "127.0.0.1:9", "-u", "-s", "64k"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "not between 14 bytes and 65507 bytes",
        ));
    roundtrip_cmd()
        .args(["load", "127.0.0.1:9", "--rate", "20M"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("rate"));
}

#[test]
fn cli_json_documents_have_the_envelope() {
    let (_srv, addr) = embedded();
    let a = addr.to_string();
    for (kind, args) in [
        (
            "throughput",
            vec!["tp", &a, "-t", "500ms", "-s", "64,1k", "--json"],
        ),
        (
            "load",
            vec![
                "load", &a, "--rate", "1k", "-t", "500ms", "--warmup", "0", "--json",
            ],
        ),
        (
            "sweep",
            vec![
                "sweep", &a, "--sizes", "64", "--rates", "500,1k", "-t", "300ms", "--warmup", "0",
                "--json",
            ],
        ),
    ] {
        let out = roundtrip_cmd()
            .args(&args)
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
        let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        assert_eq!(doc["format"], "roundtrip");
        assert_eq!(doc["format_version"], 1);
        assert_eq!(doc["kind"], kind);
        assert!(doc["environment"]["roundtrip_version"].is_string());
        match kind {
            "throughput" => {
                assert_eq!(doc["runs"].as_array().unwrap().len(), 2);
                assert!(doc["runs"][0]["total"]["mbit_per_s"].as_f64().unwrap() > 0.0);
            }
            "load" => {
                assert!(
                    doc["summary"]["latency_from_scheduled"]["p99_ns"]
                        .as_u64()
                        .unwrap()
                        > 0
                );
                assert!(doc["summary"]["schedule_lag"]["count"].as_u64().unwrap() > 0);
                assert!(doc["summary"]["rate_held"].is_boolean());
            }
            _ => assert_eq!(doc["cells"].as_array().unwrap().len(), 2),
        }
    }
}

#[test]
fn cli_text_output() {
    let (_srv, addr) = embedded();
    let a = addr.to_string();
    roundtrip_cmd()
        .args(["throughput", &a, "-t", "500ms", "-u"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success()
        .stdout(predicate::str::contains("Mbit/s").and(predicate::str::contains("lost")));
    roundtrip_cmd()
        .args(["load", &a, "--rate", "2k", "-t", "500ms", "--warmup", "0"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success()
        .stdout(
            predicate::str::contains("RTT from scheduled send")
                .and(predicate::str::contains("schedule lag"))
                .and(predicate::str::contains("rate")),
        );
    // A rate this machine cannot send: the run still succeeds and says what it achieved.
    roundtrip_cmd()
        .args([
            "load", &a, "--rate", "10M", "-s", "64k", "-t", "500ms", "--warmup", "0",
        ])
        .timeout(Duration::from_secs(60))
        .assert()
        .success()
        .stdout(
            predicate::str::contains("rate NOT held").and(predicate::str::contains("achieved")),
        );
    // A vanished server: exit 1 and a one-line error.
    let port = free_port();
    roundtrip_cmd()
        .args(["tp", &format!("127.0.0.1:{port}"), "-t", "500ms"])
        .timeout(Duration::from_secs(60))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("cannot connect"));
}

#[test]
fn realtime_sender_runs_when_root() {
    if !common::require_root("--realtime sets SCHED_FIFO") {
        return;
    }
    let (_srv, addr) = embedded();
    let mut c = load_config(addr, Transport::Tcp);
    c.realtime = true;
    c.rate = 20_000.0;
    let r = match load::run(&c) {
        Ok(r) => r,
        // Root without CAP_SYS_NICE (some containers): the refusal must be the clear one.
        // Root without CAP_SYS_NICE (some containers): locally a skip; under CI a failure, since the
        // real-time sender would go untested.
        Err(e) if e.to_string().contains("SCHED_FIFO") => {
            common::skip(&format!("root here may not use SCHED_FIFO: {e}"));
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.answered > 0);
    assert_eq!(r.lag.len(), r.sent);
}

/// Sockets of `port` (local side) in CLOSE-WAIT, from ss(8).
fn close_wait_on(port: u16) -> Vec<String> {
    let o = std::process::Command::new("ss")
        .args(["-tanH", "state", "close-wait"])
        .arg(format!("( sport = :{port} )"))
        .output()
        .expect("ss (iproute2) runs");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

/// Class: the server closes its side when the peer has closed. Clients of every TCP path (throughput
/// receive, several streams, reverse streams, synchronous messages, ping, load) are interrupted with SIGINT
/// (or killed) at several moments, as a user's Ctrl-C does; the server (the same code is the agent's
/// responder) must leave no socket in CLOSE-WAIT: at most a few seconds later, not at its 300 s idle timeout.
#[test]
fn interrupted_clients_leave_no_close_wait_on_the_server() {
    if !common::have("ss") {
        return;
    }
    let bin = assert_cmd::cargo::cargo_bin("roundtrip");
    let mut server = std::process::Command::new(&bin)
        .args(["server", "--bind", "127.0.0.1", "-p", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stderr.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port: u16 = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in: {line}"));
    let to = format!("127.0.0.1:{port}");
    // The sharpest case first: data and the FIN arriving together (one event reports both; a server that
    // stops at a short read never sees the end of file). 40 clients each send one message that needs no
    // answer (sockperf flags: CLIENT, no PONG_REQUEST) and close at once.
    let mut raw = Vec::new();
    for seq in 0..40u64 {
        let mut c = TcpStream::connect(&to).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut m = vec![0u8; 1000];
        m[0..8].copy_from_slice(&seq.to_be_bytes());
        m[8..10].copy_from_slice(&roundtrip::wire::sockperf::Flags::CLIENT.0.to_be_bytes());
        m[10..14].copy_from_slice(&1000u32.to_be_bytes());
        std::io::Write::write_all(&mut c, &m).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        raw.push(c);
    }
    let runs: [&[&str]; 7] = [
        &["throughput", &to, "-t", "10s"],
        &["throughput", &to, "-t", "10s", "-P", "4"],
        &["throughput", &to, "-t", "10s", "-R", "-P", "3"],
        &["throughput", &to, "-t", "10s", "--sync"],
        &["throughput", &to, "-t", "10s", "-s", "64,1k,64k"],
        &["ping", &to, "-t", "10s", "-i", "1ms"],
        &["load", &to, "-r", "10k", "-t", "10s"],
    ];
    for (i, args) in runs.iter().enumerate() {
        for (j, after_ms) in [300u64, 800, 1300].into_iter().enumerate() {
            let mut c = std::process::Command::new(&bin)
                .args(*args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(after_ms));
            // Mostly Ctrl-C; one run in three killed outright (no goodbye from the client at all).
            let sig = if (i + j) % 3 == 2 {
                libc::SIGKILL
            } else {
                libc::SIGINT
            };
            unsafe { libc::kill(c.id() as i32, sig) };
            let _ = c.wait();
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut left = close_wait_on(port);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        left = close_wait_on(port);
    }
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        left.is_empty(),
        "the server kept {} sockets in CLOSE-WAIT after its clients went:\n{}",
        left.len(),
        left.join("\n")
    );
}
