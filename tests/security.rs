//! `roundtrip server` tried as an attacker would: UDP reflection and amplification, forged sources, replayed
//! cookies, slowloris, clients that never read, connection floods, and the pre-shared key. Every limit at a
//! small scale, against the real server over loopback.

mod common;

use common::procs::Kill;

use assert_cmd::Command;
use roundtrip::probe::ping::{self, NoObserver, PeerKind, PingConfig, Stop, Transport};
use roundtrip::probe::stream::StreamError;
use roundtrip::probe::throughput::{self, ThroughputConfig};
use roundtrip::server::{
    self, DatagramIssue, DropKind, Limits, RefuseReason, ServerConfig, ServerEvent, ServerHandle,
};
use roundtrip::wire::auth::Psk;
use roundtrip::wire::sockperf::{Control, Feature, Flags, Header, Hello};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Events = Arc<Mutex<Vec<ServerEvent>>>;

fn start(config: ServerConfig) -> (ServerHandle, Events) {
    let events: Events = Arc::default();
    let e = events.clone();
    let srv = server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            ..config
        },
        move |ev| e.lock().unwrap().push(ev),
    )
    .expect("server");
    (srv, events)
}

fn limits(f: impl FnOnce(&mut Limits)) -> ServerConfig {
    let mut l = Limits::default();
    f(&mut l);
    ServerConfig {
        limits: l,
        ..Default::default()
    }
}

/// Everything `sock` receives for `wait`: (datagrams, bytes).
fn drain(sock: &UdpSocket, wait: Duration) -> (usize, usize) {
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 70_000];
    let (mut n, mut bytes) = (0, 0);
    let end = Instant::now() + wait;
    while Instant::now() < end {
        if let Ok(k) = sock.recv(&mut buf) {
            n += 1;
            bytes += k;
        }
    }
    (n, bytes)
}

/// The 35-byte datagram of the issue: a version 1 reverse request (kind 5, 60000-byte messages, 2 s), no hello.
fn old_attack() -> Vec<u8> {
    let mut m = vec![0xff; 8];
    m.extend_from_slice(&[0, 3, 0, 0, 0, 35]);
    m.extend_from_slice(b"RTRP");
    m.push(5);
    m.extend_from_slice(&60000u64.to_be_bytes());
    m.extend_from_slice(&2_000_000_000u64.to_be_bytes());
    m
}

fn reverse_request(cookie: Option<[u8; 16]>) -> Vec<u8> {
    Control::ReverseRequest {
        size: 60000,
        duration: Duration::from_secs(2),
        cookie,
    }
    .encode(Flags::CLIENT.with(Flags::PONG_REQUEST))
}

fn grant_of(sock: &UdpSocket) -> [u8; 16] {
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 100];
    let n = sock.recv(&mut buf).expect("a grant");
    match Control::decode(&buf[..n]) {
        Some(Control::ReverseGrant { cookie, .. }) => cookie,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn one_unsolicited_datagram_makes_the_server_send_nothing() {
    let (srv, events) = start(ServerConfig::default());
    let target = srv.udp_addr().unwrap();
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    victim.send_to(&old_attack(), target).unwrap();
    // Not one byte: the cookie answer (48 bytes) would be larger than the 35-byte request.
    assert_eq!(drain(&victim, Duration::from_secs(3)), (0, 0));
    assert!(events.lock().unwrap().iter().any(|e| matches!(
        e,
        ServerEvent::Datagram {
            issue: DatagramIssue::TooShort,
            ..
        }
    )));
    // A current-format request (64 bytes) without a cookie gets one 48-byte grant and no stream.
    victim.send_to(&reverse_request(None), target).unwrap();
    assert_eq!(drain(&victim, Duration::from_secs(3)), (1, 48));
}

#[test]
fn a_cookie_from_another_address_starts_nothing() {
    let (srv, events) = start(ServerConfig::default());
    let target = srv.udp_addr().unwrap();
    let asker = UdpSocket::bind("127.0.0.1:0").unwrap();
    asker.send_to(&reverse_request(None), target).unwrap();
    let cookie = grant_of(&asker);
    // A second socket (another port, so another address) replays the first one's cookie.
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    other
        .send_to(&reverse_request(Some(cookie)), target)
        .unwrap();
    // It gets a fresh grant of its own (48 bytes, less than its 64-byte request), not a stream.
    assert_eq!(drain(&other, Duration::from_secs(3)), (1, 48));
    assert_eq!(drain(&asker, Duration::from_millis(300)), (0, 0));
    assert!(events.lock().unwrap().iter().any(|e| matches!(
        e,
        ServerEvent::Datagram {
            issue: DatagramIssue::BadCookie,
            ..
        }
    )));
    // The cookie works from the address it was made for.
    asker
        .send_to(&reverse_request(Some(cookie)), target)
        .unwrap();
    let (n, bytes) = drain(&asker, Duration::from_millis(500));
    assert!(n > 10 && bytes > 10 * 60000, "{n} datagrams, {bytes} bytes");
}

/// An IPv4 + UDP datagram from `from` to `to` carrying `payload`, for a raw socket (the kernel fills in the IP
/// checksum; a zero UDP checksum means none).
fn forged(from: SocketAddr, to: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
        panic!("IPv4 only")
    };
    let total = 20 + 8 + payload.len();
    let mut p = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ];
    p.extend_from_slice(&f.ip().octets());
    p.extend_from_slice(&t.ip().octets());
    p.extend_from_slice(&f.port().to_be_bytes());
    p.extend_from_slice(&t.port().to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

#[test]
fn a_forged_source_address_receives_no_stream() {
    if !common::require_root("a raw socket forges the source address") {
        return;
    }
    let (srv, _) = start(ServerConfig::default());
    let target = srv.udp_addr().unwrap();
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    // The attacker gets a valid cookie for its own address...
    attacker.send_to(&reverse_request(None), target).unwrap();
    let cookie = grant_of(&attacker);
    let raw = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::RAW,
        Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
    )
    .expect("raw socket");
    let from = victim.local_addr().unwrap();
    // ...then sends, with the victim's address as the source: the old 35-byte attack, and a request carrying
    // its own cookie.
    for payload in [old_attack(), reverse_request(Some(cookie))] {
        raw.send_to(&forged(from, target, &payload), &target.into())
            .expect("send a forged datagram");
    }
    // The victim receives at most the 48-byte grant answering the 64-byte forged request: never a stream.
    let (n, bytes) = drain(&victim, Duration::from_secs(3));
    assert!(n <= 1 && bytes <= 48, "{n} datagrams, {bytes} bytes");
    assert_eq!(drain(&attacker, Duration::from_millis(300)), (0, 0));
}

fn tp(addr: SocketAddr, duration: Duration) -> ThroughputConfig {
    let mut c = ThroughputConfig::new(addr);
    c.link.transport = Transport::Udp;
    c.sizes = vec![1400];
    c.reverse = true;
    c.duration = duration;
    c.report_interval = Duration::from_millis(200);
    c.link.timeout = Duration::from_secs(5);
    c
}

#[test]
fn udp_reverse_works_and_is_capped() {
    let (srv, _) = start(limits(|l| {
        l.max_reverse = Duration::from_secs(1);
        l.max_reverse_streams = 1;
    }));
    let addr = srv.udp_addr().unwrap();
    // The real client still works through the cookie.
    let r = throughput::run(
        &tp(addr, Duration::from_millis(600)),
        &mut throughput::NoObserver,
    )
    .unwrap();
    let run = &r.runs[0];
    assert!(run.error.is_none(), "{:?}", run.error);
    assert!(run.received.expect("counted").0 > 0);
    // Longer than --max-reverse: refused before streaming, with what to do.
    let r = throughput::run(
        &tp(addr, Duration::from_secs(2)),
        &mut throughput::NoObserver,
    )
    .unwrap();
    let e = r.runs[0].error.as_ref().expect("refused").to_string();
    assert!(
        e.contains("at most 1.0s") && e.contains("--max-reverse"),
        "{e}"
    );
    drop(srv);
    // One stream at a time: a second client meanwhile is told the server is busy.
    let (srv, events) = start(limits(|l| l.max_reverse_streams = 1));
    let addr = srv.udp_addr().unwrap();
    let long = tp(addr, Duration::from_secs(25));
    let cancel = long.cancel.clone();
    let first = std::thread::spawn(move || throughput::run(&long, &mut throughput::NoObserver));
    wait_for("the first stream", || {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, ServerEvent::ReverseStarted { .. }))
    });
    let r = throughput::run(
        &tp(addr, Duration::from_millis(500)),
        &mut throughput::NoObserver,
    )
    .unwrap();
    cancel.store(true, std::sync::atomic::Ordering::SeqCst);
    let e = r.runs[0].error.as_ref().map(|e| e.to_string());
    assert!(
        e.as_deref()
            .is_some_and(|e| e.contains("already runs 1 of its 1 UDP reverse streams")),
        "{e:?}"
    );
    let first = first.join().unwrap().unwrap();
    assert!(first.runs[0].received.expect("counted").0 > 0);
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// True when the server closed `s` (end of stream or reset) within the read timeout.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                );
            }
        }
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ping_once(addr: SocketAddr) -> Result<u64, String> {
    let mut c = PingConfig::new(addr);
    c.stop = Stop::Count(3);
    c.warmup = Duration::ZERO;
    c.link.timeout = Duration::from_secs(5);
    match ping::run(&c, &mut NoObserver) {
        Ok(r) if r.error.is_none() => Ok(r.received),
        Ok(r) => Err(r.error.unwrap().to_string()),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn connections_over_the_limits_are_closed_at_once() {
    let (srv, events) = start(limits(|l| {
        l.max_clients = 3;
        l.max_per_address = 2;
    }));
    let addr = srv.tcp_addr().unwrap();
    let a = connect(addr);
    let b = connect(addr);
    wait_for("two clients", || srv.clients() == 2);
    // A third from the same address: closed at once.
    let mut c = connect(addr);
    assert!(closed(&mut c));
    // From another loopback address it is let in (the total is 3)...
    let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    other
        .bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into())
        .unwrap();
    other.connect(&addr.into()).unwrap();
    wait_for("three clients", || srv.clients() == 3);
    // ...and the fourth is over --max-clients.
    let d = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    d.bind(&SocketAddr::from(([127, 0, 0, 3], 0)).into())
        .unwrap();
    d.connect(&addr.into()).unwrap();
    let mut d: TcpStream = d.into();
    d.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert!(closed(&mut d));
    let ev = events.lock().unwrap();
    assert!(ev.iter().any(|e| matches!(
        e,
        ServerEvent::Refused {
            why: RefuseReason::MaxPerAddress(2),
            ..
        }
    )));
    assert!(ev.iter().any(|e| matches!(
        e,
        ServerEvent::Refused {
            why: RefuseReason::MaxClients(3),
            ..
        }
    )));
    drop(ev);
    // Leaving frees the places.
    drop((a, b));
    wait_for("the two to leave", || srv.clients() == 1);
    assert_eq!(ping_once(addr), Ok(3));
}

fn dropped_for(events: &Events, kind: DropKind) -> bool {
    events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, ServerEvent::Disconnected { reason: Some(r), .. } if r.kind == kind))
}

#[test]
fn slowloris_is_dropped_at_the_message_deadline() {
    let (srv, events) = start(limits(|l| l.message_deadline = Duration::from_millis(500)));
    let addr = srv.tcp_addr().unwrap();
    // Announces 1000 bytes and sends one more every 100 ms: still incomplete after the deadline.
    let mut s = connect(addr);
    let mut m = vec![7u8; 1000];
    Header {
        seq: 1,
        flags: Flags(3),
        len: 1000,
    }
    .write(&mut m);
    s.write_all(&m[..14]).unwrap();
    let started = Instant::now();
    let mut sent = 14;
    while !dropped_for(&events, DropKind::Deadline) {
        assert!(started.elapsed() < Duration::from_secs(30), "never dropped");
        if s.write_all(&m[sent..sent + 1]).is_err() {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for("the deadline drop", || {
        dropped_for(&events, DropKind::Deadline)
    });
    assert!(sent < 1000);
    assert!(closed(&mut s));
    // A well-behaved client meanwhile and after is answered.
    assert_eq!(ping_once(addr), Ok(3));
}

#[test]
fn idle_clients_are_dropped_after_the_idle_timeout() {
    let (srv, events) = start(limits(|l| {
        l.idle_timeout = Some(Duration::from_millis(300))
    }));
    let mut s = connect(srv.tcp_addr().unwrap());
    assert!(closed(&mut s));
    assert!(dropped_for(&events, DropKind::Idle));
}

#[test]
fn a_client_that_never_reads_its_answers_is_dropped() {
    let (srv, events) = start(limits(|l| l.message_deadline = Duration::from_millis(500)));
    let addr = srv.tcp_addr().unwrap();
    let mut s = connect(addr);
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut m = vec![1u8; 64 * 1024];
    Header {
        seq: 1,
        flags: Flags(3),
        len: m.len() as u32,
    }
    .write(&mut m);
    // Requests until the server stops reading (its answers fill both socket buffers), never reading answers.
    let end = Instant::now() + Duration::from_secs(60);
    while !dropped_for(&events, DropKind::StoppedReading) {
        assert!(Instant::now() < end, "never dropped");
        let _ = s.write(&m);
    }
    // Its held answers are gone with it, and others are served.
    assert_eq!(ping_once(addr), Ok(3));
}

/// VmRSS and thread count of a process.
fn rss_threads(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("VmRSS:") * 1024, field("Threads:"))
}

fn server_process(
    extra: &[&str],
) -> (
    Kill,
    SocketAddr,
    std::io::BufReader<std::process::ChildStderr>,
) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("roundtrip"))
        .args(["server", "--bind", "127.0.0.1", "--port", "0"])
        .args(extra)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let port: u16 = line
        .split("tcp 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let mut exposure = String::new();
    err.read_line(&mut exposure).unwrap();
    (Kill(child), SocketAddr::from(([127, 0, 0, 1], port)), err)
}

#[test]
fn announced_lengths_and_many_connections_cost_little() {
    let (srv, addr, _err) = server_process(&[]);
    let pid = srv.0.id();
    // Let it settle, then measure.
    assert_eq!(ping_once(addr), Ok(3));
    let (rss0, threads0) = rss_threads(pid);
    // The issue's attack: 300 connections that each announce a 256 KiB message and go silent (spread over
    // source addresses so --max-per-address does not refuse them).
    let mut held = Vec::new();
    for i in 0..300u32 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::from(([127, 0, 1, (i % 250 + 1) as u8], 0)).into())
            .unwrap();
        s.connect(&addr.into()).unwrap();
        let mut s: TcpStream = s.into();
        let mut h = [0u8; 100];
        Header {
            seq: 1,
            flags: Flags(3),
            len: 256 * 1024,
        }
        .write(&mut h);
        s.write_all(&h).unwrap();
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ping_once(addr), Ok(3));
    let (rss1, threads1) = rss_threads(pid);
    // The old server grew by 35 MB and 300 threads here; now a few hundred bytes each and no thread.
    assert!(
        rss1 < rss0 + 8 * 1024 * 1024,
        "RSS grew from {rss0} to {rss1} bytes"
    );
    assert_eq!(threads1, threads0, "threads per client");
}

#[test]
fn log_lines_about_bad_clients_are_rate_limited_with_counts() {
    use std::io::BufRead;
    let (_srv, addr, mut err) = server_process(&["--max-clients", "1"]);
    let keep = connect(addr);
    // 50 connections over --max-clients, as fast as they go. On a loaded machine the server can accept and reset
    // one before the client's connect(2) returns, which then fails with ECONNRESET: refused all the same.
    for _ in 0..50 {
        match TcpStream::connect(addr) {
            Ok(mut s) => {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                assert!(closed(&mut s));
            }
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        }
    }
    drop(keep);
    // Every refusal is accounted for: printed, counted on a printed line, or summed up once the second is over.
    let mut counted = 0u64;
    let mut lines = 0;
    let end = Instant::now() + Duration::from_secs(30);
    while counted < 50 {
        assert!(Instant::now() < end, "counted {counted} of 50 refusals");
        let mut l = String::new();
        if err.read_line(&mut l).unwrap() == 0 {
            break;
        }
        if !l.contains("--max-clients") {
            continue;
        }
        lines += 1;
        if let Some(rest) = l.strip_prefix("... ") {
            counted += rest
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        } else {
            counted += 1;
            if let Some(and) = l.split("(and ").nth(1) {
                counted += and
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    assert_eq!(counted, 50);
    assert!(lines < 25, "{lines} lines for 50 refusals");
}

fn key(text: &str) -> (tempfile::TempDir, std::path::PathBuf, Psk) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    std::fs::write(&path, format!("{text}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let psk = Psk::from_file(&path).unwrap();
    (dir, path, psk)
}

fn keyed_ping(
    addr: SocketAddr,
    transport: Transport,
    psk: Option<Psk>,
) -> Result<PeerKind, String> {
    let mut c = PingConfig::new(addr);
    c.link.transport = transport;
    c.stop = Stop::Count(5);
    c.warmup = Duration::ZERO;
    c.link.timeout = Duration::from_secs(3);
    c.link.psk = psk;
    match ping::run(&c, &mut NoObserver) {
        Ok(r) if r.error.is_none() && r.received == 5 => Ok(r.peer),
        Ok(r) => Err(format!("{:?} after {} answers", r.error, r.received)),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn with_a_key_the_server_answers_only_those_who_prove_it() {
    let (_d, _p, psk) = key("the fleet's shared key, 32 bytes+");
    let (_d2, _p2, wrong) = key("somebody else's key of 16+ bytes");
    let (srv, events) = start(ServerConfig {
        psk: Some(psk.clone()),
        ..Default::default()
    });
    let (tcp, udp) = (srv.tcp_addr().unwrap(), srv.udp_addr().unwrap());
    for (addr, t) in [(tcp, Transport::Tcp), (udp, Transport::Udp)] {
        assert_eq!(
            keyed_ping(addr, t, Some(psk.clone())),
            Ok(PeerKind::Roundtrip)
        );
        let e = keyed_ping(addr, t, None).unwrap_err();
        assert!(
            e.contains("requires a pre-shared key") && e.contains("--psk-file"),
            "{e}"
        );
        let e = keyed_ping(addr, t, Some(wrong.clone())).unwrap_err();
        assert!(e.contains("refused our key"), "{e}");
    }
    // A sockperf-format ping without the exchange: over UDP not a byte back, over TCP the connection closes
    // without a byte.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut m = [0u8; 64];
    Header {
        seq: 1,
        flags: Flags(3),
        len: 64,
    }
    .write(&mut m);
    u.send_to(&m, udp).unwrap();
    assert_eq!(drain(&u, Duration::from_secs(1)), (0, 0));
    let mut s = connect(tcp);
    s.write_all(&m).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.is_empty(), "{got:?}");
    // Nor does a UDP reverse request from an address without the key get a cookie.
    u.send_to(&reverse_request(None), udp).unwrap();
    assert_eq!(drain(&u, Duration::from_secs(1)), (0, 0));
    // The challenge answering a hello over UDP is no larger than the hello.
    let hello = Hello::request(Feature::MEASURE.with(Feature::PSK), [3; 16])
        .encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
    u.send_to(&hello, udp).unwrap();
    let (n, bytes) = drain(&u, Duration::from_secs(1));
    assert!(
        n == 1 && bytes <= hello.len(),
        "{n} datagrams, {bytes} bytes"
    );
    let ev = events.lock().unwrap();
    assert!(ev.iter().any(|e| matches!(
        e,
        ServerEvent::Datagram {
            issue: DatagramIssue::Unauthenticated,
            ..
        }
    )));
    assert!(ev.iter().any(|e| matches!(
        e,
        ServerEvent::Disconnected { reason: Some(r), .. } if r.kind == DropKind::BadProof
    )));
    drop(ev);
    // Throughput with the key, both ways.
    let mut c = ThroughputConfig::new(tcp);
    c.duration = Duration::from_millis(300);
    c.link.psk = Some(psk.clone());
    let r = throughput::run(&c, &mut throughput::NoObserver).unwrap();
    assert!(r.runs[0].error.is_none(), "{:?}", r.runs[0].error);
    let mut c = tp(udp, Duration::from_millis(300));
    c.link.psk = Some(psk);
    let r = throughput::run(&c, &mut throughput::NoObserver).unwrap();
    assert!(r.runs[0].error.is_none(), "{:?}", r.runs[0].error);
}

#[test]
fn a_client_with_a_key_refuses_a_server_without_one() {
    let (_d, _p, psk) = key("the fleet's shared key, 32 bytes+");
    let (srv, _) = start(ServerConfig::default());
    for (addr, t) in [
        (srv.tcp_addr().unwrap(), Transport::Tcp),
        (srv.udp_addr().unwrap(), Transport::Udp),
    ] {
        let e = keyed_ping(addr, t, Some(psk.clone())).unwrap_err();
        assert!(
            e.contains("holds no key") && e.contains("without --psk-file"),
            "{e}"
        );
    }
    // A throughput client says the same.
    let mut c = ThroughputConfig::new(srv.tcp_addr().unwrap());
    c.link.psk = Some(psk);
    match throughput::run(&c, &mut throughput::NoObserver) {
        Err(StreamError::Handshake { .. }) => {}
        Ok(r) if r.runs[0].error.is_some() => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn sockperf_clients_get_nothing_from_a_keyed_server() {
    if !common::have("sockperf") {
        return;
    }
    let (_d, path, _) = key("the fleet's shared key, 32 bytes+");
    let (_srv, addr, _err) = server_process(&["--psk-file", path.to_str().unwrap()]);
    let port = addr.port().to_string();
    for extra in [&["--tcp"][..], &[][..]] {
        let out = std::process::Command::new("sockperf")
            .args(["ping-pong", "-i", "127.0.0.1", "-p", &port, "-t", "1"])
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("No messages were received") || text.contains("forcibly closed"),
            "sockperf {extra:?} measured something:\n{text}"
        );
    }
}

#[test]
fn key_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "abc").unwrap();
    for args in [
        vec![
            "server",
            "--port",
            "0",
            "--psk-file",
            short.to_str().unwrap(),
        ],
        vec!["ping", "127.0.0.1:9", "--psk-file", short.to_str().unwrap()],
        vec!["ping", "127.0.0.1:9", "--psk-file", "/nonexistent/key"],
        vec!["server", "--port", "0", "--max-clients", "0"],
    ] {
        let out = Command::cargo_bin("roundtrip")
            .unwrap()
            .args(&args)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("key") || err.contains("--max-clients"),
            "{args:?}: {err}"
        );
    }
}

fn hello_over(s: &mut TcpStream, wanted: Feature) -> Feature {
    s.write_all(&Hello::request(wanted, [1; 16]).encode(Flags::CLIENT.with(Flags::PONG_REQUEST)))
        .unwrap();
    let mut a = [0u8; roundtrip::wire::sockperf::HELLO_LEN];
    s.read_exact(&mut a).unwrap();
    Hello::decode(&a).unwrap().features
}

fn replay_request(seq: u64, answer_len: u64, delay: Duration) -> Vec<u8> {
    use roundtrip::wire::sockperf::{REPLAY_MIN_LEN, ReplayRequest};
    let mut m = vec![0u8; REPLAY_MIN_LEN + 10];
    Header {
        seq,
        flags: Flags::CLIENT.with(Flags::PONG_REQUEST).with(Flags::REPLAY),
        len: m.len() as u32,
    }
    .write(&mut m);
    ReplayRequest { answer_len, delay }.write(&mut m);
    m
}

#[test]
fn replay_answers_only_with_allow_replay_in_order_and_after_their_delay() {
    // Without --allow-replay the feature is not granted.
    let (srv, _) = start(ServerConfig::default());
    let mut s = connect(srv.tcp_addr().unwrap());
    assert!(!hello_over(&mut s, Feature::ALL).contains(Feature::REPLAY));
    drop(srv);
    let (srv, events) = start(ServerConfig {
        allow_replay: true,
        ..Default::default()
    });
    let addr = srv.tcp_addr().unwrap();
    let mut s = connect(addr);
    assert!(hello_over(&mut s, Feature::REPLAY).contains(Feature::REPLAY));
    // Three pipelined requests: 1 MiB after 30 ms, 100 bytes at once, 20 bytes after 10 ms. Answers come in
    // request order, each complete, the first not before its delay.
    let t0 = Instant::now();
    let mut reqs = replay_request(1, 1 << 20, Duration::from_millis(30));
    reqs.extend(replay_request(2, 100, Duration::ZERO));
    reqs.extend(replay_request(3, 20, Duration::from_millis(10)));
    s.write_all(&reqs).unwrap();
    for (seq, len) in [(1u64, 1usize << 20), (2, 100), (3, 20)] {
        let mut m = vec![0u8; len];
        s.read_exact(&mut m).unwrap();
        if seq == 1 {
            assert!(t0.elapsed() >= Duration::from_millis(30), "answered early");
        }
        let h = Header::parse(&m, 1 << 24).unwrap();
        assert_eq!((h.seq, h.len as usize), (seq, len));
        assert!(h.flags.contains(Flags::REPLAY) && !h.flags.contains(Flags::CLIENT));
        // The payload is the documented filler, not zeros and not leftovers of another buffer.
        for (j, b) in m.iter().enumerate().skip(14) {
            assert_eq!(
                *b,
                (j as u8).wrapping_mul(31).wrapping_add(7),
                "byte {j} of {seq}"
            );
        }
    }
    // Out of range: the connection is dropped with a protocol error.
    s.write_all(&replay_request(4, 1 << 30, Duration::ZERO))
        .unwrap();
    assert!(closed(&mut s));
    wait_for("the protocol drop", || {
        dropped_for(&events, DropKind::Protocol)
    });
}
