//! SECURITY.md's claims about the server, the proxy, the defaults, the pre-shared key and JSON that had no test
//! (the audit's items 1, 2, 8, 9, 11 and 13): each tried against the real binary or the real server over
//! loopback.

use crate::common::procs::{Kids, Kill, bin, port_in, watchdog};
use roundtrip::server::{self, Limits, ServerConfig, ServerEvent, ServerHandle};
use roundtrip::wire::auth::Psk;
use roundtrip::wire::sockperf::{Control, Feature, Flags, HELLO_LEN, Header, Hello};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// A generous bound on anything that should happen at once.
const LONG: Duration = Duration::from_secs(30);

type Events = Arc<Mutex<Vec<ServerEvent>>>;

/// The real server on 127.0.0.1, a port from the OS, its events recorded.
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

/// Every datagram `sock` receives for `wait`, as its length.
fn datagrams(sock: &UdpSocket, wait: Duration) -> Vec<usize> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = vec![0u8; 70_000];
    let mut got = Vec::new();
    let end = Instant::now() + wait;
    while Instant::now() < end {
        if let Ok(k) = sock.recv(&mut buf) {
            got.push(k);
        }
    }
    got
}

/// One datagram, waited for generously.
fn one_datagram(sock: &UdpSocket) -> Vec<u8> {
    sock.set_read_timeout(Some(LONG)).unwrap();
    let mut buf = vec![0u8; 70_000];
    let (n, _) = sock.recv_from(&mut buf).expect("a datagram within 30 s");
    buf.truncate(n);
    buf
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + LONG;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A sockperf ping of `len` bytes (header included) asking for an answer.
fn ping_message(seq: u64, len: usize) -> Vec<u8> {
    let mut m = vec![0x5a; len];
    Header {
        seq,
        flags: Flags::CLIENT.with(Flags::PONG_REQUEST),
        len: len as u32,
    }
    .write(&mut m);
    m
}

/// The binary's stdout or stderr lines, read on a thread, until a line holding `needle` (waited for generously).
fn lines_until(r: impl Read + Send + 'static, needle: &'static str) -> Vec<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                // Keep draining so the child never blocks on a full pipe.
                continue;
            }
        }
    });
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let l = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no line with '{needle}' within 60 s; got {got:?}"));
        let done = l.contains(needle);
        got.push(l);
        if done {
            return got;
        }
    }
}

fn run_bin(args: &[&str]) -> Output {
    assert_cmd::Command::new(bin())
        .args(args)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap()
}

/// The value clap's help shows as `[default: V]` for `flag` in `roundtrip ARGS --help`.
fn help_default(args: &[&str], flag: &str) -> String {
    let mut a = args.to_vec();
    a.push("--help");
    let out = run_bin(&a);
    assert!(out.status.success(), "{a:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let at = help
        .find(&format!("{flag} <"))
        .unwrap_or_else(|| panic!("{flag} is not in `roundtrip {args:?} --help`:\n{help}"));
    // The flag's own paragraph: up to the next flag's line (flags are indented less than their text).
    let para: Vec<&str> = help[at..]
        .lines()
        .enumerate()
        .take_while(|(i, l)| {
            *i == 0 || !l.trim_start().starts_with('-') || l.starts_with("          ")
        })
        .map(|(_, l)| l)
        .collect();
    // Short help wraps "[default: N]" onto the next line: compare with whitespace collapsed.
    let para = para
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let i = para
        .find("[default: ")
        .unwrap_or_else(|| panic!("{flag} shows no default:\n{para}"))
        + "[default: ".len();
    para[i..].split(']').next().unwrap().to_string()
}

// ---------------------------------------------------------------------------------------------------------
// Item 1: the proxy relays to --upstream only.

/// Accepts one connection on `l` within 30 s.
fn accept_one(l: &TcpListener) -> TcpStream {
    l.set_nonblocking(true).unwrap();
    let end = Instant::now() + LONG;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(LONG)).unwrap();
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < end, "the upstream got no connection");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Requests that ask a relay to go elsewhere, each naming `decoy`: HTTP CONNECT, an absolute URI with its Host,
/// a PROXY protocol v1 and v2 header, and a SOCKS5 greeting with its CONNECT.
fn steering_requests(decoy: SocketAddr) -> Vec<Vec<u8>> {
    let port = decoy.port();
    let mut proxy_v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    proxy_v2.extend([0x21, 0x11, 0, 12, 127, 0, 0, 1, 127, 0, 0, 1]);
    proxy_v2.extend(1234u16.to_be_bytes());
    proxy_v2.extend(port.to_be_bytes());
    let mut socks = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1];
    socks.extend(port.to_be_bytes());
    vec![
        format!("CONNECT {decoy} HTTP/1.1\r\nHost: {decoy}\r\n\r\n").into_bytes(),
        format!("GET http://{decoy}/ HTTP/1.1\r\nHost: {decoy}\r\n\r\n").into_bytes(),
        format!("PROXY TCP4 127.0.0.1 127.0.0.1 1234 {port}\r\nhello\r\n").into_bytes(),
        proxy_v2,
        socks,
    ]
}

/// Clients of a TCP proxy that ask, every way a relay can be asked, to be taken to another address: the
/// `--upstream` receives every one of them as a connection carrying their bytes unchanged, the other address
/// never a connection. Over UDP (`--udp`), datagrams naming another destination (a SOCKS5 UDP header, a PROXY
/// header), from two clients, reach the upstream unchanged and nothing reaches the other address.
#[test]
fn the_proxy_relays_only_to_its_upstream_whatever_clients_ask() {
    let _w = watchdog(Duration::from_secs(180), "proxy relays to upstream only");
    // TCP.
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let decoy = TcpListener::bind("127.0.0.1:0").unwrap();
    decoy.set_nonblocking(true).unwrap();
    let decoy_addr = decoy.local_addr().unwrap();
    let mut kids = Kids::default();
    let proxy = kids.proxy(upstream.local_addr().unwrap().port(), &[]);
    for req in steering_requests(decoy_addr) {
        let mut c = TcpStream::connect(("127.0.0.1", proxy)).unwrap();
        c.write_all(&req).unwrap();
        let mut up = accept_one(&upstream);
        let mut got = vec![0u8; req.len()];
        up.read_exact(&mut got).unwrap();
        assert_eq!(
            got, req,
            "the upstream got other bytes than the client sent"
        );
        // The upstream's answer goes back to the client.
        up.write_all(b"from upstream").unwrap();
        c.set_read_timeout(Some(LONG)).unwrap();
        let mut back = [0u8; 13];
        c.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"from upstream");
    }
    match decoy.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the other address got a connection: {other:?}"),
    }
    // UDP.
    let upstream = UdpSocket::bind("127.0.0.1:0").unwrap();
    let decoy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let decoy_addr = decoy.local_addr().unwrap();
    let proxy = kids.proxy(upstream.local_addr().unwrap().port(), &["--udp"]);
    let mut socks_udp = vec![0, 0, 0, 1, 127, 0, 0, 1];
    socks_udp.extend(decoy_addr.port().to_be_bytes());
    socks_udp.extend(b"payload");
    let hostile = [
        socks_udp,
        format!(
            "PROXY UDP4 127.0.0.1 127.0.0.1 1234 {}\r\n",
            decoy_addr.port()
        )
        .into_bytes(),
        format!("CONNECT {decoy_addr} HTTP/1.1\r\n\r\n").into_bytes(),
    ];
    for _client in 0..2 {
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        for d in &hostile {
            c.send_to(d, ("127.0.0.1", proxy)).unwrap();
            upstream.set_read_timeout(Some(LONG)).unwrap();
            let mut buf = [0u8; 2048];
            let (n, from) = upstream.recv_from(&mut buf).expect("the upstream got it");
            assert_eq!(&buf[..n], &d[..]);
            // The answer goes back to that client.
            upstream.send_to(b"answer", from).unwrap();
            assert_eq!(one_datagram(&c), b"answer");
        }
    }
    assert_eq!(
        datagrams(&decoy, Duration::from_millis(500)),
        Vec::<usize>::new(),
        "the other address got datagrams"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Item 2: the defaults of the exposure table.

/// The exposure table's defaults are the ones the binary uses: the proxy's `--max-clients` 4096 and
/// `--idle-timeout` 300 s (its help and its start line), the agent's `--metrics` 127.0.0.1:9911 (loopback) and
/// `--watch-max-connections` 65,536, and the live capture's `--max-connections` 100,000 for every live reader.
#[test]
fn exposure_table_defaults_are_the_binarys() {
    let _w = watchdog(Duration::from_secs(180), "exposure defaults");
    assert_eq!(help_default(&["proxy"], "--max-clients"), "4096");
    assert_eq!(help_default(&["proxy"], "--idle-timeout"), "300s");
    assert_eq!(roundtrip::proxy::DEFAULT_MAX_CLIENTS, 4096);
    // The proxy started without either flag says what it applies.
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = Command::new(bin())
        .args(["proxy", "--listen", "127.0.0.1:0", "--upstream"])
        .arg(upstream.local_addr().unwrap().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = c.stdout.take().unwrap();
    let _proxy = Kill(c);
    let lines = lines_until(out, "clients at once");
    let last = lines.last().unwrap();
    assert!(
        last.contains("at most 4096 clients at once, idle connections closed after 300s"),
        "{lines:?}"
    );
    // The agent's pages: loopback by default.
    let metrics = help_default(&["agent"], "--metrics");
    assert_eq!(metrics, "127.0.0.1:9911");
    assert!(metrics.parse::<SocketAddr>().unwrap().ip().is_loopback());
    assert_eq!(help_default(&["agent"], "--watch-max-connections"), "65536");
    assert_eq!(roundtrip::agent::watch::DEFAULT_MAX_CONNECTIONS, 65_536);
    for cmd in ["rpc", "stats", "flows", "timeline"] {
        assert_eq!(
            help_default(&["capture", cmd], "--max-connections"),
            "100000",
            "capture {cmd}"
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// Item 8: no reflection over UDP.

/// Over UDP a server without a key answers a ping with exactly as many bytes as it carried, from the 14-byte
/// header alone to the largest datagram; a datagram whose header announces another length than it carries gets
/// nothing; the hello's answer is no longer than the hello, a full one or a version 1 hello of 32 or 25 bytes.
#[test]
fn udp_echoes_are_the_size_of_their_request_and_the_hello_answer_no_longer() {
    let _w = watchdog(Duration::from_secs(120), "udp echo sizes");
    let (srv, _) = start(ServerConfig::default());
    let udp = srv.udp_addr().unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (seq, len) in [14usize, 15, 64, 1000, 1472, 9000, 65_507]
        .into_iter()
        .enumerate()
    {
        let m = ping_message(seq as u64 + 1, len);
        c.send_to(&m, udp).unwrap();
        let a = one_datagram(&c);
        assert_eq!(a.len(), len, "a {len}-byte ping got {} bytes", a.len());
        assert_eq!(Header::parse(&a, 1 << 17).unwrap().seq, seq as u64 + 1);
    }
    // A header announcing 60,000 bytes in a 64-byte datagram, and 14 in a 64-byte one: nothing back.
    for announced in [60_000u32, 14] {
        let mut m = ping_message(99, 64);
        Header {
            seq: 99,
            flags: Flags::CLIENT.with(Flags::PONG_REQUEST),
            len: announced,
        }
        .write(&mut m);
        c.send_to(&m, udp).unwrap();
    }
    assert_eq!(datagrams(&c, Duration::from_secs(1)), Vec::<usize>::new());
    // A control message a client has no reason to send is echoed like any message: the same size.
    let counts = Control::Counts {
        messages: 1,
        bytes: 1,
    }
    .encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
    c.send_to(&counts, udp).unwrap();
    assert_eq!(one_datagram(&c).len(), counts.len());
    // The hello.
    let hello =
        Hello::request(Feature::ALL, [7; 16]).encode(Flags::CLIENT.with(Flags::PONG_REQUEST));
    assert_eq!(hello.len(), HELLO_LEN);
    c.send_to(&hello, udp).unwrap();
    let a = one_datagram(&c);
    assert!(a.len() <= hello.len(), "{} > {}", a.len(), hello.len());
    assert!(Hello::decode(&a).is_some(), "the answer is an ack");
    // A version 1 hello is 32 bytes (25 of them meaningful): its answer is cut to its length.
    for len in [32usize, 25] {
        let mut v1 = hello[..len].to_vec();
        Header {
            seq: roundtrip::wire::sockperf::HELLO_SEQ,
            flags: Flags::CLIENT.with(Flags::PONG_REQUEST),
            len: len as u32,
        }
        .write(&mut v1);
        v1[19..21].copy_from_slice(&1u16.to_be_bytes());
        c.send_to(&v1, udp).unwrap();
        let a = one_datagram(&c);
        assert!(a.len() <= len, "a {len}-byte hello got {} bytes", a.len());
    }
}

// ---------------------------------------------------------------------------------------------------------
// Item 9: the server's limits table.

/// Starts `roundtrip server --bind 127.0.0.1 -p 0 EXTRA...`; returns it, its TCP port and its first two lines.
fn server_bin(extra: &[&str]) -> (Kill, u16, Vec<String>) {
    let mut c = Command::new(bin())
        .args(["server", "--bind", "127.0.0.1", "-p", "0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = c.stderr.take().unwrap();
    let kill = Kill(c);
    let lines = lines_until(err, "limits:");
    let port = port_in(&lines[0]);
    (kill, port, lines)
}

/// The limits table's defaults are the server's: 16384 clients, 256 per address, 10 s to complete a message,
/// idle 5 m, reverse streams of at most 30 s and 4 at once, in the library's `Limits::default()`, the help and
/// the line the server prints at start; `--idle-timeout 0` is printed as "idle never" and a client silent longer
/// than a short idle timeout is still served.
#[test]
fn limits_defaults_and_idle_timeout_zero_means_never() {
    let _w = watchdog(Duration::from_secs(120), "limits defaults");
    let l = Limits::default();
    assert_eq!(l.max_clients, 16_384);
    assert_eq!(l.max_per_address, 256);
    assert_eq!(l.message_deadline, Duration::from_secs(10));
    assert_eq!(l.idle_timeout, Some(Duration::from_secs(300)));
    assert_eq!(l.max_reverse, Duration::from_secs(30));
    assert_eq!(l.max_reverse_streams, 4);
    for (flag, want) in [
        ("--max-clients", "16384"),
        ("--max-per-address", "256"),
        ("--message-deadline", "10s"),
        ("--idle-timeout", "5m"),
        ("--max-reverse", "30s"),
        ("--max-reverse-streams", "4"),
    ] {
        assert_eq!(help_default(&["server"], flag), want, "{flag}");
    }
    let (_srv, _, lines) = server_bin(&[]);
    let line = &lines[1];
    assert!(
        line.contains(
            "limits: 16384 clients, 256 per address, 10.0s to complete a message, idle 300s, UDP reverse streams \
             need a cookie and last at most 30.0s (4 at once)"
        ),
        "{lines:?}"
    );
    // --idle-timeout 0: never.
    let (_srv, port, lines) = server_bin(&["--idle-timeout", "0"]);
    assert!(lines[1].contains("idle never"), "{lines:?}");
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    // Silent for longer than the 300 ms idle timeout tests/security.rs drops a client at.
    std::thread::sleep(Duration::from_millis(1500));
    let m = ping_message(1, 64);
    s.write_all(&m).unwrap();
    let mut a = vec![0u8; 64];
    s.read_exact(&mut a)
        .expect("a client silent under --idle-timeout 0 is still served");
    assert_eq!(Header::parse(&a, 1 << 17).unwrap().seq, 1);
}

/// `--max-reverse-streams` counts one stream per client address: a client repeating its request (with its valid
/// cookie) while its stream runs starts no second one, though the limit (4) would allow it.
#[test]
fn a_client_address_gets_one_reverse_stream_however_often_it_asks() {
    let _w = watchdog(Duration::from_secs(120), "one reverse stream per address");
    let (srv, events) = start(ServerConfig::default());
    assert_eq!(srv.limits().max_reverse_streams, 4);
    let udp = srv.udp_addr().unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    let request = |cookie| {
        Control::ReverseRequest {
            size: 100,
            duration: Duration::from_secs(3),
            cookie,
        }
        .encode(Flags::CLIENT.with(Flags::PONG_REQUEST))
    };
    c.send_to(&request(None), udp).unwrap();
    let cookie = match Control::decode(&one_datagram(&c)) {
        Some(Control::ReverseGrant { cookie, .. }) => cookie,
        other => panic!("expected a grant, got {other:?}"),
    };
    let started = || {
        events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, ServerEvent::ReverseStarted { .. }))
            .count()
    };
    c.send_to(&request(Some(cookie)), udp).unwrap();
    wait_for("the first stream", || started() == 1);
    // Two repeats: were each a stream, the limit (4) would still leave room for the other address below.
    for _ in 0..2 {
        c.send_to(&request(Some(cookie)), udp).unwrap();
    }
    // Another client address meanwhile gets a stream of its own: the repeated requests were taken.
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    other.send_to(&request(None), udp).unwrap();
    let cookie2 = match Control::decode(&one_datagram(&other)) {
        Some(Control::ReverseGrant { cookie, .. }) => cookie,
        other => panic!("expected a grant, got {other:?}"),
    };
    other.send_to(&request(Some(cookie2)), udp).unwrap();
    wait_for("the other address's stream", || started() >= 2);
    assert_eq!(started(), 2, "a repeated request started a second stream");
}

// ---------------------------------------------------------------------------------------------------------
// Item 11: --psk-file for load and sweep.

fn key_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("{text}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.to_str().unwrap().to_string()
}

/// `load` and `sweep` with `--psk-file` run the key exchange against a keyed server, over TCP and UDP, and
/// measure (a keyed server answers no measurement message before the proof); without the key they are told it is
/// required, with another key that it was refused, and exit non-zero.
#[test]
fn load_and_sweep_prove_the_key() {
    let _w = watchdog(Duration::from_secs(240), "load and sweep with a key");
    let dir = tempfile::tempdir().unwrap();
    let good = key_file(dir.path(), "good", "the fleet's shared key, 32 bytes+");
    let wrong = key_file(dir.path(), "wrong", "somebody else's key of 16+ bytes");
    let (srv, _) = start(ServerConfig {
        psk: Some(Psk::from_file(std::path::Path::new(&good)).unwrap()),
        ..Default::default()
    });
    let target = srv.tcp_addr().unwrap().to_string();
    assert_eq!(
        srv.udp_addr().unwrap().port(),
        srv.tcp_addr().unwrap().port()
    );
    let load = [
        "load", &target, "-r", "2000", "-t", "500ms", "--warmup", "0",
    ];
    let sweep = [
        "sweep", &target, "--sizes", "64", "--rates", "1k", "-t", "500ms", "--warmup", "0",
    ];
    for cmd in [&load[..], &sweep[..]] {
        for udp in [false, true] {
            let mut args = cmd.to_vec();
            if udp {
                args.push("--udp");
            }
            let what = format!("{args:?}");
            // Without the key, then with another: refused, nothing answered.
            let out = run_bin(&args);
            let err = String::from_utf8_lossy(&out.stderr).to_string()
                + &String::from_utf8_lossy(&out.stdout);
            assert!(!out.status.success(), "{what} without a key: {err}");
            assert!(err.contains("requires a pre-shared key"), "{what}: {err}");
            let mut a = args.clone();
            a.extend(["--psk-file", &wrong]);
            let out = run_bin(&a);
            let err = String::from_utf8_lossy(&out.stderr).to_string()
                + &String::from_utf8_lossy(&out.stdout);
            assert!(!out.status.success(), "{what} with another key: {err}");
            assert!(err.contains("refused our key"), "{what}: {err}");
            // With the key: measured.
            let mut a = args.clone();
            a.extend(["--psk-file", &good, "--json"]);
            let out = run_bin(&a);
            assert!(
                out.status.success(),
                "{what} with the key: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(doc["peer"], "roundtrip", "{what}: {doc}");
            let answered = if cmd[0] == "load" {
                &doc["summary"]["answered"]
            } else {
                &doc["cells"][0]["answered"]
            };
            assert!(
                answered.as_u64().is_some_and(|n| n > 0),
                "{what}: nothing answered: {doc}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Item 13: JSON output is escaped by JSON itself and unchanged.

/// The Redis command name of tests/hostile/misc.rs: ESC with a clear-screen sequence, BEL, NUL, DEL and U+202E.
const HOSTILE_NAME: &str = "SET\u{1b}[2J\u{7}\u{0}\u{7f}\u{202e}X";

/// One Ethernet/IPv4/TCP frame from `src` to `dst` (IP checksum computed; TCP's left zero).
fn frame(
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    seq: u32,
    ack: u32,
    flags: u8,
    data: &[u8],
) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    let total = (20 + 20 + data.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend(total.to_be_bytes());
    ip.extend([0, 1, 0x40, 0, 64, 6, 0, 0]);
    ip.extend(src.0);
    ip.extend(dst.0);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend(ip);
    f.extend(src.1.to_be_bytes());
    f.extend(dst.1.to_be_bytes());
    f.extend(seq.to_be_bytes());
    f.extend(ack.to_be_bytes());
    f.extend([0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend(data);
    f
}

/// A pcap (microsecond timestamps, Ethernet) of a Redis client sending a command named `name` three times, each
/// answered with an error.
fn redis_pcap(path: &std::path::Path, name: &str) {
    let cli = ([127, 0, 0, 1], 40_000u16);
    let srv = ([127, 0, 0, 1], 6379u16);
    let (syn, fin, ack, psh) = (0x02u8, 0x01u8, 0x10u8, 0x18u8);
    let (mut c_seq, mut s_seq) = (1000u32, 5000u32);
    let mut frames = vec![
        frame(cli, srv, c_seq, 0, syn, &[]),
        frame(srv, cli, s_seq, c_seq + 1, syn | ack, &[]),
    ];
    c_seq += 1;
    s_seq += 1;
    frames.push(frame(cli, srv, c_seq, s_seq, ack, &[]));
    let cmd = format!("*1\r\n${}\r\n{name}\r\n", name.len()).into_bytes();
    let reply = b"-ERR unknown command\r\n".to_vec();
    for _ in 0..3 {
        frames.push(frame(cli, srv, c_seq, s_seq, psh, &cmd));
        c_seq += cmd.len() as u32;
        frames.push(frame(srv, cli, s_seq, c_seq, psh, &reply));
        s_seq += reply.len() as u32;
    }
    frames.push(frame(cli, srv, c_seq, s_seq, fin | ack, &[]));
    frames.push(frame(srv, cli, s_seq, c_seq + 1, fin | ack, &[]));
    let mut b = Vec::new();
    b.extend(0xa1b2_c3d4u32.to_le_bytes());
    b.extend([2, 0, 4, 0]);
    b.extend([0u8; 8]);
    b.extend(262_144u32.to_le_bytes());
    b.extend(1u32.to_le_bytes());
    for (i, d) in frames.iter().enumerate() {
        let us = 1_700_000_000_000_000u64 + i as u64 * 1000;
        b.extend(((us / 1_000_000) as u32).to_le_bytes());
        b.extend(((us % 1_000_000) as u32).to_le_bytes());
        b.extend((d.len() as u32).to_le_bytes());
        b.extend((d.len() as u32).to_le_bytes());
        b.extend(d);
    }
    std::fs::write(path, b).unwrap();
}

/// Every string in `v`.
fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| {
            out.push(k.clone());
            strings(x, out)
        }),
        _ => {}
    }
}

/// A Redis command name holding terminal controls and a bidirectional override, read from a capture by
/// `capture rpc FILE --json`: the output is valid JSON holding the name unchanged (not the terminal escapes of
/// the text output), and no raw control character.
#[test]
fn hostile_names_in_json_output_are_valid_json_and_unchanged() {
    let _w = watchdog(Duration::from_secs(120), "hostile names in JSON");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostile.pcap");
    redis_pcap(&file, HOSTILE_NAME);
    // The text output shows it escaped (the other half of the claim, tests/hostile/misc.rs).
    let out = run_bin(&["capture", "rpc", file.to_str().unwrap(), "--proto", "redis"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("SET\\x1b[2J\\x07\\x00\\x7f\\u{202e}X"),
        "{text}"
    );
    let out = run_bin(&[
        "capture",
        "rpc",
        file.to_str().unwrap(),
        "--proto",
        "redis",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let raw = String::from_utf8(out.stdout).expect("JSON output is UTF-8");
    for c in ['\u{1b}', '\u{7}', '\u{0}', '\u{7f}'] {
        // DEL is legal inside a JSON string; serde_json leaves it, and it is part of the name unchanged.
        if c != '\u{7f}' {
            assert!(!raw.contains(c), "{c:?} raw in the JSON output");
        }
    }
    let doc: serde_json::Value = serde_json::from_str(&raw).expect("valid JSON");
    let mut all = Vec::new();
    strings(&doc, &mut all);
    assert!(
        all.iter().any(|s| s == HOSTILE_NAME),
        "the name is not in the JSON unchanged: {all:?}"
    );
    assert!(
        !all.iter().any(|s| s.contains("\\x1b")),
        "the JSON holds the terminal escape, not the name: {all:?}"
    );
}
