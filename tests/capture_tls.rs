//! `capture rpc` on TLS: real sessions against the local PostgreSQL (ssl = on), captured with tcpdump on
//! loopback, timed as turns of TLS records without keys and decrypted with the client's key log, checked
//! against tshark decrypting the same capture with the same key log.

mod common;

use assert_cmd::Command;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const PG: u16 = 5432;

/// A running tcpdump; stopped with SIGINT (so it flushes) by `stop` or on drop.
struct Tcpdump(Option<Child>);

impl Tcpdump {
    fn start(file: &Path, filter: &str) -> Tcpdump {
        let mut child = std::process::Command::new("tcpdump")
            .args(["-i", "lo", "-U", "-w", file.to_str().unwrap(), filter])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump starts");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening on") {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "tcpdump ended before listening"
            );
        }
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut err, &mut std::io::sink());
        });
        Tcpdump(Some(child))
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            // libpcap hands packets over in blocks retired after its 1 s timeout: wait for the last one.
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
        self.stop();
    }
}

fn ready() -> bool {
    common::is_root()
        && common::have("tcpdump")
        && common::have("tshark")
        && common::have("python3")
        && common::service_up(PG, "PostgreSQL")
}

/// One PostgreSQL session over TLS with `n` queries, captured on its own source port. Returns the capture
/// and what the client printed (TLS version and cipher, then the queries).
fn pg_tls_session(
    dir: &Path,
    name: &str,
    n: usize,
    client_args: &[&str],
) -> (PathBuf, Vec<String>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pg_tls_client.py");
    let mut client = std::process::Command::new("python3")
        .arg(script)
        .arg(PG.to_string())
        .arg(n.to_string())
        .args(client_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut port = String::new();
    out.read_line(&mut port).unwrap();
    let port: u16 = port.trim().parse().expect("the client prints its port");
    let file = dir.join(format!("{name}.pcap"));
    let mut dump = Tcpdump::start(&file, &format!("tcp port {port}"));
    client.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(client.wait().unwrap().success(), "the TLS client failed");
    dump.stop();
    (file, rest.lines().map(str::to_string).collect())
}

fn rpc_json(file: &Path, extra: &[&str]) -> Value {
    let o = Command::cargo_bin("roundtrip")
        .unwrap()
        .args(["capture", "rpc", file.to_str().unwrap(), "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "capture rpc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// (proto, op) -> count.
fn ops(j: &Value) -> Vec<(String, String, u64)> {
    j["report"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["proto"].as_str().unwrap().to_string(),
                o["op"].as_str().unwrap().to_string(),
                o["latency"]["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn anomaly(j: &Value, kind: &str) -> u64 {
    j["report"]["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == kind)
        .map(|a| a["count"].as_u64().unwrap())
        .sum()
}

/// Without keys, a TLS PostgreSQL session (SSLRequest, then TLS) is timed as turns of TLS records: one turn
/// per query, plus the start-up (and the TLS 1.3 Finished answered by session tickets), nothing unparseable.
#[test]
fn pgsql_over_tls_is_timed_as_turns() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let n = 9;
    let (file, printed) = pg_tls_session(dir.path(), "turns", n, &[]);
    assert_eq!(printed.len(), n + 1, "{printed:?}");
    let j = rpc_json(&file, &[]);
    let o = ops(&j);
    assert_eq!(o.len(), 1, "{o:?}");
    let (proto, op, count) = &o[0];
    assert_eq!((proto.as_str(), op.as_str()), ("pgsql", "tls turn"));
    assert!(
        (n as u64 + 1..=n as u64 + 2).contains(count),
        "{count} turns for {n} queries"
    );
    assert_eq!(anomaly(&j, "unparseable bytes"), 0);
    assert_eq!(j["counts"]["tls_connections"], 1);
    Command::cargo_bin("roundtrip")
        .unwrap()
        .args(["capture", "rpc", file.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicates::str::contains("tls turn"))
        .stderr(predicates::str::contains("statements cannot be named"));
}
