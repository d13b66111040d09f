//! `roundtrip tcp`: the kernel's view of live connections, checked against traffic we shape ourselves.
//!
//! The seed's experiment (seed 004): two namespaces joined by veth, the sender's side rate-limited by tbf so
//! round trips are not loopback-sized; one sender streams to (a) a receiver that reads as fast as it can and
//! (b) a receiver with a small SO_RCVBUF that reads slowly. `roundtrip tcp`, run in the sender's namespace,
//! must call (b) receiver-window limited and (a) not, and its RTT and cwnd must agree with `ss -ti` read at
//! the same moment. The bad-input cases run on loopback without root.

mod common;

use common::lab::{Lab, ns_exec, sh};
use common::procs::BIN;

/// Starts the test binary in `ns` as `role` and waits for its "ready" line.
fn spawn_role(lab: &mut Lab, ns: &str, role: &str) {
    let _ = common::lab::spawn_role(lab, ns, role, &[], true);
}

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const FAST_PORT: u16 = 7101;
const SLOW_PORT: u16 = 7102;
const RCV_ADDR: &str = "10.78.1.2";

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

// ---------- roles, run inside the namespaces ----------

fn role_receivers() {
    let fast = TcpListener::bind(("0.0.0.0", FAST_PORT)).unwrap();
    // The small buffer must be set before listen so the accepted socket inherits it.
    let slow = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    slow.set_reuse_address(true).unwrap();
    slow.set_recv_buffer_size(4096).unwrap();
    slow.bind(&std::net::SocketAddr::from(([0, 0, 0, 0], SLOW_PORT)).into())
        .unwrap();
    slow.listen(4).unwrap();
    let slow: TcpListener = slow.into();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let f = thread::spawn(move || {
        let (mut s, _) = fast.accept().unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let (mut s, _) = slow.accept().unwrap();
    let mut buf = [0u8; 1024];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {
        thread::sleep(Duration::from_millis(10));
    }
    let _ = f.join();
}

fn role_senders() {
    let go = |port: u16| {
        let mut s = TcpStream::connect((RCV_ADDR, port)).unwrap();
        thread::spawn(move || {
            let buf = vec![0x5au8; 64 * 1024];
            while s.write_all(&buf).is_ok() {}
        })
    };
    let a = go(FAST_PORT);
    let b = go(SLOW_PORT);
    println!("ready");
    std::io::stdout().flush().unwrap();
    let _ = a.join();
    let _ = b.join();
}

/// Entry point of the re-executed test binary inside a namespace (does nothing in a normal test run).
#[test]
fn netns_role() {
    let Some(role) = env("RT_NETNS_ROLE") else {
        return;
    };
    match role.as_str() {
        "receivers" => role_receivers(),
        "senders" => role_senders(),
        _ => panic!("unknown role {role}"),
    }
}

// ---------- the orchestration ----------

/// Sender and receiver namespaces, 10.78.1.1 - 10.78.1.2, the sender's egress limited to 20 Mbit/s by tbf.
fn lab_up() -> Option<(Lab, String)> {
    if env("RT_NETNS_ROLE").is_some() {
        return None;
    }
    if !common::require_root("network namespaces") {
        return None;
    }
    if !common::have("ip") || !common::have("tc") || !common::have("ss") {
        return None;
    }
    let id = std::process::id() % 100_000;
    let (nsnd, nrcv) = (format!("rtws{id}"), format!("rtwr{id}"));
    let mut lab = Lab::default();
    for n in [&nsnd, &nrcv] {
        sh(&["ip", "netns", "add", n]);
        lab.ns.push(n.clone());
        ns_exec(n, &["ip", "link", "set", "lo", "up"]);
    }
    let (s0, r0) = (format!("tws{id}"), format!("twr{id}"));
    sh(&[
        "ip", "link", "add", &s0, "netns", &nsnd, "type", "veth", "peer", "name", &r0, "netns",
        &nrcv,
    ]);
    ns_exec(&nsnd, &["ip", "addr", "add", "10.78.1.1/24", "dev", &s0]);
    ns_exec(&nrcv, &["ip", "addr", "add", "10.78.1.2/24", "dev", &r0]);
    ns_exec(&nsnd, &["ip", "link", "set", &s0, "up"]);
    ns_exec(&nrcv, &["ip", "link", "set", &r0, "up"]);
    ns_exec(
        &nsnd,
        &[
            "tc", "qdisc", "add", "dev", &s0, "root", "tbf", "rate", "20mbit", "burst", "32kb",
            "latency", "20ms",
        ],
    );
    spawn_role(&mut lab, &nrcv, "receivers");
    spawn_role(&mut lab, &nsnd, "senders");
    Some((lab, nsnd))
}

fn verdict_of(doc: &Value, port: u16) -> String {
    let conns = doc["connections"].as_array().unwrap();
    let c = conns
        .iter()
        .find(|c| {
            c["conn"]["remote"]
                .as_str()
                .unwrap()
                .ends_with(&format!(":{port}"))
        })
        .unwrap_or_else(|| panic!("no connection to port {port} in {doc}"));
    c["verdict"]["verdict"].as_str().unwrap().to_string()
}

/// The same tracepoint read by bpftrace over a window that contains roundtrip's: every event roundtrip
/// decoded (snd_nxt, snd_una, snd_wnd, cwnd, srtt) is one bpftrace printed.
fn trace_agrees_with_bpftrace(nsnd: &str) {
    if !common::have("bpftrace") {
        return;
    }
    let prog = format!(
        "tracepoint:tcp:tcp_probe /args->dport == {SLOW_PORT}/ {{ printf(\"ev %u %u %u %u %u\\n\", args->snd_nxt, args->snd_una, args->snd_wnd, args->snd_cwnd, args->srtt); }}"
    );
    // Inside `ip netns exec` (its own mount namespace), tracefs is mounted for bpftrace without touching the
    // host's mounts; `ip` and `sh` exec, so the child's pid is bpftrace's.
    let mut bt = Command::new("ip")
        .args(["netns", "exec", nsnd, "sh", "-c"])
        .arg(
            "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; exec bpftrace -e \"$0\"",
        )
        .arg(&prog)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out = bt.stdout.take().unwrap();
    thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    // bpftrace prints "Attaching 1 probe..." once the probe is live.
    loop {
        let l = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("bpftrace did not attach");
        if l.starts_with("Attaching") {
            break;
        }
    }
    let o = Command::new("ip")
        .args(["netns", "exec", nsnd, BIN, "tcp", "--per-packet", "--port"])
        .arg(SLOW_PORT.to_string())
        .args(["-t", "1s", "--json"])
        .output()
        .unwrap();
    thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill")
        .args(["-INT", &bt.id().to_string()])
        .status();
    let _ = bt.wait();
    let seen: std::collections::HashSet<String> = rx
        .try_iter()
        .filter_map(|l| l.strip_prefix("ev ").map(str::to_string))
        .collect();
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let events = doc["first_events"].as_array().unwrap();
    assert!(!events.is_empty(), "{doc:#}");
    for e in events {
        let key = format!(
            "{} {} {} {} {}",
            e["snd_nxt"], e["snd_una"], e["snd_wnd"], e["cwnd"], e["srtt_us"]
        );
        assert!(
            seen.contains(&key),
            "roundtrip traced '{key}' which bpftrace did not see ({} bpftrace events)",
            seen.len()
        );
    }
    eprintln!(
        "--per-packet: {} events, all among bpftrace's {}",
        events.len(),
        seen.len()
    );
}

/// `ss -tin` fields of the connection to `port`: (rtt ms, cwnd).
fn ss_fields(text: &str) -> Option<(f64, u64)> {
    let mut rtt = None;
    let mut cwnd = None;
    for tok in text.split_whitespace() {
        if let Some(v) = tok.strip_prefix("rtt:") {
            rtt = v.split('/').next().and_then(|x| x.parse::<f64>().ok());
        } else if let Some(v) = tok.strip_prefix("cwnd:") {
            cwnd = v.parse::<u64>().ok();
        }
    }
    Some((rtt?, cwnd?))
}

#[test]
fn slow_receiver_is_window_limited_and_fast_one_is_not() {
    let Some((_lab, nsnd)) = lab_up() else {
        return;
    };
    // Let both streams settle, then watch for a few intervals.
    thread::sleep(Duration::from_secs(2));
    let o = Command::new("ip")
        .args(["netns", "exec", &nsnd, BIN, "tcp", "--host", RCV_ADDR])
        .args(["--report-interval", "1s", "-t", "4s", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["kind"], "tcp");
    let slow = verdict_of(&doc, SLOW_PORT);
    let fast = verdict_of(&doc, FAST_PORT);
    eprintln!("verdicts: fast {fast}, slow {slow}");
    assert_eq!(slow, "receiver_window_limited", "{doc:#}");
    assert_ne!(fast, "receiver_window_limited", "{doc:#}");

    // The text mode says it in words.
    let o = Command::new("ip")
        .args(["netns", "exec", &nsnd, BIN, "tcp", "--port"])
        .arg(SLOW_PORT.to_string())
        .args(["--report-interval", "1s", "-t", "2s"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("receiver window limited"),
        "text output:\n{text}"
    );
    assert!(text.contains("verdicts (whole watch)"), "{text}");

    // --per-packet (per arriving segment, tcp/tcp_probe): the slow connection's unacknowledged bytes are pinned at
    // the peer's small window, never beyond it; the kernel's lost-event count is reported.
    let o = Command::new("ip")
        .args(["netns", "exec", &nsnd, BIN, "tcp", "--per-packet", "--port"])
        .arg(SLOW_PORT.to_string())
        .args(["-t", "2s", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["kind"], "tcp-trace");
    assert!(doc["lost_events"].is_u64(), "{doc:#}");
    // The library's type reads the document back, field for field.
    let typed: roundtrip::doc::tcp_trace::TcpTraceDoc = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(typed.header.kind, roundtrip::doc::kind::TCP_TRACE);
    assert_eq!(Some(typed.events), doc["events"].as_u64());
    assert_eq!(
        typed.connections.len(),
        doc["connections"].as_array().unwrap().len()
    );
    assert_eq!(
        typed.first_events.len(),
        doc["first_events"].as_array().unwrap().len()
    );
    assert_eq!(
        Some(u64::from(typed.connections[0].unacked_max)),
        doc["connections"][0]["unacked_max"].as_u64()
    );
    let c = &doc["connections"][0];
    assert!(c["events"].as_u64().unwrap() > 0, "{doc:#}");
    let unacked = c["unacked_max"].as_u64().unwrap();
    let wnd = c["snd_wnd_max"].as_u64().unwrap();
    assert!(unacked > 0 && unacked <= wnd, "{doc:#}");
    assert!(
        wnd <= 16 * 1024,
        "the slow receiver's window is small: {doc:#}"
    );
    trace_agrees_with_bpftrace(&nsnd);

    // One connection's RTT and cwnd against ss -ti read just before and just after ours (the fast one: its
    // cwnd and RTT move, so this is the harder comparison). Ours must lie between the two kernel reads,
    // widened by 20% for what moves in the milliseconds between them: a value off by a factor 2 (units, a
    // doubled or halved RTT, segments read as packets) falls outside. Tried up to 5 times, because a
    // burst between the reads can move the kernel's values more than that; a wrong value misses every time.
    let ss = format!("ss -tinH dst {RCV_ADDR}:{FAST_PORT}");
    let script = format!(
        "{ss}; echo '---ours---'; {} tcp --port {FAST_PORT} -i 1s -t 1ms --json; echo '---ss---'; {ss}",
        BIN
    );
    let mut agreed = false;
    let mut last = String::new();
    for _ in 0..5 {
        let o = Command::new("ip")
            .args(["netns", "exec", &nsnd, "sh", "-c", &script])
            .output()
            .unwrap();
        let all = String::from_utf8_lossy(&o.stdout).to_string();
        let (before, rest) = all.split_once("---ours---").unwrap();
        let (json_part, after) = rest.split_once("---ss---").unwrap();
        let doc: Value = serde_json::from_str(json_part).unwrap();
        let s = &doc["samples"][0]["socket"]["info"];
        let ours_rtt_ms = s["rtt_ns"].as_f64().unwrap() / 1e6;
        let ours_cwnd = s["cwnd"].as_u64().unwrap() as f64;
        let (rtt1, cwnd1) = ss_fields(before).expect("ss -ti printed rtt and cwnd");
        let (rtt2, cwnd2) = ss_fields(after).expect("ss -ti printed rtt and cwnd");
        last = format!(
            "roundtrip rtt {ours_rtt_ms:.3}ms cwnd {ours_cwnd}; ss before/after rtt {rtt1:.3}/{rtt2:.3}ms \
             cwnd {cwnd1}/{cwnd2}"
        );
        let between = |v: f64, a: f64, b: f64| v >= a.min(b) * 0.8 && v <= a.max(b) * 1.2;
        let rtt_ok = between(ours_rtt_ms, rtt1, rtt2);
        let cwnd_ok = between(ours_cwnd, cwnd1 as f64, cwnd2 as f64);
        assert!(ours_rtt_ms > 0.0 && ours_cwnd > 0.0, "{last}");
        eprintln!("{last}");
        if rtt_ok && cwnd_ok {
            agreed = true;
            break;
        }
    }
    assert!(agreed, "sampled values disagree with ss -ti: {last}");
}

// ---------- bad input, on loopback ----------

#[test]
fn nonexistent_pid_is_a_one_line_error() {
    if env("RT_NETNS_ROLE").is_some() {
        return;
    }
    let o = Command::new(BIN)
        .args(["tcp", "--pid", "4294967290", "-t", "1s"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no process with pid 4294967290"), "{err}");
}

#[test]
fn no_matching_connection_keeps_watching() {
    if env("RT_NETNS_ROLE").is_some() {
        return;
    }
    // A port nobody uses: bound and released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = Command::new(BIN)
        .args([
            "tcp",
            "--port",
            &port.to_string(),
            "--report-interval",
            "200ms",
            "-t",
            "1s",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("no matching connection yet, watching"),
        "{text}"
    );
    assert!(text.contains("--- no matching connection"), "{text}");
}

#[test]
fn a_connection_closing_mid_run_gets_a_closed_line_and_the_other_goes_on() {
    if env("RT_NETNS_ROLE").is_some() {
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let stay = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (_stay_peer, _) = l.accept().unwrap();
    let leave = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let leave_port = leave.local_addr().unwrap().port();
    let (leave_peer, _) = l.accept().unwrap();
    let stay_name = format!("127.0.0.1:{} -> ", stay.local_addr().unwrap().port());
    let leave_name = format!("127.0.0.1:{leave_port} -> ");

    let mut child = Command::new(BIN)
        .args([
            "tcp",
            "--port",
            &port.to_string(),
            "--report-interval",
            "200ms",
            "-t",
            "60s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let next = || {
        rx.recv_timeout(Duration::from_secs(30))
            .expect("roundtrip tcp went quiet")
    };
    // Wait until the leaving connection has been sampled, then close both of its ends.
    while !next().contains(&leave_name) {}
    drop(leave);
    drop(leave_peer);
    let mut closed_seen = false;
    let mut stay_after_close = false;
    let mut text = String::new();
    while !stay_after_close {
        let line = next();
        text.push_str(&line);
        text.push('\n');
        if line.contains(&leave_name) && line.contains("closed (last sample at") {
            closed_seen = true;
        } else if closed_seen && line.contains(&stay_name) {
            assert!(!line.contains("closed"), "{text}");
            stay_after_close = true;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    drop(stay);
}

#[test]
fn the_full_log_note_counts_the_rows_written_without_json() {
    if env("RT_NETNS_ROLE").is_some() {
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (_peer, _) = l.accept().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("full.csv");
    let o = Command::new(BIN)
        .args([
            "tcp",
            "--port",
            &port.to_string(),
            "--report-interval",
            "200ms",
            "-t",
            "1s",
        ])
        .arg("--full-log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let written = std::fs::read_to_string(&log).unwrap().lines().count() - 1;
    assert!(
        written >= 2,
        "both ends of the connection sampled at least once: {written}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("full log: {written} rows in ")),
        "the note must count the {written} rows the file holds: {stderr}"
    );
}

#[test]
fn report_draws_rtt_and_windows_per_connection() {
    if env("RT_NETNS_ROLE").is_some() {
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut peer, _) = l.accept().unwrap();
    c.write_all(&[1u8; 100_000]).unwrap();
    let mut buf = vec![0u8; 100_000];
    peer.read_exact(&mut buf).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("tcp.html");
    let o = Command::new(BIN)
        .args([
            "tcp",
            "--port",
            &port.to_string(),
            "--report-interval",
            "200ms",
            "-t",
            "600ms",
        ])
        .arg("--report")
        .arg(&html)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("tcp-rtt") && page.contains("tcp-window"),
        "{page}"
    );
    assert!(page.contains("cwnd (x MSS)"), "{page}");
    assert!(page.contains(&format!("127.0.0.1:{port}")), "{page}");
}

#[test]
fn trace_without_root_says_why_in_one_line() {
    // RT_NETNS_ROLE: this process is a child the namespace tests started, not the test run.
    if env("RT_NETNS_ROLE").is_some() {
        return;
    }
    if !common::require_root("setpriv drops root to show the refusal") || !common::have("setpriv") {
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args([BIN, "tcp", "--per-packet", "-t", "1s"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--per-packet is not available"), "{err}");
    assert!(err.contains("sampled mode"), "{err}");
}
