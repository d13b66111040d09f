//! `capture rpc` on TLS: real sessions against the local PostgreSQL (ssl = on), captured with tcpdump on
//! loopback, timed as turns of TLS records without keys and decrypted with the client's key log, checked
//! against tshark decrypting the same capture with the same key log.

mod common;

use common::tcpdump::Tcpdump;

use assert_cmd::Command;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

const PG: u16 = 5432;

fn ready() -> bool {
    common::require_root("tcpdump on loopback")
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
    let dump = Tcpdump::on_lo(&file, &format!("tcp port {port}"));
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
                o["last_byte"]["count"].as_u64().unwrap(),
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
/// per query, plus the start-up, nothing unparseable.
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
    // One turn per query and one for the start-up: the TLS 1.3 Finished and the close_notify alerts are not
    // requests, and the Terminate the client sends before its close_notify expects no answer.
    assert_eq!(*count, n as u64 + 1, "turns for {n} queries");
    assert_eq!(j["report"]["anomalies"], serde_json::json!([]));
    assert_eq!(j["counts"]["tls_connections"], 1);
    Command::cargo_bin("roundtrip")
        .unwrap()
        .args(["capture", "rpc", file.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicates::str::contains("tls turn"))
        .stderr(predicates::str::contains("statements cannot be named"));
}

fn tshark_fields(file: &Path, keylog: &Path, filter: &str, field: &str) -> Vec<String> {
    let o = std::process::Command::new("tshark")
        .arg("-r")
        .arg(file)
        .arg("-o")
        .arg(format!("tls.keylog_file:{}", keylog.display()))
        .args(["-Y", filter, "-T", "fields", "-e", field])
        .output()
        .expect("tshark runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// With the client's key log, TLS 1.3 and TLS 1.2 (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305) sessions
/// are decrypted: every query is named, as many as tshark decrypts from the same capture and key log, and
/// the text tshark decrypts is the text the client sent.
#[test]
fn pgsql_over_tls_decrypted_with_a_key_log_agrees_with_tshark() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let n = 6;
    let variants: [(&str, &[&str], &str); 4] = [
        ("tls13", &[], "TLSv1.3"),
        (
            "aes128",
            &["--tls12", "ECDHE-RSA-AES128-GCM-SHA256"],
            "TLSv1.2",
        ),
        (
            "aes256",
            &["--tls12", "ECDHE-RSA-AES256-GCM-SHA384"],
            "TLSv1.2",
        ),
        (
            "chacha",
            &["--tls12", "ECDHE-RSA-CHACHA20-POLY1305"],
            "TLSv1.2",
        ),
    ];
    for (name, args, version) in variants {
        let keylog = dir.path().join(format!("{name}.keys"));
        let mut a = vec!["--keylog", keylog.to_str().unwrap()];
        a.extend_from_slice(args);
        let (file, printed) = pg_tls_session(dir.path(), name, n, &a);
        assert!(printed[0].starts_with(version), "{name}: {printed:?}");
        let queries = &printed[1..];
        let j = rpc_json(
            &file,
            &["--keylog", keylog.to_str().unwrap(), "--top", "100"],
        );
        assert_eq!(j["counts"]["tls_decrypted"], 1, "{name}");
        // The same requests at the same places: the TCP sequence numbers of the records holding the queries.
        let mut ours: Vec<String> = j["report"]["slowest"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["op"] == "SELECT")
            .map(|w| w["request_seq"].to_string())
            .collect();
        let mut their_seqs = tshark_fields(
            &file,
            &keylog,
            "pgsql.type == \"Simple query\"",
            "tcp.seq_raw",
        );
        ours.sort();
        their_seqs.sort();
        assert_eq!(ours, their_seqs, "{name}: where the queries are");
        let mut o = ops(&j);
        o.sort();
        assert_eq!(
            o,
            vec![
                ("pgsql".into(), "SELECT".into(), n as u64),
                ("pgsql".into(), "STARTUP".into(), 1)
            ],
            "{name}"
        );
        assert_eq!(anomaly(&j, "unparseable bytes"), 0, "{name}");
        let theirs = tshark_fields(
            &file,
            &keylog,
            "pgsql.type == \"Simple query\"",
            "pgsql.query",
        );
        assert_eq!(
            theirs, queries,
            "{name}: tshark decrypts what the client sent"
        );
        assert_eq!(theirs.len() as u64, o[0].2, "{name}");
    }
}

/// A running `openssl s_server -www` answering `accepts` connections; its port.
fn s_server(dir: &Path, accepts: usize, suite_args: &[&str]) -> (Child, u16) {
    let key = dir.join("key.pem");
    let cert = dir.join("cert.pem");
    if !cert.exists() {
        let ok = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "openssl req");
    }
    let mut child = std::process::Command::new("openssl")
        .args(["s_server", "-accept", "127.0.0.1:0", "-www", "-naccept"])
        .arg(accepts.to_string())
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .args(suite_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("ACCEPT") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "s_server ended");
    }
    let port = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    (child, port)
}

/// HTTPS on an unknown port, found by its ClientHello, with curl writing the key log: the TLS 1.3 suites
/// AES-128-GCM and ChaCha20-Poly1305 and TLS 1.2 ECDHE-ECDSA-AES256-GCM decrypt to the GET requests tshark
/// finds; a key log of other sessions leaves them timed as turns; a key file that is not one is an error
/// naming it.
#[test]
fn https_decrypted_with_curls_key_log_agrees_with_tshark() {
    if !ready() || !common::have("curl") || !common::have("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "aes128",
            &["-ciphersuites", "TLS_AES_128_GCM_SHA256"],
            "0x1301",
        ),
        (
            "chacha13",
            &["-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"],
            "0x1303",
        ),
        (
            "ecdsa12",
            &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"],
            "0xc02c",
        ),
    ];
    let mut first_keylog: Option<String> = None;
    for (name, suite, id) in cases {
        let (mut server, port) = s_server(dir.path(), 2, suite);
        let file = dir.path().join(format!("{name}.pcap"));
        let keylog = dir.path().join(format!("{name}.keys"));
        let dump = Tcpdump::on_lo(&file, &format!("tcp port {port}"));
        let url = format!("https://127.0.0.1:{port}/");
        let ok = std::process::Command::new("curl")
            .env("SSLKEYLOGFILE", &keylog)
            .args([
                "-sk",
                "--http1.1",
                "-o",
                "/dev/null",
                "-o",
                "/dev/null",
                &url,
                &url,
            ])
            .status()
            .unwrap();
        assert!(ok.success(), "{name}: curl");
        dump.stop();
        let _ = server.kill();
        let _ = server.wait();
        let suites = tshark_fields(
            &file,
            &keylog,
            "tls.handshake.type == 2",
            "tls.handshake.ciphersuite",
        );
        assert_eq!(suites, vec![id; 2], "{name}");
        let gets = tshark_fields(&file, &keylog, "http.request", "http.request.method");
        let j = rpc_json(&file, &["--keylog", keylog.to_str().unwrap()]);
        assert_eq!(j["counts"]["tls_decrypted"], 2, "{name}");
        assert_eq!(
            ops(&j),
            vec![("http".into(), "GET".into(), gets.len() as u64)],
            "{name}"
        );
        assert_eq!(gets, vec!["GET"; 2], "{name}");
        // Keys of other sessions: turn timing, said so.
        if let Some(other) = first_keylog.as_deref() {
            let j = rpc_json(&file, &["--keylog", other]);
            assert_eq!(j["counts"]["tls_no_key"], 2, "{name}");
            assert!(
                ops(&j)
                    .iter()
                    .all(|(p, op, _)| p == "tls" && op == "tls turn")
            );
            Command::cargo_bin("roundtrip")
                .unwrap()
                .args(["capture", "rpc", file.to_str().unwrap(), "--keylog", other])
                .assert()
                .success()
                .stderr(predicates::str::contains("without a working key"));
        }
        first_keylog.get_or_insert(keylog.to_str().unwrap().to_string());
    }
    let bad = dir.path().join("bad.keys");
    std::fs::write(&bad, "CLIENT_RANDOM zz\n").unwrap();
    let o = Command::cargo_bin("roundtrip")
        .unwrap()
        .args([
            "capture",
            "rpc",
            "/dev/null",
            "--keylog",
            bad.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.keys:1: not a TLS key log line"), "{err}");
}

/// The case the issue reports: `psql -h 127.0.0.1` (TLS, as the server has ssl = on) with seven statements.
/// Other tests may talk to the same server meanwhile, so the session is found by its connection: the one
/// timed as exactly seven statements plus the start-up.
#[test]
fn psql_session_is_timed_as_turns() {
    if !ready() || !common::have("psql") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("psql.pcap");
    let dump = Tcpdump::on_lo(&file, &format!("tcp port {PG}"));
    let mut cmd = std::process::Command::new("psql");
    cmd.args([
        "-X",
        "-q",
        "-h",
        "127.0.0.1",
        "-U",
        "postgres",
        "-d",
        "test",
    ]);
    for i in 1..=7 {
        cmd.args(["-c", &format!("select {i}")]);
    }
    let o = cmd
        .env("PGSSLMODE", "require")
        .env("PGCONNECT_TIMEOUT", "30")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    dump.stop();
    let j = rpc_json(&file, &["--by-conn"]);
    assert!(
        ops(&j)
            .iter()
            .any(|(p, op, _)| p == "pgsql" && op == "tls turn"),
        "{:?}",
        ops(&j)
    );
    let conns = j["report"]["connections"].as_array().unwrap();
    assert!(
        conns.iter().any(|c| c["count"] == 8),
        "no connection with 8 turns: {conns:?}"
    );
    Command::cargo_bin("roundtrip")
        .unwrap()
        .args(["capture", "rpc", file.to_str().unwrap()])
        .assert()
        .success();
}
