//! The proxy's limits and its control API's guard, at a small scale, over real loopback sockets: the client
//! over `max_clients`, idle connections, the control token, oversized and slow API requests.

mod common;

use assert_cmd::Command;
use roundtrip::proxy::{self, ControlToken, ProxyConfig, ProxyError, ProxyHandle};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn local() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// An echo server for the proxy to relay to.
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind(local()).unwrap();
    let a = l.local_addr().unwrap();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    a
}

fn echo(c: &mut TcpStream, msg: &[u8]) -> std::io::Result<()> {
    c.write_all(msg)?;
    let mut back = vec![0u8; msg.len()];
    c.read_exact(&mut back)?;
    assert_eq!(back, msg);
    Ok(())
}

fn connect(addr: SocketAddr) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c
}

/// Waits (generously) until `cond` holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// True when the proxy closed `c` (end of file or reset) without relaying anything.
fn closed_at_once(c: &mut TcpStream) -> bool {
    let _ = c.write_all(b"hello");
    let mut b = [0u8; 16];
    match c.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
        ),
    }
}

#[test]
fn a_client_over_max_clients_is_closed_and_the_next_after_one_leaves_is_served() {
    let mut c = ProxyConfig::new(local(), echo_server());
    c.max_clients = 2;
    let p = proxy::start(&c).unwrap();
    let mut a = connect(p.listen_addr());
    let mut b = connect(p.listen_addr());
    echo(&mut a, b"a").unwrap();
    echo(&mut b, b"b").unwrap();
    let mut third = connect(p.listen_addr());
    assert!(closed_at_once(&mut third), "the third client was relayed");
    let t = p.shared().totals();
    assert_eq!(t.refused.load(Ordering::Relaxed), 1);
    // The two admitted ones are unaffected.
    echo(&mut a, b"still").unwrap();
    drop(b);
    eventually("the second client to be released", || {
        t.active.load(Ordering::SeqCst) == 1
    });
    let mut fourth = connect(p.listen_addr());
    echo(&mut fourth, b"welcome").unwrap();
    assert_eq!(t.refused.load(Ordering::Relaxed), 1);
}

#[test]
fn udp_clients_over_the_limit_get_no_session() {
    // A UDP echo upstream.
    let up = UdpSocket::bind(local()).unwrap();
    let up_addr = up.local_addr().unwrap();
    thread::spawn(move || {
        let mut b = [0u8; 2048];
        while let Ok((n, from)) = up.recv_from(&mut b) {
            let _ = up.send_to(&b[..n], from);
        }
    });
    let mut c = ProxyConfig::new(local(), up_addr);
    c.udp = true;
    c.max_clients = 1;
    let p = proxy::start(&c).unwrap();
    let first = UdpSocket::bind(local()).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    first.send_to(b"one", p.listen_addr()).unwrap();
    let mut b = [0u8; 16];
    let n = first.recv(&mut b).unwrap();
    assert_eq!(&b[..n], b"one");
    let second = UdpSocket::bind(local()).unwrap();
    second.send_to(b"two", p.listen_addr()).unwrap();
    let t = p.shared().totals();
    eventually("the second address to be refused", || {
        t.refused.load(Ordering::Relaxed) == 1
    });
    second
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        second.recv(&mut b).is_err(),
        "the second address was relayed"
    );
    // The first keeps its session.
    first.send_to(b"again", p.listen_addr()).unwrap();
    let n = first.recv(&mut b).unwrap();
    assert_eq!(&b[..n], b"again");
}

#[test]
fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
    let mut c = ProxyConfig::new(local(), echo_server());
    c.idle_timeout = Some(Duration::from_millis(1500));
    let p = proxy::start(&c).unwrap();
    let mut idle = connect(p.listen_addr());
    let mut busy = connect(p.listen_addr());
    echo(&mut idle, b"x").unwrap();
    // The busy one talks every 100 ms for well over the idle time; the idle one says nothing.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        echo(&mut busy, b"tick").unwrap();
        thread::sleep(Duration::from_millis(100));
    }
    let t = p.shared().totals();
    eventually("the idle connection to be closed", || {
        t.idle_closed.load(Ordering::Relaxed) >= 1
    });
    assert!(
        closed_at_once(&mut idle),
        "the idle connection still relays"
    );
    echo(&mut busy, b"alive").unwrap();
    assert_eq!(t.idle_closed.load(Ordering::Relaxed), 1);
}

#[test]
fn a_control_api_on_a_public_address_needs_a_token() {
    let mut c = ProxyConfig::new(local(), echo_server());
    c.control = Some("0.0.0.0:0".parse().unwrap());
    match proxy::start(&c) {
        Err(e @ ProxyError::ControlExposed { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("--control-token-file"), "{msg}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a control api on 0.0.0.0 started without a token"),
    }
    // The command line says so in one line, before listening anywhere.
    let err = proxy_cli_error(&[]);
    assert!(err.contains("--control-token-file"), "{err}");
    // A token file that is too short is refused, naming the file.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, "short\n").unwrap();
    let err = proxy_cli_error(&["--control-token-file".as_ref(), f.as_os_str()]);
    assert!(err.contains(&f.display().to_string()), "{err}");
}

/// Runs `roundtrip proxy` with its control API on 0.0.0.0 and `extra` arguments, expecting it to fail at start
/// with a one-line error; returns that line.
fn proxy_cli_error(extra: &[&std::ffi::OsStr]) -> String {
    let out = Command::cargo_bin("roundtrip")
        .unwrap()
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--control",
            "0.0.0.0:0",
        ])
        .args(extra)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    err
}

fn proxy_with_token() -> ProxyHandle {
    let mut c = ProxyConfig::new(local(), echo_server());
    c.control = Some(local());
    c.control_token = Some(ControlToken::new(TOKEN).unwrap());
    proxy::start(&c).unwrap()
}

/// One HTTP request; (status, body).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut s = connect(addr);
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let code = resp[9..12].parse().unwrap();
    (code, resp.split_once("\r\n\r\n").unwrap().1.to_string())
}

#[test]
fn the_token_is_required_and_checked() {
    let p = proxy_with_token();
    let ctl = p.control_addr().unwrap();
    let (code, body) = http(ctl, "GET", "/impairment", None, "");
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("Bearer"), "{body}");
    let wrong = format!("Bearer {}", TOKEN.replace('0', "1"));
    assert_eq!(http(ctl, "GET", "/impairment", Some(&wrong), "").0, 401);
    let short = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    assert_eq!(http(ctl, "GET", "/impairment", Some(&short), "").0, 401);
    let right = format!("Bearer {TOKEN}");
    let (code, body) = http(ctl, "GET", "/impairment", Some(&right), "");
    assert_eq!(code, 200, "{body}");
    // A refused PUT changed nothing; an accepted one did.
    let put = r#"{"delay_ns": 5000000}"#;
    assert_eq!(http(ctl, "PUT", "/impairment", Some(&wrong), put).0, 401);
    assert_eq!(p.shared().impairment().delay_ns, 0);
    assert_eq!(http(ctl, "PUT", "/impairment", Some(&right), put).0, 200);
    assert_eq!(p.shared().impairment().delay_ns, 5_000_000);
    assert_eq!(
        p.shared().totals().control_refused.load(Ordering::Relaxed),
        4
    );
}

#[test]
fn an_oversized_body_gets_413_before_it_is_read() {
    let p = proxy_with_token();
    let ctl = p.control_addr().unwrap();
    let mut s = connect(ctl);
    // Announce 100 MB and send none of it: the answer comes at once.
    write!(
        s,
        "PUT /impairment HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 100000000\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert_eq!(p.shared().impairment().delay_ns, 0);
}

#[test]
fn a_slow_api_client_blocks_neither_other_api_clients_nor_relayed_traffic() {
    let p = proxy_with_token();
    let ctl = p.control_addr().unwrap();
    // Slowloris: a request head sent a byte at a time, never finished.
    let mut slow = connect(ctl);
    slow.write_all(b"GET /impairm").unwrap();
    let mut relayed = connect(p.listen_addr());
    for i in 0..20 {
        echo(&mut relayed, format!("ping {i}").as_bytes()).unwrap();
        let (code, _) = http(
            ctl,
            "GET",
            "/counters",
            Some(&format!("Bearer {TOKEN}")),
            "",
        );
        assert_eq!(code, 200);
        let _ = slow.write_all(b"e");
    }
    // The slow one is cut off at the request deadline with 408 (or a close).
    let mut resp = String::new();
    let _ = slow.read_to_string(&mut resp);
    assert!(
        resp.is_empty() || resp.starts_with("HTTP/1.1 408"),
        "{resp}"
    );
}

#[test]
fn too_many_api_clients_at_once_get_503_and_the_api_recovers() {
    let p = proxy_with_token();
    let ctl = p.control_addr().unwrap();
    let held: Vec<TcpStream> = (0..proxy::control::MAX_REQUESTS)
        .map(|_| {
            let mut s = connect(ctl);
            s.write_all(b"GET").unwrap();
            s
        })
        .collect();
    let t = p.shared().totals();
    // One more is answered 503 (not an empty reply).
    eventually("an api client over the cap to be refused with 503", || {
        let mut s = connect(ctl);
        let _ = s.write_all(b"GET /counters HTTP/1.1\r\n\r\n");
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        r.starts_with("HTTP/1.1 503") && t.control_refused.load(Ordering::Relaxed) >= 1
    });
    drop(held);
    eventually("the api to answer again", || {
        let mut s = connect(ctl);
        let _ = write!(
            s,
            "GET /counters HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        );
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        r.starts_with("HTTP/1.1 200")
    });
}

/// Threads of a running process, from /proc/PID/status.
fn threads_of(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn many_busy_connections_share_a_few_threads() {
    // 300 connections open at once, all of them busy in turn, through a pass-through proxy and a delayed one:
    // the proxy's threads stay a small fixed number (its event loops, accept, main), not two per connection.
    const CONNS: usize = 300;
    let upstream = echo_server();
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    for extra in [&[][..], &["--delay", "2ms"][..]] {
        let mut kids = common::procs::Kids(Vec::new());
        let port = kids.proxy(upstream.port(), extra);
        let pid = kids.0.last().unwrap().id();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut conns: Vec<TcpStream> = (0..CONNS).map(|_| connect(addr)).collect();
        for round in 0..3u8 {
            for (i, c) in conns.iter_mut().enumerate() {
                echo(c, &[round, (i % 251) as u8, 7, 7]).unwrap();
            }
        }
        // Every connection is open and has relayed data both ways; the short-lived connect threads end.
        let bound = cores.min(16) + 8;
        eventually(
            &format!("the proxy ({extra:?}) to run on at most {bound} threads"),
            || threads_of(pid) <= bound,
        );
        for (i, c) in conns.iter_mut().enumerate() {
            echo(c, &[9, (i % 251) as u8]).unwrap();
        }
        assert!(threads_of(pid) <= bound, "{} threads", threads_of(pid));
    }
}

#[test]
fn the_bearer_scheme_is_accepted_in_any_case() {
    let p = proxy_with_token();
    let ctl = p.control_addr().unwrap();
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let (code, body) = http(
            ctl,
            "GET",
            "/impairment",
            Some(&format!("{scheme} {TOKEN}")),
            "",
        );
        assert_eq!(code, 200, "{scheme}: {body}");
    }
    // Another scheme, or the scheme alone, is still refused.
    for auth in [
        format!("Basic {TOKEN}"),
        "Bearer".to_string(),
        TOKEN.to_string(),
    ] {
        assert_eq!(
            http(ctl, "GET", "/impairment", Some(&auth), "").0,
            401,
            "{auth}"
        );
    }
}

#[test]
fn two_different_content_lengths_get_400_and_change_nothing() {
    let p = proxy_with_token();
    let ctl = p.control_addr().unwrap();
    let put = r#"{"delay_ns": 5000000}"#;
    let mut s = connect(ctl);
    write!(
        s,
        "PUT /impairment HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 2\r\nContent-Length: {}\r\n\r\n{put}",
        put.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(
        resp.contains("two different Content-Length headers"),
        "{resp}"
    );
    assert_eq!(p.shared().impairment().delay_ns, 0);
    // The same length twice is one length.
    let mut s = connect(ctl);
    write!(
        s,
        "PUT /impairment HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {n}\r\nContent-Length: {n}\r\n\r\n{put}",
        n = put.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

/// The error line of `roundtrip ARGS` refused before any I/O (exit 2).
fn refused_line(args: &[&str]) -> String {
    let out = Command::new(common::procs::bin())
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    err
}

#[test]
fn api_fields_get_their_flags_bounds() {
    // The TCP proxy's API: window_bytes and reorder_delay_ns as --window and --reorder-delay.
    let p = proxy_with_token();
    let ctl = p.control_addr().unwrap();
    let auth = format!("Bearer {TOKEN}");
    for body in [
        format!(r#"{{"window_bytes": {}}}"#, u64::MAX),
        format!(r#"{{"window_bytes": {}}}"#, (1u64 << 30) + 1),
        format!(r#"{{"reorder_delay_ns": {}}}"#, u64::MAX),
    ] {
        let (code, resp) = http(ctl, "PATCH", "/impairment", Some(&auth), &body);
        assert_eq!(code, 400, "{body}: {resp}");
    }
    let (code, resp) = http(
        ctl,
        "PATCH",
        "/impairment",
        Some(&auth),
        r#"{"window_bytes": 1073741824}"#,
    );
    assert_eq!(code, 200, "{resp}");
    let (_, resp) = http(
        ctl,
        "PATCH",
        "/impairment",
        Some(&auth),
        &format!(r#"{{"window_bytes": {}}}"#, u64::MAX),
    );
    let cli = refused_line(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:9",
        "--window",
        "2GiB",
    ]);
    // One range, one wording: the API names its field, the command line its flag.
    assert!(
        resp.contains("out of range: give 1 byte to 1024 MiB"),
        "{resp}"
    );
    assert!(
        cli.contains("--window 2147483648 bytes is out of range: give 1 byte to 1024 MiB"),
        "{cli}"
    );

    // The bridge's API: queue_limit_bytes as --queue-limit (a real bridge between two namespaces).
    if !common::require_root("network namespaces") {
        return;
    }
    let cli = refused_line(&["proxy", "--bridge", "a0,b0", "--queue-limit", "2GiB"]);
    assert!(
        cli.contains(
            "--queue-limit 2147483648 bytes is out of range: give 65792 bytes to 1024 MiB"
        ),
        "{cli}"
    );
    let mut net = common::bridge_ns::BridgeNet::new();
    let ns = net.netns(common::bridge_ns::Side::Bridge).to_string();
    let port = common::netns::free_port(Some(&ns), std::net::Ipv4Addr::LOCALHOST).unwrap();
    let control = format!("127.0.0.1:{port}");
    net.start_bridge(&["--control", &control]);
    let addr: SocketAddr = control.parse().unwrap();
    let ask = |method: &str, body: &str| -> String {
        let mut s = common::netns::connect(Some(&ns), addr, Duration::from_secs(10)).unwrap();
        write!(
            s,
            "{method} /impairment HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        r
    };
    let r = ask(
        "PATCH",
        &format!(r#"{{"queue_limit_bytes": {}}}"#, u64::MAX),
    );
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("queue_limit_bytes 18446744073709551615 bytes is out of range: give 65792 bytes to 1024 MiB"), "{r}");
    let r = ask(
        "PATCH",
        &format!(r#"{{"queue_limit_bytes": {}}}"#, (1u64 << 30) + 1),
    );
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    // Nothing changed: the default bound is still in force.
    let r = ask("GET", "");
    assert!(r.contains(r#""queue_limit_bytes": 8388608"#), "{r}");
    let r = ask("PATCH", r#"{"queue_limit_bytes": 1073741824}"#);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let f = net.stop_bridge();
    assert!(f.ok(), "{}", f.output);
}

/// `proxy --bridge --control` in a namespace whose `lo` is down: nothing can connect to the control listener,
/// and SIGTERM (then Ctrl-C) still ends the bridge at once, with its summary.
#[test]
fn the_bridge_stops_on_a_signal_when_its_control_address_cannot_be_reached() {
    if !common::require_root("network namespaces") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(120), "control shutdown");
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut net = common::bridge_ns::BridgeNet::new();
        let ns = net.netns(common::bridge_ns::Side::Bridge).to_string();
        common::netns::sh(&["ip", "-n", &ns, "link", "set", "lo", "down"]).unwrap();
        net.start_bridge(&["--control", "127.0.0.1:0"]);
        // Nothing reaches it: a connection from inside the namespace fails.
        let line = net.bridge().output();
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or_else(|| panic!("no control address in {line}"))
            .to_string();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        assert!(common::netns::connect(Some(&ns), addr, Duration::from_secs(2)).is_err());
        let p = net.bridge();
        p.signal(sig);
        // Generous: the bridge ends in well under a second; before the fix it never did.
        let st = p.wait_exit(Duration::from_secs(30));
        assert!(
            st.is_some(),
            "signal {sig}: the bridge did not stop:\n{}",
            p.output()
        );
        let f = net.bridge_exits(Duration::from_secs(5));
        assert!(f.output.contains("dropped, queue full"), "{}", f.output);
    }
}
