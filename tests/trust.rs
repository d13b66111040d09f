//! Every printed number true, every refusal one line (issue 25): one test per class, each walking every
//! command the class applies to.

mod common;

use common::procs::{MODEL_BDP, MODEL_TRANSFER};

use std::process::Command;

/// Runs the binary with `args`; returns (exit code, stdout, stderr).
fn rt(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::procs::bin())
        .args(args)
        .output()
        .expect("run roundtrip");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every command path (`ping`, `capture stats`, `model tps`, ...), read from the help, so a new command is
/// walked without editing this file.
fn commands() -> Vec<Vec<String>> {
    fn subs(path: &[String]) -> Vec<String> {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (code, help, _) = rt(&args);
        assert_eq!(code, 0, "{args:?}");
        let Some(i) = help.find("Commands:\n") else {
            return Vec::new();
        };
        help[i + "Commands:\n".len()..]
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(String::from)
            .collect()
    }
    let mut out = Vec::new();
    let mut todo: Vec<Vec<String>> = subs(&[]).into_iter().map(|c| vec![c]).collect();
    while let Some(path) = todo.pop() {
        let children = subs(&path);
        if children.is_empty() {
            out.push(path);
        } else {
            for c in children {
                let mut p = path.clone();
                p.push(c);
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The options of a command that take one value, with their placeholder: `("--rtt", "DURATION")`.
fn options(path: &[String]) -> Vec<(String, String)> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let (_, help, _) = rt(&args);
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            if !l.starts_with('-') {
                return None;
            }
            let long = l.split([' ', ',']).find(|w| w.starts_with("--"))?;
            let rest = &l[l.find(long)? + long.len()..];
            let rest = rest.strip_prefix(" <")?;
            let placeholder = &rest[..rest.find('>')?];
            Some((long.to_string(), placeholder.to_string()))
        })
        .collect()
}

/// Placeholders of durations, sizes, counts, rates and probabilities: each is given a negative value.
const NUMERIC: &[&str] = &[
    "DURATION",
    "DURATION[,...]",
    "DURATION|BYTES",
    "BYTES",
    "BYTES,...",
    "BYTES[,...]",
    "BYTES[,BYTES...]",
    "COUNT",
    "SNAPLEN",
    "ROWS",
    "PID",
    "N",
    "N/s",
    "N/s,...",
    "BITRATE",
    "P",
    "PORT",
    "LOSS",
    "TPS[,TPS...]",
    "SIZE",
];

/// Placeholders that name something else (an address, a file, a name, a choice): no negative value to give.
const OTHER: &[&str] = &[
    "A:P-B:P",
    "ADDR",
    "IFACE",
    "ADDR:PORT",
    "CHART",
    "CSV",
    "DATA_FROM",
    "DIR",
    "DIRECTION",
    "EXPR",
    "FILE",
    "FILE.csv",
    "FILE.html",
    "FILE.svg",
    "HOST:PORT",
    "HOST[:PORT]",
    "IF_A,IF_B",
    "IP:PORT",
    "JITTER_DIST",
    "KIND",
    "NAME",
    "NAME=VALUE",
    "NAME[:PORT]",
    "PATH",
    "PROBE",
    "PROTO",
    "RESULT.json",
    "SQL",
    "TARGET",
    "TITLE",
    "TYPE",
    "URL",
];

/// Class 11: every duration/size/count flag of every command, given a negative value, is refused by our
/// parser (not clap's "unexpected argument '-2'") on one line `roundtrip: error: ...` naming the flag, exit 2,
/// nothing on stdout.
#[test]
fn negative_values_are_refused_in_one_line_by_every_command() {
    let mut walked = Vec::new();
    for path in commands() {
        for (flag, placeholder) in options(&path) {
            if OTHER.contains(&placeholder.as_str()) {
                continue;
            }
            assert!(
                NUMERIC.contains(&placeholder.as_str()),
                "{path:?} {flag} <{placeholder}>: a placeholder this test does not know; add it to NUMERIC or OTHER"
            );
            let value = match placeholder.as_str() {
                p if p.starts_with("DURATION") => "-5ms",
                p if p.starts_with("BYTES") => "-1",
                "N/s" | "N/s,..." => "-10",
                "BITRATE" => "-10mbit",
                _ => "-2",
            };
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push(&flag);
            args.push(value);
            let (code, stdout, stderr) = rt(&args);
            let cmd = args.join(" ");
            assert_eq!(code, 2, "{cmd}: exit {code}, stderr {stderr}");
            assert!(stdout.is_empty(), "{cmd}: printed {stdout}");
            assert_eq!(stderr.lines().count(), 1, "{cmd}: not one line: {stderr}");
            assert!(stderr.starts_with("roundtrip: error: "), "{cmd}: {stderr}");
            assert!(!stderr.contains("unexpected argument"), "{cmd}: {stderr}");
            assert!(
                stderr.contains(&flag),
                "{cmd}: the error does not name {flag}: {stderr}"
            );
            walked.push(cmd);
        }
    }
    // The examples the issue names are among the ones walked.
    for must in [
        "proxy --rtt",
        "server --idle-timeout",
        "capture whatif --rtt",
        "icmp --size",
    ] {
        assert!(
            walked.iter().any(|c| c.starts_with(must)),
            "{must} not walked: {walked:?}"
        );
    }
    eprintln!("{} flags walked", walked.len());
    assert!(walked.len() > 100, "only {} flags walked", walked.len());
}

/// Class 11: every port flag of every command (`-p/--port` of server and agent, `--port` of the capture
/// readers and tcp), given a port above 65535 or not a number, is refused on one line that names the flag,
/// the value and the range in words (not clap's `0..=65535`), exit 2.
#[test]
fn out_of_range_ports_are_refused_in_words_by_every_command() {
    let mut walked = Vec::new();
    for path in commands() {
        for (flag, placeholder) in options(&path) {
            if placeholder != "PORT" {
                continue;
            }
            for value in ["99999", "http"] {
                let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
                args.push(&flag);
                args.push(value);
                let (code, stdout, stderr) = rt(&args);
                let cmd = args.join(" ");
                assert_eq!(code, 2, "{cmd}: exit {code}, stderr {stderr}");
                assert!(stdout.is_empty(), "{cmd}: printed {stdout}");
                assert_eq!(stderr.lines().count(), 1, "{cmd}: not one line: {stderr}");
                assert!(stderr.starts_with("roundtrip: error: "), "{cmd}: {stderr}");
                assert!(stderr.contains(&flag), "{cmd}: no flag: {stderr}");
                assert!(stderr.contains(value), "{cmd}: no value: {stderr}");
                assert!(
                    stderr.contains("between 0 and 65535") && !stderr.contains("..="),
                    "{cmd}: the range not in words: {stderr}"
                );
            }
            walked.push(format!("{} {flag}", path.join(" ")));
        }
    }
    for must in [
        "server --port",
        "agent --port",
        "tcp --port",
        "capture flows --port",
        "capture rpc --port",
        "capture whatif --port",
    ] {
        assert!(
            walked.iter().any(|c| c == must),
            "{must} not walked: {walked:?}"
        );
    }
}

/// Class 11: a file a command reads (a key, a configuration, a peer list, a result, a delay trace, a key log,
/// a full log) that cannot be read is refused before anything runs, on one line that names the flag, the path
/// and the OS's reason, exit 2: every flag of every command whose placeholder is a file to read is walked
/// with a missing file and with a directory.
#[test]
fn unreadable_input_files_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.key");
    let missing = missing.to_str().unwrap();
    let folder = dir.path().to_str().unwrap();
    let mut walked = Vec::new();
    for path in commands() {
        for (flag, placeholder) in options(&path) {
            // `--write FILE` (capture --live) is written, not read.
            if !["FILE", "RESULT.json", "CSV"].contains(&placeholder.as_str()) || flag == "--write"
            {
                continue;
            }
            for (value, reason) in [
                (missing, "No such file or directory"),
                (folder, "is a directory"),
            ] {
                let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
                args.push(&flag);
                args.push(value);
                let (code, stdout, stderr) = rt(&args);
                let cmd = args.join(" ");
                assert_eq!(code, 2, "{cmd}: exit {code}, stderr {stderr}");
                assert!(stdout.is_empty(), "{cmd}: printed {stdout}");
                assert_eq!(stderr.lines().count(), 1, "{cmd}: not one line: {stderr}");
                assert!(stderr.starts_with("roundtrip: error: "), "{cmd}: {stderr}");
                for part in [flag.as_str(), value, reason] {
                    assert!(stderr.contains(part), "{cmd}: no {part:?}: {stderr}");
                }
            }
            walked.push(format!("{} {flag}", path.join(" ")));
        }
    }
    for must in [
        "server --psk-file",
        "ping --psk-file",
        "throughput --psk-file",
        "load --psk-file",
        "sweep --psk-file",
        "replay --psk-file",
        "agent --config",
        "agent --peers-file",
        "model tps --from",
        "proxy --delay-from",
        "proxy --control-token-file",
        "capture rpc --keylog",
        "report --full-log",
    ] {
        assert!(
            walked.iter().any(|c| c == must),
            "{must} not walked: {walked:?}"
        );
    }
}

/// Every bit rate flag of every command (capture whatif --bandwidth, model bdp --bandwidth, model transfer
/// --bandwidth, proxy --bandwidth/--bandwidth-total) takes the common spellings of a rate alike, and the example its help gives is
/// one the parser takes; a rate without a unit is refused in one line. (A value is parsed before `--help`
/// is acted on, so `FLAG VALUE --help` exits 0 only when the value was accepted.)
#[test]
fn every_bit_rate_flag_takes_the_common_spellings() {
    let mut walked = Vec::new();
    for path in commands() {
        let mut help_args: Vec<&str> = path.iter().map(String::as_str).collect();
        help_args.push("--help");
        let (_, help, _) = rt(&help_args);
        for (flag, placeholder) in options(&path) {
            if placeholder != "BITRATE" {
                continue;
            }
            let mut values: Vec<String> = [
                "1Gbit/s",
                "1gbit",
                "1Gbps",
                "100Mbit/s",
                "100mbit",
                "100mbps",
                "10M",
                "2.5G",
            ]
            .iter()
            .map(|v| v.to_string())
            .collect();
            // The example in the flag's help text, when it gives one.
            let text: String = help
                .split(&format!("{flag} <BITRATE>"))
                .nth(1)
                .unwrap_or_default()
                .split("\n\n")
                .next()
                .unwrap_or_default()
                .to_string();
            if let Some(i) = text.find("e.g. ") {
                let ex: String = text[i + 5..]
                    .chars()
                    .take_while(|c| !matches!(c, ',' | ')' | ' ' | '\n' | ';'))
                    .collect();
                let ex = ex.trim_end_matches('.').to_string();
                values.push(ex);
            }
            for v in &values {
                let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
                args.extend([flag.as_str(), v.as_str(), "--help"]);
                let (code, _, stderr) = rt(&args);
                assert_eq!(code, 0, "{}: {stderr}", args.join(" "));
            }
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.extend([flag.as_str(), "100"]);
            let (code, _, stderr) = rt(&args);
            assert_eq!(code, 2, "{}: {stderr}", args.join(" "));
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(stderr.contains("1Gbit/s"), "the accepted forms: {stderr}");
            walked.push(format!("{} {flag}", path.join(" ")));
        }
    }
    for must in [
        "capture whatif --bandwidth",
        "model bdp --bandwidth",
        "model transfer --bandwidth",
        "proxy --bandwidth",
        "proxy --bandwidth-total",
    ] {
        assert!(
            walked.iter().any(|c| c == must),
            "{must} not walked: {walked:?}"
        );
    }
    // The same rate however it is spelled: the same figures.
    let outs: Vec<String> = ["1Gbit/s", "1gbit", "1Gbps", "1G", "1000Mbit/s"]
        .iter()
        .map(|r| {
            let (code, out, err) = rt(&["model", "bdp", "--bandwidth", r, "--rtt", "40ms"]);
            assert_eq!(code, 0, "{r}: {err}");
            out
        })
        .collect();
    assert!(outs.iter().all(|o| o == &outs[0]), "{outs:?}");
}

/// Class 11, the other half: clap's own refusals (unknown flag, missing argument, a wrong choice, a value
/// out of range) and the configuration checks that run before any I/O all end the same way: one line,
/// `roundtrip: error: `, exit 2; ranges are said in words; help and version exit 0. The checks of our own
/// walk every command that has one: target syntax (ping, load, sweep, throughput, compare, replay, connect,
/// icmp, proxy --upstream, db URLs), option combinations (proxy and proxy --bridge), counts of 0 (server,
/// agent), mesh URLs, model inputs, report's argument counts.
#[test]
fn every_refusal_is_one_line_with_exit_2() {
    for args in [
        vec!["ping", "127.0.0.1", "--bogus"],
        vec!["ping"],
        vec!["capture", "stats"],
        vec!["nonsense"],
        vec!["proxy", "--direction", "sideways"],
        vec!["proxy", "--max-clients", "0"],
        vec!["replay", "x.pcap", "--rtt-pings", "20000"],
        vec!["ping", "127.0.0.1:1", "-s", "1", "-c", "1"],
        vec!["ping", "127.0.0.1:1", "-s", "300k", "-c", "1"],
        vec!["throughput", "127.0.0.1:1", "-P", "1000"],
        // Our own checks before any I/O (not clap's): the target's form, a port where none belongs or
        // none where one is needed, options that do not go together, counts of 0, URLs, RTTs of 0.
        vec!["icmp", "127.0.0.1:80", "-c", "1"],
        vec!["connect", "127.0.0.1", "-c", "1"],
        vec!["ping", "127.0.0.1:99999", "-c", "1"],
        vec!["ping", "[::1", "-c", "1"],
        vec!["load", "127.0.0.1:99999", "-r", "10", "-t", "1s"],
        vec!["sweep", "127.0.0.1:99999"],
        vec!["throughput", "127.0.0.1:99999", "-t", "1s"],
        vec!["compare", "127.0.0.1:99999"],
        vec!["replay", "x.pcap", "--to", "127.0.0.1:99999"],
        vec!["db", "mysqlx://127.0.0.1", "-c", "1"],
        vec!["db", "postgres://127.0.0.1:99999/test", "-c", "1"],
        vec!["server", "-p", "0", "--max-clients", "0"],
        vec!["server", "-p", "0", "--max-per-address", "0"],
        vec!["agent", "--workers", "0"],
        vec!["agent", "--max-series", "0"],
        vec!["mesh", "--agent", "htp://x"],
        vec!["mesh", "--agent", "http://"],
        vec!["model", "bdp", "--bandwidth", "1gbit", "--rtt", "0ms"],
        vec!["model", "window", "--window", "64k", "--rtt", "0ms"],
        vec![
            "model",
            "tps",
            "--tps",
            "2000,3000",
            "--rtt",
            "1ms",
            "--at",
            "1ms",
        ],
        vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1",
        ],
        vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:99999",
        ],
        vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:1",
            "--rtt",
            "10ms",
            "--direction",
            "up",
        ],
        vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:1",
            "--udp",
            "--window",
            "10",
        ],
        vec![
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:1",
            "--loss",
            "0.1",
        ],
        vec!["proxy", "--bridge", "veth0"],
        vec!["proxy", "--bridge", "veth0,"],
        vec!["proxy", "--bridge", "a,b", "--window", "10"],
        vec!["proxy", "--bridge", "a,b", "--reorder", "0.5"],
        vec![
            "proxy",
            "--bridge",
            "a,b",
            "--loss-burst",
            "0.5",
            "--loss",
            "0.1",
        ],
        vec!["proxy", "--bridge", "a,b", "--loss-burst", "2"],
        vec![
            "proxy",
            "--bridge",
            "a,b",
            "--rtt",
            "10ms",
            "--delay-back",
            "5ms",
        ],
        vec!["report", "x.json"],
        vec![
            "report",
            "x.json",
            "-o",
            "x.html",
            "--full-log",
            "a",
            "--full-log",
            "b",
        ],
        vec![
            "report", "x.json", "-o", "x.html", "--name", "a", "--name", "b",
        ],
        vec!["model", "tps", "--tps", "100", "--rtt", "20ms"],
    ] {
        let (code, stdout, stderr) = rt(&args);
        assert_eq!(code, 2, "{args:?}: exit {code}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("roundtrip: error: "),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("..="),
            "{args:?}: a range in Rust syntax: {stderr}"
        );
        assert!(!stderr.contains("4294967295"), "{args:?}: {stderr}");
    }
    let (_, _, e) = rt(&["ping", "127.0.0.1:1", "-s", "1", "-c", "1"]);
    assert!(e.contains("between 14 bytes and 256 KiB"), "{e}");
    for args in [
        vec!["--help"],
        vec!["--version"],
        vec!["ping", "--help"],
        vec!["capture", "whatif", "-h"],
    ] {
        let (code, stdout, _) = rt(&args);
        assert_eq!(code, 0, "{args:?}");
        assert!(!stdout.is_empty(), "{args:?}");
    }
}

/// Words only the team knows: "seed 000", "the seeds' arithmetic", "issue 7", "the issue's bounds".
fn team_words(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    for (i, _) in lower.match_indices("seed") {
        found.push(lower[i..].chars().take(40).collect());
    }
    for (i, _) in lower.match_indices("issue") {
        let after: String = lower[i + "issue".len()..].chars().take(3).collect();
        let after = after.trim_start_matches([' ', '#']);
        if after.starts_with(|c: char| c.is_ascii_digit()) || after.starts_with("'s") {
            found.push(lower[i..].chars().take(40).collect());
        }
    }
    found
}

/// Class 13: no user-visible text names the team's sources by their internal numbers: the help of every
/// command, the model's formulas (text and JSON), demo's output and README.
#[test]
fn no_team_words_reach_users() {
    let mut texts: Vec<(String, String)> = Vec::new();
    let (_, top, _) = rt(&["--help"]);
    texts.push(("--help".into(), top));
    for path in commands() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (_, help, _) = rt(&args);
        texts.push((args.join(" "), help));
    }
    for args in [
        vec![
            "model",
            "tps",
            "--tps",
            "2356,1567,854",
            "--rtt",
            "0.021ms,0.161ms,0.685ms",
            "--at",
            "40ms",
        ],
        vec![
            "model", "tps", "--tps", "2356", "--rtt", "0.021ms", "--at", "40ms", "--json",
        ],
        vec!["model", "window", "--window", "64KiB", "--rtt", "40ms"],
        MODEL_BDP.to_vec(),
        vec![
            "model", "mathis", "--mss", "1448", "--rtt", "40ms", "--loss", "0.01",
        ],
        MODEL_TRANSFER.to_vec(),
        [&MODEL_TRANSFER[..], &["--json"]].concat(),
        vec!["demo", "--duration", "100ms"],
    ] {
        let (code, stdout, stderr) = rt(&args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(!stdout.is_empty(), "{args:?}");
        texts.push((args.join(" "), format!("{stdout}{stderr}")));
    }
    // Every page a user reads: README, the root pages and docs/.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<std::path::PathBuf> =
        ["README.md", "FAQ.md", "SECURITY.md", "ARCHITECTURE.md"]
            .iter()
            .map(|p| root.join(p))
            .collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        texts.push((page.display().to_string(), text));
    }
    let mut bad = Vec::new();
    for (what, text) in &texts {
        for w in team_words(text) {
            bad.push(format!("{what}: {w}"));
        }
    }
    assert!(
        bad.is_empty(),
        "team words reach users:\n{}",
        bad.join("\n")
    );
    // The sources are named instead.
    let (_, tps, _) = rt(&[
        "model", "tps", "--tps", "2356", "--rtt", "0.021ms", "--at", "40ms",
    ]);
    assert!(tps.contains("Performing in the cloud"), "{tps}");
}

/// One HTTP/1.1 request to the proxy's control API: (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("control api");
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let code = resp[9..12].parse().unwrap();
    (code, resp.split_once("\r\n\r\n").unwrap().1.to_string())
}

/// Class 12: the control-API sequence of docs/proxy.md, run as written against `roundtrip proxy --rtt 40ms --jitter 1ms
/// --control`: each PATCH changes only its field (the delay survives the fault), PUT replaces everything, and
/// every answer is the full impairment in force.
#[test]
fn readme_control_api_sequence_patches_and_puts() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/proxy.md")).unwrap();
    // The curl lines of the proxy example, in order: (method, body).
    let steps: Vec<(String, String)> = readme
        .lines()
        .filter(|l| l.starts_with("$ curl -X ") && l.contains("/impairment"))
        .map(|l| {
            let method = l["$ curl -X ".len()..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            let body = l.split('\'').nth(1).unwrap().to_string();
            (method, body)
        })
        .collect();
    let methods: Vec<&str> = steps.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        ["PATCH", "PATCH", "PUT"],
        "docs/proxy.md's sequence changed: {steps:?}"
    );

    let mut proxy = common::procs::Proc::spawn("proxy", {
        let mut c = Command::new(common::procs::bin());
        c.args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:1",
            "--rtt",
            "40ms",
            "--jitter",
            "1ms",
            "--control",
            "127.0.0.1:0",
        ]);
        c
    });
    let line = proxy
        .wait_line("control api on", std::time::Duration::from_secs(60))
        .unwrap();
    let ctl = line
        .split("http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let get = |what: &str| -> serde_json::Value {
        let (code, body) = http(&ctl, "GET", "/impairment", "");
        assert_eq!(code, 200, "{what}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let start = get("start");
    assert_eq!(start["delay_ns"], 20_000_000);
    assert_eq!(start["jitter_ns"], 1_000_000);

    // Step 1: PATCH the delay; the jitter stays.
    let (code, body) = http(&ctl, &steps[0].0, "/impairment", &steps[0].1);
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer,
        get("after step 1"),
        "the answer is not the impairment in force"
    );
    assert_eq!(answer["delay_ns"], 5_000_000);
    assert_eq!(
        answer["jitter_ns"], 1_000_000,
        "PATCH reset the jitter: {answer}"
    );

    // Step 2: PATCH a fault; the delay of step 1 stays (with PUT it was silently reset).
    let (code, body) = http(&ctl, &steps[1].0, "/impairment", &steps[1].1);
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer, get("after step 2"));
    assert_eq!(
        answer["delay_ns"], 5_000_000,
        "PATCH reset the delay: {answer}"
    );
    assert_eq!(
        answer["reset_after"]["after_ns"], 2_000_000_000u64,
        "{answer}"
    );

    // A refused PATCH changes nothing; null resets one field.
    let (code, body) = http(&ctl, "PATCH", "/impairment", r#"{"loss": 2}"#);
    assert_eq!(code, 400, "{body}");
    assert_eq!(get("after a refused patch")["delay_ns"], 5_000_000);
    let (code, body) = http(&ctl, "PATCH", "/impairment", r#"{"reset_after": null}"#);
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(answer["reset_after"].is_null(), "{answer}");
    assert_eq!(answer["delay_ns"], 5_000_000);

    // Step 3: PUT replaces the whole impairment.
    let (code, body) = http(&ctl, &steps[2].0, "/impairment", &steps[2].1);
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer, get("after step 3"));
    assert_eq!(answer["delay_ns"], 0);
    assert_eq!(answer["jitter_ns"], 0);
    proxy.signal(libc::SIGINT);
    assert!(
        proxy
            .wait_exit(std::time::Duration::from_secs(30))
            .is_some()
    );
}

/// Class 6: a run that measured nothing prints its error alone (one line on stderr, exit 1): no table of
/// zeros or dashes, no JSON document of empty histograms; a run that measured part keeps what it measured and
/// still exits 1 when the part it exists for failed. Every command that reaches a peer, against a closed port.
#[test]
fn a_run_that_measured_nothing_prints_the_error_alone() {
    // A port nothing listens on: bound and dropped, so the OS will not hand it out again at once.
    let closed = format!("127.0.0.1:{}", common::free_port());
    let pcap = "../shared/captures/zeek/postgresql_psql-select-now.pcap";
    let have_captures = std::path::Path::new(pcap).exists()
        || common::skip("../shared/captures is missing: replay is not walked");
    let pg = format!("postgres://{closed}/test");
    let my = format!("mysql://{closed}/test");
    let redis = format!("redis://{closed}");
    let agent = format!("http://{closed}");
    let mut cases: Vec<Vec<&str>> = vec![
        vec!["ping", &closed, "-c", "3"],
        vec!["ping", &closed, "-c", "3", "--udp"],
        vec!["throughput", &closed, "-t", "1s"],
        vec!["throughput", &closed, "-t", "1s", "--udp"],
        vec!["throughput", &closed, "-t", "1s", "--udp", "--reverse"],
        vec!["load", &closed, "-r", "100", "-t", "1s"],
        vec!["load", &closed, "-r", "100", "-t", "1s", "--udp"],
        vec![
            "sweep", &closed, "--rates", "100", "--sizes", "64", "-t", "1s",
        ],
        vec!["db", &pg],
        vec!["db", &my],
        vec!["db", &redis],
        vec!["mesh", "--agent", &agent],
    ];
    if have_captures {
        cases.push(vec!["replay", pcap, "--to", &closed]);
    }
    for case in cases {
        for json in [false, true] {
            let mut args = case.clone();
            if json && case[0] != "mesh" && case[0] != "replay" {
                args.push("--json");
            }
            let cmd = args.join(" ");
            let (code, stdout, stderr) = rt(&args);
            assert_eq!(code, 1, "{cmd}: exit {code}\n{stdout}{stderr}");
            let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
            assert_eq!(errors.len(), 1, "{cmd}: {stderr}");
            assert!(
                errors[0].starts_with("roundtrip: error: "),
                "{cmd}: {stderr}"
            );
            // At most the heading line that says what is being tried; no table, no document.
            let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(
                lines.len() <= 1,
                "{cmd}: printed results for a run that measured nothing:\n{stdout}"
            );
            if json {
                assert!(lines.is_empty(), "{cmd}: {stdout}");
            }
            assert!(
                lines.iter().all(|l| l.starts_with("roundtrip ")),
                "{cmd}: not a heading:\n{stdout}"
            );
        }
    }
    // A server that refuses the stream (a UDP reverse stream longer than its --max-reverse): the refusal
    // alone, not a row of zeros.
    let mut srv = common::procs::Proc::spawn("server", {
        let mut c = Command::new(common::procs::bin());
        c.args(["server", "--bind", "127.0.0.1", "-p", "0"]);
        c
    });
    let line = srv
        .wait_line("listening on", std::time::Duration::from_secs(60))
        .unwrap();
    let server = format!("127.0.0.1:{}", common::procs::port_in(&line));
    for json in [false, true] {
        let mut args = vec!["throughput", &server, "--udp", "--reverse", "-t", "60s"];
        if json {
            args.push("--json");
        }
        let (code, stdout, stderr) = rt(&args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains("at most"), "{stderr}");
        let lines = stdout.lines().filter(|l| !l.trim().is_empty()).count();
        assert!(lines <= usize::from(!json), "{args:?}: printed\n{stdout}");
    }
    // compare: ICMP is answered by the kernel even on a closed port, so that row is a real measurement and
    // stays; the application rows (what compare is for) measured nothing: exit 1, named on one line.
    for json in [false, true] {
        let mut args = vec!["compare", &closed, "-c", "2", "-i", "1ms"];
        if json {
            args.push("--json");
        }
        let (code, _, stderr) = rt(&args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
        assert!(
            errors[0].contains("measured nothing") && errors[0].contains("roundtrip ping"),
            "{stderr}"
        );
    }
}

/// Class 6, the other half: a figure got by subtracting two medians is never printed negative. `db`'s
/// attribution against the real PostgreSQL and Redis: each part is a duration or "not measurable" with a note
/// giving the raw difference.
#[test]
fn subtracted_figures_are_never_shown_negative() {
    let mut walked = 0;
    for (port, url) in [
        (5432, "postgres://127.0.0.1:5432/test"),
        (6379, "redis://127.0.0.1:6379"),
    ] {
        if !common::service_up(port, url) {
            continue;
        }
        // Several runs: on loopback ping and handshake medians are close, so both outcomes happen.
        for _ in 0..5 {
            let (code, stdout, stderr) = rt(&["db", url, "-c", "30", "--connects", "3"]);
            assert_eq!(code, 0, "{url}: {stderr}");
            let line = stdout
                .lines()
                .find(|l| l.starts_with("attribution"))
                .expect("attribution");
            assert!(!line.contains("~ -"), "{url}: a negative figure: {line}");
            if line.contains("not measurable") {
                let note = stdout
                    .lines()
                    .find(|l| l.contains("came out negative"))
                    .expect("a note");
                assert!(note.contains("= -"), "{note}");
            }
        }
        walked += 1;
    }
    assert!(walked > 0 || common::skip("neither PostgreSQL nor Redis is running"));
}

/// A `roundtrip server` on loopback (TCP and UDP) for the tests that need a peer; killed when dropped.
fn server() -> (common::procs::Proc, String) {
    let mut srv = common::procs::Proc::spawn("server", {
        let mut c = Command::new(common::procs::bin());
        c.args(["server", "--bind", "127.0.0.1", "-p", "0"]);
        c
    });
    let line = srv
        .wait_line("listening on", std::time::Duration::from_secs(60))
        .unwrap();
    let addr = format!("127.0.0.1:{}", common::procs::port_in(&line));
    (srv, addr)
}

/// A `roundtrip server --allow-replay` behind `roundtrip proxy --rtt 40ms`: (server, proxy, proxy address).
fn replay_path() -> (common::procs::Proc, common::procs::Proc, String) {
    let mut srv = common::procs::Proc::spawn("replay server", {
        let mut c = Command::new(common::procs::bin());
        c.args([
            "server",
            "--bind",
            "127.0.0.1",
            "-p",
            "0",
            "--tcp-only",
            "--allow-replay",
        ]);
        c
    });
    let line = srv
        .wait_line("listening on", std::time::Duration::from_secs(60))
        .unwrap();
    let upstream = format!("127.0.0.1:{}", common::procs::port_in(&line));
    let mut proxy = common::procs::Proc::spawn("replay proxy", {
        let mut c = Command::new(common::procs::bin());
        c.args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--rtt",
            "40ms",
        ]);
        c
    });
    let line = proxy
        .wait_line("listening on", std::time::Duration::from_secs(60))
        .unwrap();
    let to = format!("127.0.0.1:{}", common::procs::port_in(&line));
    (srv, proxy, to)
}

/// Starts `args`, waits until it printed its first line and then `measuring` more, sends SIGINT and
/// returns (exit code, stdout, everything) once it ended.
fn interrupt(args: &[&str], measuring: std::time::Duration) -> (i32, String, String) {
    use std::time::Duration;
    let mut p = common::procs::Proc::spawn(args[0], {
        let mut c = Command::new(common::procs::bin());
        c.args(args);
        c
    });
    if args.contains(&"--json") {
        // Silent until the end: give it its start (connect, hello, warm-up) first.
        std::thread::sleep(Duration::from_secs(2));
    } else {
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while p.output().is_empty() && p.try_wait().is_none() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(
        p.try_wait().is_none(),
        "{args:?} ended before the interrupt:\n{}",
        p.output()
    );
    std::thread::sleep(measuring);
    p.signal(libc::SIGINT);
    let f = p.finish(Duration::from_secs(60));
    let code = f.status.and_then(|s| s.code()).unwrap_or(-1);
    (code, f.stdout, f.output)
}

/// Class 1: every command given a duration, a count or a schedule, cut by Ctrl-C, says how far it got
/// ("interrupted (Ctrl-C) after X of Y", and `interrupted` in its JSON document), and judges only what it
/// measured: no "rate NOT held" from a schedule that was cut, no row made of zeros for a part that never ran.
#[test]
fn interrupted_runs_say_how_far_they_got_and_judge_only_that() {
    use std::time::Duration;
    let (_srv, addr) = server();
    let pg = "postgres://127.0.0.1:5432/test";
    let have_pg = common::service_up(5432, "PostgreSQL");
    // replay: a real server granting replay behind `roundtrip proxy --rtt 40ms`, so the shipped pgbench
    // capture's 204 turns take about 8 s to play.
    let (_replay_srv, _replay_proxy, replay_to) = replay_path();
    let pgbench = format!(
        "{}/docs/captures/pgbench-select.pcap",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut cases: Vec<Vec<&str>> = vec![
        vec!["replay", &pgbench, "--to", &replay_to],
        vec!["ping", &addr, "-t", "60s"],
        vec!["ping", &addr, "-c", "100000000", "--udp"],
        vec!["load", &addr, "-r", "10k", "-t", "60s"],
        vec![
            "sweep", &addr, "--rates", "1k,10k", "--sizes", "64", "-t", "30s",
        ],
        vec!["throughput", &addr, "-t", "60s", "-s", "64,1k"],
        vec!["compare", &addr, "-c", "100000", "-i", "5ms"],
        vec!["connect", &addr, "-c", "100000", "-i", "5ms"],
        vec!["icmp", "127.0.0.1", "-c", "100000", "-i", "5ms"],
    ];
    if have_pg {
        cases.push(vec!["db", pg, "-c", "100000000"]);
    }
    let mut walked = Vec::new();
    for case in &cases {
        for json in [false, true] {
            let mut args = case.clone();
            if json {
                args.push("--json");
            }
            let cmd = args.join(" ");
            let (code, stdout, all) = interrupt(&args, Duration::from_secs(3));
            assert_eq!(code, 0, "{cmd}: exit {code}\n{all}");
            assert!(
                !all.contains("NOT held"),
                "{cmd}: a verdict from a cut schedule:\n{all}"
            );
            if json {
                let doc: serde_json::Value = serde_json::from_str(&stdout)
                    .unwrap_or_else(|e| panic!("{cmd}: not one JSON document ({e}):\n{all}"));
                let i = &doc["interrupted"];
                let after = i["after_s"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{cmd}: {doc}"));
                assert!(after > 0.0, "{cmd}: {i}");
                match (
                    i["planned_s"].as_f64(),
                    i["done"].as_u64(),
                    i["planned"].as_u64(),
                ) {
                    (Some(planned), _, _) => assert!(after < planned, "{cmd}: {i}"),
                    (None, Some(done), Some(planned)) => assert!(done < planned, "{cmd}: {i}"),
                    _ => panic!("{cmd}: {i}"),
                }
                assert_eq!(doc["cancelled"], true, "{cmd}");
            } else {
                let line = stdout
                    .lines()
                    .find(|l| l.starts_with("interrupted (Ctrl-C) after "))
                    .unwrap_or_else(|| panic!("{cmd}: no 'interrupted' line:\n{all}"));
                assert!(line.contains(" of "), "{cmd}: {line}");
                // No row made of zeros: no zero latency, no 0-of-0 answers, no zero rate.
                for zero in [" 0ns ", " 0/0 ", " 0/s "] {
                    assert!(!stdout.contains(zero), "{cmd}: '{zero}' in\n{stdout}");
                }
                // No comparison of a part with the whole (replay against the capture's total and prediction).
                assert!(!stdout.contains("replayed / predicted"), "{cmd}:\n{stdout}");
            }
            walked.push(cmd);
        }
    }
    // demo: no JSON; cut during its direct rows, it prints no proxy table of what did not run.
    let (code, stdout, all) = interrupt(&["demo", "--duration", "30s"], Duration::from_secs(3));
    assert_eq!(code, 0, "demo: {all}");
    assert!(
        stdout.contains("interrupted (Ctrl-C) after 0 of 8 measurements"),
        "{all}"
    );
    assert!(
        !stdout.contains("via proxy"),
        "demo: proxy rows that did not run:\n{stdout}"
    );
    assert!(!stdout.contains(" 0ns "), "{stdout}");
    walked.push("demo".into());
    eprintln!("interrupted: {}", walked.join("; "));
}

/// Class 1, the other side: for server, proxy, agent and tcp, Ctrl-C is the normal end: exit 0, and no
/// "interrupted" word.
#[test]
fn ctrl_c_is_the_normal_end_of_servers_and_watchers() {
    use std::time::Duration;
    let (_srv, addr) = server();
    for args in [
        vec!["server", "--bind", "127.0.0.1", "-p", "0"],
        vec!["proxy", "--listen", "127.0.0.1:0", "--upstream", &addr],
        vec![
            "agent",
            "--bind",
            "127.0.0.1",
            "-p",
            "0",
            "--peer",
            &addr,
            "--metrics",
            "127.0.0.1:0",
        ],
        vec!["tcp", "--report-interval", "200ms"],
    ] {
        let (code, _, all) = interrupt(&args, Duration::from_secs(1));
        assert_eq!(code, 0, "{args:?}: {all}");
        assert!(!all.contains("interrupted"), "{args:?}: {all}");
    }
}

/// Class 2: every reader of a capture (stats, timeline, flows, rpc, match, whatif, replay) reports a truncated
/// file the same way: `roundtrip: error: FILE: file truncated: ... at byte offset N; results cover the K
/// packets before it ...`, exit 1, with the results of the packets before the cut still printed. pcap and
/// pcapng.
#[test]
fn every_capture_reader_reports_a_truncated_file_the_same_way() {
    let Some(dir) = common::captures_dir() else {
        assert!(common::skip("../shared/captures is missing"));
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (_srv, _) = server();
    // A replay server: `roundtrip server --allow-replay`.
    let mut rsrv = common::procs::Proc::spawn("replay server", {
        let mut c = Command::new(common::procs::bin());
        c.args(["server", "--bind", "127.0.0.1", "-p", "0", "--allow-replay"]);
        c
    });
    let line = rsrv
        .wait_line("listening on", std::time::Duration::from_secs(60))
        .unwrap();
    let replay_to = format!("127.0.0.1:{}", common::procs::port_in(&line));
    let mut walked = Vec::new();
    // (file, bytes kept, whether every reader has results from the part before the cut: the pcapng keeps
    // only its handshake, too little for a what-if or a replay, which then say so after the damage)
    for (name, keep, results) in [
        (
            "zeek/postgresql_psql-create-insert-select-delete-drop.pcap",
            3000usize,
            true,
        ),
        ("chrissanders/latency1.pcapng", 0, false),
    ] {
        let whole = std::fs::read(dir.join(name)).unwrap();
        // Cut inside a record: three quarters of the file (or the given length).
        let keep = if keep == 0 { whole.len() * 3 / 4 } else { keep };
        let cut = tmp.path().join(name.replace('/', "_"));
        std::fs::write(&cut, &whole[..keep]).unwrap();
        let file = cut.to_str().unwrap();
        let whole_path = dir.join(name);
        let whole_file = whole_path.to_str().unwrap();
        let cases: Vec<Vec<&str>> = vec![
            vec!["capture", "stats", file],
            vec!["capture", "timeline", file],
            vec!["capture", "flows", file],
            vec!["capture", "rpc", file],
            vec!["capture", "match", file, whole_file],
            vec!["capture", "whatif", file, "--rtt", "10ms"],
            vec!["replay", file, "--to", &replay_to, "--rtt-pings", "0"],
        ];
        let mut messages = Vec::new();
        for args in cases {
            let cmd = args.join(" ");
            let (code, stdout, stderr) = rt(&args);
            assert_eq!(code, 1, "{cmd}: exit {code}\n{stderr}");
            let err: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("roundtrip: error: "))
                .collect();
            assert_eq!(err.len(), 1, "{cmd}: {stderr}");
            let e = err[0];
            assert!(
                e.starts_with(&format!("roundtrip: error: {file}: file truncated")),
                "{cmd}: {e}"
            );
            assert!(e.contains("at byte offset "), "{cmd}: {e}");
            if results {
                assert!(
                    !stdout.trim().is_empty(),
                    "{cmd}: no results for the packets before the cut"
                );
            }
            messages.push(e.to_string());
            walked.push(cmd);
        }
        // The same words from every reader, up to the byte offset.
        let head = |m: &String| m[..m.find("at byte offset ").unwrap()].to_string();
        assert!(
            messages.windows(2).all(|w| head(&w[0]) == head(&w[1])),
            "{messages:#?}"
        );
    }
    eprintln!("truncated: {}", walked.join("; "));
}

/// Class 14, the smaller cases: each checked on the real thing.
#[test]
fn smaller_cases_say_what_they_are() {
    use std::time::Duration;
    // MariaDB is named MariaDB, its version without the 5.5.5- compatibility prefix.
    if common::service_up(3306, "MariaDB") {
        let (code, stdout, stderr) = rt(&["db", "mysql://root@127.0.0.1:3306/test", "-c", "3"]);
        assert_eq!(code, 0, "{stderr}");
        let line = stdout.lines().find(|l| l.starts_with("--- ")).unwrap();
        assert!(line.starts_with("--- MariaDB at "), "{line}");
        assert!(!line.contains("5.5.5-"), "{line}");
        let (_, json, _) = rt(&[
            "db",
            "mysql://root@127.0.0.1:3306/test",
            "-c",
            "3",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let version = v["server_version"].as_str().unwrap();
        assert!(
            version.contains("MariaDB") && !version.starts_with("5.5.5-"),
            "{version}"
        );
    }
    // An address this host does not have: said so, not "another server using the port". Binding only: no
    // packet is sent to it. Every command that listens.
    for args in [
        vec!["server", "--bind", "10.9.9.9", "-p", "0"],
        vec![
            "proxy",
            "--listen",
            "10.9.9.9:0",
            "--upstream",
            "127.0.0.1:1",
        ],
        vec![
            "agent",
            "--bind",
            "10.9.9.9",
            "-p",
            "0",
            "--peer",
            "127.0.0.1:1",
            "--metrics",
            "127.0.0.1:0",
        ],
        vec![
            "agent",
            "--no-responder",
            "--peer",
            "127.0.0.1:1",
            "--metrics",
            "10.9.9.9:0",
        ],
    ] {
        let (code, _, stderr) = rt(&args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains("10.9.9.9 is not an address of this host"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("another"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    // A port in use: named as such.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (code, _, stderr) = rt(&["server", "--bind", "127.0.0.1", "-p", &port]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("another program is using port {port}")),
        "{stderr}"
    );
    // Words in text, not identifiers: a connection's state in the timeline.
    if let Some(dir) = common::captures_dir() {
        let mut states = Vec::new();
        for sub in ["zeek", "chrissanders"] {
            for e in std::fs::read_dir(dir.join(sub)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
                    let (_, stdout, _) = rt(&["capture", "timeline", p.to_str().unwrap()]);
                    if let Some(l) = stdout.lines().find(|l| l.starts_with("connection #")) {
                        states.push(l.to_string());
                    }
                }
            }
        }
        assert!(
            states.iter().any(|l| l.contains("reset by ")),
            "{states:#?}"
        );
        assert!(
            states.iter().all(|l| !l.contains("reset_by")),
            "{states:#?}"
        );
    }
    // A file cut inside its file header: the damage alone, not "pcap, (0 B)" and a table of zeros.
    let tmp = tempfile::tempdir().unwrap();
    let ten = tmp.path().join("ten.pcap");
    std::fs::write(&ten, [0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0]).unwrap();
    for reader in ["stats", "flows", "timeline", "rpc"] {
        let (code, stdout, stderr) = rt(&["capture", reader, ten.to_str().unwrap()]);
        assert_eq!(code, 1, "{reader}: {stderr}");
        assert!(stdout.is_empty(), "{reader}: {stdout}");
        assert!(
            stderr.contains("file header cut short (10 of 24 bytes) at byte offset 0"),
            "{stderr}"
        );
    }
    // Placeholders say what to type: <DURATION>, not the field's name.
    for path in commands() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (_, help, _) = rt(&args);
        for name in [
            "<WARMUP>",
            "<TIMEOUT>",
            "<INTERVAL>",
            "<IDLE_TIMEOUT>",
            "<REPORT_INTERVAL>",
        ] {
            assert!(!help.contains(name), "{args:?}: {name}");
        }
    }
    // What works is in the help: whatif --connection.
    let (_, help, _) = rt(&["capture", "whatif", "--help"]);
    assert!(help.contains("--connection"), "{help}");
    // Two agents on one host, on other ports than the default: two sources, not one merged 127.0.0.1.
    let mut sources = Vec::new();
    let mut agents = Vec::new();
    for _ in 0..2 {
        let mut p = common::procs::Proc::spawn("agent", {
            let mut c = Command::new(common::procs::bin());
            c.args([
                "agent",
                "--bind",
                "127.0.0.1",
                "-p",
                "0",
                "--peer",
                "127.0.0.1:1",
                "--metrics",
                "127.0.0.1:0",
            ]);
            c
        });
        let line = p
            .wait_line("roundtrip agent: source ", Duration::from_secs(60))
            .unwrap();
        let responder = p
            .wait_line("responder on tcp+udp ", Duration::from_secs(60))
            .unwrap();
        let port = common::procs::port_in(&responder);
        let source = line["roundtrip agent: source ".len()..]
            .split(',')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(source, format!("127.0.0.1:{port}"), "{line}");
        sources.push(source);
        agents.push(p);
    }
    assert_ne!(sources[0], sources[1]);
}

/// tshark's `io,stat` rows: (frames, bytes) per interval.
fn tshark_io_stat(file: &str, interval: &str) -> Vec<(u64, u64)> {
    let out = Command::new("tshark")
        .args(["-q", "-r", file, "-z", &format!("io,stat,{interval}")])
        .output()
        .expect("tshark runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("<>"))
        .map(|l| {
            let cells: Vec<&str> = l
                .split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect();
            (cells[1].parse().unwrap(), cells[2].parse().unwrap())
        })
        .collect()
}

/// Class 3: `capture stats` rows start at the first packet, as tshark's io,stat does, so the same packets land
/// in the same rows; each row's rates are divided by the time it really covers (the last row ends at the last
/// packet). Checked on a shared capture and on one recorded here with tcpdump.
#[test]
fn capture_stats_rows_match_tshark_and_rates_use_the_time_covered() {
    if !common::have("tshark") || !common::have("tcpdump") || !common::require_root("tcpdump on lo")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let recorded = tmp.path().join("ping.pcap");
    {
        let (_srv, addr) = server();
        let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
        let mut kids = common::procs::Kids::default();
        let td = kids.tcpdump(&recorded, port);
        let (code, _, stderr) = rt(&[
            "ping", &addr, "-t", "2300ms", "-i", "5ms", "-q", "--warmup", "0s",
        ]);
        assert_eq!(code, 0, "{stderr}");
        kids.stop(td);
    }
    let mut files = vec![(recorded.to_str().unwrap().to_string(), "1")];
    if let Some(dir) = common::captures_dir() {
        files.push((
            dir.join("chrissanders/http_google.pcapng")
                .to_str()
                .unwrap()
                .to_string(),
            "1",
        ));
        files.push((
            dir.join("zeek/nfs_nfs_base.pcap")
                .to_str()
                .unwrap()
                .to_string(),
            "1",
        ));
    }
    for (file, interval) in &files {
        let theirs = tshark_io_stat(file, interval);
        let v: serde_json::Value = serde_json::from_str(
            &rt(&[
                "capture",
                "stats",
                file,
                "--report-interval",
                &format!("{interval}s"),
                "--json",
            ])
            .1,
        )
        .unwrap();
        let rows = v["rows"]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: {v}"));
        let ours: Vec<(u64, u64)> = rows
            .iter()
            .map(|r| (r["packets"].as_u64().unwrap(), r["bytes"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            ours, theirs,
            "{file}: rows differ from tshark io,stat,{interval}"
        );
        // Rates: a full interval for every row but the last, which covers up to the last packet.
        let span =
            v["total"]["packets"].as_f64().unwrap() / v["total"]["packets_per_s"].as_f64().unwrap();
        let n = rows.len();
        for (i, r) in rows.iter().enumerate() {
            let (p, pps) = (
                r["packets"].as_f64().unwrap(),
                r["packets_per_s"].as_f64().unwrap(),
            );
            if p == 0.0 {
                continue;
            }
            let covered = p / pps;
            let want = if i + 1 < n {
                1.0
            } else {
                span - (n - 1) as f64
            };
            assert!(
                (covered - want).abs() < 1e-6,
                "{file} row {i}: rate over {covered} s, covers {want} s"
            );
        }
    }
}

/// Class 4: a capture of two psql sessions one after the other against the real PostgreSQL: in the what-if
/// the second follows the first (they did not overlap in the capture, so they do not in the prediction),
/// and the breakdown's parts add up to the predicted total.
#[test]
fn whatif_keeps_sequential_connections_sequential_and_its_parts_add_up() {
    if !common::service_up(5432, "PostgreSQL")
        || !common::have("psql")
        || !common::have("tcpdump")
        || !common::require_root("tcpdump on lo")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("two.pcap");
    {
        // Through a plain relay on a port of our own, so other clients of this PostgreSQL stay out of the
        // capture.
        let mut kids = common::procs::Kids::default();
        let port = kids.proxy(5432, &[]).to_string();
        let td = kids.tcpdump(&file, port.parse().unwrap());
        for _ in 0..2 {
            let out = Command::new("psql")
                .args(["-h", "127.0.0.1", "-p", &port, "-d", "test"])
                .args(["-c", "select 1", "-c", "select 2", "-c", "select 3"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        kids.stop(td);
    }
    let file = file.to_str().unwrap();
    for rtt in ["10ms", "40ms"] {
        let (code, stdout, stderr) = rt(&["capture", "whatif", file, "--rtt", rtt, "--json"]);
        assert_eq!(code, 0, "{stderr}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let conns = v["connections"].as_array().unwrap();
        assert_eq!(conns.len(), 2, "{stdout}");
        let p = &v["predictions"][0];
        let predicted = p["predicted_s"].as_f64().unwrap();
        let b = &p["breakdown"];
        let parts: f64 = ["think_s", "server_s", "round_trips_s", "transfer_s"]
            .iter()
            .map(|k| b[k].as_f64().unwrap())
            .sum();
        assert!(
            (parts - predicted).abs() < 1e-6,
            "at {rtt}: parts {parts} s, total {predicted} s"
        );
        // The two connections run one after the other: the run is at least both of them.
        let each: f64 = p["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["predicted_s"].as_f64().unwrap())
            .sum();
        assert!(
            predicted >= each,
            "at {rtt}: {predicted} s < the two connections' {each} s: they overlap"
        );
    }
}

/// Class 5: `roundtrip tcp` verdicts follow from the numbers they print. 64-byte ping-pong keeps a request in
/// flight most of the time (busy) but never fills the congestion window: application limited, with the
/// in-flight and cwnd figures that say so; never "congestion window limited" with in flight far below cwnd.
#[test]
fn tcp_verdicts_follow_from_their_numbers() {
    use std::time::Duration;
    let (_srv, addr) = server();
    let port = addr.rsplit(':').next().unwrap().to_string();
    let ping = common::procs::Proc::spawn("ping", {
        let mut c = Command::new(common::procs::bin());
        c.args(["ping", &addr, "-t", "60s", "-q"]);
        c
    });
    std::thread::sleep(Duration::from_secs(2));
    let (code, stdout, stderr) = rt(&[
        "tcp",
        "--port",
        &port,
        "--report-interval",
        "1s",
        "-t",
        "4s",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (_, text, _) = rt(&[
        "tcp",
        "--port",
        &port,
        "--report-interval",
        "1s",
        "-t",
        "3s",
    ]);
    ping.signal(libc::SIGINT);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let mut judged = 0;
    for c in v["connections"].as_array().unwrap() {
        let verdict = &c["verdict"];
        match verdict["verdict"].as_str().unwrap() {
            "congestion_window_limited" => {
                let (u, cw) = (
                    verdict["unacked"].as_f64().unwrap(),
                    verdict["cwnd"].as_f64().unwrap(),
                );
                assert!(
                    u >= 0.8 * cw,
                    "cwnd limited with {u} of {cw} segments in flight: {verdict}"
                );
            }
            "application_limited" => judged += 1,
            _ => {}
        }
    }
    assert!(
        judged > 0,
        "ping-pong was never judged application limited:\n{text}"
    );
    assert!(!text.contains("congestion window limited"), "{text}");
    assert!(text.contains("application limited"), "{text}");
}

/// The choices a command's help lists for `--chart`.
fn chart_choices(path: &[String]) -> Vec<String> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let (_, help, _) = rt(&args);
    let Some(i) = help.find("      --chart <CHART>") else {
        return Vec::new();
    };
    let rest = &help[i..];
    let j = rest.find("Possible values:").expect("listed values");
    rest[j..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim_start()[2..].split(':').next().unwrap().to_string())
        .collect()
}

/// Class 10: output options are checked before anything is measured, and `--chart` lists (and accepts)
/// only the charts the command can draw: every command with --chart draws each chart its help lists, refuses
/// the others at once (exit 2, one line), and every output file option refuses a path it cannot write
/// before measuring.
#[test]
fn output_options_are_checked_before_measuring() {
    let Some(dir) = common::captures_dir() else {
        assert!(common::skip("../shared/captures is missing"));
        return;
    };
    let cap = dir.join("zeek/http_get.pcap");
    let cap = cap.to_str().unwrap();
    let (_srv, addr) = server();
    let tmp = tempfile::tempdir().unwrap();
    let pg = "postgres://127.0.0.1:5432/test";
    let log = tmp.path().join("db.csv");
    let log = log.to_str().unwrap();
    // How each command is run to draw its charts (quick runs against real peers).
    let run_of = |cmd: &str| -> Vec<&str> {
        match cmd {
            "ping" => vec!["ping", &addr, "-c", "200", "--warmup", "0s"],
            "connect" => vec!["connect", &addr, "-c", "5", "-i", "10ms"],
            "icmp" => vec!["icmp", "127.0.0.1", "-c", "5", "-i", "10ms"],
            "load" => vec!["load", &addr, "-r", "1k", "-t", "1s", "--warmup", "100ms"],
            "sweep" => vec!["sweep", &addr, "--rates", "1k", "--sizes", "64", "-t", "1s"],
            "throughput" => vec!["throughput", &addr, "-t", "500ms", "-s", "64,1k"],
            "compare" => vec!["compare", &addr, "-c", "5", "-i", "5ms"],
            "db" => vec!["db", pg, "-c", "20", "--full-log", log],
            "capture stats" => vec!["capture", "stats", cap],
            "capture flows" => vec!["capture", "flows", cap],
            "capture timeline" => vec!["capture", "timeline", cap],
            "capture rpc" => vec!["capture", "rpc", cap],
            "capture match" => vec!["capture", "match", cap, cap],
            "tcp" => vec![
                "tcp",
                "--port",
                addr.rsplit(':').next().unwrap(),
                "--report-interval",
                "300ms",
                "-t",
                "1s",
            ],
            other => {
                panic!("{other}: has --chart but this test does not know how to run it; add it")
            }
        }
    };
    let all = chart_choices(&["report".to_string()]);
    assert_eq!(all.len(), 14, "report lists every chart: {all:?}");
    let mut walked = Vec::new();
    // tcp needs a connection to watch.
    let _ping = common::procs::Proc::spawn("ping", {
        let mut c = Command::new(common::procs::bin());
        c.args(["ping", &addr, "-t", "300s", "-q", "-i", "10ms"]);
        c
    });
    for path in commands() {
        let name = path.join(" ");
        if name == "report" {
            continue;
        }
        let listed = chart_choices(&path);
        if listed.is_empty() {
            continue;
        }
        assert!(
            listed.len() < all.len(),
            "{name} lists every chart: {listed:?}"
        );
        // Each listed chart is drawn.
        for chart in &listed {
            let svg = tmp
                .path()
                .join(format!("{}-{chart}.svg", name.replace(' ', "-")));
            let mut args = run_of(&name);
            args.extend(["--svg", svg.to_str().unwrap(), "--chart", chart]);
            let (code, _, stderr) = rt(&args);
            assert_eq!(code, 0, "{}: {stderr}", args.join(" "));
            let text = std::fs::read_to_string(&svg).unwrap_or_default();
            assert!(text.contains("<svg"), "{}: no SVG written", args.join(" "));
            walked.push(format!("{name} --chart {chart}"));
        }
        // Another is refused before anything runs (a closed port or a missing file would fail later).
        let other = all.iter().find(|c| !listed.contains(c)).unwrap();
        let mut args = run_of(&name);
        args.extend(["--svg", "/tmp/never.svg", "--chart", other]);
        let (code, stdout, stderr) = rt(&args);
        assert_eq!(code, 2, "{}: {stderr}", args.join(" "));
        assert!(
            stdout.is_empty(),
            "{}: measured first:\n{stdout}",
            args.join(" ")
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        // An output file it cannot write: refused before measuring.
        for flag in ["--report", "--svg"] {
            let mut args = run_of(&name);
            args.extend([flag, "/proc/roundtrip-cannot-write-here"]);
            let (code, stdout, stderr) = rt(&args);
            assert_eq!(code, 2, "{}: {stderr}", args.join(" "));
            assert!(
                stdout.is_empty(),
                "{}: measured first:\n{stdout}",
                args.join(" ")
            );
            assert!(
                stderr.starts_with("roundtrip: error: cannot write "),
                "{stderr}"
            );
        }
    }
    for cmd in ["ping", "db", "tcp"] {
        let mut args = run_of(cmd);
        if cmd == "db" {
            args.truncate(4);
        }
        args.extend(["--full-log", "/proc/roundtrip-cannot-write-here.csv"]);
        let (code, stdout, stderr) = rt(&args);
        assert_eq!(code, 2, "{}: {stderr}", args.join(" "));
        assert!(stdout.is_empty(), "{}", args.join(" "));
    }
    for args in [
        vec![
            "capture",
            "whatif",
            cap,
            "--rtt",
            "10ms",
            "--report",
            "/proc/x/y.html",
        ],
        vec![
            "mesh",
            "--agent",
            "http://127.0.0.1:1",
            "--report",
            "/proc/x/y.html",
        ],
    ] {
        let (code, _, stderr) = rt(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }
    eprintln!("charts: {}", walked.join("; "));
}

/// The bulk direction of each flow of `capture flows FILE --json`: (diagnosis, in flight max, receiver's
/// window max, receiver-limited segments).
fn flow_windows(file: &std::path::Path) -> Vec<(String, u64, u64, u64)> {
    let (code, stdout, stderr) = rt(&["capture", "flows", file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{}: {stderr}", file.display());
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    doc["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let (up, down) = (&f["client_to_server"], &f["server_to_client"]);
            let (bulk, recv) = if up["payload_bytes"].as_u64() >= down["payload_bytes"].as_u64() {
                (up, down)
            } else {
                (down, up)
            };
            (
                f["diagnosis"].as_str().unwrap().to_string(),
                bulk["in_flight_max_bytes"].as_u64().unwrap(),
                recv["window_max_bytes"].as_u64().unwrap(),
                bulk["receiver_limited_segments"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Class 5 for `capture flows`' rwnd max: when the capture does not hold the handshake that announced the
/// window scale, the window is the raw 16-bit field and its real size unknown: the text marks it `N?` with a
/// legend saying so, the JSON says `window_scale_known: false`. With the handshake (the shipped pgbench
/// capture) the window is in bytes, unmarked, and the JSON says true.
#[test]
fn capture_flows_marks_a_window_whose_scale_is_unknown() {
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/captures");
    let with = shipped.join("pgbench-select.pcap");
    let with = with.to_str().unwrap();
    let (code, text, stderr) = rt(&["capture", "flows", with]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!text.contains("unscaled"), "{text}");
    let (_, json, _) = rt(&["capture", "flows", with, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    for f in doc["flows"].as_array().unwrap() {
        for dir in ["client_to_server", "server_to_client"] {
            assert_eq!(f[dir]["window_scale_known"], true, "{f}");
        }
    }
    let Some(d) = common::captures_dir() else {
        return;
    };
    let without = d.join("chrissanders/tcp_dupack.pcapng");
    let without = without.to_str().unwrap();
    let (code, text, stderr) = rt(&["capture", "flows", without]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        text.contains("rwnd max N? = the raw window field, unscaled"),
        "{text}"
    );
    let (_, json, _) = rt(&["capture", "flows", without, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let flows = doc["flows"].as_array().unwrap();
    assert!(!flows.is_empty());
    for f in flows {
        let (up, down) = (&f["client_to_server"], &f["server_to_client"]);
        assert_eq!(f["handshake_seen"], false, "{f}");
        assert_eq!(up["window_scale_known"], false, "{f}");
        assert_eq!(down["window_scale_known"], false, "{f}");
        // The row shows the receiver's raw window with the mark.
        let recv = if up["payload_bytes"].as_u64() >= down["payload_bytes"].as_u64() {
            down
        } else {
            up
        };
        let cell = format!(" {}? ", recv["window_max_bytes"].as_u64().unwrap());
        assert!(text.contains(&cell), "no {cell:?} in\n{text}");
    }
}

/// Class 5 for `capture flows` (its limit column r/s/a and its diagnosis): a window limit needs in-flight bytes
/// near the advertised window. The shipped loopback captures of pgbench, redis-benchmark and roundtrip ping
/// (request/response, a few hundred bytes in flight against 64 KiB windows, loopback's MSS about 64 KiB) are
/// application-limited, no segment receiver-limited; a capture that starts after the handshake (window scale
/// unknown) gets no window verdict; a real bulk transfer on loopback into a receiver that
/// stops reading (small SO_RCVBUF), recorded with tcpdump, is receiver-limited with in flight at its window.
#[test]
fn capture_flows_calls_a_window_limit_only_with_in_flight_at_the_window() {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/captures");
    for name in [
        "pgbench-select.pcap",
        "redis-benchmark.pcap",
        "roundtrip-ping.pcap",
    ] {
        for (diagnosis, in_flight, window, r) in flow_windows(&shipped.join(name)) {
            assert_eq!(
                r, 0,
                "{name}: {diagnosis} (in flight {in_flight}, window {window})"
            );
            assert!(
                diagnosis.contains("application-limited"),
                "{name}: {diagnosis}"
            );
        }
    }
    // A capture that starts after the handshake (a real web download): the window's scale is unknown, so its
    // raw 382-byte window field against 14.7 KiB in flight judges nothing.
    if let Some(d) = common::captures_dir() {
        for (diagnosis, _, _, r) in flow_windows(&d.join("chrissanders/tcp_dupack.pcapng")) {
            assert_eq!(r, 0, "tcp_dupack: {diagnosis}");
            assert!(!diagnosis.contains("limited"), "tcp_dupack: {diagnosis}");
        }
    }
    if !common::require_root("tcpdump on lo") {
        return;
    }
    if !common::have("tcpdump") {
        common::skip("tcpdump is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("bulk.pcap");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // A small receive buffer, inherited by the accepted socket: a window of a few KiB.
    let size: libc::c_int = 8192;
    // SAFETY: setsockopt on a socket this test owns, with a pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    let mut kids = common::procs::Kids::default();
    let dump = kids.tcpdump(&pcap, port);
    let sender = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&vec![7u8; 1 << 20]).unwrap();
    });
    let (mut conn, _) = listener.accept().unwrap();
    // Not reading for a while: the sender fills the window; then reading slowly, a few KiB at a time.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut buf = [0u8; 4096];
    let mut got = 0;
    while got < 1 << 20 {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
        if got < 256 << 10 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    sender.join().unwrap();
    drop(conn);
    std::thread::sleep(std::time::Duration::from_millis(300));
    kids.stop(dump);
    let flows = flow_windows(&pcap);
    assert_eq!(flows.len(), 1, "{flows:?}");
    let (diagnosis, in_flight, window, r) = &flows[0];
    assert!(*r > 0, "{diagnosis}");
    assert!(diagnosis.contains("receiver-limited"), "{diagnosis}");
    // In flight reached the window: the limit the verdict names is in its own figures.
    assert!(
        in_flight * 4 >= window * 3,
        "in flight {in_flight} against a window of {window}: {diagnosis}"
    );
}

/// Class 5 for `compare`: the payload row says the payload "adds" time only when its median is above the
/// header-only row's; at or below it, it says the cost is below the run's noise. Real pings to a real server,
/// with a 15-byte payload row beside the 14-byte header row (their medians land either way) and a 250-byte one.
#[test]
fn compare_says_the_payload_adds_time_only_when_its_median_is_higher() {
    let (_srv, addr) = server();
    for size in ["15", "250", "15"] {
        let (code, stdout, stderr) = rt(&[
            "compare", &addr, "-c", "50", "-i", "1ms", "--size", size, "--json",
        ]);
        assert_eq!(code, 0, "{stderr}");
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let rows = doc["rows"].as_array().unwrap();
        let p50 = |kind: &str| {
            rows.iter().find(|r| r["kind"] == kind).unwrap()["summary"]["p50_ns"]
                .as_u64()
                .unwrap()
        };
        let (header, payload) = (p50("ping_header"), p50("ping_payload"));
        let words = rows.iter().find(|r| r["kind"] == "ping_payload").unwrap()["interpretation"]
            .as_str()
            .unwrap();
        assert_eq!(
            words.contains("adds"),
            payload > header,
            "p50 {payload} ns vs {header} ns: {words}"
        );
    }
}

/// Class 5 for `capture match`: its verdict says the path "adds" time with the positive figure it measured
/// (a negative one is said as what it is, not as "adds 0": unit test in src/capture/matching.rs).
/// Real traffic: roundtrip ping through `roundtrip proxy --rtt 20ms` to a real server, tcpdump on both sides.
#[test]
fn capture_match_says_the_path_adds_time_only_when_it_did() {
    if !common::require_root("tcpdump on lo") {
        return;
    }
    if !common::have("tcpdump") {
        common::skip("tcpdump is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut kids = common::procs::Kids::default();
    let sp = kids.server(&[]);
    let pp = kids.proxy(sp, &["--rtt", "20ms"]);
    let (client, srv) = (
        dir.path().join("client.pcap"),
        dir.path().join("server.pcap"),
    );
    let tc = kids.tcpdump(&client, pp);
    let ts = kids.tcpdump(&srv, sp);
    let (code, _, stderr) = rt(&["ping", &format!("127.0.0.1:{pp}"), "-c", "30", "-i", "10ms"]);
    assert_eq!(code, 0, "{stderr}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    kids.stop(tc);
    kids.stop(ts);
    let verdict = |a: &std::path::Path, b: &std::path::Path| {
        let (code, stdout, stderr) = rt(&[
            "capture",
            "match",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(code, 0, "{stderr}");
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        (
            doc["verdict"].as_str().unwrap().to_string(),
            doc["ops"][0]["diff_mean_ns"].as_f64().unwrap(),
        )
    };
    let (right, diff) = verdict(&client, &srv);
    // The proxy's 20 ms is in the path's figure, and the verdict says it adds (the negative case, files the
    // wrong way round, is src/capture/matching.rs's a_negative_path_time_is_not_said_as_adding_zero).
    assert!(diff >= 20e6, "{right}");
    assert!(
        right.contains("the path between the captures adds"),
        "{right}"
    );
}
