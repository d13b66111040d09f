//! `capture whatif` against real runs: a real smbd (tests/common/samba.rs) and PostgreSQL, captured directly
//! on loopback with tcpdump, predicted at 5 and 20 ms, then measured through `roundtrip proxy --rtt`; an HTTP
//! download predicted with the default TCP path (window growth) and measured across `roundtrip proxy --bridge`
//! (tests/common/bridge_ns.rs), where the endpoints' own TCP meets the RTT; and bad captures (no TCP, one
//! direction only, no handshake, snaplen cut) built by filtering a real one.
//!
//! Measured and today's durations are both read from captures (first to last packet of the capture on the
//! client's side), so process start-up is in neither. Tolerances are generous (30%) because the tests run on a
//! shared, loaded machine; bench/whatif.sh carries the real figures (interleaved rounds, medians).

mod common;

use common::tcpdump::Tcpdump;

use common::db::PgbenchDb;
use common::procs::{Kids, bin, port_in, wait_line};
use common::samba::Samba;
use roundtrip::whatif::predict::{self, Network, PathKind};
use roundtrip::whatif::profile::{AppProfile, ProfileOptions};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `roundtrip proxy --rtt RTT` in front of `port`; returns the proxy's port.
fn proxy(kids: &mut Kids, port: u16, rtt_ms: u32) -> u16 {
    let mut p = Command::new(bin())
        .args(["proxy", "--listen", "127.0.0.1:0", "--upstream"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--rtt", &format!("{rtt_ms}ms")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = p.stdout.take().unwrap();
    kids.0.push(p);
    port_in(&wait_line(out, "listening on"))
}

fn net(rtt_ms: u32) -> Network {
    Network {
        rtt: Duration::from_millis(rtt_ms as u64),
        bandwidth_bps: None,
        loss: 0.0,
        slow_start_after_idle: predict::host_slow_start_after_idle(),
        // The proxy terminates TCP: windows are not what the added delay limits (see PathKind::Relay).
        path: PathKind::Relay,
    }
}

fn predicted(file: &Path, rtt_ms: u32) -> f64 {
    let prof = AppProfile::from_capture(file, &ProfileOptions::default()).unwrap();
    predict::predict(&prof, &net(rtt_ms)).predicted_s
}

fn captured(file: &Path) -> f64 {
    AppProfile::from_capture(file, &ProfileOptions::default())
        .unwrap()
        .duration
        .as_secs_f64()
}

/// Generous: the machine is shared; bench/whatif.sh measures the real accuracy.
const TOLERANCE: f64 = 0.30;

#[test]
fn samba_get_20mb_predicted_vs_measured_through_the_proxy() {
    if !common::have("tcpdump") {
        return;
    }
    let Some(smb) = Samba::start() else { return };
    smb.put_file("f", 20 << 20);
    let dir = tempfile::tempdir().unwrap();
    let direct = dir.path().join("direct.pcap");
    let t = Tcpdump::port(&direct, smb.addr.port());
    let (ok, text, _) = Samba::client(smb.addr, "get f /dev/null");
    t.stop();
    assert!(ok, "smbclient: {text}");
    if let Some(keep) = std::env::var_os("WHATIF_KEEP") {
        let _ = std::fs::copy(&direct, keep);
    }
    let out = Command::new(bin())
        .args(["capture", "whatif"])
        .arg(&direct)
        .args(["--rtt", "5ms,20ms"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("smb2"), "SMB2 turns: {text}");
    assert!(text.contains("assumptions"), "{text}");
    let mut kids = Kids(Vec::new());
    for rtt in [5, 20] {
        let pp = proxy(&mut kids, smb.addr.port(), rtt);
        let via = dir.path().join(format!("via{rtt}.pcap"));
        let t = Tcpdump::port(&via, pp);
        let (ok, text, _) = Samba::client(
            format!("127.0.0.1:{pp}").parse().unwrap(),
            "get f /dev/null",
        );
        t.stop();
        assert!(ok, "smbclient through the proxy: {text}");
        let (p, m) = (predicted(&direct, rtt), captured(&via));
        eprintln!(
            "samba 20 MB at {rtt} ms: predicted {p:.3} s, measured {m:.3} s, ratio {:.2}",
            p / m
        );
        assert!(
            (p / m - 1.0).abs() < TOLERANCE,
            "at {rtt} ms predicted {p:.3} s, measured {m:.3} s"
        );
    }
}

/// The default path (`--path tcp`: slow start, receiver window per RTT) checked against a network whose RTT
/// the endpoints' TCP really sees: a 4 MB HTTP download (python's http.server, urllib) captured at the client
/// across an unimpaired `proxy --bridge`, predicted at 20 ms, then run across the bridge at `--rtt 20ms`.
#[test]
fn http_download_predicted_with_window_growth_vs_measured_across_the_bridge() {
    use common::bridge_ns::{BridgeNet, Side};
    if !common::netns::available() || !common::have("tcpdump") || !common::have("python3") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(300), "whatif bridge");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f4m"), vec![7u8; 4_000_000]).unwrap();
    let mut bn = BridgeNet::new();
    let sip = bn.server_ip.to_string();
    let root = dir.path().to_str().unwrap().to_string();
    let mut web = bn.spawn(
        Side::Server,
        "http.server",
        "python3",
        &[
            "-u",
            "-m",
            "http.server",
            "8080",
            "--bind",
            &sip,
            "--directory",
            &root,
        ],
    );
    web.wait_line("Serving HTTP", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("http://{sip}:8080/f4m");
    let get = format!(
        "import urllib.request; assert len(urllib.request.urlopen('{url}').read()) == 4000000"
    );
    let download = |net: &mut BridgeNet, bridge: &[&str], name: &str| {
        net.start_bridge(bridge);
        let pcap = dir.path().join(name);
        let t = Tcpdump::start_in(
            Some(net.netns(Side::Client)),
            &[
                "--immediate-mode",
                "-U",
                "-n",
                // 64 MiB: a 4 MB download at full speed must not overflow the default 2 MiB ring on a
                // loaded machine (a capture missing segments holds no complete request/response turn).
                "-B",
                "65536",
                "-i",
                "eth0",
                "-w",
                pcap.to_str().unwrap(),
                "tcp port 8080",
            ],
        );
        let f = net.run(
            Side::Client,
            "download",
            "python3",
            &["-c", &get],
            Duration::from_secs(120),
        );
        let drops = t.stop();
        assert!(f.ok(), "download: {}", f.output);
        assert!(
            drops == 0 || drops == u64::MAX,
            "tcpdump dropped {drops} packets of {name}"
        );
        let b = net.stop_bridge();
        assert!(b.ok(), "bridge: {}", b.output);
        pcap
    };
    let local = download(&mut bn, &[], "local.pcap");
    let far = download(&mut bn, &["--rtt", "20ms"], "far.pcap");
    let prof = AppProfile::from_capture(&local, &ProfileOptions::default()).unwrap();
    let p = predict::predict(
        &prof,
        &Network {
            path: PathKind::Tcp,
            ..net(20)
        },
    )
    .predicted_s;
    let m = captured(&far);
    eprintln!(
        "http 4 MB at 20 ms across the bridge: predicted {p:.3} s, measured {m:.3} s, ratio {:.2}",
        p / m
    );
    assert!(
        (p / m - 1.0).abs() < TOLERANCE,
        "at 20 ms predicted {p:.3} s, measured {m:.3} s"
    );
}

/// TPS from pgbench's output ("tps = 1234.5 (without initial connection time)").
fn tps(out: &str) -> f64 {
    out.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l[6..].split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no tps in {out}"))
}

fn pgbench(port: u16, db: &str, extra: &[&str]) -> String {
    let o = Command::new("pgbench")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-c",
            "1",
            "-T",
            "3",
            "-n",
        ])
        .args(extra)
        .arg(db)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "pgbench: {s}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    s
}

#[test]
fn pgbench_tps_predicted_vs_measured_through_the_proxy() {
    if !common::have("pgbench")
        || !common::have("tcpdump")
        || !common::service_up(5432, "PostgreSQL")
    {
        return;
    }
    let db = PgbenchDb::create("whatif");
    let dir = tempfile::tempdir().unwrap();
    let mut kids = Kids(Vec::new());
    for (name, extra) in [("select-only", vec!["-S"]), ("tpc-b", vec![])] {
        let direct = dir.path().join(format!("{name}.pcap"));
        let t = Tcpdump::port(&direct, 5432);
        let today = tps(&pgbench(5432, &db.0, &extra));
        t.stop();
        let prof = AppProfile::from_capture(&direct, &ProfileOptions::default()).unwrap();
        assert!(
            prof.connections.iter().any(|c| c.protocol == "pgsql"),
            "pgsql turns"
        );
        for rtt in [5u32, 20] {
            // pgbench runs for a fixed time: TPS scales with the inverse of the predicted duration of its
            // benchmark connection (the one with the most turns; the others are its set-up queries).
            let bench = (0..prof.connections.len())
                .max_by_key(|&i| prof.connections[i].turns.len())
                .unwrap();
            let pred = predict::predict(&prof, &net(rtt));
            let p = today * prof.connections[bench].duration.as_secs_f64()
                / pred.connections[bench].predicted_s;
            let pp = proxy(&mut kids, 5432, rtt);
            let m = tps(&pgbench(pp, &db.0, &extra));
            eprintln!(
                "pgbench {name} at {rtt} ms: predicted {p:.1} tps, measured {m:.1} tps, ratio {:.2}",
                p / m
            );
            assert!(
                (p / m - 1.0).abs() < TOLERANCE,
                "{name} at {rtt} ms: predicted {p:.1}, measured {m:.1}"
            );
        }
    }
}

/// Runs `roundtrip capture whatif FILE --rtt 20ms`; returns (exit code, stdout, stderr).
fn whatif(file: &Path) -> (i32, String, String) {
    let o = Command::new(bin())
        .args(["capture", "whatif"])
        .arg(file)
        .args(["--rtt", "20ms"])
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn tshark_filter(input: &Path, out: &Path, filter: &str, extra: &[&str]) {
    let st = Command::new("tshark")
        .args(["-r"])
        .arg(input)
        .args(["-Y", filter, "-F", "pcap", "-w"])
        .arg(out)
        .args(extra)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "tshark -Y {filter}");
}

#[test]
fn bad_captures_say_what_is_missing() {
    if !common::have("tcpdump") || !common::have("tshark") || !common::have("editcap") {
        return;
    }
    let Some(smb) = Samba::start() else { return };
    smb.put_file("f", 2 << 20);
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.pcap");
    let t = Tcpdump::port(&full, smb.addr.port());
    let (ok, text, _) = Samba::client(smb.addr, "get f /dev/null");
    t.stop();
    assert!(ok, "smbclient: {text}");
    let port = smb.addr.port().to_string();

    // No TCP at all: only packets that cannot exist.
    let none = dir.path().join("none.pcap");
    tshark_filter(&full, &none, "udp", &[]);
    let (code, _, err) = whatif(&none);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("no TCP packet") && err.lines().count() == 1,
        "{err}"
    );

    // One direction only: the server's packets.
    let one = dir.path().join("one.pcap");
    tshark_filter(&full, &one, &format!("tcp.srcport == {port}"), &[]);
    let (code, _, err) = whatif(&one);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("one way only") || err.contains("both"),
        "{err}"
    );

    // No handshake: the RTT comes from ACK timing, and the output says so.
    let nosyn = dir.path().join("nosyn.pcap");
    tshark_filter(&full, &nosyn, "not tcp.flags.syn == 1", &[]);
    let (code, out, err) = whatif(&nosyn);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ack timing") && out.contains("no handshake captured"),
        "{out}"
    );

    // Snaplen cut: still predicted, with a note.
    let cut = dir.path().join("cut.pcap");
    let st = Command::new("editcap")
        .args(["-s", "200", "-F", "pcap"])
        .arg(&full)
        .arg(&cut)
        .status()
        .unwrap();
    assert!(st.success());
    let (code, out, err) = whatif(&cut);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("cut by the snap length"), "{out}");

    // Bad arguments: exit 2.
    let o = Command::new(bin())
        .args(["capture", "whatif"])
        .arg(&full)
        .args(["--rtt", "fast"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
