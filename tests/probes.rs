//! Probes against real sockets: loopback, and network namespaces built here (veth pair, a private /30 and
//! an IPv6 /126 that exist only inside that pair, nftables rules in the "server" namespace).

mod common;

use assert_cmd::Command;
use roundtrip::probe::compare::{self, CompareConfig, RowKind};
use roundtrip::probe::connect::{self, ConnectConfig, ConnectMode, NoConnectObserver, PortState};
use roundtrip::probe::icmp::{self, IcmpConfig, IcmpError, IcmpMode, IcmpSocket, NoIcmpObserver};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut c = Command::cargo_bin("roundtrip").unwrap();
    c.timeout(Duration::from_secs(120));
    c
}

fn sh(args: &[&str]) {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sh_stdin(args: &[&str], input: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Two namespaces joined by a veth pair: "client" 10.199.0.1/30 + fd00:199::1/126, "server" 10.199.0.2/30 +
/// fd00:199::2/126. The addresses exist only inside this pair. In the server namespace nftables drops TCP
/// to port 9 (filtered), and rejects TCP to port 10 and echo requests with a 1000-byte payload with ICMP
/// host-unreachable. Everything goes away on drop,
/// servers started with [`NetPair::spawn_in_server`] too.
struct NetPair {
    client: String,
    server: String,
    children: Vec<Child>,
}

const SERVER_V4: &str = "10.199.0.2";
const SERVER_V6: &str = "fd00:199::2";

impl NetPair {
    fn new() -> Option<NetPair> {
        if !common::require_root("namespace tests") || !common::have("ip") || !common::have("nft") {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}{n}", std::process::id());
        let pair = NetPair {
            client: format!("rtp-c-{id}"),
            server: format!("rtp-s-{id}"),
            children: Vec::new(),
        };
        sh(&["ip", "netns", "add", &pair.client]);
        // From here on, Drop cleans up even if a later step fails.
        let pair = pair;
        sh(&["ip", "netns", "add", &pair.server]);
        let (vc, vs) = (format!("rtpc{id}"), format!("rtps{id}"));
        let (vc, vs) = (&vc[..vc.len().min(15)], &vs[..vs.len().min(15)]);
        sh(&[
            "ip",
            "link",
            "add",
            vc,
            "netns",
            &pair.client,
            "type",
            "veth",
            "peer",
            "name",
            vs,
            "netns",
            &pair.server,
        ]);
        for (ns, dev, v4, v6) in [
            (&pair.client, vc, "10.199.0.1/30", "fd00:199::1/126"),
            (&pair.server, vs, "10.199.0.2/30", "fd00:199::2/126"),
        ] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            sh(&["ip", "-n", ns, "addr", "add", v4, "dev", dev]);
            sh(&["ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad"]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        sh_stdin(
            &["ip", "netns", "exec", &pair.server, "nft", "-f", "-"],
            "table inet rtp {\n chain input {\n  type filter hook input priority 0; policy accept;\n  \
             tcp dport 9 drop\n  tcp dport 10 reject with icmpx type host-unreachable\n  \
             icmp type echo-request ip length 1028 reject with icmpx type host-unreachable\n  \
             icmpv6 type echo-request ip6 length 1008 reject with icmpx type host-unreachable\n }\n}\n",
        );
        // A veth link drops packets for a moment after it comes up (IPv6 longer than IPv4): wait until
        // both addresses answer an echo, so no test sees that start-up loss.
        let deadline = Instant::now() + Duration::from_secs(30);
        for host in [SERVER_V4, SERVER_V6] {
            while !std::process::Command::new("ip")
                .args(["netns", "exec", &pair.client])
                .arg(common::procs::BIN)
                .args(["icmp", host, "-c", "1", "--timeout", "200ms"])
                .output()
                .is_ok_and(|o| o.status.success())
            {
                assert!(
                    Instant::now() < deadline,
                    "the veth pair never carried an echo to {host}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(pair)
    }

    /// `ip netns exec NS roundtrip ARGS`.
    fn run_in(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(common::procs::BIN)
            .args(args);
        c.timeout(Duration::from_secs(120));
        c
    }

    fn client_cmd(&self, args: &[&str]) -> Command {
        self.run_in(&self.client, args)
    }

    /// Starts `roundtrip server` in the server namespace and waits until it accepts.
    fn spawn_server(&mut self, port: u16) {
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &self.server])
            .arg(common::procs::BIN)
            .args(["server", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting roundtrip server in the namespace");
        self.children.push(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = std::process::Command::new("ip")
                .args(["netns", "exec", &self.client])
                .arg(common::procs::BIN)
                .args([
                    "connect",
                    &format!("{SERVER_V4}:{port}"),
                    "-c",
                    "1",
                    "--timeout",
                    "1s",
                ])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the namespace server did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for NetPair {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.client, &self.server] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn stdout_json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn quick_connect(addr: SocketAddr, mode: ConnectMode) -> connect::ConnectResult {
    let mut c = ConnectConfig::new(addr);
    c.count = 3;
    c.interval = Duration::from_millis(1);
    c.timeout = Duration::from_secs(5);
    c.mode = mode;
    connect::run(&c, &mut NoConnectObserver).expect("connect run")
}

/// A port nothing listens on: bound by the OS, then released.
fn closed_port(ip: &str) -> SocketAddr {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a
}

// ---------------------------------------------------------------- connect

#[test]
fn connect_open_loopback_port_v4_and_v6() {
    for ip in ["127.0.0.1", "::1"] {
        let l = TcpListener::bind((ip, 0)).unwrap();
        let r = quick_connect(l.local_addr().unwrap(), ConnectMode::Kernel);
        assert_eq!(r.count(PortState::Open), 3, "{ip}: {:?}", r.attempts);
        assert_eq!(r.handshake.len(), 3);
        assert_eq!(r.verdict(), Some(PortState::Open));
        assert!(r.attempts.iter().all(|a| a.time.is_some()));
    }
}

#[test]
fn connect_closed_port_is_rst() {
    for ip in ["127.0.0.1", "::1"] {
        let r = quick_connect(closed_port(ip), ConnectMode::Kernel);
        assert_eq!(r.count(PortState::Closed), 3, "{ip}: {:?}", r.attempts);
        assert_eq!(r.refused.len(), 3);
        assert!(r.handshake.is_empty());
    }
}

#[test]
fn raw_syn_open_and_closed_never_reach_the_application() {
    if !common::require_root("raw SYN") {
        return;
    }
    for ip in ["127.0.0.1", "::1"] {
        let l = TcpListener::bind((ip, 0)).unwrap();
        l.set_nonblocking(true).unwrap();
        let r = quick_connect(l.local_addr().unwrap(), ConnectMode::Raw);
        assert_eq!(r.count(PortState::Open), 3, "{ip}: {:?}", r.attempts);
        // The RST removed every half-open connection: nothing is waiting to be accepted.
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            l.accept().is_err(),
            "{ip}: a raw-SYN connection reached accept()"
        );
        let r = quick_connect(closed_port(ip), ConnectMode::Raw);
        assert_eq!(r.count(PortState::Closed), 3, "{ip}: {:?}", r.attempts);
    }
}

/// A bulk transfer on loopback (to another port) does not make raw SYNs read as filtered: the raw socket keeps
/// only the target port's segments, so the flood's copies cannot fill its receive buffer before the SYN-ACK
/// arrives (before: 11 of 50 attempts "filtered" beside a `roundtrip throughput` on loopback).
#[test]
fn raw_syn_answers_are_not_lost_beside_a_loopback_flood() {
    use std::io::{Read, Write};
    if !common::require_root("raw SYN") {
        return;
    }
    let sink = TcpListener::bind("127.0.0.1:0").unwrap();
    let sink_addr = sink.local_addr().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drain = std::thread::spawn(move || {
        let (mut s, _) = sink.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        while s.read(&mut buf).is_ok_and(|n| n > 0) {}
    });
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(sink_addr).unwrap();
            let buf = vec![0u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) && s.write_all(&buf).is_ok() {}
        })
    };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = ConnectConfig::new(l.local_addr().unwrap());
    c.count = 40;
    c.interval = Duration::from_millis(5);
    c.timeout = Duration::from_secs(5);
    c.mode = ConnectMode::Raw;
    let r = connect::run(&c, &mut NoConnectObserver).expect("connect run");
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    drain.join().unwrap();
    assert_eq!(r.count(PortState::Open), 40, "{:?}", r.attempts);
}

#[test]
fn cli_connect_open_json_and_closed_exit_code() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let out = bin()
        .args([
            "connect",
            &format!("localhost:{port}"),
            "-4",
            "-c",
            "2",
            "-i",
            "10ms",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["format"], "roundtrip");
    assert_eq!(v["kind"], "connect");
    assert_eq!(v["verdict"], "open");
    assert_eq!(v["counts"]["open"], 2);
    assert_eq!(v["handshake"]["count"], 2);
    assert!(v["dns_ns"].is_u64(), "a name was resolved, so DNS is timed");
    assert!(v["attempts"][0]["time_ns"].as_u64().unwrap() > 0);
    assert!(v["environment"]["kernel"].is_string());

    let closed = closed_port("127.0.0.1");
    let out = bin()
        .args(["connect", &closed.to_string(), "-c", "2", "-i", "10ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("closed"), "{text}");
    assert!(stderr(&out).contains("is closed"), "{}", stderr(&out));
}

#[test]
fn cli_connect_dns_failure_and_bad_input() {
    let out = bin()
        .args(["connect", "no-such-host.invalid:80"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot resolve 'no-such-host.invalid'"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        stderr(&out).lines().count(),
        1,
        "one-line error: {}",
        stderr(&out)
    );

    let out = bin().args(["connect", "127.0.0.1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no port"), "{}", stderr(&out));

    let out = bin()
        .args(["connect", "127.0.0.1:80", "--timeout", "0s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin()
        .args(["connect", "127.0.0.1:80", "-c", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin()
        .args(["icmp", "no-such-host.invalid"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot resolve"), "{}", stderr(&out));
    let out = bin().args(["icmp", "127.0.0.1:80"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ICMP has no ports"),
        "{}",
        stderr(&out)
    );
    let out = bin()
        .args(["compare", "no-such-host.invalid"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot resolve"), "{}", stderr(&out));
    let out = bin().args(["compare", "--size", "5"]).output().unwrap();
    // Refused by the settings check before any I/O: exit 2.
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("message size 5"), "{}", stderr(&out));
}

#[test]
fn namespace_filtered_unreachable_and_no_route() {
    let Some(pair) = NetPair::new() else { return };
    for mode in [&[][..], &["--raw"][..]] {
        // Filtered: the SYN is dropped by nftables.
        for host in [SERVER_V4, SERVER_V6] {
            let target = if host.contains(':') {
                format!("[{host}]:9")
            } else {
                format!("{host}:9")
            };
            let mut args = vec![
                "connect",
                target.as_str(),
                "-c",
                "2",
                "-i",
                "0s",
                "--timeout",
                "300ms",
                "--json",
            ];
            args.extend(mode);
            let out = pair.client_cmd(&args).output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(1),
                "{target} {mode:?}: {}",
                stderr(&out)
            );
            let v = stdout_json(&out);
            assert_eq!(v["verdict"], "filtered", "{target} {mode:?}");
            assert_eq!(v["counts"]["filtered"], 2);
            assert!(v["attempts"][0]["time_ns"].is_null());
        }
        // Unreachable: the SYN is answered with ICMP host-unreachable.
        let mut args = vec!["connect", "10.199.0.2:10", "-c", "1", "--timeout", "5s"];
        args.extend(mode);
        let out = pair.client_cmd(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{mode:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("unreachable"), "{mode:?}: {text}");
        assert!(text.contains("EHOSTUNREACH"), "{mode:?}: {text}");
        assert!(stderr(&out).contains("is unreachable"), "{}", stderr(&out));
    }
    // Filtered text output and message.
    let out = pair
        .client_cmd(&["connect", "10.199.0.2:9", "-c", "1", "--timeout", "300ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("filtered"), "{}", stderr(&out));
    // No route: an address outside the /30.
    let out = pair
        .client_cmd(&["connect", "10.199.1.1:80", "-c", "1", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v = stdout_json(&out);
    assert_eq!(v["verdict"], "unreachable");
    assert!(
        v["attempts"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("ENETUNREACH")
    );
    let out = pair
        .client_cmd(&["icmp", "10.199.1.1", "-c", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no route"), "{}", stderr(&out));
    let out = pair
        .client_cmd(&["compare", "10.199.1.1", "-c", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("nothing could be measured"),
        "{}",
        stderr(&out)
    );
    // Open port in the namespace, both families, raw and kernel: closed too.
    let mut pair = pair;
    pair.spawn_server(7000);
    for t in ["10.199.0.2:7000", "[fd00:199::2]:7000"] {
        for mode in [&[][..], &["--raw"][..]] {
            let mut args = vec!["connect", t, "-c", "2", "-i", "0s", "--json"];
            args.extend(mode);
            let out = pair.client_cmd(&args).output().unwrap();
            assert!(out.status.success(), "{t} {mode:?}: {}", stderr(&out));
            assert_eq!(stdout_json(&out)["verdict"], "open");
        }
    }
    let out = pair
        .client_cmd(&["connect", "10.199.0.2:7001", "-c", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("closed"));
}

// ---------------------------------------------------------------- icmp

#[test]
fn icmp_errors_from_the_network_are_reported_per_probe() {
    let Some(pair) = NetPair::new() else { return };
    for host in [SERVER_V4, SERVER_V6] {
        for mode in ["--raw", "--datagram"] {
            if mode == "--datagram" {
                // Datagram sockets need the group range; set it for the client namespace only.
                sh(&[
                    "ip",
                    "netns",
                    "exec",
                    &pair.client,
                    "sysctl",
                    "-qw",
                    "net.ipv4.ping_group_range=0 2147483647",
                ]);
            }
            let out = pair
                .client_cmd(&[
                    "icmp", host, "-c", "2", "-i", "10ms", "--size", "1000", mode, "--json",
                ])
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(1),
                "{host} {mode}: {}",
                stderr(&out)
            );
            let v = stdout_json(&out);
            assert_eq!(v["errors"], 2, "{host} {mode}: {v}");
            assert_eq!(v["probes"][0]["outcome"], "error");
            assert!(
                v["probes"][0]["detail"]
                    .as_str()
                    .unwrap()
                    .contains("EHOSTUNREACH"),
                "{host} {mode}: {v}"
            );
            assert!(stderr(&out).contains("no echo reply"), "{}", stderr(&out));
            // The same host answers echoes of another size.
            let out = pair
                .client_cmd(&["icmp", host, "-c", "2", "-i", "10ms", mode])
                .output()
                .unwrap();
            assert!(out.status.success(), "{host} {mode}: {}", stderr(&out));
        }
    }
}

#[test]
fn icmp_to_loopback_v4_and_v6() {
    if !common::require_root("raw ICMP") {
        return;
    }
    for ip in ["127.0.0.1", "::1"] {
        let mut c = IcmpConfig::new(ip.parse().unwrap());
        c.count = 3;
        c.interval = Duration::from_millis(5);
        c.timeout = Duration::from_secs(5);
        c.size = 100;
        let r = icmp::run(&c, &mut NoIcmpObserver).unwrap();
        assert_eq!(r.socket, IcmpSocket::Raw);
        assert_eq!((r.sent, r.received, r.errors), (3, 3, 0), "{ip}");
        assert_eq!(r.rtt.len(), 3);
    }
    let out = bin()
        .args(["icmp", "::1", "-c", "2", "-i", "10ms", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["kind"], "icmp");
    assert_eq!(v["received"], 2);
    assert_eq!(v["probes"][0]["outcome"], "reply");
    assert_eq!(v["probes"][0]["bytes"], 64);
}

/// A namespace with only loopback, and `net.ipv4.ping_group_range` set for it alone.
struct LoneNs(String);

impl LoneNs {
    fn new(range: &str) -> Option<LoneNs> {
        if !common::require_root("namespace tests") || !common::have("setpriv") {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let ns = LoneNs(format!("rtp-l-{}{n}", std::process::id()));
        sh(&["ip", "netns", "add", &ns.0]);
        sh(&["ip", "-n", &ns.0, "link", "set", "lo", "up"]);
        sh(&[
            "ip",
            "netns",
            "exec",
            &ns.0,
            "sysctl",
            "-qw",
            &format!("net.ipv4.ping_group_range={range}"),
        ]);
        Some(ns)
    }

    /// Runs the binary as `nobody` inside the namespace.
    fn as_nobody(&self, args: &[&str]) -> std::process::Output {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.0,
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ])
        .arg(common::procs::BIN)
        .args(args)
        .timeout(Duration::from_secs(60));
        c.output().unwrap()
    }
}

impl Drop for LoneNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

#[test]
fn icmp_unprivileged_datagram_socket_when_allowed() {
    let Some(ns) = LoneNs::new("0 2147483647") else {
        return;
    };
    for ip in ["127.0.0.1", "::1"] {
        let out = ns.as_nobody(&["icmp", ip, "-c", "2", "-i", "10ms", "--json"]);
        assert!(out.status.success(), "{ip}: {}", stderr(&out));
        let v = stdout_json(&out);
        assert_eq!(v["socket"], "datagram", "{ip}");
        assert_eq!(v["received"], 2, "{ip}");
    }
}

#[test]
fn icmp_not_permitted_says_how_to_allow_it() {
    let Some(ns) = LoneNs::new("1 0") else { return };
    let out = ns.as_nobody(&["icmp", "127.0.0.1", "-c", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(e.contains("not permitted"), "{e}");
    assert!(e.contains("net.ipv4.ping_group_range"), "{e}");
    assert!(e.contains("\"1 0\""), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // --raw needs the privilege too, and says what works without it.
    let out = ns.as_nobody(&["connect", "127.0.0.1:1", "--raw", "-c", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(e.contains("--raw needs root or CAP_NET_RAW"), "{e}");
    assert!(e.contains("without --raw"), "{e}");
    // The library error, as root (LoneNs::new required root), when only the datagram socket is allowed to
    // be tried.
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(common::procs::BIN)
        .args(["icmp", "::1", "-c", "1", "--datagram"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not permitted"), "{}", stderr(&out));
    // compare still measures the TCP rows, and explains the missing ICMP row.
    let out = ns.as_nobody(&["compare", "-c", "3", "-i", "1ms", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = stdout_json(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows[0]["kind"], "icmp");
    assert_eq!(rows[0]["summary"]["count"], 0);
    assert!(
        rows[0]["error"]
            .as_str()
            .unwrap()
            .contains("ping_group_range")
    );
    assert_eq!(rows[1]["summary"]["count"], 3);
}

/// The kernel's rule for ICMP datagram sockets (net/ipv4/ping.c, ping_init_sock), read from /proc without
/// the library: allowed when the effective gid or a supplementary group is inside ping_group_range.
/// Returns (allowed, the range as the kernel prints it with single spaces).
fn kernel_allows_ping_sockets() -> (bool, String) {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range").unwrap();
    let bounds: Vec<u64> = text
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> Vec<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| {
                l[name.len()..]
                    .split_whitespace()
                    .map(|v| v.parse().unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    let egid = field("Gid:")[1];
    let mut groups = field("Groups:");
    groups.push(egid);
    let allowed = groups.iter().any(|g| (bounds[0]..=bounds[1]).contains(g));
    (allowed, format!("{} {}", bounds[0], bounds[1]))
}

#[test]
fn icmp_mode_datagram_is_refused_cleanly_in_the_library() {
    // The datagram-only mode works exactly when the kernel's ping_group_range admits one of our groups,
    // and otherwise names the sysctl with the range the kernel holds (read here from /proc, not by the
    // library).
    let (allowed, range_now) = kernel_allows_ping_sockets();
    let mut c = IcmpConfig::new("127.0.0.1".parse().unwrap());
    c.count = 1;
    c.mode = IcmpMode::Datagram;
    c.timeout = Duration::from_secs(5);
    match icmp::run(&c, &mut NoIcmpObserver) {
        Ok(r) => {
            assert!(
                allowed,
                "datagram ICMP worked outside ping_group_range {range_now}"
            );
            assert_eq!(r.socket, IcmpSocket::Datagram)
        }
        Err(IcmpError::NotPermitted { range, .. }) => {
            assert!(
                !allowed,
                "refused although ping_group_range {range_now} admits us"
            );
            assert_eq!(range, range_now)
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
}

// ---------------------------------------------------------------- compare

#[test]
fn compare_against_the_embedded_server() {
    let mut c = CompareConfig::new(None);
    c.count = 5;
    c.interval = Duration::from_millis(1);
    c.timeout = Duration::from_secs(5);
    let r = compare::run(&c).unwrap();
    assert!(r.embedded_server);
    let kinds: Vec<RowKind> = r.rows.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            RowKind::Icmp,
            RowKind::TcpHandshake,
            RowKind::PingHeader,
            RowKind::PingPayload,
            RowKind::KernelSrtt
        ]
    );
    for row in &r.rows[1..] {
        assert_eq!(row.summary.count, 5, "{row:?}");
        assert!(row.error.is_none(), "{row:?}");
        assert!(!row.interpretation.is_empty());
    }
    assert_eq!(r.rows[3].size_bytes, Some(250));
    assert!(r.tcp_info.is_some());
    assert!(r.conclusion().unwrap().contains("the application pays"));
    if common::require_root("the ICMP row of compare uses a raw socket") {
        assert_eq!(r.rows[0].summary.count, 5, "{:?}", r.rows[0]);
    }
}

#[test]
fn cli_compare_embedded_v6_text_and_json() {
    let out = bin()
        .args([
            "compare", "-6", "-c", "3", "-i", "1ms", "--size", "1k", "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["format"], "roundtrip");
    assert_eq!(v["kind"], "compare");
    assert_eq!(v["embedded_server"], true);
    assert!(v["address"].as_str().unwrap().starts_with("[::1]:"));
    assert_eq!(v["rows"][3]["size_bytes"], 1024);
    assert_eq!(v["rows"][4]["kind"], "kernel_srtt");
    assert!(v["tcp_info"]["srtt_ns"].is_u64());
    assert!(v["tcp_info"]["rttvar_ns"].is_u64());

    let out = bin()
        .args(["compare", "-c", "3", "-i", "1ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "ICMP echo",
        "TCP handshake",
        "roundtrip ping 14 B",
        "roundtrip ping 250 B",
        "kernel srtt",
        "min",
        "p50",
        "p99",
        "count",
    ] {
        assert!(text.contains(want), "missing {want}: {text}");
    }
}

#[test]
fn compare_against_a_namespace_host() {
    let Some(mut pair) = NetPair::new() else {
        return;
    };
    pair.spawn_server(11111);
    for host in [SERVER_V4, SERVER_V6] {
        let out = pair
            .client_cmd(&["compare", host, "-c", "5", "-i", "2ms", "--raw", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{host}: {}", stderr(&out));
        let v = stdout_json(&out);
        assert_eq!(v["embedded_server"], false);
        for row in v["rows"].as_array().unwrap() {
            assert_eq!(row["summary"]["count"], 5, "{host}: {row}");
        }
    }
    // A filtered port: the handshake row gives up after three silent attempts instead of ten timeouts.
    let out = pair
        .client_cmd(&[
            "compare",
            "10.199.0.2:9",
            "-c",
            "10",
            "--timeout",
            "300ms",
            "--json",
        ])
        .output()
        .unwrap();
    // The application rows measured nothing: exit 1, the rows that did measure still in the document.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("measured nothing"),
        "{}",
        stderr(&out)
    );
    let v = stdout_json(&out);
    assert_eq!(v["rows"][0]["summary"]["count"], 10);
    assert_eq!(v["rows"][1]["kind"], "tcp_handshake");
    assert_eq!(v["rows"][1]["attempts"], 3);
    assert_eq!(v["rows"][1]["summary"]["count"], 0);
    assert!(v["rows"][1]["error"].as_str().unwrap().contains("filtered"));
    // The ping rows need a roundtrip server; a port without one keeps ICMP, and says why the rest is empty.
    let out = pair
        .client_cmd(&["compare", "10.199.0.2:7002", "-c", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("closed"), "{text}");
}
