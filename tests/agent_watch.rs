//! `roundtrip agent --watch`: the real agent watching `lo` while real clients (pgbench, redis-benchmark, the
//! mariadb and psql clients) talk to the real servers through a `roundtrip proxy` of the test's own (so the
//! agent's kernel filter sees only this test's connections, not those of other tests on the shared servers),
//! its `/metrics`, `/api/results` and `/` read over HTTP. Counts are compared with what the clients report;
//! nothing asserts a duration.

mod common;

use common::procs::{Kids, Proc, bin};
use common::prometheus::{http_get, wait_for};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

fn ready() -> bool {
    common::require_root("AF_PACKET capture on lo")
}

/// The agent watching `lo` for TCP port `port`, with `extra` arguments; its pages' address.
fn agent(port: u16, extra: &[&str]) -> (Proc, SocketAddr) {
    agent_filtered(&format!("tcp port {port}"), extra)
}

/// The agent watching `lo` with the kernel filter `filter`, with `extra` arguments; its pages' address.
fn agent_filtered(filter: &str, extra: &[&str]) -> (Proc, SocketAddr) {
    let filter = filter.to_string();
    let mut args = vec![
        "agent",
        "--no-responder",
        "--metrics",
        "127.0.0.1:0",
        "--watch",
        "lo",
        "--watch-filter",
        &filter,
    ];
    args.extend_from_slice(extra);
    let mut cmd = Command::new(bin());
    cmd.args(&args);
    let mut p = Proc::spawn("agent", cmd);
    let line = p.wait_line("metrics on http://", WAIT).unwrap();
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line}"));
    p.wait_line("watching lo", WAIT).unwrap();
    // The capture is open once the watcher says it is up.
    wait_for("the watcher is up", WAIT, |last| {
        let m = metrics(addr);
        *last = m.lines().filter(|l| l.contains("watch_up")).collect();
        m.contains("roundtrip_watch_up{source=")
            .then_some(())
            .filter(|_| {
                m.lines()
                    .any(|l| l.starts_with("roundtrip_watch_up{") && l.ends_with(" 1"))
            })
    })
    .unwrap();
    (p, addr)
}

fn metrics(addr: SocketAddr) -> String {
    http_get(None, addr, "/metrics", WAIT).unwrap().1
}

/// The value of the series `name{labels...}` whose labels include every one of `want`.
fn value(m: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for l in m.lines() {
        let Some(rest) = l.strip_prefix(name) else {
            continue;
        };
        let Some(rest) = rest.strip_prefix('{') else {
            continue;
        };
        let Some((labels, v)) = rest.rsplit_once("} ") else {
            continue;
        };
        let map = parse_labels(labels);
        if want
            .iter()
            .all(|(k, v)| map.get(*k).map(String::as_str) == Some(*v))
        {
            *total.get_or_insert(0.0) += v.parse::<f64>().unwrap();
        }
    }
    total
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for part in s.split("\",") {
        if let Some((k, v)) = part.split_once("=\"") {
            m.insert(k.to_string(), v.trim_end_matches('"').to_string());
        }
    }
    m
}

/// Requests counted for `op` (every outcome, every server).
fn requests(m: &str, proto: &str, op: &str) -> u64 {
    value(
        m,
        "roundtrip_requests_total",
        &[("proto", proto), ("op", op)],
    )
    .unwrap_or(0.0) as u64
}

/// Waits until `op`'s count reaches `n` (the agent publishes every few hundred ms) and returns the scrape.
fn wait_count(addr: SocketAddr, proto: &str, op: &str, n: u64) -> String {
    wait_for(&format!("{n} {proto} {op} requests"), WAIT, |last| {
        let m = metrics(addr);
        let got = requests(&m, proto, op);
        *last = format!("{got}");
        (got >= n).then_some(m)
    })
    .unwrap()
}

fn pg(port: u16) -> Command {
    let mut c = Command::new("pgbench");
    c.env("PGSSLMODE", "disable").args([
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "postgres",
    ]);
    c
}

fn run_ok(mut c: Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn processed(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|r| r.split('/').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no processed count in {out}"))
}

/// The bucket index of `seconds` in the agent's buckets (25 us doubling).
fn bucket(seconds: f64) -> i64 {
    let mut b = 25e-6;
    let mut k = 0;
    while b < seconds && k < 20 {
        b *= 2.0;
        k += 1;
    }
    k
}

/// The quantile `q` of a histogram series, as the index of the bucket it falls in.
fn hist_bucket(m: &str, name: &str, want: &[(&str, &str)], q: f64) -> i64 {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for l in m.lines() {
        let Some(rest) = l.strip_prefix(&format!("{name}_bucket{{")) else {
            continue;
        };
        let Some((labels, v)) = rest.rsplit_once("} ") else {
            continue;
        };
        let map = parse_labels(labels);
        if !want
            .iter()
            .all(|(k, v)| map.get(*k).map(String::as_str) == Some(*v))
        {
            continue;
        }
        let le = map["le"].as_str();
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        buckets.push((le, v.parse().unwrap()));
    }
    let total = buckets.last().unwrap().1;
    let (le, _) = buckets.iter().find(|(_, c)| *c >= q * total).unwrap();
    bucket(*le)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

#[test]
fn pgbench_counts_latency_and_no_query_text() {
    if !ready() || !common::have("pgbench") || !common::service_up(5432, "postgresql") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(400), "agent_watch pgbench");
    let mut kids = Kids::default();
    let port = kids.proxy(5432, &[]);
    let (a, addr) = agent(port, &[]);
    // Tables of our own, in a database of our own.
    let db = format!("watch_pgb_{}", std::process::id());
    let _ = Command::new("dropdb")
        .args(["-h", "127.0.0.1", "-U", "postgres", "--if-exists", &db])
        .status();
    run_ok({
        let mut c = Command::new("createdb");
        c.args(["-h", "127.0.0.1", "-U", "postgres", &db]);
        c
    });
    struct Drop_(String);
    impl Drop for Drop_ {
        fn drop(&mut self) {
            let _ = Command::new("dropdb")
                .args(["-h", "127.0.0.1", "-U", "postgres", "--if-exists", &self.0])
                .status();
        }
    }
    let _cleanup = Drop_(db.clone());
    run_ok({
        let mut c = pg(5432);
        c.args(["-i", "-q", "-s", "1", &db]);
        c
    });
    let before = metrics(addr);
    assert_eq!(requests(&before, "pgsql", "SELECT"), 0, "{before}");

    // -S with --log: one SELECT per transaction, pgbench's own latency per transaction.
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("pgb");
    let out = run_ok({
        let mut c = pg(port);
        c.args(["-n", "-S", "-c", "2", "-t", "1500", "--log", "--log-prefix"])
            .arg(&prefix)
            .arg(&db);
        c
    });
    let n = processed(&out);
    assert_eq!(n, 3000);
    // pgbench also asks two questions of its own at start, both SELECTs: the scale (count(*) of
    // pgbench_branches) and whether pgbench_accounts is partitioned.
    let m = wait_count(addr, "pgsql", "SELECT", n + 2);
    std::thread::sleep(Duration::from_secs(1));
    let m2 = metrics(addr);
    assert_eq!(requests(&m2, "pgsql", "SELECT"), n + 2, "{m}");
    // Latency quantiles within one bucket of pgbench's per-transaction log.
    let mut lat = Vec::new();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        for l in text.lines() {
            let us: f64 = l.split_whitespace().nth(2).unwrap().parse().unwrap();
            lat.push(us * 1e-6);
        }
    }
    assert_eq!(lat.len() as u64, n);
    let want = [("proto", "pgsql"), ("op", "SELECT")];
    for q in [0.5, 0.99] {
        let theirs = bucket(quantile(&mut lat, q));
        let ours = hist_bucket(&m2, "roundtrip_request_duration_seconds", &want, q);
        assert!(
            (theirs - ours).abs() <= 1,
            "p{}: pgbench's log in bucket {theirs}, the agent's histogram in bucket {ours}",
            q * 100.0
        );
    }

    // TPC-B: BEGIN, 3 UPDATE, SELECT, INSERT, END (counted as COMMIT) per transaction.
    let out = run_ok({
        let mut c = pg(port);
        c.args(["-n", "-c", "2", "-t", "200", &db]);
        c
    });
    let t = processed(&out);
    wait_count(addr, "pgsql", "COMMIT", t);
    std::thread::sleep(Duration::from_secs(1));
    let m = metrics(addr);
    assert_eq!(requests(&m, "pgsql", "COMMIT"), t, "{m}");
    assert_eq!(requests(&m, "pgsql", "BEGIN"), t);
    assert_eq!(requests(&m, "pgsql", "UPDATE"), 3 * t);
    assert_eq!(requests(&m, "pgsql", "INSERT"), t);
    assert_eq!(requests(&m, "pgsql", "SELECT"), n + 2 + t + 2);

    // A query carrying a marker: counted, its text nowhere.
    let marker = format!("WATCHMARKER{}x", std::process::id());
    run_ok({
        let mut c = Command::new("psql");
        c.env("PGSSLMODE", "disable")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
                "-d",
                &db,
                "-c",
            ])
            .arg(format!("SELECT '{marker}' AS secret_password_{marker}"));
        c
    });
    wait_count(addr, "pgsql", "SELECT", n + t + 5);
    let api = http_get(None, addr, "/api/results", WAIT).unwrap().1;
    let html = http_get(None, addr, "/", WAIT).unwrap().1;
    let m = metrics(addr);
    for (what, text) in [
        ("metrics", &m),
        ("api", &api),
        ("html", &html),
        ("log", &a.output()),
    ] {
        assert!(!text.contains(&marker), "{what} shows the query text");
    }
    // The per-server table.
    let v: Value = serde_json::from_str(&api).unwrap();
    let server = format!("127.0.0.1:{port}");
    let row = v["watch"]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["server"] == server.as_str())
        .unwrap_or_else(|| panic!("no row for {server}: {v}"));
    assert!(row["requests"].as_u64().unwrap() >= n, "{row}");
    assert!(row["network_rtt_s"].as_f64().is_some(), "{row}");
    assert!(html.contains("Watched servers") && html.contains(&server));
    // Every connection began after the agent: oriented by their handshakes.
    assert_eq!(
        value(
            &m,
            "roundtrip_watch_connections_total",
            &[("oriented_by", "port")]
        ),
        Some(0.0),
        "{m}"
    );
    assert!(
        value(
            &m,
            "roundtrip_network_rtt_seconds_count",
            &[("server", &server)]
        )
        .unwrap()
            >= 4.0
    );
    a.signal(libc::SIGTERM);
    let f = a.finish(WAIT);
    assert!(f.ok(), "{}", f.output);
    assert!(!f.output.contains(&marker));
}

#[test]
fn redis_benchmark_counts_and_the_cap_folds() {
    if !ready() || !common::have("redis-benchmark") || !common::service_up(6379, "redis") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(300), "agent_watch redis");
    let mut kids = Kids::default();
    let port = kids.proxy(6379, &[]);
    let (a, addr) = agent(port, &[]);
    run_ok({
        let mut c = Command::new("redis-benchmark");
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-n",
            "5000",
            "-c",
            "2",
            "-t",
            "get,set",
            "-q",
        ]);
        c
    });
    wait_count(addr, "redis", "GET", 5000);
    std::thread::sleep(Duration::from_secs(1));
    let m = metrics(addr);
    assert_eq!(requests(&m, "redis", "GET"), 5000, "{m}");
    assert_eq!(requests(&m, "redis", "SET"), 5000, "{m}");
    assert_eq!(
        value(&m, "roundtrip_watch_folded_requests_total", &[]),
        Some(0.0)
    );
    a.signal(libc::SIGTERM);
    assert!(a.finish(WAIT).ok());

    // Room for one (server, proto, op) only: the first op seen (CONFIG, redis-benchmark's first question) keeps
    // it, every later one is folded into server="other", op="other".
    // Budget = --max-series less 11 health series; one op (83) + its server (81) at the default --buckets 4.
    let (a, addr) = agent(port, &["--max-series", "175"]);
    run_ok({
        let mut c = Command::new("redis-benchmark");
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-n",
            "2000",
            "-c",
            "1",
            "-t",
            "set,get",
            "-q",
        ]);
        c
    });
    let m = wait_for("folded requests", WAIT, |last| {
        let m = metrics(addr);
        let f = value(&m, "roundtrip_watch_folded_requests_total", &[]).unwrap_or(0.0);
        *last = format!("{f}");
        (f >= 4000.0).then_some(m)
    })
    .unwrap();
    let other = value(
        &m,
        "roundtrip_requests_total",
        &[("server", "other"), ("op", "other")],
    )
    .unwrap();
    let kept: f64 = value(
        &m,
        "roundtrip_requests_total",
        &[("server", &format!("127.0.0.1:{port}"))],
    )
    .unwrap();
    let folded = value(&m, "roundtrip_watch_folded_requests_total", &[]).unwrap();
    assert_eq!(other, folded, "{m}");
    assert_eq!(folded, 4000.0, "{m}");
    assert_eq!(kept, 2.0, "{m}");
    assert!(value(&m, "roundtrip_watch_series", &[]).unwrap() <= 164.0 + 83.0 + 81.0);
    a.signal(libc::SIGTERM);
    assert!(a.finish(WAIT).ok());
}

#[test]
fn mariadb_client_queries_are_counted() {
    if !ready() || !common::have("mariadb") || !common::service_up(3306, "mariadb") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(300), "agent_watch mariadb");
    let mut kids = Kids::default();
    let port = kids.proxy(3306, &[]);
    let (a, addr) = agent(port, &[]);
    let sql: String = (0..100).map(|i| format!("SELECT {i};\nDO 1;\n")).collect();
    let mut c = Command::new("mariadb");
    c.args([
        "-h",
        "127.0.0.1",
        "-P",
        &port.to_string(),
        "-u",
        "root",
        "--batch",
        "--skip-ssl",
        "test",
        "-e",
        &sql,
    ]);
    run_ok(c);
    let m = wait_count(addr, "mysql", "DO", 100);
    std::thread::sleep(Duration::from_secs(1));
    let m2 = metrics(addr);
    assert_eq!(requests(&m2, "mysql", "DO"), 100, "{m}");
    // The client asks its own version comment once: SELECT @@version_comment.
    let s = requests(&m2, "mysql", "SELECT");
    assert!((100..=101).contains(&s), "{m2}");
    a.signal(libc::SIGTERM);
    assert!(a.finish(WAIT).ok());
}

#[test]
fn an_unknown_interface_is_refused_before_any_io() {
    let out = Command::new(bin())
        .args([
            "agent",
            "--no-responder",
            "--metrics",
            "127.0.0.1:0",
            "--watch",
            "nosuchif0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nosuchif0") && err.lines().count() == 1,
        "{err}"
    );
    let out = Command::new(bin())
        .args([
            "agent",
            "--no-responder",
            "--watch",
            "lo",
            "--watch-filter",
            "tcp port",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// The verdict of the server row for `server` in `/api/results`, once it has at least `n` requests.
fn verdict(ns: Option<&str>, addr: SocketAddr, server: &str, n: u64) -> Value {
    wait_for(&format!("a row for {server}"), WAIT, |last| {
        let api = http_get(ns, addr, "/api/results", WAIT).ok()?.1;
        let v: Value = serde_json::from_str(&api).ok()?;
        let row = v["watch"]["servers"]
            .as_array()?
            .iter()
            .find(|r| r["server"] == server)?
            .clone();
        *last = row.to_string();
        (row["requests"].as_u64()? >= n).then_some(row)
    })
    .unwrap()
}

#[test]
fn pg_sleep_without_delay_is_the_server() {
    if !ready() || !common::have("pgbench") || !common::service_up(5432, "postgresql") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(300), "agent_watch pg_sleep");
    let mut kids = Kids::default();
    let port = kids.proxy(5432, &[]);
    let (a, addr) = agent(port, &[]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sleep.sql");
    std::fs::write(&script, "SELECT pg_sleep(0.02);\n").unwrap();
    run_ok({
        let mut c = pg(port);
        c.args(["-n", "-c", "1", "-t", "30", "-f"])
            .arg(&script)
            .arg("test");
        c
    });
    let row = verdict(None, addr, &format!("127.0.0.1:{port}"), 30);
    assert_eq!(row["verdict"], "server", "{row}");
    assert!(row["server_share"].as_f64().unwrap() > 0.5, "{row}");
    a.signal(libc::SIGTERM);
    assert!(a.finish(WAIT).ok());
}

#[test]
fn ten_ms_of_network_through_the_packet_bridge_is_the_network() {
    use common::bridge_ns::{BridgeNet, Side};
    if !ready() || !common::have("redis-server") || !common::have("redis-benchmark") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(300), "agent_watch bridge");
    let mut net = BridgeNet::new();
    net.start_bridge(&["--rtt", "10ms"]);
    let sip = net.server_ip.to_string();
    let mut redis = net.spawn(
        Side::Server,
        "redis-server",
        "redis-server",
        &[
            "--port",
            "6390",
            "--bind",
            &sip,
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ],
    );
    redis
        .wait_line("Ready to accept connections", WAIT)
        .unwrap();
    // The agent at the client, watching its interface.
    let mut agent = net.spawn(
        Side::Client,
        "agent",
        &bin(),
        &[
            "agent",
            "--no-responder",
            "--metrics",
            "127.0.0.1:0",
            "--watch",
            "eth0",
            "--watch-filter",
            "tcp port 6390",
        ],
    );
    let line = agent.wait_line("metrics on http://", WAIT).unwrap();
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap();
    agent.wait_line("watching eth0", WAIT).unwrap();
    let ns = net.netns(Side::Client).to_string();
    wait_for("the watcher is up", WAIT, |_| {
        let m = http_get(Some(&ns), addr, "/metrics", WAIT).ok()?.1;
        m.lines()
            .any(|l| l.starts_with("roundtrip_watch_up{") && l.ends_with(" 1"))
            .then_some(())
    })
    .unwrap();
    let f = net.run(
        Side::Client,
        "redis-benchmark",
        "redis-benchmark",
        &[
            "-h", &sip, "-p", "6390", "-n", "200", "-c", "2", "-t", "get", "-q",
        ],
        WAIT,
    );
    assert!(f.ok(), "{}", f.output);
    let row = verdict(Some(&ns), addr, &format!("{sip}:6390"), 200);
    assert_eq!(row["verdict"], "network", "{row}");
    let rtt = row["network_rtt_s"].as_f64().unwrap();
    assert!(
        rtt > 0.005,
        "the bridge's 10 ms is in the handshake RTT: {row}"
    );
    agent.signal(libc::SIGTERM);
    assert!(agent.finish(WAIT).ok());
    drop(redis);
}

/// A Redis connection opened before the agent watches (a pooled connection: no handshake seen) still gives
/// network RTT samples: the server's pure ACKs of its large requests. Only counts are asserted.
#[test]
fn a_connection_open_before_watching_gets_network_rtt() {
    use std::io::{Read, Write};
    if !ready() || !common::service_up(6379, "redis") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(300), "agent_watch pooled");
    let mut s = std::net::TcpStream::connect("127.0.0.1:6379").unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mine = s.local_addr().unwrap().port();
    // One exchange before watching: the connection is open and used, as a pool's would be.
    let mut buf = vec![0u8; 4096];
    s.write_all(b"PING\r\n").unwrap();
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    // Only this connection: other tests' handshakes to the shared Redis must not give samples here.
    let (_agent, addr) = agent_filtered(&format!("tcp port 6379 and tcp port {mine}"), &[]);
    let key = format!("roundtrip_watch2_pooled_{mine}");
    // A request spanning many segments: the receiving kernel acknowledges every second full segment at once,
    // before Redis has read the request.
    let val = vec![b'x'; 1 << 20];
    let mut req = format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n",
        key.len(),
        val.len()
    )
    .into_bytes();
    req.extend_from_slice(&val);
    req.extend_from_slice(b"\r\n");
    let mut sets = 0;
    let m = wait_for(
        "network RTT samples of the pooled connection",
        WAIT,
        |last| {
            s.write_all(&req).unwrap();
            let n = s.read(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"+OK\r\n");
            sets += 1;
            let m = metrics(addr);
            let rtt = value(
                &m,
                "roundtrip_network_rtt_seconds_count",
                &[("server", "127.0.0.1:6379")],
            )
            .unwrap_or(0.0);
            *last = format!("{sets} SETs, {rtt} RTT samples");
            (rtt > 0.0 && requests(&m, "redis", "SET") >= 1).then_some(m)
        },
    )
    .unwrap();
    // Seen without its handshake: oriented by its first payload (a RESP command array), none by handshake.
    assert_eq!(
        value(
            &m,
            "roundtrip_watch_connections_total",
            &[("oriented_by", "protocol")]
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            "roundtrip_watch_connections_total",
            &[("oriented_by", "handshake")]
        )
        .unwrap_or(0.0),
        0.0,
        "{m}"
    );
    s.write_all(format!("*2\r\n$3\r\nDEL\r\n${}\r\n{key}\r\n", key.len()).as_bytes())
        .unwrap();
    let _ = s.read(&mut buf).unwrap();
}

/// A connection open before watching, to a Redis (behind a proxy) on a port no rule knows, from a client on a
/// LOWER port: the port rule would take the client for the server. The protocol's own direction (a RESP command
/// array from the client, a reply from the server) orients it: the requests are counted against the real
/// server, and `oriented_by="protocol"` says how. The two ports are taken from the OS together, the higher one
/// for the server.
#[test]
fn a_connection_open_before_watching_is_oriented_by_its_protocol() {
    use std::io::{Read, Write};
    if !ready() || !common::service_up(6379, "redis") {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(300), "agent_watch protocol orientation");
    let (lo, hi) = {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (x, y) = (
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        );
        (x.min(y), x.max(y))
    };
    assert!(!roundtrip::capture::rpc::detect::is_service_port(hi));
    let mut kids = Kids::default();
    let port = kids.proxy_at(hi, 6379, &[]);
    assert_eq!(port, hi);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_reuse_address(true).unwrap();
    let client: SocketAddr = ([127, 0, 0, 1], lo).into();
    sock.bind(&client.into()).unwrap();
    sock.connect(&SocketAddr::from(([127, 0, 0, 1], hi)).into())
        .unwrap();
    let mut s: std::net::TcpStream = sock.into();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = vec![0u8; 4096];
    s.write_all(b"PING\r\n").unwrap();
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
    // Watching starts now: the handshake is in the past.
    let (_agent, addr) = agent(hi, &[]);
    let server = format!("127.0.0.1:{hi}");
    let mut gets = 0;
    let m = wait_for("the GETs of the open connection", WAIT, |last| {
        s.write_all(b"*2\r\n$3\r\nGET\r\n$20\r\nroundtrip_watch2_nil\r\n")
            .unwrap();
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"$-1\r\n");
        gets += 1;
        let m = metrics(addr);
        let got = value(
            &m,
            "roundtrip_requests_total",
            &[("server", &server), ("proto", "redis"), ("op", "GET")],
        )
        .unwrap_or(0.0);
        *last = format!("{gets} GETs, {got} counted");
        (got >= 1.0).then_some(m)
    })
    .unwrap();
    let how = |k: &str| {
        value(
            &m,
            "roundtrip_watch_connections_total",
            &[("oriented_by", k)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(
        (how("handshake"), how("protocol"), how("port")),
        (0.0, 1.0, 0.0),
        "{m}"
    );
    // Nothing is counted against the client's port as if it served.
    assert!(!m.contains(&format!("server=\"127.0.0.1:{lo}\"")), "{m}");
    let api = http_get(None, addr, "/api/results", WAIT).unwrap().1;
    let v: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(
        v["watch"]["interfaces"][0]["oriented_by_protocol"],
        serde_json::json!(1),
        "{api}"
    );
}

/// A real Prometheus scrapes the watching agent, and `histogram_quantile` over the request durations of one
/// server answers: a finite, positive median for that server. Nothing asserts its size.
#[test]
fn prometheus_scrapes_the_watcher_and_histogram_quantile_works() {
    use std::io::{Read, Write};
    if !ready() || !common::service_up(6379, "redis") || !common::prometheus::available() {
        return;
    }
    let _w = common::procs::watchdog(Duration::from_secs(400), "agent_watch prometheus");
    let mut kids = Kids::default();
    let port = kids.proxy(6379, &[]);
    let (_agent, addr) = agent(port, &[]);
    let prom = common::prometheus::Prometheus::start(
        None,
        std::net::Ipv4Addr::LOCALHOST,
        "watch",
        &[addr.to_string()],
    );
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = vec![0u8; 4096];
    let server = format!("127.0.0.1:{port}");
    let q = format!(
        "histogram_quantile(0.5, sum by (le, server) \
         (rate(roundtrip_request_duration_seconds_bucket{{server=\"{server}\"}}[30s])))"
    );
    let mut gets = 0u64;
    let got = wait_for(
        "histogram_quantile of the watched server",
        Duration::from_secs(180),
        |last| {
            // Requests between the polls, so that the rate over the window is not zero.
            for _ in 0..50 {
                s.write_all(b"*2\r\n$3\r\nGET\r\n$20\r\nroundtrip_watch2_nil\r\n")
                    .unwrap();
                let n = s.read(&mut buf).unwrap();
                assert_eq!(&buf[..n], b"$-1\r\n");
                gets += 1;
            }
            let v = prom.vector(&q);
            *last = format!("{gets} GETs, {v:?}");
            let v = v.ok()?;
            let x = v.iter().find(|x| x.labels.get("server") == Some(&server))?;
            (x.value.is_finite() && x.value > 0.0).then_some(x.value)
        },
    )
    .unwrap();
    assert!(got.is_finite() && got > 0.0);
    // The samples came from the agent's scrape of this test's server.
    let up = prom.scalar(&format!("up{{instance=\"{addr}\"}}")).unwrap();
    assert_eq!(up, Some(1.0), "{}", prom.output());
}
