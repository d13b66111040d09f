//! Live capture (`capture stats|flows|rpc|timeline --live`) against real traffic and real peers.
//!
//! The test traffic goes through a socat relay on a port of our own (to the real PostgreSQL and Redis), so
//! the filter `tcp port P` keeps exactly this test's packets on a loopback other tests share. tcpdump
//! (`--time-stamp-precision=nano`) records the same port at the same time: the live results must equal the
//! results of analysing tcpdump's file: the same counts, and the same latencies within what separates two
//! packet sockets' timestamps of one packet (on `lo` the kernel stamps a TCP packet for each socket as it
//! reaches it: a fraction of a microsecond apart, more when a virtual CPU is preempted between the two;
//! measured on the two files by [`stamp_gap`]); roundtrip's own `--write` file must give the live result
//! exactly.

mod common;

use common::procs::{Proc, bin, watchdog};
use serde_json::Value;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

fn ready() -> bool {
    common::require_root("AF_PACKET capture") && common::have("tcpdump") && common::have("socat")
}

/// A socat relay from a free port of ours to `upstream`.
fn relay(upstream: u16) -> (Proc, u16) {
    let port = common::free_port();
    let mut c = Command::new("socat");
    c.arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
        .arg(format!("TCP:127.0.0.1:{upstream}"));
    let p = Proc::spawn("socat", c);
    for _ in 0..200 {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            // This probe's teardown must be over before the captures start, or a capture started first (tcpdump)
            // holds its last packets and one started later does not (seen once on a loaded machine): close our
            // side and wait for socat's end of it.
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = std::io::Read::read(&mut s, &mut [0u8; 64]);
            return (p, port);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("socat did not listen on {port}: {}", p.output());
}

/// `roundtrip ARGS` started, waited for until it captures.
fn live(args: &[&str]) -> Proc {
    let mut c = Command::new(bin());
    c.args(args);
    let mut p = Proc::spawn("roundtrip live", c);
    p.wait_line("capturing on", LONG).unwrap();
    p
}

fn tcpdump(file: &Path, port: u16) -> Proc {
    let mut c = Command::new("tcpdump");
    c.args([
        "--time-stamp-precision=nano",
        "--immediate-mode",
        "-B",
        "65536",
        "-n",
        "-i",
        "lo",
        "-w",
    ])
    .arg(file)
    .args(["tcp", "port", &port.to_string()]);
    let mut p = Proc::spawn("tcpdump", c);
    p.wait_line("listening on", LONG).unwrap();
    p
}

/// SIGINT (the normal end of a live capture), then the JSON document it printed.
fn stop_json(p: Proc) -> Value {
    p.signal(libc::SIGINT);
    let name = p.name.clone();
    let f = p.finish(LONG);
    assert!(f.ok(), "{name}: {:?}\n{}", f.status, f.output);
    serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("{name}: {e}\n{}", f.output))
}

fn run_json(args: &[&str]) -> Value {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The largest difference between the times two captures stamped on the same packets (found by their bytes;
/// packets only one of them holds are left out: the callers compare the counts). On `lo` the kernel stamps a
/// TCP packet separately for each packet socket as it reaches that socket (the skb carries TCP's departure
/// time, not an arrival stamp both could share), so the two stamps are usually a fraction of a microsecond
/// apart, and tens of microseconds and more when the virtual CPU is preempted between the two deliveries
/// (seen on CI).
fn stamp_gap(a: &Path, b: &Path) -> u64 {
    use roundtrip::capture::read::CaptureReader;
    use std::collections::{HashMap, VecDeque};
    let key = |p: &roundtrip::capture::read::Packet| {
        (p.orig_len, p.data[..p.data.len().min(128)].to_vec())
    };
    let mut times: HashMap<_, VecDeque<i64>> = HashMap::new();
    let mut r = CaptureReader::open(a).unwrap();
    while let Some(p) = r.next_packet() {
        times.entry(key(&p)).or_default().push_back(p.ts_ns);
    }
    let (mut gap, mut both, mut only_b) = (0, 0u64, 0u64);
    let mut r = CaptureReader::open(b).unwrap();
    while let Some(p) = r.next_packet() {
        match times.get_mut(&key(&p)).and_then(|q| q.pop_front()) {
            Some(t) => {
                gap = gap.max(t.abs_diff(p.ts_ns));
                both += 1;
            }
            None => only_b += 1,
        }
    }
    let only_a: usize = times.values().map(|q| q.len()).sum();
    eprintln!(
        "stamp_gap: {both} packets in both, {only_a} only in {}, {only_b} only in {}: stamps up to {gap} ns apart",
        a.display(),
        b.display()
    );
    assert!(
        both > 100,
        "{} and {} share {both} packets",
        a.display(),
        b.display()
    );
    gap
}

/// A latency is the difference of two stamps, each at most `gap` from the other capture's stamp of the same
/// packet, so every order statistic (min, p50, p99, max) of the two runs differs by at most 2 x `gap`, plus
/// the histogram's resolution (3 significant digits) at the value. A request paired with the wrong response
/// is off by a whole request, a unit error by 1000x.
fn same_latency(a: u64, b: u64, gap: u64) -> bool {
    a.abs_diff(b) <= 2 * gap + a.max(b) / 500
}

/// The same operations with the same counts, and latencies within [`same_latency`]: the median with stamps up
/// to `gap_p50` apart, min, p99 and max (which one request can set) with `gap_ends`.
fn assert_same_ops(
    live: &[(String, u64, u64, u64, u64, u64)],
    file: &[(String, u64, u64, u64, u64, u64)],
    gap_p50: u64,
    gap_ends: u64,
) {
    assert_eq!(live.len(), file.len(), "{live:?}\n{file:?}");
    for (l, f) in live.iter().zip(file) {
        assert_eq!((&l.0, l.1), (&f.0, f.1), "{live:?}\n{file:?}");
        for (x, y, gap) in [
            (l.2, f.2, gap_ends),
            (l.3, f.3, gap_p50),
            (l.4, f.4, gap_ends),
            (l.5, f.5, gap_ends),
        ] {
            assert!(
                same_latency(x, y, gap),
                "{x} vs {y} (stamps up to {gap} ns apart): {live:?}\n{file:?}"
            );
        }
    }
}

fn op_table(v: &Value) -> Vec<(String, u64, u64, u64, u64, u64)> {
    let mut ops: Vec<_> = v["report"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let l = &o["last_byte"];
            (
                o["op"].as_str().unwrap().to_string(),
                l["count"].as_u64().unwrap(),
                l["min_ns"].as_u64().unwrap(),
                l["p50_ns"].as_u64().unwrap(),
                l["p99_ns"].as_u64().unwrap(),
                l["max_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    ops.sort();
    ops
}

fn flow_table(v: &Value) -> Vec<(String, String, u64, u64, u64)> {
    let mut f: Vec<_> = v["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let c = &f["client_to_server"];
            let s = &f["server_to_client"];
            (
                f["client"].as_str().unwrap().to_string(),
                f["server"].as_str().unwrap().to_string(),
                c["packets"].as_u64().unwrap() + s["packets"].as_u64().unwrap(),
                c["payload_bytes"].as_u64().unwrap(),
                s["payload_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    f.sort();
    f
}

/// Runs stats, flows and rpc live (rpc also writing its capture) beside tcpdump while `traffic` goes through a
/// relay to `upstream`; then compares with the files.
fn live_equals_file(upstream: u16, proto: &str, traffic: impl FnOnce(u16)) {
    let _w = watchdog(Duration::from_secs(600), "live vs file");
    let dir = tempfile::tempdir().unwrap();
    let (_relay, port) = relay(upstream);
    let p = port.to_string();
    let dump = dir.path().join("tcpdump.pcap");
    let written = dir.path().join("live.pcapng");
    let td = tcpdump(&dump, port);
    let filter = ["tcp", "port", &p];
    let mut a = vec!["capture", "stats", "--live", "lo", "--json"];
    a.extend(filter);
    let stats = live(&a);
    let mut a = vec!["capture", "flows", "--live", "lo", "--json"];
    a.extend(filter);
    let flows = live(&a);
    let w = written.to_str().unwrap();
    let mut a = vec![
        "capture", "rpc", "--live", "lo", "--json", "--proto", proto, "--write", w,
    ];
    a.extend(filter);
    let rpc = live(&a);
    traffic(port);
    // Blocks are handed over at most 250 ms after their first packet; tcpdump writes as packets come.
    std::thread::sleep(Duration::from_millis(1500));
    td.signal(libc::SIGINT);
    let tdf = td.finish(LONG);
    assert!(tdf.ok(), "tcpdump: {}", tdf.output);
    let stats = stop_json(stats);
    let flows = stop_json(flows);
    let rpc = stop_json(rpc);
    let d = dump.to_str().unwrap();

    // stats: every packet, every byte.
    let fs = run_json(&["capture", "stats", d, "--json"]);
    assert!(fs["total"]["packets"].as_u64().unwrap() > 100, "{fs}");
    assert_eq!(stats["total"]["packets"], fs["total"]["packets"]);
    assert_eq!(stats["total"]["bytes"], fs["total"]["bytes"]);
    assert_eq!(stats["capture"]["source"]["interface"], "lo");
    assert_eq!(stats["capture"]["source"]["stop_reason"], "interrupted");
    assert_eq!(stats["capture"]["source"]["kernel_drops"], 0, "{stats}");

    // flows: the same connections with the same packets and bytes.
    let ff = run_json(&["capture", "flows", d, "--json"]);
    assert!(!flow_table(&ff).is_empty());
    assert_eq!(flow_table(&flows), flow_table(&ff));

    // rpc: the same requests with the same latencies, within what separates the two captures' stamps of one
    // packet (measured on the two files: the same packets, found by their bytes).
    let fr = run_json(&["capture", "rpc", d, "--json", "--proto", proto]);
    assert!(fr["report"]["transactions"].as_u64().unwrap() > 50, "{fr}");
    assert_eq!(rpc["report"]["transactions"], fr["report"]["transactions"]);
    let gap = stamp_gap(&dump, &written);
    assert_same_ops(&op_table(&rpc), &op_table(&fr), gap, gap);
    assert_eq!(rpc["counts"]["packets"], fr["counts"]["packets"]);

    // --write: analysing roundtrip's own file gives the live result.
    let wr = run_json(&["capture", "rpc", w, "--json", "--proto", proto]);
    assert_eq!(wr["report"], rpc["report"]);
    assert_eq!(
        wr["capture"]["packets_read"],
        rpc["capture"]["packets_read"]
    );
}

/// Runs pgbench against 127.0.0.1:`port` (database `test`, user postgres, no TLS) with `args` and then
/// `-f script`, and checks that it succeeded.
fn pgbench(port: u16, script: &std::path::Path, args: &[&str]) {
    let out = Command::new("pgbench")
        .env("PGSSLMODE", "disable")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .arg("-f")
        .arg(script)
        .arg("test")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pgbench: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs redis-benchmark against 127.0.0.1:`port` with `args` and checks that it succeeded.
fn redis_benchmark(port: u16, args: &[&str]) {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "redis-benchmark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pgbench_live_equals_tcpdump_file() {
    if !ready() || !common::have("pgbench") || !common::service_up(5432, "postgresql") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("q.sql");
    std::fs::write(&script, "SELECT 1;\nSELECT count(*) FROM pg_class;\n").unwrap();
    live_equals_file(5432, "pgsql", |port| {
        pgbench(port, &script, &["-n", "-c", "2", "-t", "150"]);
    });
}

#[test]
fn redis_benchmark_live_equals_tcpdump_file() {
    if !ready() || !common::have("redis-benchmark") || !common::service_up(6379, "redis") {
        return;
    }
    live_equals_file(6379, "redis", |port| {
        redis_benchmark(port, &["-n", "2000", "-c", "4", "-t", "set,get", "-q"]);
    });
}

/// A sink on a port of ours: accepts and reads everything.
fn sink() -> (u16, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        }
    });
    (port, h)
}

#[test]
fn a_full_ring_shows_kernel_drops_in_lines_and_json() {
    if !ready() {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "drops");
    let (port, h) = sink();
    let p = port.to_string();
    let rt = live(&[
        "capture", "stats", "--live", "lo", "--buffer", "16k", "--json", "tcp", "port", &p,
    ]);
    // Stopped, the reader cannot empty the 16 KiB ring: the kernel must drop.
    rt.signal(libc::SIGSTOP);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    for _ in 0..3000 {
        s.write_all(&[7u8; 1000]).unwrap();
    }
    drop(s);
    h.join().unwrap();
    rt.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(1500));
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    let v: Value = serde_json::from_str(&f.stdout).unwrap();
    let drops = v["capture"]["source"]["kernel_drops"].as_u64().unwrap();
    assert!(drops > 0, "{v}");
    // The interval lines (stderr with --json) say it too.
    assert!(
        f.output.lines().any(|l| l.starts_with("stderr: ")
            && l.contains("kernel drops ")
            && !l.ends_with("kernel drops 0")),
        "{}",
        f.output
    );
    assert_eq!(v["capture"]["source"]["ring_blocks"], 4);
}

#[test]
fn flight_recorder_keeps_the_slow_request() {
    if !ready() || !common::have("psql") || !common::service_up(5432, "postgresql") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "flight recorder");
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep");
    let (_relay, port) = relay(5432);
    let p = port.to_string();
    let rt = live(&[
        "capture",
        "rpc",
        "--live",
        "lo",
        "--proto",
        "pgsql",
        "--keep-slow",
        "150ms",
        "--keep-dir",
        keep.to_str().unwrap(),
        "tcp",
        "port",
        &p,
    ]);
    let sql = "SELECT 1; SELECT 2; SELECT pg_sleep(0.5); SELECT 3; SELECT 4;";
    let out = Command::new("psql")
        .env("PGSSLMODE", "disable")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &p,
            "-U",
            "postgres",
            "-d",
            "test",
            "-c",
            sql,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(1000));
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    assert!(
        f.output.contains("flight recorder: 1 file(s)"),
        "{}",
        f.output
    );
    let files: Vec<_> = std::fs::read_dir(&keep)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    for file in &files {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(name.contains(&format!("127.0.0.1_{port}")), "{name}");
        let v = run_json(&[
            "capture",
            "rpc",
            file.to_str().unwrap(),
            "--json",
            "--proto",
            "pgsql",
        ]);
        let slowest = v["report"]["slowest"][0]["last_byte_ns"].as_u64().unwrap();
        assert!(slowest >= 500_000_000, "{v}");
    }
}

#[test]
fn connection_cap_bounds_a_syn_flood() {
    if !ready() || !common::have("hping3") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "syn flood");
    // A port nobody listens on: every SYN is a new connection (answered by RST, so closed, but held for the
    // 5 s linger). `capture rpc` drops a connection at its RST; its cap is tested on a flood without answers in
    // the library (capture::rpc::driver).
    let port = common::free_port().to_string();
    let flows = live(&[
        "capture",
        "flows",
        "--live",
        "lo",
        "--json",
        "--max-connections",
        "100",
        "tcp",
        "port",
        &port,
    ]);
    let st = Command::new("hping3")
        .args([
            "-q",
            "-S",
            "-p",
            &port,
            "-i",
            "u200",
            "-c",
            "1500",
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    assert!(st.status.code().is_some(), "{st:?}");
    std::thread::sleep(Duration::from_millis(1000));
    let f = stop_json(flows);
    let c = &f["counters"];
    assert!(c["max_open_flows"].as_u64().unwrap() <= 100, "{c}");
    assert!(c["cap_evictions"].as_u64().unwrap() >= 1000, "{c}");
    assert!(
        f["flows"].as_array().unwrap().len() >= 1400,
        "{}",
        f["flows"].as_array().unwrap().len()
    );
}

#[test]
fn sigint_ends_a_run_with_its_summary() {
    if !ready() {
        return;
    }
    let _w = watchdog(Duration::from_secs(120), "sigint");
    // A port nobody uses: the other tests' bursts on lo are not this capture's to drop.
    let port = common::free_port().to_string();
    let rt = live(&[
        "capture",
        "stats",
        "--live",
        "lo",
        "--report-interval",
        "200ms",
        "tcp",
        "port",
        &port,
    ]);
    std::thread::sleep(Duration::from_millis(800));
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{:?} {}", f.status, f.output);
    assert!(f.stdout.contains("stopped: interrupted"), "{}", f.output);
    assert!(f.stdout.contains("kernel drops 0"), "{}", f.output);
    assert!(f.stdout.contains("total "), "{}", f.output);
}

#[test]
fn duration_and_count_end_the_run() {
    if !ready() {
        return;
    }
    let _w = watchdog(Duration::from_secs(120), "duration");
    let out = Command::new(bin())
        .args(["capture", "rpc", "--live", "lo", "-t", "1s", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["capture"]["source"]["stop_reason"], "duration");
    // -c counts the packets the kernel filter passed.
    let (port, h) = sink();
    let p = port.to_string();
    let rt = live(&[
        "capture", "stats", "--live", "lo", "-c", "5", "--json", "tcp", "port", &p,
    ]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    for _ in 0..20 {
        s.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(s);
    h.join().unwrap();
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    let v: Value = serde_json::from_str(&f.stdout).unwrap();
    assert_eq!(v["capture"]["source"]["stop_reason"], "count");
    assert_eq!(v["total"]["packets"], 5);
}

/// `-c` counts the packets that pass every filter, `--port` included (it joins the kernel filter): the other
/// port's packets, sent first, are neither counted nor read.
#[test]
fn count_counts_packets_after_every_filter() {
    if !ready() {
        return;
    }
    let _w = watchdog(Duration::from_secs(120), "count after filters");
    let (p1, h1) = sink();
    let (p2, h2) = sink();
    let port1 = p1.to_string();
    let rt = live(&[
        "capture", "stats", "--live", "lo", "-c", "5", "--json", "--port", &port1, "tcp",
    ]);
    for port in [p2, p1] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        for _ in 0..20 {
            s.write_all(b"x").unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    h1.join().unwrap();
    h2.join().unwrap();
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    assert!(
        f.output
            .contains(&format!("tcp port {p1} or udp port {p1}")),
        "{}",
        f.output
    );
    let v: Value = serde_json::from_str(&f.stdout).unwrap();
    assert_eq!(v["capture"]["source"]["stop_reason"], "count");
    assert_eq!(v["total"]["packets"], 5, "{v}");
    assert_eq!(v["capture"]["packets_read"], 5, "{v}");
    assert_eq!(v["capture"]["packets_matched"], 5, "{v}");
}

#[test]
fn bad_input_is_one_line() {
    if !ready() {
        return;
    }
    // Unknown interface: refused before any I/O, the interfaces listed.
    let out = Command::new(bin())
        .args(["capture", "stats", "--live", "nosuch0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("no interface 'nosuch0'") && e.contains("lo"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    // A bad expression.
    let out = Command::new(bin())
        .args(["capture", "stats", "--live", "lo", "--filter", "port"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    // A file and --live at once; --write without --live.
    let out = Command::new(bin())
        .args(["capture", "stats", "x.pcap", "--write", "y.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // No privilege: one line naming the capability and the setcap command.
    if common::have("setpriv") {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(bin())
            .args(["capture", "stats", "--live", "lo", "-t", "1s"])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{e}");
        assert!(e.contains("CAP_NET_RAW"), "{e}");
        assert!(
            e.contains("setcap cap_net_raw,cap_net_admin+eip $(command -v roundtrip)"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    } else {
        common::skip("setpriv is not installed");
    }
}

/// A veth pair deleted when the test ends.
struct Veth(String);

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

#[test]
fn an_interface_going_down_ends_the_run_with_the_reason() {
    if !ready() {
        return;
    }
    let _w = watchdog(Duration::from_secs(120), "veth down");
    let name = format!("rtlv{}", std::process::id() % 100_000);
    let st = Command::new("ip")
        .args([
            "link",
            "add",
            &name,
            "type",
            "veth",
            "peer",
            "name",
            &format!("{name}p"),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let v = Veth(name.clone());
    assert!(
        Command::new("ip")
            .args(["link", "set", &name, "up"])
            .status()
            .unwrap()
            .success()
    );
    let rt = live(&["capture", "stats", "--live", &name]);
    std::thread::sleep(Duration::from_millis(500));
    drop(v);
    let f = rt.finish(LONG);
    assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{}", f.output);
    assert!(
        f.stdout.contains("stopped: the interface went down"),
        "{}",
        f.output
    );
    assert!(
        f.output.contains("stderr: roundtrip: error:"),
        "{}",
        f.output
    );
}

/// `--filter` on a live interface keeps the packets tcpdump's filter keeps: two hosts' traffic on a veth in a
/// namespace (real addresses for `host`/`net`), one unfiltered tcpdump there, one roundtrip per expression;
/// each expression is then applied by tcpdump (libpcap) to tcpdump's file.
#[test]
fn live_filter_keeps_what_tcpdump_keeps() {
    if !ready() || !common::netns::available() {
        return;
    }
    let _w = watchdog(Duration::from_secs(600), "live filters");
    let lan = common::netns::Lan::new(3);
    for ns in lan.ns.iter().chain(std::iter::once(&lan.bridge)) {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-q",
                "-w",
                "net.ipv6.conf.all.disable_ipv6=1",
            ])
            .output();
    }
    // No packet the test did not send: no IPv6 (router solicitations, DAD) and no ARP (permanent neighbours),
    // so a capture that starts or stops a moment apart from tcpdump's sees the same packets.
    let macs: Vec<String> = lan
        .ns
        .iter()
        .map(|ns| {
            let o = Command::new("ip")
                .args(["-n", ns, "-o", "link", "show", "eth0"])
                .output()
                .unwrap();
            let t = String::from_utf8_lossy(&o.stdout).to_string();
            let i = t.find("link/ether ").expect("a MAC") + "link/ether ".len();
            t[i..i + 17].to_string()
        })
        .collect();
    for (i, ns) in lan.ns.iter().enumerate() {
        for (j, mac) in macs.iter().enumerate() {
            if i != j {
                let ip = lan.addrs[j].to_string();
                let st = Command::new("ip")
                    .args([
                        "-n",
                        ns,
                        "neigh",
                        "replace",
                        &ip,
                        "lladdr",
                        mac,
                        "dev",
                        "eth0",
                        "nud",
                        "permanent",
                    ])
                    .status()
                    .unwrap();
                assert!(st.success());
            }
        }
    }
    let (a, b, c) = (lan.addrs[0], lan.addrs[1], lan.addrs[2]);
    let net = format!("{}.{}.{}.0/24", a.octets()[0], a.octets()[1], a.octets()[2]);
    let exprs = [
        "port 1521".to_string(),
        format!("host {b} and tcp"),
        "tcp port 5432 or tcp port 6379".to_string(),
        format!("net {net}"),
        "not port 22".to_string(),
        "udp".to_string(),
        "tcp[tcpflags] & tcp-syn != 0".to_string(),
        format!("src host {c}"),
        format!("dst {b} and (udp or tcp[tcpflags] & tcp-fin != 0)"),
    ];
    let dir = tempfile::tempdir().unwrap();
    // Servers: PostgreSQL's and Redis's ports echo on b; c has nothing listening (SYN, RST).
    let _srv: Vec<Proc> = ["5432", "6379"]
        .iter()
        .map(|p| {
            lan.spawn(
                1,
                "socat echo",
                "socat",
                &[&format!("TCP-LISTEN:{p},reuseaddr,fork"), "EXEC:cat"],
            )
        })
        .collect();
    let all = dir.path().join("all.pcap");
    let mut td = lan.spawn(
        0,
        "tcpdump",
        "tcpdump",
        &[
            "--time-stamp-precision=nano",
            "--immediate-mode",
            "-n",
            "-i",
            "eth0",
            "-w",
            all.to_str().unwrap(),
        ],
    );
    td.wait_line("listening on", LONG).unwrap();
    let mut rts = Vec::new();
    for e in &exprs {
        let mut cmd = lan.command(
            0,
            &bin(),
            &["capture", "stats", "--live", "eth0", "--buffer", "1M"],
        );
        cmd.args(["--json", "--filter", e]);
        let mut p = Proc::spawn("roundtrip live", cmd);
        p.wait_line("capturing on", LONG).unwrap();
        rts.push(p);
    }
    // Traffic from a: data to b's two ports, SYNs to c's 22 and 1521 (refused), UDP to b and c.
    for (dst, port) in [(b, 5432), (b, 6379), (c, 22), (c, 1521), (b, 22)] {
        let _ = lan.run(
            0,
            "socat client",
            "socat",
            &["-T1", "-", &format!("TCP:{dst}:{port},connect-timeout=2")],
            Duration::from_secs(30),
        );
    }
    for dst in [b, c] {
        let _ = lan.run(
            0,
            "socat udp",
            "sh",
            &["-c", &format!("echo hello | socat -u - UDP:{dst}:53")],
            Duration::from_secs(30),
        );
    }
    let _ = lan.run(
        0,
        "socat data",
        "sh",
        &["-c", &format!("seq 1 2000 | socat -T2 - TCP:{b}:5432")],
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let docs: Vec<Value> = rts.into_iter().map(stop_json).collect();
    td.signal(libc::SIGINT);
    let tdf = td.finish(LONG);
    assert!(tdf.ok(), "{}", tdf.output);
    for (e, v) in exprs.iter().zip(docs) {
        let out = Command::new("tcpdump")
            .args(["-n", "-tt", "--time-stamp-precision=nano", "-r"])
            .arg(&all)
            .arg(e)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{e}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The packets tcpdump kept while this capture was open (the captures start one after the other).
        let (from, to) = (
            v["capture"]["source"]["started_unix_ns"].as_i64().unwrap(),
            v["capture"]["source"]["ended_unix_ns"].as_i64().unwrap(),
        );
        let want = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                let t = l.split_whitespace().next().unwrap_or("0");
                let (sec, ns) = t.split_once('.').unwrap_or((t, "0"));
                let ts = sec.parse::<i64>().unwrap_or(0) * 1_000_000_000
                    + ns.parse::<i64>().unwrap_or(0);
                ts >= from && ts <= to
            })
            .count() as u64;
        assert!(want > 0, "{e}: tcpdump kept nothing");
        assert_eq!(v["total"]["packets"].as_u64().unwrap(), want, "{e}: {v}");
        assert_eq!(v["capture"]["filter"], e.as_str());
    }
    lan.kill_all();
}

#[test]
fn flows_and_timeline_print_as_connections_end_and_packets_come() {
    if !ready() {
        return;
    }
    let _w = watchdog(Duration::from_secs(120), "flows/timeline lines");
    let (port, h) = sink();
    let p = port.to_string();
    let flows = live(&["capture", "flows", "--live", "lo", "tcp", "port", &p]);
    let mut tl = live(&["capture", "timeline", "--live", "lo", "tcp", "port", &p]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"hello").unwrap();
    drop(s);
    h.join().unwrap();
    // The timeline prints the handshake as it comes, before the run ends.
    tl.wait_line(" S ", LONG).unwrap();
    tl.wait_line("following 127.0.0.1:", LONG).unwrap();
    // A closed connection ends after the 5 s linger (capture time, so later packets move it on): send one more.
    std::thread::sleep(Duration::from_millis(5500));
    let _ = TcpStream::connect(("127.0.0.1", port));
    flows.signal(libc::SIGINT);
    let f = flows.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    assert!(f.stdout.contains(" end #1 127.0.0.1:"), "{}", f.output);
    assert!(f.stdout.contains("5 bytes c>s"), "{}", f.output);
    tl.signal(libc::SIGINT);
    let t = tl.finish(LONG);
    assert!(t.ok(), "{}", t.output);
    assert!(t.stdout.contains("diagnosis:"), "{}", t.output);
}

/// `flows` on `any` keys connections by interface and says which: a column, and `interface` in JSON.
#[test]
fn flows_on_any_show_the_interface() {
    if !ready() {
        return;
    }
    let _w = watchdog(Duration::from_secs(120), "flows on any");
    let (port, h) = sink();
    let p = port.to_string();
    let rt = live(&["capture", "flows", "--live", "any", "tcp", "port", &p]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"hello").unwrap();
    drop(s);
    h.join().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    let header = f
        .stdout
        .lines()
        .find(|l| l.starts_with('#'))
        .unwrap_or_else(|| panic!("no table: {}", f.output));
    assert!(header.contains("interface"), "{}", f.output);
    let row = f
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("no row: {}", f.output));
    assert_eq!(row.split_whitespace().nth(1), Some("lo"), "{}", f.output);
}

/// `any`: each loopback packet once (the outgoing copy dropped in the kernel by `lo`'s index), as tcpdump
/// `-i any` counts them, and the requests of the file tcpdump wrote.
#[test]
fn any_counts_as_tcpdump_any() {
    if !ready() || !common::have("redis-benchmark") || !common::service_up(6379, "redis") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "any");
    let dir = tempfile::tempdir().unwrap();
    let (_relay, port) = relay(6379);
    let p = port.to_string();
    let dump = dir.path().join("any.pcap");
    let mut c = Command::new("tcpdump");
    c.args([
        "--time-stamp-precision=nano",
        "--immediate-mode",
        "-B",
        "65536",
        "-n",
        "-i",
        "any",
        "-w",
    ])
    .arg(&dump)
    .args(["tcp", "port", &p]);
    let mut td = Proc::spawn("tcpdump", c);
    td.wait_line("listening on", LONG).unwrap();
    let rt = live(&[
        "capture", "rpc", "--live", "any", "--json", "--proto", "redis", "tcp", "port", &p,
    ]);
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &p,
            "-n",
            "1000",
            "-c",
            "2",
            "-t",
            "get",
            "-q",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(1500));
    let v = stop_json(rt);
    td.signal(libc::SIGINT);
    assert!(td.finish(LONG).ok());
    let f = run_json(&[
        "capture",
        "rpc",
        dump.to_str().unwrap(),
        "--json",
        "--proto",
        "redis",
    ]);
    assert_eq!(v["capture"]["link_types"][0], "linux-sll2");
    // Every request once (redis-benchmark sent 1000 GETs), no loopback packet twice (a copy would be a
    // retransmission), and nothing tcpdump -i any kept that roundtrip did not (tcpdump -i any itself was seen
    // to miss packets of a burst here, so the comparison is one-sided).
    let gets: u64 = v["report"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == "GET")
        .map(|o| o["last_byte"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(gets, 1000, "{v}");
    assert!(
        v["capture"]["packets_read"].as_u64().unwrap()
            >= f["capture"]["packets_read"].as_u64().unwrap(),
        "{v}\n{f}"
    );
    assert!(
        v["report"]["transactions"].as_u64().unwrap()
            >= f["report"]["transactions"].as_u64().unwrap()
    );
    assert_eq!(v["counts"]["retransmitted_segments"], 0);
}

#[test]
fn threads_two_count_what_one_thread_counts() {
    if !ready() || !common::have("pgbench") || !common::service_up(5432, "postgresql") {
        return;
    }
    let _w = watchdog(Duration::from_secs(600), "threads");
    let dir = tempfile::tempdir().unwrap();
    let (_relay, port) = relay(5432);
    let p = port.to_string();
    let dump = dir.path().join("tcpdump.pcap");
    let td = tcpdump(&dump, port);
    let one = live(&[
        "capture",
        "stats",
        "--live",
        "lo",
        "--json",
        "--threads",
        "1",
        "tcp",
        "port",
        &p,
    ]);
    let two = live(&[
        "capture",
        "stats",
        "--live",
        "lo",
        "--json",
        "--threads",
        "2",
        "tcp",
        "port",
        &p,
    ]);
    // A new connection per transaction: a hundred flow hashes, spread over both rings.
    let script = dir.path().join("q.sql");
    std::fs::write(&script, "SELECT 1;\n").unwrap();
    pgbench(port, &script, &["-n", "-C", "-c", "2", "-t", "50"]);
    std::thread::sleep(Duration::from_millis(1500));
    td.signal(libc::SIGINT);
    let tdf = td.finish(LONG);
    assert!(tdf.ok(), "tcpdump: {}", tdf.output);
    let one = stop_json(one);
    let two = stop_json(two);
    let fs = run_json(&["capture", "stats", dump.to_str().unwrap(), "--json"]);
    assert!(fs["total"]["packets"].as_u64().unwrap() > 1000, "{fs}");
    for v in [&one, &two] {
        assert_eq!(v["total"]["packets"], fs["total"]["packets"], "{v}");
        assert_eq!(v["total"]["bytes"], fs["total"]["bytes"], "{v}");
        assert_eq!(v["capture"]["source"]["kernel_drops"], 0, "{v}");
        assert_eq!(v["capture"]["source"]["stop_reason"], "interrupted");
    }
    assert_eq!(
        one["capture"]["packets_matched"],
        two["capture"]["packets_matched"]
    );
    // Two rings, one per thread.
    assert_eq!(
        two["capture"]["source"]["ring_blocks"].as_u64().unwrap(),
        2 * one["capture"]["source"]["ring_blocks"].as_u64().unwrap()
    );
    let rows = |v: &Value| -> u64 {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["packets"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(rows(&two), rows(&one));
}

/// SIGINT, then the JSON document and the requests the interval lines (on stderr with --json) counted.
fn stop_rpc(p: Proc) -> (Value, u64) {
    p.signal(libc::SIGINT);
    let name = p.name.clone();
    let f = p.finish(LONG);
    assert!(f.ok(), "{name}: {:?}\n{}", f.status, f.output);
    let v: Value =
        serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("{name}: {e}\n{}", f.output));
    let counted = f
        .output
        .lines()
        .filter(|l| l.starts_with("stderr: ") && l.contains("  count "))
        .map(|l| {
            let n = l
                .split("  count ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next();
            n.unwrap().parse::<u64>().unwrap()
        })
        .sum();
    (v, counted)
}

/// `rpc --threads 2` and `flows --threads 2` (two rings of one PACKET_FANOUT group, one thread each, results
/// merged) beside `rpc --threads 1` and tcpdump on the same traffic: the same requests (per operation, with
/// the same latencies), the same packets, the same connections; the merged interval lines count every request.
fn threads_equal_file(upstream: u16, proto: &str, traffic: impl FnOnce(u16)) {
    let _w = watchdog(Duration::from_secs(600), "rpc/flows threads");
    let dir = tempfile::tempdir().unwrap();
    let (_relay, port) = relay(upstream);
    let p = port.to_string();
    let dump = dir.path().join("tcpdump.pcap");
    let td = tcpdump(&dump, port);
    let filter = ["tcp", "port", &p];
    let written1 = dir.path().join("rpc1.pcapng");
    let w1 = written1.to_str().unwrap();
    let start = |cmd: &str, threads: &str| {
        let mut a = vec![
            "capture",
            cmd,
            "--live",
            "lo",
            "--json",
            "--threads",
            threads,
        ];
        if cmd == "rpc" {
            a.extend(["--proto", proto]);
        }
        if cmd == "rpc" && threads == "1" {
            a.extend(["--write", w1]);
        }
        a.extend(filter);
        live(&a)
    };
    let rpc2 = start("rpc", "2");
    let flows2 = start("flows", "2");
    let rpc1 = start("rpc", "1");
    traffic(port);
    std::thread::sleep(Duration::from_millis(1500));
    td.signal(libc::SIGINT);
    let tdf = td.finish(LONG);
    assert!(tdf.ok(), "tcpdump: {}", tdf.output);
    let (rpc2, lines2) = stop_rpc(rpc2);
    let (rpc1, lines1) = stop_rpc(rpc1);
    let flows2 = stop_json(flows2);
    let d = dump.to_str().unwrap();

    let fr = run_json(&["capture", "rpc", d, "--json", "--proto", proto]);
    let n = fr["report"]["transactions"].as_u64().unwrap();
    assert!(n > 50, "{fr}");
    // The one-thread run's stamps are measured against tcpdump's (its --write file). The two-thread run cannot
    // write (one reader only), so its stamps' distance is not known: its median (which one late stamp cannot
    // move) is held to 10 us, its min, p99 and max (which one can) to 0.5 ms for a preempted delivery. A
    // request paired with the wrong response moves the median by a whole request.
    let gap1 = stamp_gap(&dump, &written1);
    for (v, lines, gaps) in [
        (&rpc2, lines2, (gap1.max(10_000), gap1.max(500_000))),
        (&rpc1, lines1, (gap1, gap1)),
    ] {
        assert_eq!(v["report"]["transactions"], n, "{v}");
        assert_eq!(lines, n, "interval lines: {v}");
        assert_same_ops(&op_table(v), &op_table(&fr), gaps.0, gaps.1);
        assert_eq!(v["counts"]["packets"], fr["counts"]["packets"], "{v}");
        assert_eq!(v["counts"]["connections"], fr["counts"]["connections"]);
        assert_eq!(v["capture"]["source"]["stop_reason"], "interrupted");
    }
    assert_eq!(
        rpc2["capture"]["packets_read"],
        rpc1["capture"]["packets_read"]
    );
    // Two rings, one per thread.
    assert_eq!(
        rpc2["capture"]["source"]["ring_blocks"].as_u64().unwrap(),
        2 * rpc1["capture"]["source"]["ring_blocks"].as_u64().unwrap()
    );

    let ff = run_json(&["capture", "flows", d, "--json"]);
    assert!(flow_table(&ff).len() > 1, "{ff}");
    assert_eq!(flow_table(&flows2), flow_table(&ff));
    // One number per connection among both threads.
    let mut ids: Vec<u64> = flows2["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_u64().unwrap())
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), flow_table(&ff).len(), "{flows2}");
}

#[test]
fn threads_two_rpc_and_flows_equal_the_file_pgbench() {
    if !ready() || !common::have("pgbench") || !common::service_up(5432, "postgresql") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("q.sql");
    std::fs::write(&script, "SELECT 1;\nSELECT count(*) FROM pg_class;\n").unwrap();
    threads_equal_file(5432, "pgsql", |port| {
        // A new connection per transaction: many flow hashes, spread over both rings.
        pgbench(port, &script, &["-n", "-C", "-c", "2", "-t", "60"]);
    });
}

#[test]
fn threads_two_rpc_and_flows_equal_the_file_redis() {
    if !ready() || !common::have("redis-benchmark") || !common::service_up(6379, "redis") {
        return;
    }
    threads_equal_file(6379, "redis", |port| {
        redis_benchmark(port, &["-n", "2000", "-c", "8", "-t", "set,get", "-q"]);
    });
}

#[test]
fn threads_out_of_range_is_refused() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for n in ["0".to_string(), (cpus * 4 + 1).to_string()] {
        let out = Command::new(bin())
            .args(["capture", "stats", "--live", "lo", "--threads", &n])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--threads {n}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--threads"), "{err}");
    }
    // timeline follows one connection (one ring); the flight recorder needs one reader.
    for (args, why) in [
        (
            &["capture", "timeline", "--live", "lo", "--threads", "2"][..],
            "one connection",
        ),
        (
            &[
                "capture",
                "rpc",
                "--live",
                "lo",
                "--threads",
                "2",
                "--keep-slow",
                "1s",
                "--keep-dir",
                "/tmp",
            ][..],
            "--keep-slow",
        ),
    ] {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(why), "{err}");
    }
}
