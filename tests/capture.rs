//! `roundtrip capture`: real captures from other projects, captures recorded here with tcpdump on loopback,
//! and cross-checks of every count against tshark and tcptrace on the same files.
//!
//! Deliberate differences from Wireshark (documented in README.md):
//! - bytes in flight when the capture starts in the middle of a connection with a hole (tcp_dupack.pcapng):
//!   roundtrip counts from the receiver's last ACK (what is really unacknowledged), Wireshark only sums the
//!   segments it saw.

mod common;

use assert_cmd::Command;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
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

/// A running tcpdump; stopped (SIGINT, so it flushes) on drop.
struct Tcpdump {
    child: Option<Child>,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Tcpdump {
    fn start(args: &[&str]) -> Tcpdump {
        let mut child = std::process::Command::new("tcpdump")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let log2 = log.clone();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stderr);
            let mut line = String::new();
            let mut sent = false;
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if !sent && line.contains("listening on") {
                    let _ = tx.send(());
                    sent = true;
                }
                log2.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("tcpdump says it is listening");
        Tcpdump {
            child: Some(child),
            log,
            reader: Some(reader),
        }
    }

    /// Stops the capture; returns how many packets the kernel dropped (tcpdump's own count).
    fn stop(mut self) -> u64 {
        self.stop_inner();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let log = self.log.lock().unwrap().clone();
        log.lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX)
    }

    fn stop_inner(&mut self) {
        if let Some(mut c) = self.child.take() {
            // libpcap hands packets over in blocks retired after its 1 s timeout; a block still in the
            // kernel when tcpdump stops is lost, so wait for the last one first.
            std::thread::sleep(Duration::from_millis(2500));
            let _ = std::process::Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

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
    cfg.transport = Transport::Tcp;
    cfg.stop = Stop::Count(count);
    cfg.warmup = Duration::ZERO;
    cfg.timeout = Duration::from_secs(10);
    let r = ping::run(&cfg, &mut NoObserver).unwrap();
    assert_eq!(r.received, count);
    drop(srv);
    addr.port()
}

fn can_capture() -> bool {
    if !common::is_root() {
        if std::env::var_os("ROUNDTRIP_REQUIRE_SERVICES").is_some() {
            panic!("capture tests need root under CI");
        }
        eprintln!("SKIPPED: recording captures needs root");
        return false;
    }
    common::have("tcpdump") && common::have("tshark")
}

/// Records ping-pong and a bulk transfer with tcpdump `extra` args; returns the file, the addresses and
/// whether tcpdump lost packets.
fn record(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, SocketAddr, SocketAddr, u16, bool) {
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
        .args(["capture", "stats", "x.pcap", "--interval", "0s"])
        .assert()
        .code(2);
    roundtrip()
        .args(["capture", "stats", "x.pcap", "--host", "example.org"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("not an IP address"));
}
