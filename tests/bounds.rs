//! Class: every option that multiplies work or memory has a bound, checked before the measurement (or, for a
//! capture's span, as soon as it is passed), refused with one line that names the option, the bound and
//! what to do. Network commands are pointed at 127.0.0.1:1, where nothing listens: a refusal that came
//! after any I/O would say "cannot connect" instead.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn run(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let o = Command::new(assert_cmd::cargo::cargo_bin("roundtrip"))
        .args(args)
        .output()
        .unwrap();
    (o, start.elapsed())
}

/// `args` is refused with one line containing every word of `want`, without reaching the network.
fn refused(args: &[&str], want: &[&str]) {
    let (o, took) = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{args:?}: a refusal of the arguments exits 2: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: no '{w}' in: {err}");
    }
    assert!(
        !err.contains("cannot connect"),
        "{args:?} did I/O first: {err}"
    );
    // A hang detector (the refusals take milliseconds): the old capture stats ran for minutes here.
    assert!(took < Duration::from_secs(60), "{args:?} took {took:?}");
}

fn list(n: usize, unit: &str, step: usize) -> String {
    (1..=n)
        .map(|i| format!("{}{unit}", 64 + i * step))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn every_multiplying_option_is_bounded_with_a_one_line_refusal() {
    // capture stats --report-interval: 100,000 rows in total (not per gap).
    if let Some(dir) = common::captures_dir() {
        let f = dir.join("zeek/nfs_nfs_write.pcap");
        let f = f.to_str().unwrap();
        for i in ["1ns", "100ns", "10us"] {
            refused(
                &["capture", "stats", f, "--report-interval", i],
                &["--report-interval", "100000 rows", "or more"],
            );
        }
        refused(
            &[
                "capture",
                "stats",
                f,
                "--by-direction",
                "--report-interval",
                "10us",
            ],
            &["--report-interval", "100000 rows"],
        );
        // The interval the refusal names works, and makes no more rows than the bound.
        let (o, _) = run(&["capture", "stats", f, "--report-interval", "1ns"]);
        let err = String::from_utf8_lossy(&o.stderr);
        let fit = err
            .split("give --report-interval ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no interval named: {err}"))
            .to_string();
        let (o, _) = run(&["capture", "stats", f, "--report-interval", &fit, "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let rows = v["rows"].as_array().unwrap().len();
        assert!(rows > 1000 && rows <= 100_000, "{rows} rows at {fit}");
        // capture whatif --rtt: each value re-runs the capture in the model.
        let rtts = list(101, "us", 1);
        refused(
            &["capture", "whatif", f, "--rtt", &rtts],
            &["--rtt", "101", "100"],
        );
    }
    // tcp: the sampling interval has a floor; with --json every sample is kept, so --duration / --report-interval is
    // bounded before sampling.
    refused(
        &["tcp", "--report-interval", "1ns", "-t", "1s"],
        &["--report-interval", "1ms"],
    );
    refused(
        &["tcp", "--report-interval", "1ms", "-t", "1000h", "--json"],
        &["--duration", "--report-interval", "100000 rounds"],
    );
    // icmp: every probe is kept for --json and the report.
    refused(
        &["icmp", "127.0.0.1", "-c", "2000000", "--json"],
        &["-c 2000000", "1000000"],
    );
    // sweep: sizes x rates cells.
    let sizes = list(40, "", 10);
    let rates = list(30, "", 100);
    refused(
        &["sweep", "127.0.0.1:1", "--sizes", &sizes, "--rates", &rates],
        &["--sizes", "--rates", "1200 cells", "1000"],
    );
    // throughput: one run per size; streams.
    let sizes = list(101, "", 1);
    refused(
        &["throughput", "127.0.0.1:1", "-s", &sizes],
        &["--size", "101 sizes", "100"],
    );
    refused(
        &["throughput", "127.0.0.1:1", "-P", "100000"],
        &["--streams", "100000"],
    );
    // load: the offered rate.
    refused(&["load", "127.0.0.1:1", "-r", "1000000000000"], &["rate"]);
    // db: what one fetch moves.
    refused(
        &[
            "db",
            "postgres://127.0.0.1:1/test",
            "--rows",
            "10000000",
            "--row-bytes",
            "1M",
        ],
        &["--rows", "--row-bytes", "1024 MiB"],
    );
    // agent: series exposed.
    refused(
        &[
            "agent",
            "--peer",
            "127.0.0.1",
            "--max-series",
            "1",
            "-p",
            "0",
            "--metrics",
            "127.0.0.1:0",
        ],
        &["--max-series"],
    );
}
