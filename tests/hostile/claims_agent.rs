//! SECURITY.md's claims about the agent's pages, the live readers, the bridge, database links, deep input and
//! the server's memory, each proved against the real thing: the agent's HTTP loop through the library (with
//! smaller limits than its defaults, the same code path; the defaults checked apart), the real binary in
//! namespaces of our own, the real PostgreSQL and Redis on this machine.

use crate::common;
use common::bridge_ns::BridgeNet;
use common::netns::{Ns, in_netns, sh};
use common::procs::{Kids, Proc, bin};
use common::prometheus::{http_get, wait_for};
use roundtrip::agent::http::{Handler, HttpServer, Limits, Request, Response};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// A handler answering `ok`; `/slow` waits until `release` is set (counting in `started` first), `/big`
/// answers `big` bytes.
fn handler(release: Arc<AtomicBool>, started: Arc<AtomicUsize>, big: usize) -> Arc<Handler> {
    Arc::new(move |r: &Request| {
        if r.path == "/slow" {
            started.fetch_add(1, Ordering::SeqCst);
            while !release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let body = if r.path == "/big" {
            vec![b'x'; big]
        } else {
            b"ok\n".to_vec()
        };
        Response {
            status: 200,
            content_type: "text/plain",
            body,
        }
    })
}

fn serve(limits: Limits, workers: usize, h: Arc<Handler>) -> HttpServer {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    HttpServer::serve_with(l, workers, h, limits).unwrap()
}

fn connect(a: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&a, Duration::from_secs(10)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// Sends `raw` on `s` and reads the whole answer (the server closes after it).
fn answer(mut s: TcpStream, raw: &[u8]) -> String {
    s.write_all(raw).unwrap();
    let mut r = Vec::new();
    s.read_to_end(&mut r).unwrap();
    String::from_utf8_lossy(&r).into_owned()
}

fn get(a: SocketAddr, path: &str) -> String {
    answer(
        connect(a),
        format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes(),
    )
}

/// True when the server closed `s` (end of stream or a reset), false when it is still open when the
/// read timeout ends.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn agent_pages_limits_default_to_4096_connections_5s_heads_30s_answers_64_renders() {
    assert_eq!(
        Limits::default(),
        Limits {
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_rendering: 64,
        }
    );
}

/// At the connection cap a newcomer is taken and the connection that has waited longest for its head is
/// closed; one being answered is not, however old, and the younger heads are still served.
#[test]
fn agent_pages_close_the_oldest_head_to_make_room() {
    let release = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let limits = Limits {
        max_connections: 8,
        read_timeout: Duration::from_secs(600),
        ..Limits::default()
    };
    let server = serve(limits, 2, handler(release.clone(), started.clone(), 0));
    let a = server.local_addr();
    // The oldest of all is being answered.
    let mut rendering = connect(a);
    rendering.write_all(b"GET /slow HTTP/1.1\r\n\r\n").unwrap();
    let end = Instant::now() + WAIT;
    while started.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < end,
            "the slow request never reached the handler"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Then seven half-sent heads, oldest first (the loop accepts in the order the kernel queued them).
    let mut heads: Vec<TcpStream> = (0..7)
        .map(|_| {
            let mut s = connect(a);
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost:").unwrap();
            s
        })
        .collect();
    // The ninth connection is served...
    let r = get(a, "/metrics");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    // ...and the oldest head made room for it.
    let mut oldest = heads.remove(0);
    assert!(
        closed_by_server(&mut oldest),
        "the oldest half-sent head is still open"
    );
    // The one being answered was not touched.
    release.store(true, Ordering::SeqCst);
    let mut r = Vec::new();
    rendering.read_to_end(&mut r).unwrap();
    assert!(
        r.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&r)
    );
    // The next oldest head is still open and gets its answer once complete.
    let r = answer(heads.remove(0), b" x\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    server.shutdown();
}

/// A head not complete within the read timeout is closed (not before), and others are served meanwhile.
#[test]
fn agent_pages_close_a_head_not_complete_within_its_deadline() {
    let release = Arc::new(AtomicBool::new(true));
    let limits = Limits {
        read_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = serve(limits, 1, handler(release, Arc::default(), 0));
    let a = server.local_addr();
    let t0 = Instant::now();
    let mut slow = connect(a);
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    assert!(get(a, "/").starts_with("HTTP/1.1 200"));
    assert!(
        closed_by_server(&mut slow),
        "a head never finished is still open after {WAIT:?}"
    );
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "closed before its deadline"
    );
    server.shutdown();
}

/// An answer the client does not read within the write timeout is given up: the connection is closed with
/// the rest unsent.
#[test]
fn agent_pages_close_an_answer_not_read_within_its_deadline() {
    if !common::have("ss") {
        return;
    }
    let big = 64 << 20;
    let limits = Limits {
        write_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = serve(limits, 1, handler(Arc::default(), Arc::default(), big));
    let a = server.local_addr();
    let mut c = connect(a);
    c.write_all(b"GET /big HTTP/1.1\r\n\r\n").unwrap();
    let me = c.local_addr().unwrap().port();
    // Not reading: the server's side stays established until the loop gives up on it.
    let t0 = Instant::now();
    let gone = wait_for("the server gives up the unread answer", WAIT, |last| {
        let o = Command::new("ss")
            .args(["-tnH", "state", "established"])
            .arg(format!("( sport = :{} and dport = :{me} )", a.port()))
            .output()
            .unwrap();
        *last = String::from_utf8_lossy(&o.stdout).into_owned();
        last.trim().is_empty().then_some(())
    });
    assert!(gone.is_ok(), "{gone:?}");
    assert!(t0.elapsed() >= Duration::from_secs(1));
    // What the kernel held is delivered, the rest never comes.
    let mut got = 0usize;
    let mut b = vec![0u8; 1 << 16];
    loop {
        match c.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(got < big, "the whole answer came ({got} bytes)");
    // The server serves others as before.
    assert!(get(a, "/").starts_with("HTTP/1.1 200"));
    server.shutdown();
}

/// Past the renders allowed at once a request is answered 503; once they end, requests are served again.
#[test]
fn agent_pages_answer_503_past_the_renders_at_once() {
    let release = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let limits = Limits {
        max_rendering: 2,
        ..Limits::default()
    };
    let server = serve(limits, 4, handler(release.clone(), started.clone(), 0));
    let a = server.local_addr();
    let slow: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = connect(a);
            s.write_all(b"GET /slow HTTP/1.1\r\n\r\n").unwrap();
            s
        })
        .collect();
    let end = Instant::now() + WAIT;
    while started.load(Ordering::SeqCst) < 2 {
        assert!(
            Instant::now() < end,
            "the slow requests never reached the handler"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = get(a, "/metrics");
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    release.store(true, Ordering::SeqCst);
    for mut s in slow {
        let mut r = Vec::new();
        s.read_to_end(&mut r).unwrap();
        assert!(r.starts_with(b"HTTP/1.1 200"));
    }
    // The server counts a connection out after it has closed it: the next one may come a moment before.
    let end = Instant::now() + WAIT;
    while !get(a, "/metrics").starts_with("HTTP/1.1 200") {
        assert!(
            Instant::now() < end,
            "never served again once the slow requests were done"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.shutdown();
}

/// When every connection held is being answered, a newcomer is told 503 (none is closed to make room), and
/// served once they are done.
#[test]
fn agent_pages_answer_503_when_every_connection_is_being_answered() {
    let release = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = serve(limits, 4, handler(release.clone(), started.clone(), 0));
    let a = server.local_addr();
    let slow: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = connect(a);
            s.write_all(b"GET /slow HTTP/1.1\r\n\r\n").unwrap();
            s
        })
        .collect();
    let end = Instant::now() + WAIT;
    while started.load(Ordering::SeqCst) < 2 {
        assert!(
            Instant::now() < end,
            "the slow requests never reached the handler"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = get(a, "/metrics");
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    release.store(true, Ordering::SeqCst);
    for mut s in slow {
        let mut r = Vec::new();
        s.read_to_end(&mut r).unwrap();
        assert!(
            r.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&r)
        );
    }
    // The server counts a connection out after it has closed it: the next one may come a moment before.
    let end = Instant::now() + WAIT;
    while !get(a, "/metrics").starts_with("HTTP/1.1 200") {
        assert!(
            Instant::now() < end,
            "never served again once the slow requests were done"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.shutdown();
}

/// The interface's transmit counter.
fn tx_packets(ns: &Ns, ifname: &str) -> u64 {
    let o = ns.run(&[
        "cat",
        &format!("/sys/class/net/{ifname}/statistics/tx_packets"),
    ]);
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no tx_packets for {ifname}: {o:?}"))
}

/// `capture stats --live` and `agent --watch` read every packet on an interface and send none: in a
/// namespace of our own, a veth end with no address and IPv6 off (so the kernel itself sends nothing on
/// it) receives 300 datagrams while both watch it, and its transmit counter does not move.
#[test]
fn live_capture_and_agent_watch_send_nothing_on_the_interface() {
    if !common::require_root("namespaces and AF_PACKET capture") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(120), "claims_agent send nothing");
    let ns = Ns::new(&format!("rtsn{}", std::process::id()));
    let n = ns.0.clone();
    for cmd in [
        vec![
            "ip", "-n", &n, "link", "add", "w0", "type", "veth", "peer", "name", "w1",
        ],
        vec![
            "ip",
            "netns",
            "exec",
            &n,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ],
        vec![
            "ip",
            "netns",
            "exec",
            &n,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.disable_ipv6=1",
        ],
        vec![
            "ip",
            "netns",
            "exec",
            &n,
            "sysctl",
            "-qw",
            "net.ipv6.conf.w0.disable_ipv6=1",
        ],
        vec![
            "ip",
            "netns",
            "exec",
            &n,
            "sysctl",
            "-qw",
            "net.ipv6.conf.w1.disable_ipv6=1",
        ],
        vec!["ip", "-n", &n, "link", "set", "lo", "up"],
        vec!["ip", "-n", &n, "link", "set", "w0", "up"],
        vec!["ip", "-n", &n, "link", "set", "w1", "up"],
        vec!["ip", "-n", &n, "addr", "add", "10.77.0.1/24", "dev", "w1"],
    ] {
        sh(&cmd).unwrap_or_else(|e| panic!("{e}"));
    }
    // w1 sends to 10.77.0.2 at w0's address without asking (no ARP from w0 either way).
    let mac = String::from_utf8_lossy(&ns.run(&["cat", "/sys/class/net/w0/address"]).stdout)
        .trim()
        .to_string();
    sh(&[
        "ip",
        "-n",
        &n,
        "neigh",
        "add",
        "10.77.0.2",
        "lladdr",
        &mac,
        "dev",
        "w1",
        "nud",
        "permanent",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let exec = |args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &n, &bin()]).args(args);
        c
    };
    let mut cap = Proc::spawn(
        "capture",
        exec(&["capture", "stats", "--live", "w0", "--json", "udp"]),
    );
    cap.wait_line("capturing on", WAIT).unwrap();
    let mut agent = Proc::spawn(
        "agent",
        exec(&[
            "agent",
            "--no-responder",
            "--metrics",
            "127.0.0.1:0",
            "--watch",
            "w0",
        ]),
    );
    agent.wait_line("watching w0", WAIT).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = tx_packets(&ns, "w0");
    let sent = in_netns(Some(&n), || {
        let u = UdpSocket::bind("10.77.0.1:0").unwrap();
        for i in 0..300u32 {
            u.send_to(&i.to_be_bytes(), "10.77.0.2:9").unwrap();
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    sent.unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(cap.try_wait().is_none(), "capture exited: {}", cap.output());
    assert!(
        agent.try_wait().is_none(),
        "agent exited: {}",
        agent.output()
    );
    cap.signal(libc::SIGINT);
    let out = cap.finish(WAIT);
    agent.signal(libc::SIGTERM);
    let aout = agent.finish(WAIT);
    let after = tx_packets(&ns, "w0");
    assert_eq!(
        after, before,
        "packets left w0 while roundtrip watched it\ncapture: {}\nagent: {}",
        out.output, aout.output
    );
    // And the capture did read the datagrams.
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {}", out.output));
    assert_eq!(v["total"]["packets"], 300, "{v}");
}

/// A bridge killed with SIGKILL (no handler runs) leaves neither interface promiscuous: the promiscuity is
/// the packet sockets' membership, which the kernel drops with them.
#[test]
fn a_bridge_killed_with_sigkill_leaves_nothing_promiscuous() {
    if !common::require_root("namespaces and packet sockets") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(120), "claims_agent bridge sigkill");
    let mut net = BridgeNet::new();
    net.start_bridge(&[]);
    assert!(net.promiscuous());
    let p = net.bridge();
    p.signal(libc::SIGKILL);
    assert!(p.wait_exit(WAIT).is_some(), "the bridge survived SIGKILL");
    let mid = net.netns(common::bridge_ns::Side::Bridge).to_string();
    for i in [common::bridge_ns::IF_A, common::bridge_ns::IF_B] {
        let o = Command::new("ip")
            .args(["-n", &mid, "-d", "link", "show", i])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            s.contains("promiscuity 0") && !s.contains("PROMISC"),
            "{i} is left promiscuous: {s}"
        );
    }
}

/// The value of `roundtrip_requests_total` for `proto` and `op` (all series summed).
fn requests(m: &str, proto: &str, op: &str) -> u64 {
    let (p, o) = (format!("proto=\"{proto}\""), format!("op=\"{op}\""));
    m.lines()
        .filter(|l| l.starts_with("roundtrip_requests_total{") && l.contains(&p) && l.contains(&o))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Under `agent --watch`, Redis keys, values and passwords (AUTH, HELLO ... AUTH) are in none of the
/// metrics, `/api/results`, the HTML page and the log; the commands are counted.
#[test]
fn agent_watch_keeps_redis_keys_values_and_passwords_out_of_api_page_and_log() {
    if !common::require_root("AF_PACKET capture on lo")
        || !common::have("redis-cli")
        || !common::service_up(6379, "redis")
    {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(180), "claims_agent redis secrets");
    let mut kids = Kids::default();
    let port = kids.proxy(6379, &[]);
    let filter = format!("tcp port {port}");
    let mut cmd = Command::new(bin());
    cmd.args([
        "agent",
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--watch",
        "lo",
        "--watch-filter",
        &filter,
    ]);
    let mut a = Proc::spawn("agent", cmd);
    let line = a.wait_line("metrics on http://", WAIT).unwrap();
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line}"));
    a.wait_line("watching lo", WAIT).unwrap();
    let metrics = || http_get(None, addr, "/metrics", WAIT).unwrap().1;
    wait_for("the watcher is up", WAIT, |last| {
        let m = metrics();
        *last = m.lines().filter(|l| l.contains("watch_up")).collect();
        m.lines()
            .any(|l| l.starts_with("roundtrip_watch_up{") && l.ends_with(" 1"))
            .then_some(())
    })
    .unwrap();
    let id = std::process::id();
    let (key, value, pass, user) = (
        format!("RtKeyMark{id}q"),
        format!("RtValueMark{id}z"),
        format!("RtPassMark{id}w"),
        format!("RtUserMark{id}v"),
    );
    let cli = |args: &[&str]| {
        let o = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // The server has no password: AUTH is refused, and the password still crosses the wire.
    cli(&["AUTH", &pass]);
    cli(&["AUTH", &user, &pass]);
    cli(&["HELLO", "2", "AUTH", &user, &pass]);
    assert!(cli(&["SET", &key, &value]).contains("OK"));
    assert!(cli(&["GET", &key]).contains(&value));
    cli(&["DEL", &key]);
    let m = wait_for("SET, GET and DEL counted", WAIT, |last| {
        let m = metrics();
        let got = [
            requests(&m, "redis", "SET"),
            requests(&m, "redis", "GET"),
            requests(&m, "redis", "DEL"),
        ];
        *last = format!("{got:?}");
        (got.iter().all(|&n| n >= 1)).then_some(m)
    })
    .unwrap();
    let api = http_get(None, addr, "/api/results", WAIT).unwrap().1;
    let html = http_get(None, addr, "/", WAIT).unwrap().1;
    a.signal(libc::SIGTERM);
    let f = a.finish(WAIT);
    for (what, text) in [
        ("metrics", &m),
        ("api", &api),
        ("html", &html),
        ("log", &f.output),
    ] {
        for secret in [&key, &value, &pass, &user] {
            assert!(
                !text.contains(secret.as_str()),
                "{what} shows {secret}:\n{text}"
            );
        }
    }
}

/// PostgreSQL logs a link open's parameters (the link string, password included) only where a superuser
/// turned on `log_statement = all` or `log_min_duration_statement`: without them the server log holds no
/// password, with either it does (so SECURITY.md's caveat is what the server does).
#[test]
fn pg_link_parameters_are_logged_only_under_log_statement_all_or_log_min_duration_statement() {
    if !super::dblink::pg_ready() {
        return;
    }
    let Some(log) = super::dblink::pg_log() else {
        common::skip("the PostgreSQL server log is not readable here");
        return;
    };
    let db = super::dblink::ScratchDb::new("logparams");
    // A link that opens (trust authentication: the password is carried, not checked).
    let open = |pass: &str| {
        let o = common::db::run(common::db::rt(Duration::from_secs(120)).args([
            "db",
            &db.url(),
            "--link",
            &format!(
                "host=127.0.0.1 port=5432 dbname=test user=postgres password={pass} sslmode=disable"
            ),
            "-c",
            "1",
            "--connects",
            "1",
        ]));
        assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    };
    let id = std::process::id();
    let plain = format!("LogPlain{id}a");
    let all = format!("LogAll{id}b");
    let dur = format!("LogDur{id}c");
    open(&plain);
    common::db::psql(
        "test",
        &format!("ALTER DATABASE {} SET log_statement = 'all'", db.0),
    );
    open(&all);
    common::db::psql(
        "test",
        &format!("ALTER DATABASE {} RESET log_statement", db.0),
    );
    common::db::psql(
        "test",
        &format!("ALTER DATABASE {} SET log_min_duration_statement = 0", db.0),
    );
    open(&dur);
    std::thread::sleep(Duration::from_millis(500));
    let text = super::dblink::pg_log_since(&log);
    assert!(
        text.contains("roundtrip_link_open"),
        "nothing logged:\n{text}"
    );
    assert!(
        !text.contains(&plain),
        "logged without log_statement:\n{text}"
    );
    assert!(
        text.contains(&all),
        "not logged under log_statement = all:\n{text}"
    );
    assert!(
        text.contains(&dur),
        "not logged under log_min_duration_statement = 0:\n{text}"
    );
}

/// The sum of the series of `name` (any labels).
fn total(m: &str, name: &str) -> u64 {
    m.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Starts `agent --watch lo` for TCP port `port` with `extra`; its pages' address once the watcher is up.
fn watch_agent(port: u16, extra: &[&str]) -> (Proc, SocketAddr) {
    let filter = format!("tcp port {port}");
    let mut cmd = Command::new(bin());
    cmd.args([
        "agent",
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--watch",
        "lo",
        "--watch-filter",
        &filter,
    ])
    .args(extra);
    let mut a = Proc::spawn("agent", cmd);
    let line = a.wait_line("metrics on http://", WAIT).unwrap();
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line}"));
    a.wait_line("watching lo", WAIT).unwrap();
    wait_for("the watcher is up", WAIT, |last| {
        let m = http_get(None, addr, "/metrics", WAIT).unwrap().1;
        *last = m.lines().filter(|l| l.contains("watch_up")).collect();
        m.lines()
            .any(|l| l.starts_with("roundtrip_watch_up{") && l.ends_with(" 1"))
            .then_some(())
    })
    .unwrap();
    (a, addr)
}

/// At `--watch-max-connections` the connection silent longest is the one evicted, not the oldest: of four
/// connections, the first opened but the last to speak is kept, the second (silent longest) is dropped,
/// and only it comes back as a new connection when it speaks again.
#[test]
fn agent_watch_evicts_the_longest_silent_connection() {
    if !common::require_root("AF_PACKET capture on lo") || !common::service_up(6379, "redis") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(180), "claims_agent eviction order");
    let mut kids = Kids::default();
    let port = kids.proxy(6379, &[]);
    let (a, addr) = watch_agent(port, &["--watch-max-connections", "4"]);
    let metrics = || http_get(None, addr, "/metrics", WAIT).unwrap().1;
    let mut pings = 0;
    // One PING on `c`, its answer read, and the agent has counted it: the packets before are tracked.
    let mut ping = |c: &mut TcpStream| -> String {
        c.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let mut b = [0u8; 7];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"+PONG\r\n");
        // Past the longest delayed ACK (200 ms), so this connection's last packet comes before the next's.
        std::thread::sleep(Duration::from_millis(300));
        pings += 1;
        let want = pings;
        let m = wait_for(&format!("{want} PINGs counted"), WAIT, |last| {
            let m = metrics();
            let got = requests(&m, "redis", "PING");
            *last = format!("{got}");
            (got >= want).then_some(m)
        })
        .unwrap();
        // Requests are counted at once, the table's health at the watcher's next publication (every
        // 200 ms): one publication after this scrape (its thread's CPU time moved) holds this PING's packets.
        let cpu = |m: &str| {
            m.lines()
                .find(|l| l.starts_with("roundtrip_watch_cpu_seconds_total{"))
                .map(str::to_string)
        };
        let before = cpu(&m);
        wait_for("a publication of the table", WAIT, |last| {
            let m = metrics();
            *last = format!("{:?}", cpu(&m));
            (cpu(&m) != before).then_some(m)
        })
        .unwrap()
    };
    let mut c: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        let mut s = connect(SocketAddr::from(([127, 0, 0, 1], port)));
        ping(&mut s);
        c.push(s);
    }
    // The first opened speaks again: the second is now the one silent longest.
    let m = ping(&mut c[0]);
    assert_eq!(total(&m, "roundtrip_watch_connections_total"), 4, "{m}");
    assert_eq!(total(&m, "roundtrip_watch_evictions_total"), 0, "{m}");
    // A fifth connection: one is evicted to make room.
    let mut fifth = connect(SocketAddr::from(([127, 0, 0, 1], port)));
    let m = ping(&mut fifth);
    assert_eq!(total(&m, "roundtrip_watch_connections_total"), 5, "{m}");
    assert_eq!(total(&m, "roundtrip_watch_evictions_total"), 1, "{m}");
    // The first opened was kept: speaking again it is no new connection.
    let m = ping(&mut c[0]);
    assert_eq!(
        total(&m, "roundtrip_watch_connections_total"),
        5,
        "the first connection (not silent longest) was evicted: {m}"
    );
    // The second was the one dropped: it comes back as a new connection (met mid-stream).
    let m = ping(&mut c[1]);
    assert_eq!(
        total(&m, "roundtrip_watch_connections_total"),
        6,
        "the silent longest was not the one evicted: {m}"
    );
    drop(c);
    drop(fifth);
    a.signal(libc::SIGTERM);
    assert!(a.finish(WAIT).ok());
}

/// One line on standard error, no panic, a failure exit.
fn refused_in_one_line(o: &std::process::Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{what} was accepted: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{what}: {err}");
    err
}

/// The agent's TOML parser bounds its own nesting: 20,000 nested arrays, inline tables or a dotted key of
/// 20,000 parts are refused in one line as invalid TOML, no stack overflow.
#[test]
fn deep_toml_in_the_agent_config_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let deep = 20_000;
    let cases = [
        (
            "arrays",
            format!("x = {}1{}\n", "[".repeat(deep), "]".repeat(deep)),
        ),
        (
            "inline tables",
            format!("x = {}1{}\n", "{a = ".repeat(deep), "}".repeat(deep)),
        ),
        (
            "dotted keys",
            format!("{} = 1\n", vec!["a"; deep].join(".")),
        ),
    ];
    for (what, text) in cases {
        let f = dir.path().join("deep.toml");
        std::fs::write(&f, text).unwrap();
        let o = assert_cmd::Command::new(bin())
            .args([
                "agent",
                "--no-responder",
                "--metrics",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&f)
            .timeout(WAIT)
            .output()
            .unwrap();
        let err = refused_in_one_line(&o, what);
        assert!(err.contains("not valid TOML"), "{what}: {err}");
        assert!(
            err.len() < 1000,
            "{what}: the error echoes the input: {err}"
        );
    }
}

/// JSON read back stops at serde_json's 128 levels: `report` on a file of 20,000 nested arrays refuses it in
/// one line, and the proxy's control API answers 400 to such a body and keeps serving.
#[test]
fn deep_json_is_refused_by_report_and_the_control_api() {
    let dir = tempfile::tempdir().unwrap();
    let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    let f = dir.path().join("deep.json");
    std::fs::write(&f, &deep).unwrap();
    let o = assert_cmd::Command::new(bin())
        .arg("report")
        .arg(&f)
        .arg("-o")
        .arg(dir.path().join("r.html"))
        .timeout(WAIT)
        .output()
        .unwrap();
    let err = refused_in_one_line(&o, "report of deep JSON");
    assert!(err.contains("recursion limit"), "{err}");
    // Under the API's 64 KiB body limit, far over 128 levels.
    let deep = format!("{}{}", "[".repeat(4_000), "]".repeat(4_000));
    let deep_obj = format!("{}{}", "{\"delay_ns\":".repeat(4_000), "}".repeat(4_000));

    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = upstream.local_addr().unwrap().port().to_string();
    let mut cmd = Command::new(bin());
    cmd.args([
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &format!("127.0.0.1:{up}"),
        "--control",
        "127.0.0.1:0",
    ]);
    let mut p = Proc::spawn("proxy", cmd);
    let line = p.wait_line("control api on http://", WAIT).unwrap();
    let control: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no control address in {line}"));
    for body in [&deep, &deep_obj] {
        for method in ["PUT", "PATCH"] {
            let r = answer(
                connect(control),
                format!(
                    "{method} /impairment HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
            assert!(r.starts_with("HTTP/1.1 400"), "{method}: {r}");
        }
    }
    let r = answer(connect(control), b"GET /impairment HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(p.try_wait().is_none(), "the proxy exited: {}", p.output());
}

/// The server raises its soft open-file limit to the hard limit at start, and warns in one line when that
/// is below what `--max-clients` needs (and only then).
#[test]
fn the_server_raises_its_open_file_limit_to_the_hard_limit_and_warns_below_max_clients() {
    if !common::have("prlimit") {
        return;
    }
    for (max_clients, warned) in [("4000", true), ("500", false)] {
        let mut c = Command::new("prlimit");
        c.args(["--nofile=512:1000", "--"])
            .arg(bin())
            .args(["server", "--bind", "127.0.0.1", "-p", "0", "--tcp-only"])
            .args(["--max-clients", max_clients]);
        // prlimit sets the limits and executes the server in its place: the same process.
        let mut p = Proc::spawn("server", c);
        p.wait_line("listening on", WAIT).unwrap();
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", p.pid())).unwrap();
        let files = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap()
            .split_whitespace()
            .skip(3)
            .take(2)
            .collect::<Vec<_>>();
        assert_eq!(files, ["1000", "1000"], "{limits}");
        p.signal(libc::SIGINT);
        let out = p.finish(WAIT).output;
        let warning: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("may open 1000 files"))
            .collect();
        if warned {
            assert_eq!(warning.len(), 1, "{out}");
            assert!(warning[0].contains("--max-clients 4000"), "{out}");
        } else {
            assert!(warning.is_empty(), "{out}");
        }
    }
}

/// VmRSS of a process, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// Answers a client does not read pause reading from it: a client that sends 64 KiB echo requests and never
/// reads is soon unable to write (the server stopped reading), and the server holds little for it (at most a
/// read's worth of answers, not what was sent).
#[test]
fn answers_a_client_does_not_read_pause_reading_and_hold_little() {
    use roundtrip::wire::sockperf::{Flags, Header};
    let mut cmd = Command::new(bin());
    cmd.args(["server", "--bind", "127.0.0.1", "-p", "0", "--tcp-only"])
        .args(["--message-deadline", "120s"]);
    let mut p = Proc::spawn("server", cmd);
    let line = p.wait_line("listening on", WAIT).unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], common::procs::port_in(&line)));
    let mut m = vec![1u8; 64 * 1024];
    Header {
        seq: 1,
        flags: Flags(3),
        len: m.len() as u32,
    }
    .write(&mut m);
    // One echo read back whole: the server is warm.
    let mut s = connect(addr);
    s.write_all(&m).unwrap();
    let mut back = vec![0u8; m.len()];
    s.read_exact(&mut back).unwrap();
    drop(s);
    let rss0 = rss(p.pid());
    let mut s = connect(addr);
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let cap: u64 = 512 << 20;
    let mut sent = 0u64;
    while sent < cap {
        match s.write(&m) {
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let rss1 = rss(p.pid());
    eprintln!("sent {sent} bytes, server RSS {rss0} -> {rss1} bytes");
    assert!(
        sent < cap,
        "the server read {sent} bytes of requests whose answers were never read"
    );
    assert!(
        rss1 < rss0 + (16 << 20),
        "the server grew from {rss0} to {rss1} bytes for a client that sent {sent} bytes and read none"
    );
    drop(s);
    p.signal(libc::SIGINT);
    let _ = p.finish(WAIT);
}

/// Replay answers are generated as the socket takes them: four pipelined requests for 16 MiB each, the
/// first answer read only 1 MiB in, grow the server by far less than one answer; then all four arrive whole.
#[test]
fn replay_answers_are_generated_as_the_socket_takes_them() {
    use roundtrip::wire::sockperf::{
        Feature, Flags, HELLO_LEN, Header, Hello, REPLAY_MIN_LEN, ReplayRequest,
    };
    let mut cmd = Command::new(bin());
    cmd.args(["server", "--bind", "127.0.0.1", "-p", "0", "--tcp-only"])
        .args(["--allow-replay", "--message-deadline", "120s"]);
    let mut p = Proc::spawn("server", cmd);
    let line = p.wait_line("listening on", WAIT).unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], common::procs::port_in(&line)));
    let mut s = connect(addr);
    s.write_all(
        &Hello::request(Feature::REPLAY, [1; 16]).encode(Flags::CLIENT.with(Flags::PONG_REQUEST)),
    )
    .unwrap();
    let mut a = [0u8; HELLO_LEN];
    s.read_exact(&mut a).unwrap();
    assert!(
        Hello::decode(&a)
            .unwrap()
            .features
            .contains(Feature::REPLAY)
    );
    let rss0 = rss(p.pid());
    let answer_len: usize = 16 << 20;
    let mut reqs = Vec::new();
    for seq in 1..=4u64 {
        let mut m = vec![0u8; REPLAY_MIN_LEN + 10];
        Header {
            seq,
            flags: Flags::CLIENT.with(Flags::PONG_REQUEST).with(Flags::REPLAY),
            len: m.len() as u32,
        }
        .write(&mut m);
        ReplayRequest {
            answer_len: answer_len as u64,
            delay: Duration::ZERO,
        }
        .write(&mut m);
        reqs.extend(m);
    }
    s.write_all(&reqs).unwrap();
    let mut first = vec![0u8; 1 << 20];
    s.read_exact(&mut first).unwrap();
    let rss1 = rss(p.pid());
    eprintln!("server RSS {rss0} -> {rss1} bytes with 64 MiB of answers asked for and 1 MiB read");
    assert!(
        rss1 < rss0 + (8 << 20),
        "the server grew from {rss0} to {rss1} bytes: answers are held, not generated as taken"
    );
    // Every answer comes whole, in order.
    let mut rest = vec![0u8; answer_len - first.len()];
    s.read_exact(&mut rest).unwrap();
    let h = Header::parse(&first, 1 << 25).unwrap();
    assert_eq!((h.seq, h.len as usize), (1, answer_len));
    let mut m = vec![0u8; answer_len];
    for seq in 2..=4u64 {
        s.read_exact(&mut m).unwrap();
        let h = Header::parse(&m, 1 << 25).unwrap();
        assert_eq!((h.seq, h.len as usize), (seq, answer_len));
    }
    drop(s);
    p.signal(libc::SIGINT);
    let _ = p.finish(WAIT);
}
