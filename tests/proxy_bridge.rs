//! `roundtrip proxy --bridge`: real frames through real network namespaces (tests/common/bridge_ns.rs), with
//! `roundtrip server`/`ping`, tcpdump, `capture flows` and iperf3 at the ends. Bounds are statistical or
//! catch a doubled or halved setting; none is a speed threshold (those are in bench/bridge.sh).

mod common;

use common::bridge_ns::{BridgeNet, Side};
use common::procs::{self, Proc};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MS: f64 = 1e6;

fn ready() -> bool {
    common::netns::available() && common::have("tcpdump") && common::have("iperf3")
}

/// Starts `roundtrip server` in the server namespace.
fn server(net: &BridgeNet) -> Proc {
    let ip = net.server_ip.to_string();
    let mut p = net.spawn(
        Side::Server,
        "server",
        &procs::bin(),
        &["server", "--bind", &ip],
    );
    p.wait_line("listening", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    p
}

/// `roundtrip ping ARGS SERVER --json` from the client namespace; the parsed document.
fn ping(net: &BridgeNet, args: &[&str]) -> Value {
    let ip = net.server_ip.to_string();
    let mut a = vec!["ping", &ip, "--json"];
    a.extend_from_slice(args);
    let f = net.run(
        Side::Client,
        "ping",
        &procs::bin(),
        &a,
        Duration::from_secs(180),
    );
    serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("ping output: {e}\n{}", f.output))
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

/// The bridge's --json document after Ctrl-C.
fn stop_json(net: &mut BridgeNet) -> Value {
    let f = net.stop_bridge();
    assert!(f.ok(), "bridge failed: {}", f.output);
    serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("bridge json: {e}\n{}", f.output))
}

/// A round trip of the configured RTT, seen by `roundtrip ping` AND by the client's own TCP handshake in a
/// tcpdump capture (`capture flows`): TCP itself meets the far network, which a terminating proxy cannot give.
#[test]
fn ping_and_tcp_handshake_see_the_configured_rtt() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge rtt test");
    let mut net = BridgeNet::new();
    let _srv = server(&net);
    net.start_bridge(&["--rtt", "40ms"]);
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("client.pcap");
    let pcap_s = pcap.to_str().unwrap().to_string();
    let mut dump = net.spawn(
        Side::Client,
        "tcpdump",
        "tcpdump",
        &[
            "--immediate-mode",
            "-U",
            "-n",
            "-i",
            "eth0",
            "-w",
            &pcap_s,
            "tcp",
        ],
    );
    dump.wait_line("listening on", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    let doc = ping(&net, &["-c", "50", "--warmup", "1s"]);
    // More connections, so the handshake check is a median, not one sample a loaded machine may stretch.
    for _ in 0..4 {
        ping(&net, &["-c", "2", "--warmup", "0"]);
    }
    dump.signal(libc::SIGINT);
    let f = dump.finish(Duration::from_secs(20));
    assert!(f.ok(), "tcpdump: {}", f.output);
    let p50 = u(&doc, &["summary", "rtt", "p50_ns"]) as f64;
    // Above the configured RTT (nothing is released early) and far below a doubled delay (80 ms); a
    // halved one (20 ms) fails the lower bound.
    assert!(
        (40.0 * MS..55.0 * MS).contains(&p50),
        "ping median {:.3} ms for --rtt 40ms",
        p50 / MS
    );
    let flows = procs::run(
        "capture flows",
        {
            let mut c = std::process::Command::new(procs::bin());
            c.args(["capture", "flows", &pcap_s, "--json"]);
            c
        },
        Duration::from_secs(60),
    );
    let v: Value = serde_json::from_str(&flows.stdout)
        .unwrap_or_else(|e| panic!("capture flows: {e}\n{}", flows.output));
    let hs: Vec<f64> = v["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["handshake"]["rtt_ns"].as_u64())
        .map(|n| n as f64)
        .collect();
    assert_eq!(hs.len(), 5, "handshakes in the client capture: {v}");
    // None is shorter than the configured RTT (load can only lengthen one); the median is near it.
    assert!(
        hs.iter().all(|&h| h >= 40.0 * MS),
        "handshake RTTs {hs:?} for --rtt 40ms"
    );
    let mut sorted = hs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[2];
    assert!(
        median < 55.0 * MS,
        "median handshake RTT at the client {:.3} ms for --rtt 40ms ({hs:?})",
        median / MS
    );
    let out = net.stop_bridge();
    assert!(out.stdout.contains("frames out"), "{}", out.output);
}

/// Timestamps (seconds) of the UDP packets in `pcap` going to `to` and coming from it, in order.
fn udp_times(pcap: &str, to: &str) -> (Vec<f64>, Vec<f64>) {
    let f = procs::run(
        "tcpdump -r",
        {
            let mut c = std::process::Command::new("tcpdump");
            c.args(["-r", pcap, "-tt", "-n", "udp"]);
            c
        },
        Duration::from_secs(30),
    );
    let (mut there, mut back) = (Vec::new(), Vec::new());
    for l in f.stdout.lines() {
        let Some(t) = l.split(' ').next().and_then(|t| t.parse::<f64>().ok()) else {
            continue;
        };
        if l.contains(&format!("> {to}.")) {
            there.push(t);
        } else if l.contains(&format!(" {to}.")) {
            back.push(t);
        }
    }
    (there, back)
}

/// Per-direction delay: `--delay 10ms --delay-back 30ms`, seen from captures at both ends (one clock): each
/// datagram takes 10 ms from the client to the server and 30 ms back (a swapped, doubled or halved setting
/// falls outside). Only the two named interfaces are touched: a third interface (a veth pair) in the bridge's
/// namespace is never made promiscuous, and the two are not promiscuous any more once the bridge has stopped.
#[test]
fn delay_is_per_direction_and_only_named_interfaces_are_touched() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge per-direction test");
    let mut net = BridgeNet::new();
    let mid = net.netns(Side::Bridge).to_string();
    let ip = |args: &[&str]| {
        let st = std::process::Command::new("ip")
            .args(["-n", &mid])
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?}");
    };
    ip(&["link", "add", "bx", "type", "veth", "peer", "name", "by"]);
    ip(&["link", "set", "bx", "up"]);
    ip(&["link", "set", "by", "up"]);
    let promiscuity = |name: &str| {
        let o = std::process::Command::new("ip")
            .args(["-n", &mid, "-d", "link", "show", name])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        s.split("promiscuity ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no promiscuity in {s}"))
    };
    let _srv = server(&net);
    net.start_bridge(&["--delay", "10ms", "--delay-back", "30ms"]);
    assert!(net.promiscuous());
    assert_eq!(promiscuity("bx"), 0, "an interface not named was touched");
    let dir = tempfile::tempdir().unwrap();
    let cap = |side: Side, name: &str| {
        let file = dir.path().join(name).to_str().unwrap().to_string();
        let mut p = net.spawn(
            side,
            "tcpdump",
            "tcpdump",
            &[
                "--immediate-mode",
                "-U",
                "-n",
                "-i",
                "eth0",
                "-w",
                &file,
                "udp",
            ],
        );
        p.wait_line("listening on", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"));
        (p, file)
    };
    let (cd, cfile) = cap(Side::Client, "client.pcap");
    let (sd, sfile) = cap(Side::Server, "server.pcap");
    let doc = ping(&net, &["-u", "-c", "30", "--warmup", "0"]);
    assert_eq!(u(&doc, &["summary", "lost"]), 0, "{doc}");
    for d in [cd, sd] {
        d.signal(libc::SIGINT);
        let f = d.finish(Duration::from_secs(20));
        assert!(f.ok(), "tcpdump: {}", f.output);
    }
    let sip = net.server_ip.to_string();
    let (c_out, c_in) = udp_times(&cfile, &sip);
    let (s_in, s_out) = udp_times(&sfile, &sip);
    assert!(
        c_out.len() >= 30 && c_out.len() == s_in.len(),
        "{c_out:?} {s_in:?}"
    );
    assert!(
        c_in.len() == s_out.len() && c_in.len() == c_out.len(),
        "{c_in:?} {s_out:?}"
    );
    let median = |a: &[f64], b: &[f64]| {
        let mut d: Vec<f64> = a.iter().zip(b).map(|(x, y)| (y - x) * 1e3).collect();
        d.sort_by(f64::total_cmp);
        d[d.len() / 2]
    };
    let there = median(&c_out, &s_in);
    let back = median(&s_out, &c_in);
    eprintln!("one way: client->server {there:.3} ms, server->client {back:.3} ms");
    assert!(
        (10.0..20.0).contains(&there),
        "client->server {there:.3} ms for --delay 10ms"
    );
    assert!(
        (30.0..45.0).contains(&back),
        "server->client {back:.3} ms for --delay-back 30ms"
    );
    let out = net.stop_bridge();
    assert!(out.ok(), "{}", out.output);
    assert_eq!(promiscuity("bx"), 0);
    assert_eq!(promiscuity("ba") + promiscuity("bb"), 0, "left promiscuous");
}

/// Independent loss in one direction over many UDP datagrams: the measured loss lies in the binomial 99.9%
/// interval, and the bridge counted exactly the frames it dropped.
#[test]
fn loss_is_binomial() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge loss test");
    let mut net = BridgeNet::new();
    net.start_bridge(&["--loss", "2%", "--direction", "up", "--json"]);
    let n = 20_000u64;
    let got = net.udp_stream(n, Duration::from_micros(100));
    let lost = (n - got.len() as u64) as f64;
    let p = 0.02;
    let half = 3.29 * (p * (1.0 - p) / n as f64).sqrt();
    let share = lost / n as f64;
    assert!(
        (share - p).abs() < half,
        "lost {lost} of {n} = {share:.5}, want {p} +- {half:.5}"
    );
    let b = stop_json(&mut net);
    let dropped = u(&b, &["total", "a_to_b", "lost"]) as f64;
    // The bridge may also have dropped a frame of ARP or of the first datagram (not counted above).
    assert!(
        dropped >= lost && dropped <= lost + 3.0,
        "the bridge counted {dropped} lost, {lost} missing"
    );
    assert_eq!(u(&b, &["total", "b_to_a", "lost"]), 0);
}

/// Gilbert-Elliott bursts: the mean run of consecutive lost datagrams is the configured burst length.
#[test]
fn loss_bursts_have_the_configured_mean_length() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge burst test");
    let mut net = BridgeNet::new();
    net.start_bridge(&["--loss", "5%", "--loss-burst", "4", "--direction", "up"]);
    let n = 20_000u64;
    let got = net.udp_stream(n, Duration::from_micros(100));
    let mut seen = vec![false; n as usize];
    for s in got {
        seen[s as usize] = true;
    }
    let mut bursts = Vec::new();
    let mut run = 0u32;
    for &g in &seen {
        if g {
            if run > 0 {
                bursts.push(run);
            }
            run = 0;
        } else {
            run += 1;
        }
    }
    let k = bursts.len() as f64;
    let mean = bursts.iter().sum::<u32>() as f64 / k;
    // Geometric burst lengths of mean 4: sd = sqrt(1 - r)/r = 3.46 per burst; 99.9% of the mean of k
    // bursts. Independent loss (mean 1.05) or bursts of 2 or 8 fall far outside.
    let half = 3.29 * 3.46 / k.sqrt();
    assert!(k > 100.0, "only {k} bursts");
    assert!(
        (mean - 4.0).abs() < half,
        "mean burst {mean:.2} over {k} bursts, want 4 +- {half:.2}"
    );
    net.stop_bridge();
}

/// Jitter (4 ms) far larger than the gap between datagrams (100 us) keeps their order; with --reorder it
/// does not.
#[test]
fn jitter_keeps_order_unless_reorder() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge jitter test");
    let mut net = BridgeNet::new();
    let inversions = |v: &[u64]| v.windows(2).filter(|w| w[1] < w[0]).count();
    for dist in ["uniform", "normal", "pareto"] {
        net.start_bridge(&["--delay", "5ms", "--jitter", "4ms", "--jitter-dist", dist]);
        let kept = net.udp_stream(3000, Duration::from_micros(100));
        net.stop_bridge();
        assert_eq!(kept.len(), 3000, "{dist}: lost datagrams without loss set");
        assert_eq!(inversions(&kept), 0, "{dist}: reordered without --reorder");
    }
    net.start_bridge(&["--delay", "5ms", "--jitter", "4ms", "--reorder"]);
    let mixed = net.udp_stream(3000, Duration::from_micros(100));
    net.stop_bridge();
    assert!(
        inversions(&mixed) > 100,
        "{} inversions with --reorder",
        inversions(&mixed)
    );
}

/// The rate limiter: a bulk TCP transfer (iperf3) gets about the rate, and no reporting interval carries more
/// than the rate (the limiter serialises frame by frame; it cannot burst). Frames over the queue bound are
/// dropped and counted, and the queue never holds more than the bound.
#[test]
fn rate_limit_does_not_burst_and_queue_is_bounded() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge rate test");
    let mut net = BridgeNet::without_offloads();
    let ip = net.server_ip.to_string();
    let _iperf = net.spawn(Side::Server, "iperf3 -s", "iperf3", &["-s", "-B", &ip]);
    std::thread::sleep(Duration::from_millis(500));
    net.start_bridge(&[
        "--bandwidth",
        "20mbit",
        "--delay",
        "2ms",
        "--report-interval",
        "250ms",
        "--json",
    ]);
    let f = net.run(
        Side::Client,
        "iperf3",
        "iperf3",
        &["-c", &ip, "-t", "4", "-J"],
        Duration::from_secs(60),
    );
    let v: Value = serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("{e}: {}", f.output));
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap();
    let b = stop_json(&mut net);
    assert!(
        bps < 20e6 * 1.02,
        "iperf3 got {:.1} Mbit/s through a 20 Mbit/s limit",
        bps / 1e6
    );
    assert!(
        bps > 20e6 * 0.5,
        "iperf3 got only {:.1} Mbit/s of 20",
        bps / 1e6
    );
    let mut prev_t = 0u64;
    for iv in b["intervals"].as_array().unwrap() {
        let t = iv["t_ns"].as_u64().unwrap();
        let secs = (t - prev_t) as f64 / 1e9;
        prev_t = t;
        let bytes = iv["a_to_b"]["bytes_out"].as_f64().unwrap();
        // Three frames of slack: the interval edge can fall inside a frame's serialisation, and on a loaded
        // machine the interval's clock and its byte counters are read a moment apart (seen once in CI: 20.1
        // Mbit/s over 0.261 s, 1.2 frames past one frame's slack). A burst (a queue let go at once) is far more.
        assert!(
            bytes * 8.0 <= 20e6 * secs + 3.0 * 1514.0 * 8.0,
            "{:.1} Mbit/s in an interval of {secs:.3} s",
            bytes * 8.0 / secs / 1e6
        );
    }
    // A flood into a slow link with a small queue: drops counted, the queue never above its bound, and every
    // frame either sent or counted.
    net.start_bridge(&[
        "--bandwidth",
        "1mbit",
        "--queue-limit",
        "70000",
        "--direction",
        "up",
        "--report-interval",
        "100ms",
        "--json",
    ]);
    let got = net.udp_stream(5000, Duration::ZERO);
    let b = stop_json(&mut net);
    let t = &b["total"]["a_to_b"];
    let full = u(t, &["queue_full"]);
    assert!(full > 0, "{t}");
    assert!(
        got.len() as u64 + full <= 5001,
        "{} arrived + {full} dropped",
        got.len()
    );
    assert_eq!(u(t, &["frames_in"]), u(t, &["frames_out"]) + full, "{t}");
    for iv in b["intervals"].as_array().unwrap() {
        assert!(
            iv["a_to_b"]["queued_bytes"].as_u64().unwrap() <= 70_000,
            "{iv}"
        );
    }
}

/// The control API changes the delay while pings run, and serves the counters.
#[test]
fn control_api_changes_delay_live() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge control test");
    let mut net = BridgeNet::new();
    let _srv = server(&net);
    net.start_bridge(&["--rtt", "10ms", "--control", "127.0.0.1:0"]);
    let line = net
        .bridge()
        .wait_line("control api on", Duration::from_secs(10))
        .unwrap();
    let port = procs::port_in(&line);
    let before = ping(&net, &["-u", "-c", "20", "--warmup", "0"]);
    assert!(u(&before, &["summary", "rtt", "p50_ns"]) < 20_000_000);
    let curl = |args: &[&str]| {
        let url = format!("http://127.0.0.1:{port}/{}", args[0]);
        let mut a = vec!["-sS", "--max-time", "10", &url];
        a.extend_from_slice(&args[1..]);
        let f = net.run(Side::Bridge, "curl", "curl", &a, Duration::from_secs(30));
        assert!(f.ok(), "curl {args:?}: {}", f.output);
        serde_json::from_str::<Value>(&f.stdout).unwrap_or_else(|e| panic!("{e}: {}", f.stdout))
    };
    let body = r#"{"a_to_b": {"delay_ns": 30000000}, "b_to_a": {"delay_ns": 30000000}}"#;
    let put = curl(&["impairment", "-X", "PUT", "-d", body]);
    assert_eq!(put["a_to_b"]["delay_ns"], 30_000_000);
    let after = ping(&net, &["-u", "-c", "20", "--warmup", "0"]);
    let p50 = u(&after, &["summary", "rtt", "p50_ns"]) as f64;
    assert!(
        (60.0 * MS..75.0 * MS).contains(&p50),
        "after PUT: {:.3} ms",
        p50 / MS
    );
    // PATCH changes only the fields given: the delay back stays, the delay there changes, and the answer is
    // the whole impairment in force.
    let patched = curl(&[
        "impairment",
        "-X",
        "PATCH",
        "-d",
        r#"{"a_to_b": {"delay_ns": 20000000}}"#,
    ]);
    assert_eq!(patched["a_to_b"]["delay_ns"], 20_000_000, "{patched}");
    assert_eq!(patched["b_to_a"]["delay_ns"], 30_000_000, "{patched}");
    let bad = curl(&[
        "impairment",
        "-X",
        "PUT",
        "-d",
        r#"{"a_to_b": {"window_bytes": 5}}"#,
    ]);
    assert!(
        bad["error"].as_str().unwrap().contains("does not apply"),
        "{bad}"
    );
    let c = curl(&["counters"]);
    assert!(u(&c, &["a_to_b", "frames_out"]) >= 40, "{c}");
    net.stop_bridge();
}

/// An interface that goes away ends the bridge with its summary and exit status 1.
#[test]
fn interface_gone_ends_with_summary() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(120), "bridge interface-gone test");
    let mut net = BridgeNet::new();
    net.start_bridge(&[]);
    let c = net.netns(Side::Client).to_string();
    let st = std::process::Command::new("ip")
        .args(["-n", &c, "link", "del", "eth0"])
        .status()
        .unwrap();
    assert!(st.success());
    let f = net.bridge_exits(Duration::from_secs(30));
    assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{}", f.output);
    assert!(
        f.output.contains("'ba'") && f.output.contains("went away"),
        "{}",
        f.output
    );
    assert!(f.stdout.contains("frames in"), "no summary: {}", f.output);
}

/// Refusals before any I/O: an unknown interface names those that exist; without CAP_NET_RAW the one line
/// names the capabilities; a capture given to `--delay-from` is answered with the command that takes its RTTs.
#[test]
fn refusals_name_the_fix() {
    if !ready() || !common::have("setpriv") {
        return;
    }
    let net = BridgeNet::new();
    let f = net.run(
        Side::Bridge,
        "bridge",
        &procs::bin(),
        &["proxy", "--bridge", "ba,nosuch0"],
        Duration::from_secs(30),
    );
    assert!(!f.ok());
    assert!(
        f.output.contains("no interface 'nosuch0'") && f.output.contains("ba, bb"),
        "{}",
        f.output
    );
    let f = net.run(
        Side::Bridge,
        "bridge as nobody",
        "setpriv",
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            &procs::bin(),
            "proxy",
            "--bridge",
            "ba,bb",
        ],
        Duration::from_secs(30),
    );
    assert!(!f.ok());
    assert!(
        f.output.contains("CAP_NET_RAW") && f.output.contains("CAP_NET_ADMIN"),
        "{}",
        f.output
    );
    assert_eq!(f.output.lines().count(), 1, "{}", f.output);
    assert!(!net.promiscuous());
    // A damaged capture given to --delay-from: refused in one line naming the file.
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("c.pcap");
    std::fs::write(&pcap, [0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]).unwrap();
    let f = net.run(
        Side::Bridge,
        "bridge",
        &procs::bin(),
        &[
            "proxy",
            "--bridge",
            "ba,bb",
            "--delay-from",
            pcap.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(!f.ok());
    assert!(
        f.output.contains("--delay-from") && f.output.contains("c.pcap"),
        "{}",
        f.output
    );
    assert_eq!(f.output.trim().lines().count(), 1, "{}", f.output);
    assert!(!net.promiscuous());
}

/// `--delay-from` replays measured RTTs: a file of 30 ms round trips gives pings of 30 ms.
#[test]
fn delay_from_replays_measured_rtts() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge delay-from test");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rtts.txt");
    std::fs::write(&f, "# measured\n29.5ms\n30ms\n30.5ms\n").unwrap();
    let mut net = BridgeNet::new();
    let _srv = server(&net);
    net.start_bridge(&["--delay-from", f.to_str().unwrap()]);
    let doc = ping(&net, &["-u", "-c", "40", "--warmup", "0"]);
    let p50 = u(&doc, &["summary", "rtt", "p50_ns"]) as f64;
    // Half of a sample each way: 29.5..30.5 ms plus the path; a whole sample each way would give 60 ms.
    assert!(
        (29.5 * MS..42.0 * MS).contains(&p50),
        "median {:.3} ms",
        p50 / MS
    );
    let out = net.stop_bridge();
    assert!(
        out.stdout.contains("delay replayed from 3 samples"),
        "{}",
        out.output
    );
    // A capture itself: one sample per connection whose handshake it holds, as `capture flows` counts them.
    let cap = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/captures/redis-benchmark.pcap");
    let flows = Command::new(procs::bin())
        .args(["capture", "flows", cap.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(flows.status.success());
    let flows: serde_json::Value = serde_json::from_slice(&flows.stdout).unwrap();
    let handshakes = flows["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["handshake"].is_null())
        .count();
    assert!(handshakes > 0);
    net.start_bridge(&["--delay-from", cap.to_str().unwrap()]);
    let out = net.stop_bridge();
    assert!(
        out.stdout
            .contains(&format!("delay replayed from {handshakes} samples")),
        "{}",
        out.output
    );
}

/// --duplicate: the share of datagrams that arrive twice is binomial around P, and the bridge counted them.
#[test]
fn duplicates_are_binomial_and_counted() {
    if !ready() {
        return;
    }
    let _w = procs::watchdog(Duration::from_secs(300), "bridge duplicate test");
    let mut net = BridgeNet::new();
    net.start_bridge(&["--duplicate", "10%", "--direction", "up", "--json"]);
    let n = 10_000u64;
    let got = net.udp_stream(n, Duration::from_micros(100));
    let mut seen = vec![0u32; n as usize];
    for s in &got {
        seen[*s as usize] += 1;
    }
    assert!(
        seen.iter().all(|&c| (1..=2).contains(&c)),
        "a datagram lost or sent thrice"
    );
    let twice = seen.iter().filter(|&&c| c == 2).count() as f64;
    let p = 0.10;
    let half = 3.29 * (p * (1.0 - p) / n as f64).sqrt();
    assert!(
        (twice / n as f64 - p).abs() < half,
        "{twice} of {n} twice, want {p} +- {half:.4}"
    );
    let b = stop_json(&mut net);
    let counted = u(&b, &["total", "a_to_b", "duplicated"]) as f64;
    // Frames other than the counted datagrams crossed too (the first datagram, ARP, the endpoints' IPv6
    // neighbour discovery and MLD reports), and each of them may have been duplicated: the bridge's count
    // lies between the datagrams seen twice and that plus every other frame it took in.
    let others = u(&b, &["total", "a_to_b", "frames_in"]) - n;
    assert!(others < 100, "{others} frames besides the stream crossed");
    assert!(
        counted >= twice && counted <= twice + others as f64,
        "bridge counted {counted}, {twice} arrived twice, {others} other frames crossed"
    );
}
