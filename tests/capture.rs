//! `roundtrip capture`: real captures from other projects, captures recorded here with tcpdump on loopback,
//! and cross-checks of every count against tshark and tcptrace on the same files.
//!
//! Deliberate differences from Wireshark (documented in README.md):
//! - bytes in flight when the capture starts in the middle of a connection with a hole (tcp_dupack.pcapng):
//!   roundtrip counts from the receiver's last ACK (what is really unacknowledged), Wireshark only sums the
//!   segments it saw.

mod common;

use common::netns::Ns;
use common::tcpdump::Tcpdump;

use assert_cmd::Command;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

fn roundtrip() -> Command {
    Command::cargo_bin("roundtrip").unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = roundtrip()
        .args(args)
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "roundtrip {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Per-direction figures, keyed by (source, destination).
#[derive(Debug, Default, Clone, PartialEq)]
struct DirCounts {
    packets: u64,
    wire_bytes: u64,
    payload_bytes: u64,
    retransmissions: u64,
    dup_acks: u64,
    zero_windows: u64,
    max_in_flight: u64,
}

type Dirs = HashMap<(SocketAddr, SocketAddr), DirCounts>;

fn ours(file: &Path) -> (Dirs, Value) {
    let v = json(&["capture", "flows", "--json", file.to_str().unwrap()]);
    let mut m: Dirs = HashMap::new();
    for f in v["flows"].as_array().unwrap() {
        let c: SocketAddr = f["client"].as_str().unwrap().parse().unwrap();
        let s: SocketAddr = f["server"].as_str().unwrap().parse().unwrap();
        for (key, d) in [
            ((c, s), &f["client_to_server"]),
            ((s, c), &f["server_to_client"]),
        ] {
            let e = m.entry(key).or_default();
            let n = |k: &str| d[k].as_u64().unwrap();
            e.packets += n("packets");
            e.wire_bytes += n("wire_bytes");
            e.payload_bytes += n("payload_bytes");
            e.retransmissions += n("retransmissions");
            e.dup_acks += n("dup_acks");
            e.zero_windows += n("zero_windows");
            e.max_in_flight = e.max_in_flight.max(n("in_flight_max_bytes"));
        }
    }
    m.retain(|_, d| d.packets > 0);
    (m, v)
}

fn tshark(file: &Path) -> Dirs {
    let out = std::process::Command::new("tshark")
        .args([
            "-n",
            "-r",
            file.to_str().unwrap(),
            "-Y",
            "tcp",
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-E",
            "occurrence=f",
        ])
        .args([
            "-e",
            "ip.src",
            "-e",
            "ipv6.src",
            "-e",
            "tcp.srcport",
            "-e",
            "ip.dst",
            "-e",
            "ipv6.dst",
            "-e",
            "tcp.dstport",
        ])
        .args([
            "-e",
            "frame.len",
            "-e",
            "tcp.len",
            "-e",
            "tcp.analysis.retransmission",
        ])
        .args([
            "-e",
            "tcp.analysis.duplicate_ack",
            "-e",
            "tcp.analysis.zero_window",
            "-e",
            "tcp.analysis.bytes_in_flight",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "tshark failed on {}", file.display());
    let mut m: Dirs = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 12 || f[2].is_empty() {
            continue; // e.g. TCP inside ICMP errors
        }
        let ip = |a: &str, b: &str| {
            if a.is_empty() {
                b.to_string()
            } else {
                a.to_string()
            }
        };
        let src = SocketAddr::new(ip(f[0], f[1]).parse().unwrap(), f[2].parse().unwrap());
        let dst = SocketAddr::new(ip(f[3], f[4]).parse().unwrap(), f[5].parse().unwrap());
        let e = m.entry((src, dst)).or_default();
        e.packets += 1;
        e.wire_bytes += f[6].parse::<u64>().unwrap();
        e.payload_bytes += f[7].parse::<u64>().unwrap_or(0);
        e.retransmissions += !f[8].is_empty() as u64;
        e.dup_acks += !f[9].is_empty() as u64;
        e.zero_windows += !f[10].is_empty() as u64;
        e.max_in_flight = e.max_in_flight.max(f[11].parse().unwrap_or(0));
    }
    m
}

/// Per connection, [a->b, b->a] of (total packets, actual data bytes, rexmt data pkts).
type TcptraceConns = HashMap<(SocketAddr, SocketAddr), [(u64, u64, u64); 2]>;

/// tcptrace -l: (host a, host b) -> [a->b, b->a] of (total packets, actual data bytes, rexmt data pkts).
fn tcptrace(file: &Path) -> TcptraceConns {
    let out = std::process::Command::new("tcptrace")
        .args(["-l", "-n", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut m = HashMap::new();
    let mut a: Option<SocketAddr> = None;
    let mut b: Option<SocketAddr> = None;
    let mut cur = [(0u64, 0u64, 0u64); 2];
    let two = |l: &str| -> (u64, u64) {
        let nums: Vec<u64> = l
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        (nums[0], nums[1])
    };
    // tcptrace 6.6.7 prints IPv6 addresses cut short (":0001:53098"): those connections are not compared.
    let addr = |l: &str| -> Option<SocketAddr> {
        let s = l.split_whitespace().last()?;
        let (ip, port) = s.rsplit_once(':')?;
        Some(SocketAddr::new(ip.parse().ok()?, port.parse().ok()?))
    };
    let mut host_lines = 0;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("TCP connection ") {
            a = None;
            b = None;
            host_lines = 0;
        } else if l.starts_with("host ") {
            // "host a:" / "host b:", then "host c:" / "host d:" for the next connection, and so on.
            host_lines += 1;
            if host_lines == 1 {
                a = addr(l);
            } else {
                b = addr(l);
            }
        } else if l.starts_with("total packets:") && line.starts_with("     ") {
            let (x, y) = two(l);
            cur[0].0 = x;
            cur[1].0 = y;
        } else if l.starts_with("actual data bytes:") {
            let (x, y) = two(l);
            cur[0].1 = x;
            cur[1].1 = y;
        } else if l.starts_with("rexmt data pkts:") {
            let (x, y) = two(l);
            cur[0].2 = x;
            cur[1].2 = y;
            if let (Some(a), Some(b)) = (a, b) {
                // The same four-tuple may be used by several connections: add them up.
                let e = m.entry((a, b)).or_insert([(0u64, 0u64, 0u64); 2]);
                for i in 0..2 {
                    e[i].0 += cur[i].0;
                    e[i].1 += cur[i].1;
                    e[i].2 += cur[i].2;
                }
            }
        }
    }
    m
}

/// Compares our per-direction counts with tshark's; `skip_in_flight` for the documented difference.
fn check_against_tshark(file: &Path, skip_in_flight: bool) {
    let (ours, _) = ours(file);
    let theirs = tshark(file);
    assert_eq!(
        ours.keys().collect::<std::collections::BTreeSet<_>>(),
        theirs.keys().collect::<std::collections::BTreeSet<_>>(),
        "{}: directions differ",
        file.display()
    );
    for (k, t) in &theirs {
        let mut o = ours[k].clone();
        if skip_in_flight {
            o.max_in_flight = t.max_in_flight;
        }
        assert_eq!(
            &o,
            t,
            "{}: {} -> {}: ours vs tshark",
            file.display(),
            k.0,
            k.1
        );
    }
}

fn check_against_tcptrace(file: &Path) {
    let (ours, _) = ours(file);
    let tt = tcptrace(file);
    let v4 = ours.keys().any(|k| k.0.is_ipv4());
    assert!(
        !tt.is_empty() || !v4,
        "tcptrace found nothing in {}",
        file.display()
    );
    for ((a, b), dirs) in tt {
        for (i, key) in [(a, b), (b, a)].into_iter().enumerate() {
            let o = ours.get(&key).cloned().unwrap_or_default();
            assert_eq!(
                (o.packets, o.payload_bytes, o.retransmissions),
                dirs[i],
                "{}: {} -> {}: ours (packets, data bytes, retransmissions) vs tcptrace -l",
                file.display(),
                key.0,
                key.1
            );
        }
    }
}

fn shared_captures() -> Vec<PathBuf> {
    let Some(dir) = common::captures_dir() else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for sub in ["zeek", "chrissanders"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the shared captures, found {}",
        files.len()
    );
    files
}

#[test]
fn shared_captures_agree_with_tshark() {
    let files = shared_captures();
    if files.is_empty() || !common::have("tshark") {
        return;
    }
    for f in &files {
        let mid_stream_hole = f.ends_with("tcp_dupack.pcapng");
        check_against_tshark(f, mid_stream_hole);
    }
}

#[test]
fn shared_captures_agree_with_tcptrace() {
    let files = shared_captures();
    if files.is_empty() || !common::have("tcptrace") {
        return;
    }
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "pcap"))
    {
        check_against_tcptrace(f);
    }
}

#[test]
fn shared_captures_stats_count_every_packet() {
    let files = shared_captures();
    if files.is_empty() || !common::have("capinfos") {
        return;
    }
    for f in &files {
        let v = json(&["capture", "stats", "--json", f.to_str().unwrap()]);
        let out = std::process::Command::new("capinfos")
            .args(["-T", "-r", "-c", "-d", f.to_str().unwrap()])
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout).to_string();
        let cols: Vec<&str> = line.trim().split('\t').collect();
        let packets: u64 = cols[1].trim().parse().unwrap();
        let bytes: u64 = cols[2].trim().parse().unwrap();
        assert_eq!(
            v["total"]["packets"].as_u64().unwrap(),
            packets,
            "{}",
            f.display()
        );
        assert_eq!(
            v["total"]["bytes"].as_u64().unwrap(),
            bytes,
            "{}",
            f.display()
        );
        let rows: u64 = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["packets"].as_u64().unwrap())
            .sum();
        assert_eq!(rows, packets);
        assert!(v["capture"]["warning"].is_null());
    }
}

#[test]
fn shared_capture_diagnoses_name_the_trouble() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    let f = |name: &str| dir.join("chrissanders").join(name);
    let (_, v) = ours(&f("tcp_zerowindowrecovery.pcapng"));
    assert!(
        v["flows"][0]["diagnosis"]
            .as_str()
            .unwrap()
            .contains("zero window")
    );
    let (_, v) = ours(&f("tcp_retransmissions.pcapng"));
    assert!(
        v["flows"][0]["diagnosis"]
            .as_str()
            .unwrap()
            .contains("5 retransmissions")
    );
    // IPv6 over BSD loopback, with the handshake.
    let (_, v) = ours(&dir.join("zeek/redis_pipelining-example.pcap"));
    assert_eq!(v["flows"][0]["server"], "[::1]:6379");
    assert!(v["flows"][0]["handshake"]["rtt_ns"].as_u64().unwrap() > 0);
    // Text output: the table and one diagnosis line per flow.
    let out = roundtrip()
        .args([
            "capture",
            "flows",
            dir.join("zeek/nfs_nfs_write.pcap").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("192.168.122.219:2049"));
    assert_eq!(
        text.lines().filter(|l| l.starts_with("  #")).count(),
        4,
        "{text}"
    );
}

#[test]
fn timeline_of_a_shared_capture() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    let file = dir.join("zeek/http_get.pcap");
    let out = roundtrip()
        .args([
            "capture",
            "timeline",
            file.to_str().unwrap(),
            "--flow",
            "192.150.187.43:80-141.142.228.5:59856",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("0.")).collect();
    assert_eq!(rows.len(), 14, "{text}");
    assert!(rows[0].contains(" S "), "{}", rows[0]);
    assert!(rows[1].contains(" S. "), "{}", rows[1]);
    // The server's first data segment starts at relative sequence 1, as tcpdump prints it.
    assert!(
        text.lines()
            .any(|l| l.contains(" <  ") && l.contains(" 1:")),
        "{text}"
    );
    let v = json(&[
        "capture",
        "timeline",
        "--json",
        file.to_str().unwrap(),
        "--port",
        "80",
    ]);
    assert_eq!(v["kind"], "capture-timeline");
    assert_eq!(v["rows"].as_array().unwrap().len(), 14);
    // No match: results say so and the exit status is 1.
    roundtrip()
        .args([
            "capture",
            "timeline",
            file.to_str().unwrap(),
            "--port",
            "81",
        ])
        .assert()
        .failure()
        .stderr(predicates::str::contains("no TCP connection matching"));
}

// ---------------------------------------------------------------------------------------------------------
// Captures recorded here.

/// A bulk transfer of `bytes` to a receiver with a small buffer that stops reading for a while: the sender
/// fills the receiver's window (receiver-limited, zero windows). Returns the client and server addresses.
fn bulk_listener(bind: &str) -> TcpListener {
    let sock = socket2::Socket::new(
        if bind.contains(':') {
            socket2::Domain::IPV6
        } else {
            socket2::Domain::IPV4
        },
        socket2::Type::STREAM,
        None,
    )
    .unwrap();
    sock.set_recv_buffer_size(32 * 1024).unwrap();
    sock.bind(
        &format!("{bind}:0")
            .replace("::1:0", "[::1]:0")
            .parse::<SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    sock.listen(1).unwrap();
    sock.into()
}

fn bulk_transfer(listener: TcpListener, bytes: usize) -> (SocketAddr, SocketAddr) {
    let server = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(300)); // let the window fill
        let mut buf = vec![0u8; 16 * 1024];
        let mut n = 0;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        n
    });
    let mut c = TcpStream::connect(server).unwrap();
    let client = c.local_addr().unwrap();
    let chunk = vec![0x5au8; 64 * 1024];
    let mut sent = 0;
    while sent < bytes {
        let k = chunk.len().min(bytes - sent);
        c.write_all(&chunk[..k]).unwrap();
        sent += k;
        // Paced a little so that tcpdump keeps up on a busy machine.
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(c);
    assert_eq!(reader.join().unwrap(), bytes);
    (client, server)
}

fn embedded_server() -> roundtrip::server::ServerHandle {
    use roundtrip::server::{self, ServerConfig};
    server::start(
        &ServerConfig {
            bind: Some([127, 0, 0, 1].into()),
            port: 0,
            tcp: true,
            udp: false,
            ..Default::default()
        },
        |_| {},
    )
    .unwrap()
}

/// Ping-pong against an embedded roundtrip server; returns its TCP port.
fn ping_pong(srv: roundtrip::server::ServerHandle, count: u64) -> u16 {
    use roundtrip::probe::ping::{self, NoObserver, PingConfig, Stop, Transport};
    let addr = srv.tcp_addr().unwrap();
    let mut cfg = PingConfig::new(addr);
    cfg.link.transport = Transport::Tcp;
    cfg.stop = Stop::Count(count);
    cfg.warmup = Duration::ZERO;
    cfg.link.timeout = Duration::from_secs(10);
    let r = ping::run(&cfg, &mut NoObserver).unwrap();
    assert_eq!(r.received, count);
    drop(srv);
    addr.port()
}

fn can_capture() -> bool {
    if !common::require_root("recording captures") {
        return false;
    }
    common::have("tcpdump") && common::have("tshark")
}

/// Records ping-pong and a bulk transfer with tcpdump `extra` args; returns the file, the addresses and
/// whether tcpdump lost packets.
fn record(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, SocketAddr, SocketAddr, u16, bool) {
    // A recording in which tcpdump dropped packets cannot be compared packet by packet: recorded again, up
    // to 3 times; after that the per-packet checks are skipped, which fails under CI (common::skip).
    for attempt in 1..=3 {
        let r = record_once(dir, name, extra);
        if !r.4 {
            return r;
        }
        if attempt == 3 {
            common::skip(
                "tcpdump dropped packets in 3 recordings; the per-packet checks need every one",
            );
            return r;
        }
    }
    unreachable!()
}

fn record_once(
    dir: &Path,
    name: &str,
    extra: &[&str],
) -> (PathBuf, SocketAddr, SocketAddr, u16, bool) {
    let file = dir.join(name);
    // Listen first so that the capture filter can name our ports (other tests and other programs use
    // loopback at the same time).
    let srv = embedded_server();
    let listener = bulk_listener("127.0.0.1");
    let bpf = format!(
        "tcp port {} or tcp port {}",
        srv.tcp_addr().unwrap().port(),
        listener.local_addr().unwrap().port()
    );
    let mut args: Vec<&str> = extra.to_vec();
    let f = file.to_str().unwrap().to_string();
    args.extend(["-B", "65536", "-w", &f, &bpf]);
    let td = Tcpdump::start(&args);
    let ping_port = ping_pong(srv, 300);
    let (client, server) = bulk_transfer(listener, 4 << 20);
    let dropped = td.stop();
    if dropped > 0 {
        eprintln!(
            "note: tcpdump dropped {dropped} packets; checks that need every packet are skipped"
        );
    }
    (file, client, server, ping_port, dropped > 0)
}

/// Keeps only our own connections (other tests run at the same time) by rewriting with tshark's filter.
fn only_ports(file: &Path, ports: &[u16]) -> PathBuf {
    let out = file.with_extension("ours.pcap");
    let filter = ports
        .iter()
        .map(|p| format!("tcp.port=={p}"))
        .collect::<Vec<_>>()
        .join(" || ");
    let st = std::process::Command::new("tshark")
        .args([
            "-r",
            file.to_str().unwrap(),
            "-Y",
            &filter,
            "-F",
            "pcap",
            "-w",
            out.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    out
}

fn check_recorded(
    file: &Path,
    client: SocketAddr,
    server: SocketAddr,
    ping_port: u16,
    expect_link: &str,
    lossy: bool,
) {
    // The whole file: every count agrees with tshark.
    check_against_tshark(file, false);
    let (ours, v) = ours(file);
    assert_eq!(v["capture"]["link_types"][0], expect_link);
    // The bulk connection: complete, receiver-limited, 4 MiB of payload.
    let flows = v["flows"].as_array().unwrap();
    let bulk = flows
        .iter()
        .find(|f| f["client"] == client.to_string() && f["server"] == server.to_string())
        .expect("the bulk connection");
    // The receiver's 32 KiB buffer can make loopback drop and retransmit; unique bytes are 4 MiB unless
    // tcpdump itself lost packets.
    let c2s = &bulk["client_to_server"];
    let unique =
        c2s["payload_bytes"].as_u64().unwrap() - c2s["retransmitted_bytes"].as_u64().unwrap();
    assert!((1 << 20..=4 << 20).contains(&unique), "{unique}");
    if !lossy {
        assert_eq!(
            bulk["state"],
            "closed",
            "{}",
            tail_of_timeline(file, client, server)
        );
    }
    assert!(bulk["handshake"]["rtt_ns"].as_u64().unwrap() > 0);
    assert!(bulk["client_to_server"]["rtt"]["count"].as_u64().unwrap() > 0);
    assert!(
        bulk["client_to_server"]["receiver_limited_segments"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        bulk["client_to_server"]["window_max_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(ours[&(client, server)].max_in_flight > 0);
    // The ping-pong connection: 300 round trips of 64-byte messages at least each way.
    let pp = flows
        .iter()
        .find(|f| {
            f["server"]
                .as_str()
                .unwrap()
                .ends_with(&format!(":{ping_port}"))
        })
        .expect("the ping-pong connection");
    assert!(pp["client_to_server"]["payload_bytes"].as_u64().unwrap() >= 300 * 64);
    assert!(
        pp["server_to_client"]["rtt"]["count"].as_u64().unwrap() > 0
            || pp["client_to_server"]["rtt"]["count"].as_u64().unwrap() > 0
    );

    // Timeline of the bulk connection: one row per packet, as many as tshark sees.
    let spec = format!("{client}-{server}");
    let tl = json(&[
        "capture",
        "timeline",
        "--json",
        file.to_str().unwrap(),
        "--flow",
        &spec,
    ]);
    let rows = tl["rows"].as_array().unwrap();
    let t = &tshark(file);
    let want = t[&(client, server)].packets + t[&(server, client)].packets;
    assert_eq!(rows.len() as u64, want);
    let zw = rows
        .iter()
        .filter(|r| {
            r["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "zero-window")
        })
        .count() as u64;
    assert_eq!(zw, t[&(server, client)].zero_windows);
    // Stats over the same flow count the same packets.
    let st = json(&[
        "capture",
        "stats",
        "--json",
        "--by-direction",
        file.to_str().unwrap(),
        "--flow",
        &spec,
    ]);
    assert_eq!(st["total"]["packets"].as_u64().unwrap(), want);
    let count = |dir: &str| -> u64 {
        st["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["direction"] == dir)
            .map(|r| r["packets"].as_u64().unwrap())
            .sum()
    };
    let (c2s, s2c) = (count("client_to_server"), count("server_to_client"));
    assert_eq!(c2s + s2c, want);
    // Stats guesses direction without state: SYN from the client, SYN-ACK from the server, otherwise the
    // higher port is the client's. Both ends here have ephemeral ports, so check only when that guess holds.
    if client.port() > server.port() {
        assert_eq!(c2s, t[&(client, server)].packets);
    }
}

fn tail_of_timeline(file: &Path, client: SocketAddr, server: SocketAddr) -> String {
    let out = roundtrip()
        .args([
            "capture",
            "timeline",
            file.to_str().unwrap(),
            "--flow",
            &format!("{client}-{server}"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

#[test]
fn loopback_capture_pcap_us_and_gzip_and_pcapng() {
    if !can_capture() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (raw, client, server, ping_port, lossy) =
        record(dir.path(), "lo.pcap", &["-i", "lo", "-n"]);
    let file = only_ports(&raw, &[server.port(), ping_port]);
    check_recorded(&file, client, server, ping_port, "ethernet", lossy);
    if common::have("tcptrace") {
        check_against_tcptrace(&file);
    }
    // The same capture gzip-compressed and as pcapng gives the same flows.
    let (plain, _) = ours(&file);
    let gz = dir.path().join("lo.pcap.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(&std::fs::read(&file).unwrap()).unwrap();
    enc.finish().unwrap();
    let (zipped, v) = ours(&gz);
    assert_eq!(v["capture"]["gzip"], true);
    assert_eq!(plain, zipped);
    if common::have("editcap") {
        let ng = dir.path().join("lo.pcapng");
        assert!(
            std::process::Command::new("editcap")
                .args(["-F", "pcapng", file.to_str().unwrap(), ng.to_str().unwrap()])
                .status()
                .unwrap()
                .success()
        );
        let (ngf, v) = ours(&ng);
        assert_eq!(v["capture"]["format"], "pcapng");
        assert_eq!(plain, ngf);
    }
}

#[test]
fn loopback_capture_any_sll2_nanoseconds() {
    if !can_capture() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (raw, client, server, ping_port, lossy) = record(
        dir.path(),
        "any.pcap",
        &["-i", "any", "-n", "--time-stamp-precision", "nano"],
    );
    let v = json(&["capture", "stats", "--json", raw.to_str().unwrap()]);
    assert_eq!(v["capture"]["format"], "pcap-ns");
    assert_eq!(v["capture"]["link_types"][0], "linux-sll2");
    // Filtering with tshark writes the same link type and keeps nanoseconds.
    let file = only_ports(&raw, &[server.port(), ping_port]);
    check_recorded(&file, client, server, ping_port, "linux-sll2", lossy);
}

#[test]
fn loopback_capture_snaplen_96() {
    if !can_capture() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (raw, client, server, ping_port, lossy) =
        record(dir.path(), "s96.pcap", &["-i", "lo", "-n", "-s", "96"]);
    let file = only_ports(&raw, &[server.port(), ping_port]);
    check_recorded(&file, client, server, ping_port, "ethernet", lossy);
    if common::have("tcptrace") {
        check_against_tcptrace(&file);
    }
    // Wire lengths, not captured lengths: the bulk direction moved more than 4 MiB.
    let st = json(&["capture", "stats", "--json", file.to_str().unwrap()]);
    if !lossy {
        assert!(st["total"]["bytes"].as_u64().unwrap() > 4 << 20);
    }
    assert!(st["total"]["size_max"].as_u64().unwrap() > 96);
}

// ---------------------------------------------------------------------------------------------------------
// Damaged input.

#[test]
fn truncated_capture_gives_results_and_the_offset() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    let src = std::fs::read(dir.join("zeek/http_get.pcap")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut.pcap");
    std::fs::write(&cut, &src[..src.len() - 100]).unwrap();
    let out = roundtrip()
        .args(["capture", "flows", cut.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stdout.contains("141.142.228.5:59856"), "{stdout}");
    assert!(stderr.contains("byte offset"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // Garbage in the middle: everything before it is analysed.
    let mut bad = src.clone();
    let big = src[0] == 0xa1;
    let first_len = if big {
        u32::from_be_bytes(src[32..36].try_into().unwrap())
    } else {
        u32::from_le_bytes(src[32..36].try_into().unwrap())
    } as usize;
    let at = 24 + 16 + first_len; // second record header
    bad[at + 8..at + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes()); // same in both orders
    let badf = tmp.path().join("bad.pcap");
    std::fs::write(&badf, &bad).unwrap();
    let out = roundtrip()
        .args(["capture", "stats", "--json", badf.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["capture"]["packets_read"], 1);
    assert_eq!(v["capture"]["warning_offset"], at as u64);
}

#[test]
fn bad_files_and_arguments_fail_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("notes.txt");
    std::fs::write(&f, "hello, not a capture").unwrap();
    roundtrip()
        .args(["capture", "stats", f.to_str().unwrap()])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("is not a pcap or pcapng capture"));
    roundtrip()
        .args([
            "capture",
            "flows",
            tmp.path().join("missing.pcap").to_str().unwrap(),
        ])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("cannot read capture"));
    roundtrip()
        .args([
            "capture",
            "timeline",
            "x.pcap",
            "--flow",
            "10.0.0.1-10.0.0.2",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("ADDR:PORT-ADDR:PORT"));
    roundtrip()
        .args(["capture", "stats", "x.pcap", "--report-interval", "0s"])
        .assert()
        .code(2);
    roundtrip()
        .args(["capture", "stats", "x.pcap", "--host", "example.org"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("not an IP address"));
}

// ---------------------------------------------------------------------------------------------------------
// The time-sequence graph (`capture timeline --json`'s seq_graph): every row against tshark's per-segment
// analysis, and the graph against the rows.

/// One packet of the connection as tshark sees it.
#[derive(Debug)]
struct TsharkSeg {
    src_port: u16,
    seq: u64,
    len: u64,
    ack: u64,
    window: u64,
    sack: Vec<(u64, u64)>,
    retrans: bool,
    zero_window: bool,
}

fn tshark_segments(file: &Path, stream: u32) -> Vec<TsharkSeg> {
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r", file.to_str().unwrap(), "-Y"])
        .arg(format!("tcp.stream == {stream}"))
        .args(["-T", "fields", "-E", "separator=|", "-E", "aggregator=,"])
        .args([
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.seq",
            "-e",
            "tcp.len",
            "-e",
            "tcp.ack",
            "-e",
            "tcp.window_size",
            "-e",
            "tcp.options.sack_le",
            "-e",
            "tcp.options.sack_re",
            "-e",
            "tcp.analysis.retransmission",
            "-e",
            "tcp.analysis.zero_window",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nums = |s: &str| -> Vec<u64> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse().unwrap())
            .collect()
    };
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            let (le, re) = (nums(f[5]), nums(f[6]));
            TsharkSeg {
                src_port: f[0].parse().unwrap(),
                seq: f[1].parse().unwrap(),
                len: f[2].parse().unwrap(),
                ack: f[3].parse().unwrap_or(0),
                window: f[4].parse().unwrap(),
                sack: le.into_iter().zip(re).collect(),
                retrans: !f[7].is_empty(),
                zero_window: !f[8].is_empty(),
            }
        })
        .collect()
}

/// Every row of `capture timeline --json` agrees with tshark: sequence and ACK numbers (up to each
/// direction's constant offset: tshark counts from 1 where the handshake was not captured), lengths,
/// scaled windows, SACK blocks, retransmissions and zero windows.
fn rows_agree_with_tshark(file: &Path, doc: &Value, stream: u32) {
    let rows = doc["rows"].as_array().unwrap();
    let ts = tshark_segments(file, stream);
    assert_eq!(rows.len(), ts.len(), "{}", file.display());
    let client_port = doc["flow"]["client"]
        .as_str()
        .unwrap()
        .parse::<SocketAddr>()
        .unwrap()
        .port();
    let mut seq_off: HashMap<bool, i64> = HashMap::new();
    for (i, (r, t)) in rows.iter().zip(&ts).enumerate() {
        let from_client = r["direction"] == "client_to_server";
        assert_eq!(from_client, t.src_port == client_port, "row {i}");
        let seq = r["seq"].as_u64().unwrap() as i64;
        // Offsets of the sender's numbers (seq) and of the receiver's numbers (what it ACKs and SACKs).
        let off = *seq_off.entry(from_client).or_insert(t.seq as i64 - seq);
        assert_eq!(t.seq as i64 - seq, off, "{} row {i} seq", file.display());
        assert_eq!(r["len"].as_u64().unwrap(), t.len, "row {i} len");
        assert_eq!(
            r["window_bytes"].as_u64().unwrap(),
            t.window,
            "row {i} window"
        );
        let notes = r["notes"].to_string();
        assert_eq!(
            notes.contains("retransmission"),
            t.retrans,
            "row {i}: {notes}"
        );
        assert_eq!(
            notes.contains("zero-window"),
            t.zero_window,
            "row {i}: {notes}"
        );
        let sack: Vec<(u64, u64)> = r["sack"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|b| (b[0].as_u64().unwrap(), b[1].as_u64().unwrap()))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(sack.len(), t.sack.len(), "row {i} sack");
        if let Some(ack) = r["ack"].as_u64() {
            // The other side's offset, once it has sent something.
            if let Some(&o) = seq_off.get(&!from_client) {
                assert_eq!(t.ack as i64 - ack as i64, o, "row {i} ack");
                for (a, b) in sack.iter().zip(&t.sack) {
                    assert_eq!(
                        (b.0 as i64 - a.0 as i64, b.1 as i64 - a.1 as i64),
                        (o, o),
                        "row {i} sack"
                    );
                }
            }
        }
    }
}

/// The graph keeps what the rows say: every retransmission exactly, new data per column from a real lowest
/// to a real highest byte, ACK and window-edge points that are real packets' values (the extremes among
/// them), SACK ranges that are unions of real blocks, zero-window periods that start at zero-window packets.
fn graph_agrees_with_rows(doc: &Value) {
    let g = &doc["seq_graph"];
    let rows = doc["rows"].as_array().unwrap();
    let start = g["start_ns"].as_i64().unwrap();
    let t = |r: &Value| (r["ts_ns"].as_i64().unwrap() - start) as f64 / 1e9;
    let sender_dir = g["direction"].as_str().unwrap();
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    let u = |v: &Value, k: &str| v[k].as_u64().unwrap();
    let sent: Vec<&Value> = rows
        .iter()
        .filter(|r| {
            r["direction"] == sender_dir
                && u(r, "len") > 0
                && !r["notes"].to_string().contains("keep-alive")
        })
        .collect();
    let acks: Vec<&Value> = rows
        .iter()
        .filter(|r| r["direction"] != sender_dir && r["ack"].is_u64())
        .collect();
    assert_eq!(u(g, "data_segments"), sent.len() as u64);
    assert_eq!(u(g, "acks"), acks.len() as u64);
    // Every retransmission, in order, exactly.
    let re: Vec<(f64, u64, u64)> = sent
        .iter()
        .filter(|r| r["notes"].to_string().contains("retransmission"))
        .map(|r| (t(r), u(r, "seq"), u(r, "seq") + u(r, "len")))
        .collect();
    let gre: Vec<(f64, u64, u64)> = g["retransmissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (f(m, "t_s"), u(m, "seq"), u(m, "end")))
        .collect();
    assert_eq!(re.len(), gre.len());
    for (a, b) in re.iter().zip(&gre) {
        assert!(
            (a.0 - b.0).abs() < 1e-9 && a.1 == b.1 && a.2 == b.2,
            "{a:?} vs {b:?}"
        );
    }
    assert_eq!(u(g, "retransmitted_segments"), re.len() as u64);
    // New data: each column's ends are real segments inside its time range; every segment is in one column.
    let new: Vec<(f64, u64, u64)> = sent
        .iter()
        .filter(|r| !r["notes"].to_string().contains("retransmission"))
        .map(|r| (t(r), u(r, "seq"), u(r, "seq") + u(r, "len")))
        .collect();
    let cols = g["segments"].as_array().unwrap();
    let mut counted = 0;
    for c in cols {
        let (a, b) = (f(c, "first_s") - 1e-9, f(c, "last_s") + 1e-9);
        let inside: Vec<&(f64, u64, u64)> = new.iter().filter(|s| s.0 >= a && s.0 <= b).collect();
        assert_eq!(inside.len() as u64, u(c, "segments"), "{c}");
        assert_eq!(
            inside.iter().map(|s| s.1).min(),
            Some(u(c, "seq_lo")),
            "{c}"
        );
        assert_eq!(
            inside.iter().map(|s| s.2).max(),
            Some(u(c, "seq_hi")),
            "{c}"
        );
        counted += inside.len();
    }
    assert_eq!(counted, new.len());
    // ACK and window edge: real samples; the overall extremes and the last value are among them.
    for (key, value) in [
        (
            "ack",
            &(|r: &Value| r["ack"].as_u64().unwrap()) as &dyn Fn(&Value) -> u64,
        ),
        ("window_edge", &|r: &Value| {
            r["ack"].as_u64().unwrap() + r["window_bytes"].as_u64().unwrap()
        }),
    ] {
        let pts: Vec<(f64, u64)> = g[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (f(p, "t_s"), u(p, "value")))
            .collect();
        for p in &pts {
            assert!(
                acks.iter()
                    .any(|r| (t(r) - p.0).abs() < 1e-9 && value(r) == p.1),
                "{key} point {p:?} is no packet's"
            );
        }
        if let Some(last) = acks.last() {
            assert_eq!(
                pts.last().unwrap().1,
                value(last),
                "{key} ends on the last packet's value"
            );
            let (lo, hi) = (
                acks.iter().map(|r| value(r)).min(),
                acks.iter().map(|r| value(r)).max(),
            );
            assert_eq!(pts.iter().map(|p| p.1).min(), lo, "{key} min");
            assert_eq!(pts.iter().map(|p| p.1).max(), hi, "{key} max");
        }
    }
    // SACK: every block inside a drawn range of its column; every range's ends are real block edges.
    let marks: Vec<(f64, u64, u64)> = g["sack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (f(m, "t_s"), u(m, "left"), u(m, "right")))
        .collect();
    let blocks: Vec<(f64, u64, u64)> = acks
        .iter()
        .flat_map(|r| {
            r["sack"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| (t(r), b[0].as_u64().unwrap(), b[1].as_u64().unwrap()))
        })
        .filter(|b| b.2 > b.1)
        .collect();
    let col_s = f(g, "column_s");
    for b in &blocks {
        assert!(
            marks
                .iter()
                .any(|m| m.1 <= b.1 && b.2 <= m.2 && (m.0 - b.0).abs() <= col_s + 1e-9),
            "SACK block {b:?} not drawn"
        );
    }
    for m in &marks {
        assert!(
            blocks.iter().any(|b| b.1 == m.1) && blocks.iter().any(|b| b.2 == m.2),
            "{m:?}"
        );
    }
    assert_eq!(
        u(g, "sack_packets"),
        acks.iter().filter(|r| r["sack"].is_array()).count() as u64
    );
    // Zero windows: each period starts at a zero-window packet of the receiver.
    let zw: Vec<&&Value> = acks
        .iter()
        .filter(|r| r["notes"].to_string().contains("zero-window"))
        .collect();
    assert_eq!(u(g, "zero_window_packets"), zw.len() as u64);
    for z in g["zero_windows"].as_array().unwrap() {
        assert!(
            zw.iter().any(|r| (t(r) - f(z, "start_s")).abs() < 1e-9),
            "{z}"
        );
        assert!(f(z, "end_s") >= f(z, "start_s"));
    }
    assert_eq!(
        g["zero_windows"].as_array().unwrap().is_empty(),
        zw.is_empty()
    );
}

#[test]
fn time_sequence_graph_of_shared_captures_agrees_with_tshark() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    if !common::have("tshark") {
        return;
    }
    for (name, retrans, sack_packets, zero_periods) in [
        ("chrissanders/tcp_retransmissions.pcapng", 5, 0, 0),
        ("chrissanders/tcp_zerowindowrecovery.pcapng", 0, 0, 1),
        ("chrissanders/tcp_dupack.pcapng", 1, 5, 0),
        ("zeek/http_get.pcap", 0, 0, 0),
        ("zeek/nfs_nfs_write.pcap", 0, 0, 0),
    ] {
        let file = dir.join(name);
        let doc = json(&["capture", "timeline", file.to_str().unwrap(), "--json"]);
        rows_agree_with_tshark(&file, &doc, 0);
        graph_agrees_with_rows(&doc);
        let g = &doc["seq_graph"];
        assert_eq!(g["retransmitted_segments"], retrans, "{name}");
        assert_eq!(g["sack_packets"], sack_packets, "{name}");
        assert_eq!(
            g["zero_windows"].as_array().unwrap().len(),
            zero_periods,
            "{name}"
        );
        // The other direction, as asked.
        let other = json(&[
            "capture",
            "timeline",
            file.to_str().unwrap(),
            "--json",
            "--data-from",
            if g["direction"] == "client_to_server" {
                "server"
            } else {
                "client"
            },
        ]);
        assert_ne!(other["seq_graph"]["direction"], g["direction"]);
        assert_eq!(other["seq_graph"]["chosen"], "asked");
        graph_agrees_with_rows(&other);
    }
}

#[test]
fn flow_that_is_not_in_the_file_lists_the_connections() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    let file = dir.join("zeek/nfs_nfs_base.pcap");
    let out = roundtrip()
        .args([
            "capture",
            "timeline",
            file.to_str().unwrap(),
            "--flow",
            "10.0.0.1:1-10.0.0.2:2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--flow 10.0.0.1:1-10.0.0.2:2 is not in the file; its TCP connections"),
        "{err}"
    );
    // Every connection tshark finds is offered, in a form --flow takes.
    let conv = std::process::Command::new("tshark")
        .args(["-n", "-q", "-r", file.to_str().unwrap(), "-z", "conv,tcp"])
        .output()
        .unwrap();
    let conv = String::from_utf8_lossy(&conv.stdout);
    let pairs: Vec<(String, String)> = conv
        .lines()
        .filter(|l| l.contains("<->"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[2].to_string())
        })
        .collect();
    assert!(pairs.len() >= 2, "{conv}");
    for (a, b) in &pairs {
        assert!(
            err.contains(&format!("{a}-{b}")) || err.contains(&format!("{b}-{a}")),
            "{a} {b}: {err}"
        );
    }
    // A listed flow works.
    let (a, b) = &pairs[0];
    roundtrip()
        .args([
            "capture",
            "timeline",
            file.to_str().unwrap(),
            "-q",
            "--flow",
            &format!("{a}-{b}"),
        ])
        .assert()
        .success();
    // Malformed and impossible flows are refused before the file is read.
    for (bad, want) in [
        ("10.0.0.1:1", "is not two endpoints"),
        ("10.0.0.1:0-10.0.0.2:80", "port 0"),
        ("10.0.0.1:80-10.0.0.1:80", "the same endpoint twice"),
    ] {
        let out = roundtrip()
            .args(["capture", "timeline", "/nonexistent.pcap", "--flow", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{bad}: {err}");
    }
}

#[test]
fn time_sequence_graph_of_a_lossy_transfer_with_sack() {
    // A transfer through a loopback (in a namespace of its own) that loses 1% of its full-sized data
    // segments after tcpdump saw them: retransmissions, duplicate ACKs with SACK blocks.
    if !can_capture() || !common::have("iperf3") || !common::have("nft") || !common::have("ethtool")
    {
        return;
    }
    let ns = Ns::new(&format!("rtsack{}", std::process::id()));
    assert!(
        ns.run(&["ip", "link", "set", "lo", "mtu", "1500", "up"])
            .status
            .success()
    );
    assert!(
        ns.run(&["ethtool", "-K", "lo", "tso", "off", "gso", "off"])
            .status
            .success()
    );
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("drop.nft");
    std::fs::write(
        &rules,
        "table inet rtsack {\n  chain in {\n    type filter hook input priority 0;\n    \
         tcp dport 5201 meta length > 1400 numgen random mod 100 == 0 drop\n  }\n}\n",
    )
    .unwrap();
    let o = ns.run(&["nft", "-f", rules.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = dir.path().join("sack.pcap");
    let mut srv = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.0, "iperf3", "-s", "-1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let td = Tcpdump::start_in(
        Some(&ns.0),
        &[
            "-i",
            "lo",
            "-n",
            "-s",
            "128",
            "-B",
            "65536",
            "-w",
            file.to_str().unwrap(),
            "tcp port 5201",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = ns.run(&["iperf3", "-c", "127.0.0.1", "-n", "3M", "-b", "100M"]);
        if o.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "iperf3: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let dropped = td.stop();
    let _ = srv.kill();
    let _ = srv.wait();
    // iperf3's data connection: the one carrying most.
    let flows = json(&["capture", "flows", file.to_str().unwrap(), "--json"]);
    let (idx, data) = flows["flows"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .max_by_key(|(_, f)| f["client_to_server"]["payload_bytes"].as_u64().unwrap())
        .unwrap();
    let flow = format!(
        "{}-{}",
        data["client"].as_str().unwrap(),
        data["server"].as_str().unwrap()
    );
    let doc = json(&[
        "capture",
        "timeline",
        file.to_str().unwrap(),
        "--flow",
        &flow,
        "--json",
    ]);
    let g = &doc["seq_graph"];
    assert_eq!(g["direction"], "client_to_server");
    assert!(
        g["retransmitted_segments"].as_u64().unwrap() > 0,
        "{}",
        g["retransmitted_segments"]
    );
    assert!(
        g["sack_packets"].as_u64().unwrap() > 0,
        "{}",
        g["sack_packets"]
    );
    assert!(g["highest_seq"].as_u64().unwrap() >= 3 << 20);
    assert!(
        g["window_scale"].is_u64(),
        "both Linux SYNs announce a window scale"
    );
    graph_agrees_with_rows(&doc);
    if dropped == 0 {
        // tshark numbers connections in order of their first packet, as flows does.
        rows_agree_with_tshark(&file, &doc, idx as u32);
    } else {
        // 3 MB at 100 Mbit/s with a 64 MB buffer: a drop means a machine too loaded for this check; under
        // CI that is a failure, not a silent pass.
        common::skip(&format!(
            "tcpdump dropped {dropped} packets; the per-packet comparison with tshark needs every one"
        ));
    }
}
