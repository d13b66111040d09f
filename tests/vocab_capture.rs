//! The old spellings of the capture, proxy, model, agent and mesh renames (docs/flags.md) still work for one
//! release and print one notice naming the new spelling; `capture ... -i IFACE` is the interface, as tcpdump's.
//!
//! This is the one file that still types the old spellings (tests/vocab.rs checks that nothing else does).

mod common;

use common::procs::{MODEL_BDP, MODEL_TRANSFER, PROXY_TO_NOWHERE};

use assert_cmd::Command;

fn rt() -> Command {
    Command::cargo_bin("roundtrip").unwrap()
}

/// Runs `args` with ROUNDTRIP_PARSE_ONLY=1 (parsed, nothing run): exit code and stderr.
fn parse_only(args: &[&str]) -> (i32, String) {
    let o = common::procs::parse_only(args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn capture(name: &str) -> String {
    format!("{}/docs/captures/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn each_old_spelling_parses_and_names_the_new_one() {
    let ping = capture("roundtrip-ping.pcap");
    let pg = capture("pgbench-select.pcap");
    let proxy = [
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:1",
    ];
    let with = |head: &[&str], tail: &[&str]| -> Vec<String> {
        head.iter().chain(tail).map(|s| s.to_string()).collect()
    };
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (
            with(&["capture", "stats", &ping], &["--interval", "100ms"]),
            "`capture stats --interval` is now `--report-interval`",
            "",
        ),
        (
            with(&["capture", "rpc", &pg], &["--interval=100ms"]),
            "`capture rpc --interval` is now `--report-interval`",
            "",
        ),
        (
            with(&["capture", "bpf", "--link", "any"], &["tcp"]),
            "`capture bpf --link` is now `--linktype`",
            "",
        ),
        (
            with(&proxy, &["--rate", "100mbit"]),
            "`proxy --rate` is now `--bandwidth`",
            "bit/s",
        ),
        (
            with(&proxy, &["--rate-total", "1gbit"]),
            "`proxy --rate-total` is now `--bandwidth-total`",
            "bit/s",
        ),
        (
            with(&["proxy", "--bridge", "a0,b0"], &["--rate", "20mbit"]),
            "`proxy --rate` is now `--bandwidth`",
            "bit/s",
        ),
        (
            with(&["model", "bdp", "--rate", "1gbit"], &["--rtt", "40ms"]),
            "`model bdp --rate` is now `--bandwidth`",
            "bit/s",
        ),
        (
            with(
                &["model", "transfer", "--bytes", "8KiB"],
                &["--link", "1gbit"],
            ),
            "`model transfer --link` is now `--bandwidth`",
            "bit/s",
        ),
        (
            with(&["agent", "--peer", "127.0.0.1"], &["--window", "30s"]),
            "`agent --window` is now `--span`",
            "",
        ),
        (
            with(
                &["mesh", "--prometheus", "http://127.0.0.1:9"],
                &["--window", "5m"],
            ),
            "`mesh --window` is now `--span`",
            "",
        ),
    ];
    for (args, notice, counts) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = parse_only(&args);
        assert_eq!(code, 0, "{}: {err}", args.join(" "));
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "one notice for {}: {err}", args.join(" "));
        assert!(
            lines[0].starts_with("roundtrip: note: ") && lines[0].contains(notice),
            "{}: {err}",
            args.join(" ")
        );
        assert!(lines[0].contains(counts), "{err}");
    }
    // The new spellings print nothing.
    for args in [
        &["capture", "stats", &ping, "--report-interval", "100ms"][..],
        &["capture", "bpf", "-y", "any", "tcp"],
        &["capture", "bpf", "--linktype", "any", "tcp"],
        &[
            &PROXY_TO_NOWHERE[..],
            &["--bandwidth", "100mbit", "--bandwidth-total", "1gbit"],
        ]
        .concat()[..],
        &MODEL_BDP,
        &MODEL_TRANSFER,
        &["agent", "--peer", "127.0.0.1", "--span", "30s"],
        &["mesh", "--prometheus", "http://127.0.0.1:9", "--span", "5m"],
        // `db --link` keeps its word.
        &["db", "postgres://u@127.0.0.1:9/d", "--link", "srv"],
    ] {
        let (code, err) = parse_only(args);
        assert_eq!(code, 0, "{}: {err}", args.join(" "));
        assert_eq!(err, "", "{}", args.join(" "));
    }
}

#[test]
fn old_spellings_give_the_same_results() {
    // model: the old and the new spelling compute the same document.
    let same = |old: &[&str], new: &[&str]| {
        let a = rt().args(old).output().unwrap();
        let b = rt().args(new).output().unwrap();
        assert!(a.status.success() && b.status.success(), "{old:?}");
        assert_eq!(a.stdout, b.stdout, "{old:?} vs {new:?}");
        assert!(String::from_utf8_lossy(&a.stderr).contains("roundtrip: note: "));
        assert!(
            b.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&b.stderr)
        );
    };
    same(
        &["model", "bdp", "--rate", "1gbit", "--rtt", "40ms", "--json"],
        &[
            "model",
            "bdp",
            "--bandwidth",
            "1gbit",
            "--rtt",
            "40ms",
            "--json",
        ],
    );
    same(
        &[
            "model", "transfer", "--bytes", "8KiB", "--link", "1gbit", "--json",
        ],
        &[&MODEL_TRANSFER[..], &["--json"]].concat()[..],
    );
    same(
        &["capture", "bpf", "--link", "linux-sll2", "tcp port 5432"],
        &["capture", "bpf", "-y", "linux-sll2", "tcp port 5432"],
    );
    let ping = capture("roundtrip-ping.pcap");
    same(
        &["capture", "stats", &ping, "--interval", "100ms", "--json"],
        &[
            "capture",
            "stats",
            &ping,
            "--report-interval",
            "100ms",
            "--json",
        ],
    );
}

#[test]
fn capture_i_with_a_duration_is_the_report_period_for_one_release() {
    let ping = capture("roundtrip-ping.pcap");
    let pg = capture("pgbench-select.pcap");
    for (sub, file) in [("stats", &ping), ("rpc", &pg)] {
        let old = rt()
            .args(["capture", sub, file, "-i", "100ms", "--json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&old.stderr);
        assert!(old.status.success(), "capture {sub} -i 100ms: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("roundtrip: note: ")
                && err.contains(&format!("`capture {sub} -i 100ms`")),
            "{err}"
        );
        assert!(err.contains("--report-interval 100ms"), "{err}");
        let new = rt()
            .args(["capture", sub, file, "--report-interval", "100ms", "--json"])
            .output()
            .unwrap();
        assert!(new.status.success());
        assert!(new.stderr.is_empty());
        assert_eq!(old.stdout, new.stdout, "capture {sub}");
    }
    // The period given twice is refused.
    let o = rt()
        .args([
            "capture",
            "stats",
            &ping,
            "-i",
            "100ms",
            "--report-interval",
            "1s",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("given twice"));
}

#[test]
fn capture_i_names_the_interface() {
    let ping = capture("roundtrip-ping.pcap");
    // `-i` and `--live` are one option: `-i lo --live lo` is the option twice.
    let (code, err) = parse_only(&["capture", "stats", "-i", "lo", "--live", "lo"]);
    assert_eq!(code, 2, "{err}");
    // On every capture subcommand that captures live, `-i lo` is the interface: a word after it is then the
    // filter expression's first (as after `--live lo`), so a FILE there is refused as a filter (exit 2,
    // before any capture), never read as a file with a notice.
    for sub in ["stats", "rpc", "flows", "timeline"] {
        let (code, err) = parse_only(&["capture", sub, "-i", "lo"]);
        assert_eq!(code, 0, "capture {sub} -i lo: {err}");
        assert_eq!(err, "");
        for live in ["-i", "--live"] {
            let o = rt()
                .args(["capture", sub, &ping, live, "lo"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "capture {sub} {live}: {err}");
            assert!(err.contains("--filter"), "capture {sub} {live}: {err}");
            assert!(!err.contains("note:"), "capture {sub} {live}: {err}");
        }
    }
    // A name that is neither an interface nor a duration is refused naming the interface.
    let o = rt()
        .args(["capture", "stats", "-i", "vocabcap0"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("vocabcap0"));
    // Live on lo (root): the capture runs on the interface and ends at its -t.
    if common::is_root() {
        let o = rt()
            .args(["capture", "stats", "-i", "lo", "-t", "300ms", "--json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(!err.contains("note:"), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v.to_string().contains("lo"), "{v}");
    }
}
