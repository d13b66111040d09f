//! Mistakes found before any I/O: a `--chart` that needs another option, an interface that does not exist, an
//! output folder that does not exist are refused in one line, exit 2, before a socket is opened or anything is
//! printed on standard output; and a database login that fails says so in one line, the same for every
//! database.

mod common;

use common::db::{Out, rt, run};
use std::net::TcpListener;
use std::time::Duration;

fn cmd() -> assert_cmd::Command {
    rt(Duration::from_secs(60))
}

/// A refusal: exit 2, one line on stderr naming every word of `names`, nothing on stdout.
fn assert_refused(o: &Out, names: &[&str], what: &str) {
    assert_eq!(o.code, 2, "{what}: {}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout, "", "{what}: printed before the refusal");
    assert_eq!(o.stderr.lines().count(), 1, "{what}: {}", o.stderr);
    assert!(
        o.stderr.starts_with("roundtrip: error:"),
        "{what}: {}",
        o.stderr
    );
    for n in names {
        assert!(o.stderr.contains(n), "{what}: no '{n}' in {}", o.stderr);
    }
}

/// A port that listens but is never answered: a command that connected to it would show in its queue.
struct Witness(TcpListener);

impl Witness {
    fn new() -> Witness {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        Witness(l)
    }

    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }

    /// Panics when anything connected.
    fn untouched(&self, what: &str) {
        match self.0.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok((_, peer)) => panic!("{what}: connected ({peer}) before refusing"),
            Err(e) => panic!("{what}: accept: {e}"),
        }
    }
}

/// A chart a command draws only with another option is refused before connecting, naming that option:
/// `db --chart percentiles|rtt-time` reads the full log back (`--full-log FILE`, not `-`), `throughput --chart
/// throughput-size` needs several `--size`s.
#[test]
fn a_chart_that_needs_another_option_is_refused_before_connecting() {
    let w = Witness::new();
    let svg = std::env::temp_dir().join(format!("rt-checks-io-{}.svg", std::process::id()));
    let svg = svg.to_str().unwrap();
    let db = format!("postgresql://127.0.0.1:{}/test", w.port());
    for chart in ["percentiles", "rtt-time"] {
        let o = run(cmd().args(["db", &db, "--svg", svg, "--chart", chart]));
        assert_refused(&o, &["--full-log", chart], &format!("db --chart {chart}"));
        let o = run(cmd().args(["db", &db, "--svg", svg, "--chart", chart, "--full-log", "-"]));
        assert_refused(
            &o,
            &["--full-log", "standard output"],
            &format!("db --chart {chart} --full-log -"),
        );
    }
    let tp = format!("127.0.0.1:{}", w.port());
    for sizes in [None, Some("1k")] {
        let mut c = cmd();
        c.args([
            "throughput",
            &tp,
            "--svg",
            svg,
            "--chart",
            "throughput-size",
        ]);
        if let Some(s) = sizes {
            c.args(["--size", s]);
        }
        let o = run(&mut c);
        assert_refused(
            &o,
            &["--size", "throughput-size"],
            "throughput --chart throughput-size",
        );
    }
    w.untouched("a refused --chart");
    assert!(!std::path::Path::new(svg).exists());
}

/// An interface that does not exist is refused in one line naming it and how to list them, exit 2, by every
/// command that takes one. No root needed: nothing is opened.
#[test]
fn an_unknown_interface_is_refused_everywhere() {
    let bad = "nosuch0";
    let runs: &[&[&str]] = &[
        &["proxy", "--bridge", "nosuch0,nosuch1"],
        &["proxy", "--bridge", "lo,nosuch0"],
        &["capture", "stats", "--live", bad],
        &["capture", "flows", "--live", bad],
        &["capture", "timeline", "--live", bad],
        &["capture", "rpc", "--live", bad],
        &["agent", "--watch", bad],
    ];
    for args in runs {
        let o = run(cmd().args(*args));
        assert_refused(&o, &["'nosuch0'", "ip link"], &args.join(" "));
    }
    // The same interface twice is a mistake in the arguments too.
    let o = run(cmd().args(["proxy", "--bridge", "lo,lo"]));
    assert_refused(&o, &["'lo' twice"], "proxy --bridge lo,lo");
}

/// An output file in a folder that does not exist is refused before "capturing on ..." (and before any
/// packet socket is opened), exit 2, for every output of a live capture.
#[test]
fn a_missing_output_folder_is_refused_before_capturing() {
    let dir = std::env::temp_dir().join(format!("rt-checks-io-missing-{}", std::process::id()));
    assert!(!dir.exists());
    let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
    for sub in ["stats", "flows", "timeline", "rpc"] {
        for (opt, name) in [
            ("--write", "x.pcap"),
            ("--svg", "x.svg"),
            ("--report", "x.html"),
        ] {
            let path = file(name);
            let o = run(cmd().args([
                "capture",
                sub,
                "--live",
                "lo",
                "--duration",
                "1s",
                opt,
                &path,
            ]));
            let what = format!("capture {sub} --live lo {opt} {path}");
            assert_refused(&o, &[&path, "does not exist"], &what);
            assert!(!o.stderr.contains("capturing on"), "{what}: {}", o.stderr);
        }
    }
    assert!(!dir.exists());
}

/// A login that fails (or an unknown database) prints its one error line and exit 1, and no table of dashes
/// around the one TCP handshake it timed: PostgreSQL, MariaDB and Redis alike.
#[test]
fn a_failed_login_is_one_line_without_a_table() {
    let cases: &[(u16, &str, &str, &str)] = &[
        (
            5432,
            "PostgreSQL",
            "postgres://rt_checks_io_nosuchuser@127.0.0.1:5432/postgres",
            "rejected user",
        ),
        (
            5432,
            "PostgreSQL",
            "postgres://postgres@127.0.0.1:5432/rt_checks_io_nosuchdb",
            "has no database",
        ),
        (
            3306,
            "MariaDB",
            "mysql://root:rt-checks-io-wrong@127.0.0.1:3306/test",
            "rejected user",
        ),
        (
            3306,
            "MariaDB",
            "mysql://root@127.0.0.1:3306/rt_checks_io_nosuchdb",
            "has no database",
        ),
        (
            6379,
            "Redis",
            "redis://rt_checks_io_nouser:pw@127.0.0.1:6379",
            "rejected user",
        ),
        (
            6379,
            "Redis",
            "redis://127.0.0.1:6379/999",
            "has no database",
        ),
    ];
    for (port, name, url, says) in cases {
        if !common::service_up(*port, name) {
            continue;
        }
        let o = run(cmd().args(["db", url, "--count", "1", "--connects", "2"]));
        assert_eq!(o.code, 1, "{url}: {}{}", o.stdout, o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{url}: {}", o.stderr);
        assert!(
            o.stderr.starts_with("roundtrip: error:") && o.stderr.contains(says),
            "{url}: {}",
            o.stderr
        );
        // The heading alone: no "connection setup" table, no rows of dashes.
        assert_eq!(o.stdout.lines().count(), 1, "{url}: {}", o.stdout);
        assert!(!o.stdout.contains("tcp handshake"), "{url}: {}", o.stdout);
        assert!(!o.stdout.contains("rt-checks-io-wrong"), "{}", o.stdout);
    }
}

/// A password given to a Redis server that has none set: the run goes on (the connection works), with one
/// note saying the password was not needed.
#[test]
fn a_redis_password_the_server_does_not_need_is_a_note() {
    if !common::service_up(6379, "Redis") {
        return;
    }
    // Only meaningful when the default user has no password.
    let plain = run(cmd().args([
        "db",
        "redis://127.0.0.1:6379",
        "--count",
        "1",
        "--connects",
        "1",
        "--rows",
        "0",
    ]));
    if plain.code != 0 {
        common::skip("the Redis on 6379 wants a password");
        return;
    }
    let o = run(cmd().args([
        "db",
        "redis://:rt-checks-io-unneeded@127.0.0.1:6379",
        "--count",
        "1",
        "--connects",
        "2",
        "--rows",
        "0",
    ]));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // The notes close the text summary.
    let notes: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.contains("has no password set"))
        .collect();
    assert_eq!(notes.len(), 1, "{}", o.stdout);
    assert!(notes[0].contains("drop it from the URL"), "{}", notes[0]);
    assert!(!o.stderr.contains("error"), "{}", o.stderr);
    for s in [&o.stdout, &o.stderr] {
        assert!(!s.contains("rt-checks-io-unneeded"), "{s}");
    }
}
