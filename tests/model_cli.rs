//! `roundtrip model` and `roundtrip proxy` on the command line: the seeds' numbers, and bad input refused.

mod common;

use common::procs::{MODEL_TRANSFER, PROXY_TO_NOWHERE};

use assert_cmd::Command;
use predicates::prelude::*;
use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::Duration;

fn rt() -> Command {
    Command::cargo_bin("roundtrip").unwrap()
}

#[test]
fn tps_reproduces_seed_000() {
    rt().args([
        "model",
        "tps",
        "--tps",
        "2356,1567,854",
        "--rtt",
        "0.021ms,0.161ms,0.685ms",
        "--at",
        "40ms",
    ])
    .assert()
    .success()
    .stdout(predicate::str::contains("49.476ms"))
    .stdout(predicate::str::contains("0.40ms"))
    .stdout(predicate::str::contains("0.48ms"))
    .stdout(predicate::str::contains("0.49ms"))
    .stdout(predicate::str::contains("formula:"));
    let out = rt()
        .args([
            "model",
            "tps",
            "--tps",
            "2356",
            "--rtt",
            "0.021ms",
            "--at",
            "0.021ms,40ms",
            "--json",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "model-tps");
    let processing = v["result"]["measured"][0]["processing_ns"]
        .as_u64()
        .unwrap();
    // (1000 - 0.021 x 2356) / 2356 ms = 0.4034482... ms
    assert_eq!(processing, 403_448);
    let same = v["result"]["predicted"][0]["predicted_tps"]
        .as_f64()
        .unwrap();
    assert!((same - 2356.0).abs() < 0.01);
}

#[test]
fn window_bdp_mathis_transfer() {
    rt().args(["model", "window", "--window", "64KiB", "--rtt", "40ms"])
        .assert()
        .success()
        .stdout(predicate::str::contains("13.11 Mbit/s"));
    rt().args(["model", "bdp", "--bandwidth", "1gbit", "--rtt", "40ms"])
        .assert()
        .success()
        .stdout(predicate::str::contains("5000000 bytes"));
    rt().args([
        "model", "mathis", "--mss", "1460", "--rtt", "40ms", "--loss", "1e-4",
    ])
    .assert()
    .success()
    .stdout(predicate::str::contains("35.76 Mbit/s"));
    // Seed 004: an 8 KiB block is 6 frames of at most 1448 bytes; one jumbo frame.
    let out = rt()
        .args(MODEL_TRANSFER)
        .args(["--mtu", "1500,9000", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"][0]["frames"], 6);
    assert_eq!(v["result"][0]["mss_bytes"], 1448);
    assert_eq!(v["result"][1]["frames"], 1);
    rt().args(["model", "tps", "--help"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("Source:")
                .and(predicate::str::contains("Operations Research")),
        );
}

#[test]
fn from_result_takes_the_median_rtt() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ping.json");
    std::fs::write(
        &p,
        br#"{"format":"roundtrip","format_version":1,"kind":"ping","summary":{"rtt":{"count":10,"p50_ns":40000000}}}"#,
    )
    .unwrap();
    rt().args(["model", "window", "--window", "64KiB", "--from"])
        .arg(&p)
        .assert()
        .success()
        .stdout(predicate::str::contains("13.11 Mbit/s"));
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"\x00\xffnot json").unwrap();
    rt().args(["model", "bdp", "--bandwidth", "1gbit", "--from"])
        .arg(&bad)
        .assert()
        .failure()
        .stderr(predicate::str::contains("bad.json"));
}

#[test]
fn bad_units_and_impossible_values_are_refused() {
    for args in [
        &["model", "window", "--window", "64KiB", "--rtt", "40"][..],
        &["model", "window", "--window", "64 parsecs", "--rtt", "40ms"],
        &["model", "bdp", "--bandwidth", "1gigabit", "--rtt", "40ms"],
        &["model", "mathis", "--rtt", "40ms", "--loss", "2"],
        &[&MODEL_TRANSFER[..], &["--mtu", "20"]].concat()[..],
        &[&PROXY_TO_NOWHERE[..], &["--delay", "20"]].concat()[..],
        &[&PROXY_TO_NOWHERE[..], &["--delay=-5ms"]].concat()[..],
        &[&PROXY_TO_NOWHERE[..], &["--bandwidth", "100"]].concat()[..],
        &[&PROXY_TO_NOWHERE[..], &["--window", "4 MiBs"]].concat()[..],
        &["proxy", "--listen", "nowhere", "--upstream", "127.0.0.1:1"],
    ] {
        rt().args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("invalid value"));
    }
    // Combinations that make no sense: one line saying what to do, exit 2 (refused before any I/O).
    rt().args([
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:1",
        "--loss",
        "1%",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("--udp"));
    rt().args([
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:1",
        "--udp",
        "--window",
        "64KiB",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("TCP"));
    rt().args([
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1",
        "--rtt",
        "40ms",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("needs a port"));
    rt().args(["model", "tps", "--tps", "100", "--rtt", "20ms"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot do that"));
}

#[test]
fn proxy_command_relays_and_survives_a_dead_upstream() {
    // Upstream: a port that was bound and closed again.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let bin = assert_cmd::cargo::cargo_bin("roundtrip");
    let mut child = std::process::Command::new(bin)
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &dead.to_string(),
            "--rtt",
            "2ms",
        ])
        .args(["--jitter", "5ms", "--jitter-dist", "normal"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr: std::net::SocketAddr = first
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    for _ in 0..2 {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(c.read(&mut b).unwrap(), 0, "expected a clean close");
    }
    // SAFETY: the child's pid; SIGINT is how a user stops the proxy.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let text = rest.join("\n");
    let failures = rest
        .iter()
        .find(|l| l.contains("upstream failures"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_default();
    assert_eq!(failures, "2", "{text}");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("clipped"),
        "jitter larger than the delay should be explained: {err}"
    );
}
