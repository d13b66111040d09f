//! `capture rpc` and `capture match` on the shared real captures, cross-checked against tshark on the same
//! files, plus the command line.

mod common;

use assert_cmd::Command;
use roundtrip::capture::Filter;
use roundtrip::capture::matching::{PathTime, Verdict};
use roundtrip::capture::rpc::driver::ProtoChoice;
use roundtrip::capture::rpc::run::{collect, run_rpc};
use roundtrip::capture::rpc::stats::{RpcReport, StatsConfig};
use roundtrip::capture::rpc::{AnomalyKind, Proto};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn shared(name: &str) -> Option<PathBuf> {
    let dir = common::captures_dir()?;
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing from the shared captures",
        p.display()
    );
    Some(p)
}

fn report(path: &Path, choice: ProtoChoice) -> RpcReport {
    let cfg = StatsConfig {
        top: 5,
        interval: None,
        by_conn: false,
        live_interval: None,
    };
    run_rpc(path, &Filter::default(), choice, cfg)
        .unwrap()
        .report
}

fn tshark(args: &[&str]) -> String {
    let o = std::process::Command::new("tshark")
        .args(args)
        .output()
        .expect("tshark runs");
    assert!(
        o.status.success(),
        "tshark {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// One row of `tshark -q -z rpc,srt,100003,V`: calls and the Min / Max / Avg SRT columns as printed.
#[derive(Debug)]
struct SrtRow {
    calls: u64,
    min: String,
    max: String,
    avg: String,
}

/// Per-procedure rows of `tshark -q -z rpc,srt,100003,VERSION`.
fn tshark_srt(path: &Path, version: u32) -> BTreeMap<String, SrtRow> {
    let z = format!("rpc,srt,100003,{version}");
    let text = tshark(&["-q", "-z", &z, "-r", path.to_str().unwrap()]);
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 7 && f[0].parse::<u32>().is_ok() {
            m.insert(
                f[1].to_string(),
                SrtRow {
                    calls: f[2].parse().unwrap(),
                    min: f[3].into(),
                    max: f[4].into(),
                    avg: f[5].into(),
                },
            );
        }
    }
    m
}

/// Seconds with six decimals, rounded or truncated (tshark prints one of the two): both are offered.
fn us_texts(ns: f64) -> [String; 2] {
    let us = ns / 1e3;
    let fmt = |us: f64| format!("{}.{:06}", (us as u64) / 1_000_000, (us as u64) % 1_000_000);
    [fmt(us.round()), fmt(us.floor())]
}

/// Every capture under the shared folder (both sub-folders).
fn all_shared_captures() -> Vec<PathBuf> {
    let Some(dir) = common::captures_dir() else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for sub in std::fs::read_dir(&dir).unwrap().flatten() {
        if !sub.path().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            let p = f.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name.ends_with(".pcap") || name.ends_with(".pcapng") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

/// The first-byte time of every NFS operation (v3 and v4) of every capture tshark finds NFS in equals
/// tshark's `rpc,srt` to the microsecond: same calls, same Min, Max and Avg SRT as tshark prints them.
#[test]
fn nfs_first_byte_agrees_with_tshark_rpc_srt() {
    if !common::have("tshark") {
        return;
    }
    let files = all_shared_captures();
    if files.is_empty() {
        return;
    }
    let mut checked_files = 0;
    let mut checked_ops = 0;
    for p in &files {
        let name = p.display().to_string();
        let mut theirs = tshark_srt(p, 3);
        let v4 = tshark_srt(p, 4);
        if theirs.is_empty() && v4.is_empty() {
            continue;
        }
        checked_files += 1;
        theirs.extend(v4);
        let ours = report(p, ProtoChoice::Auto);
        for (proc_, row) in &theirs {
            let o = ours
                .ops
                .iter()
                .find(|o| o.proto == Proto::Nfs && &o.op == proc_)
                .unwrap_or_else(|| panic!("{name}: {proc_} missing, ours: {:?}", ours.ops));
            let f = &o.first_byte;
            assert_eq!(f.count, row.calls, "{name} {proc_} count");
            assert_eq!(o.last_byte.count, row.calls, "{name} {proc_} count");
            for (what, ns, want) in [
                ("Avg", f.mean_ns, &row.avg),
                ("Min", f.min_ns as f64, &row.min),
                ("Max", f.max_ns as f64, &row.max),
            ] {
                let mine = us_texts(ns);
                assert!(
                    mine.contains(want),
                    "{name} {proc_} {what} SRT: ours {} ns ({mine:?}), tshark {want}",
                    ns
                );
            }
            // The last byte never comes before the first.
            assert!(o.last_byte.mean_ns >= f.mean_ns, "{name} {proc_}");
            checked_ops += 1;
        }
        // and nothing NFS tshark did not count
        let nfs = ours
            .ops
            .iter()
            .filter(|o| o.proto == Proto::Nfs && !o.op.contains(' '))
            .count();
        assert_eq!(nfs, theirs.len(), "{name}");
    }
    assert!(
        checked_files >= 3 && checked_ops > 20,
        "tshark found NFS in {checked_files} captures ({checked_ops} operations)"
    );
}

#[test]
fn nfs_snaplen_cut_captures_give_the_same_answers() {
    if !common::have("editcap") {
        return;
    }
    let Some(p) = shared("zeek/nfs_nfs_write.pcap") else {
        return;
    };
    let full = report(&p, ProtoChoice::Auto);
    let dir = tempfile::tempdir().unwrap();
    for snap in ["96", "512"] {
        let cut = dir.path().join(format!("s{snap}.pcap"));
        let st = std::process::Command::new("editcap")
            .args(["-s", snap, p.to_str().unwrap(), cut.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success());
        let r = report(&cut, ProtoChoice::Auto);
        let counts = |r: &RpcReport| -> BTreeMap<String, (u64, u64)> {
            r.ops
                .iter()
                .map(|o| (o.op.clone(), (o.last_byte.count, o.last_byte.max_ns)))
                .collect()
        };
        if snap == "512" {
            assert_eq!(counts(&r), counts(&full), "-s {snap}");
            continue;
        }
        // -s 96 keeps 30 bytes of TCP payload: frame 67 holds two pipelined calls and frame 70 their two
        // replies; the second header of each lies beyond the snap, so that one GETATTR cannot be seen. Every
        // other request is found with the same latency, and the loss is reported.
        let (f, c) = (counts(&full), counts(&r));
        for (op, (n, max)) in &f {
            let (m, mx) = c.get(op).copied().unwrap_or((0, 0));
            if op == "GETATTR" {
                assert_eq!(m, n - 1, "-s 96 {op}");
            } else {
                assert_eq!((m, mx), (*n, *max), "-s 96 {op}");
            }
        }
        let lost: u64 = r
            .anomalies
            .iter()
            .filter(|a| a.kind == AnomalyKind::LostFraming.name())
            .map(|a| a.count)
            .sum();
        assert_eq!(lost, 2, "{:?}", r.anomalies);
    }
}

/// (count, mean seconds) of a tshark time field over the packets where it is set.
fn tshark_times(path: &Path, field: &str) -> (u64, f64) {
    let text = tshark(&["-r", path.to_str().unwrap(), "-T", "fields", "-e", field]);
    let v: Vec<f64> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.parse().unwrap())
        .collect();
    let n = v.len() as u64;
    (
        n,
        if n > 0 {
            v.iter().sum::<f64>() / n as f64
        } else {
            0.0
        },
    )
}

#[test]
fn dns_and_http_agree_with_tshark() {
    if !common::have("tshark") {
        return;
    }
    let cases = [
        (
            "chrissanders/dns_query_response.pcapng",
            "dns.time",
            Proto::Dns,
        ),
        ("zeek/dns53.pcap", "dns.time", Proto::Dns),
        ("zeek/http_get.pcap", "http.time", Proto::Http),
        ("chrissanders/http_google.pcapng", "http.time", Proto::Http),
        ("chrissanders/latency1.pcapng", "http.time", Proto::Http),
        ("chrissanders/latency2.pcapng", "http.time", Proto::Http),
        ("chrissanders/latency3.pcapng", "http.time", Proto::Http),
        ("chrissanders/latency4.pcapng", "http.time", Proto::Http),
    ];
    for (name, field, proto) in cases {
        let Some(p) = shared(name) else { return };
        let (n, mean_s) = tshark_times(&p, field);
        let r = report(&p, ProtoChoice::Auto);
        let ours: u64 = r
            .ops
            .iter()
            .filter(|o| o.proto == proto)
            .map(|o| o.last_byte.count)
            .sum();
        assert_eq!(ours, n, "{name}: transactions");
        if n > 0 {
            let total: f64 = r
                .ops
                .iter()
                .map(|o| o.last_byte.mean_ns * o.last_byte.count as f64)
                .sum();
            let diff_us = (total / n as f64 / 1e3 - mean_s * 1e6).abs();
            assert!(diff_us <= 1.0, "{name}: mean differs by {diff_us} us");
        }
    }
}

#[test]
fn capture_ending_mid_response_and_reply_without_request_are_reported() {
    for n in 1..=4 {
        let Some(p) = shared(&format!("chrissanders/latency{n}.pcapng")) else {
            return;
        };
        let r = report(&p, ProtoChoice::Auto);
        assert_eq!(r.transactions, 0);
        assert_eq!(r.anomalies.len(), 1, "{:?}", r.anomalies);
        assert_eq!(r.anomalies[0].kind, AnomalyKind::IncompleteResponse.name());
    }
    // dns53.pcap holds a response only (the capture started after the query)
    let Some(p) = shared("zeek/dns53.pcap") else {
        return;
    };
    let r = report(&p, ProtoChoice::Auto);
    assert_eq!(
        r.anomalies[0].kind,
        AnomalyKind::ResponseWithoutRequest.name()
    );
}

/// Count of tshark's values of `field` over the capture, split at commas.
fn tshark_values(path: &Path, field: &str) -> Vec<String> {
    tshark(&["-r", path.to_str().unwrap(), "-T", "fields", "-e", field])
        .lines()
        .flat_map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn databases_agree_with_tshark_message_counts() {
    if !common::have("tshark") {
        return;
    }
    // PostgreSQL: one transaction per ReadyForQuery.
    for name in [
        "zeek/postgresql_psql-create-insert-select-delete-drop.pcap",
        "zeek/postgresql_psql-select-now.pcap",
    ] {
        let Some(p) = shared(name) else { return };
        let ready = tshark_values(&p, "pgsql.type")
            .iter()
            .filter(|t| *t == "Ready for query")
            .count();
        let queries = tshark_values(&p, "pgsql.type")
            .iter()
            .filter(|t| *t == "Simple query")
            .count();
        let r = report(&p, ProtoChoice::Auto);
        assert_eq!(r.transactions as usize, ready, "{name}");
        let ours_q: u64 = r
            .ops
            .iter()
            .filter(|o| o.op != "STARTUP")
            .map(|o| o.last_byte.count)
            .sum();
        assert_eq!(ours_q as usize, queries, "{name}");
        assert!(r.anomalies.is_empty(), "{name}: {:?}", r.anomalies);
    }
    // MySQL: one transaction per command except COM_QUIT (1), plus the login.
    for name in [
        "zeek/mysql_mysql.pcap",
        "zeek/mysql_selects_with_new_proto.pcap",
    ] {
        let Some(p) = shared(name) else { return };
        let cmds = tshark_values(&p, "mysql.command")
            .iter()
            .filter(|c| *c != "1")
            .count();
        let r = report(&p, ProtoChoice::Auto);
        let ours: u64 = r
            .ops
            .iter()
            .filter(|o| o.op != "CONNECT")
            .map(|o| o.last_byte.count)
            .sum();
        assert_eq!(ours as usize, cmds, "{name}: {:?}", r.ops);
        assert!(r.anomalies.is_empty(), "{name}: {:?}", r.anomalies);
    }
}

#[test]
fn redis_pipelines_and_almost_resp() {
    let Some(p) = shared("zeek/redis_pipeline-with-commands.pcap") else {
        return;
    };
    let r = report(&p, ProtoChoice::Auto);
    let ops: BTreeMap<String, u64> = r
        .ops
        .iter()
        .map(|o| (o.op.clone(), o.last_byte.count))
        .collect();
    assert_eq!(
        ops,
        BTreeMap::from([("GET".into(), 1), ("PING".into(), 2), ("SET".into(), 1)])
    );
    let Some(p) = shared("zeek/redis_pipelining-example.pcap") else {
        return;
    };
    let r = report(&p, ProtoChoice::Auto);
    assert_eq!(r.transactions, 3);
    // pipelined: the three replies came in one segment, so all three have the same end time
    assert_eq!(r.ops[0].last_byte.min_ns, r.ops[0].last_byte.max_ns);
    let Some(p) = shared("zeek/redis_almost-resp.pcap") else {
        return;
    };
    let r = report(&p, ProtoChoice::Auto);
    assert!(
        r.anomalies
            .iter()
            .any(|a| a.kind == AnomalyKind::Unparseable.name()),
        "{:?}",
        r.anomalies
    );
}

#[test]
fn garbage_on_a_database_port() {
    // The bad backend message: PostgreSQL's port, bytes that are not its protocol.
    let Some(p) = shared("zeek/postgresql_bad-backend-message-1.pcap") else {
        return;
    };
    let r = report(&p, ProtoChoice::Auto);
    assert_eq!(r.transactions, 0);
    assert!(
        r.anomalies
            .iter()
            .any(|a| a.kind == AnomalyKind::Unparseable.name())
    );
    // HTTP traffic forced through the MySQL and PostgreSQL parsers.
    let Some(p) = shared("chrissanders/http_google.pcapng") else {
        return;
    };
    for proto in [
        Proto::Mysql,
        Proto::Pgsql,
        Proto::Redis,
        Proto::Nfs,
        Proto::Tns,
    ] {
        let r = report(&p, ProtoChoice::Force(proto));
        assert_eq!(r.transactions, 0, "{proto}");
        assert!(
            r.anomalies
                .iter()
                .any(|a| a.kind == AnomalyKind::Unparseable.name()),
            "{proto}: {:?}",
            r.anomalies
        );
    }
}

#[test]
fn every_shared_capture_is_analysed_without_panic_by_every_parser() {
    let Some(dir) = common::captures_dir() else {
        return;
    };
    for sub in ["zeek", "chrissanders"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if !p.to_string_lossy().contains(".pcap") {
                continue;
            }
            for proto in Proto::ALL {
                let _ = report(&p, ProtoChoice::Force(proto));
            }
            let _ = report(&p, ProtoChoice::Auto);
        }
    }
}

#[test]
fn match_pairs_a_capture_with_itself_and_rejects_unrelated_traffic() {
    let Some(a) = shared("zeek/nfs_nfs_write.pcap") else {
        return;
    };
    let Some(b) = shared("zeek/nfs_nfs_base.pcap") else {
        return;
    };
    let (_, ca) = collect(&a, &Filter::default(), ProtoChoice::Auto).unwrap();
    let (_, cb) = collect(&b, &Filter::default(), ProtoChoice::Auto).unwrap();
    let (same, v) =
        roundtrip::capture::matching::match_captures(&ca.transactions, &ca.transactions);
    assert!(!same.unrelated);
    assert_eq!(same.matched as usize, ca.transactions.len());
    assert_eq!(same.clock_offset_ns, Some(0));
    assert!(same.ops.iter().all(|o| o.diff_mean_ns == 0.0));
    // The verdict's facts: the busiest operation, nothing added by the path, one clock, no box between.
    let top = same.ops.iter().find(|o| o.matched > 0).unwrap();
    assert_eq!(
        v,
        Verdict::Matched {
            op: top.op.clone(),
            op_matched: top.matched,
            server_mean_ns: top.server.mean_ns,
            path: PathTime::Adds { ns: 0.0 },
            clock_offset_ns: Some(0),
            through_box: None,
        }
    );
    assert!(top.matched > 0 && top.server.mean_ns > 0.0, "{v:?}");
    let (un, v) = roundtrip::capture::matching::match_captures(&ca.transactions, &cb.transactions);
    assert!(un.unrelated, "{v:?}");
    assert_eq!(un.matched, 0);
    assert_eq!(
        v,
        Verdict::Unrelated {
            matched: 0,
            client_requests: ca.transactions.len() as u64,
            server_requests: cb.transactions.len() as u64,
        }
    );
    let words = roundtrip::report::match_verdict::words(&v);
    assert!(words.contains("do not show the same traffic"), "{words}");
}

// ---------- command line ----------

fn cmd() -> Command {
    Command::cargo_bin("roundtrip").unwrap()
}

#[test]
fn cli_rpc_text_and_json() {
    let Some(p) = shared("zeek/nfs_nfs_write.pcap") else {
        return;
    };
    let o = cmd()
        .args(["capture", "rpc"])
        .arg(&p)
        .args(["--top", "2", "--report-interval", "100ms", "--by-conn"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    for want in [
        "GETATTR",
        "WRITE",
        "slowest 2 requests",
        "xid 0x",
        "per interval",
        "per connection",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
    let o = cmd()
        .args(["capture", "rpc", "--json"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kind"], "capture-rpc");
    assert_eq!(v["report"]["transactions"], 56);
    let ops = v["report"]["ops"].as_array().unwrap();
    let getattr = ops.iter().find(|o| o["op"] == "GETATTR").unwrap();
    assert_eq!(getattr["last_byte"]["count"], 29);
    assert!(getattr["last_byte"]["mean_ns"].as_f64().unwrap() > 0.0);
}

#[test]
fn cli_bad_input() {
    // unknown protocol: rejected before reading anything
    let o = cmd()
        .args(["capture", "rpc", "--proto", "smtp", "x.pcap"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown protocol 'smtp'"));
    // missing file
    let o = cmd()
        .args(["capture", "rpc", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/nonexistent/x.pcap") && err.lines().count() == 1,
        "{err}"
    );
    // not a capture
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("notes.txt");
    std::fs::write(&f, "hello, this is not a capture file at all").unwrap();
    let o = cmd().args(["capture", "rpc"]).arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("notes.txt"));
    // a capture with nothing to pair: says so, exit 1
    let Some(p) = shared("chrissanders/tcp_zerowindowrecovery.pcapng") else {
        return;
    };
    let o = cmd().args(["capture", "rpc"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no request/response pair"));
}

#[test]
fn cli_match_unrelated_files_says_so() {
    let Some(a) = shared("zeek/nfs_nfs_write.pcap") else {
        return;
    };
    let Some(b) = shared("zeek/mysql_mysql.pcap") else {
        return;
    };
    let o = cmd()
        .args(["capture", "match"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("verdict: the two captures do not show the same traffic"),
        "{text}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("do not show the same requests"));
    let o = cmd()
        .args(["capture", "match", "--json"])
        .arg(&a)
        .arg(&a)
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kind"], "capture-match");
    assert_eq!(v["matched"], 56);
    assert_eq!(v["unrelated"], false);
}

/// `capture rpc` opens with the answer (the line after the file's heading), the same sentence in the HTML
/// report; the shipped pgbench capture gives it exactly.
#[test]
fn answer_leads_text_and_html() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("rpc.html");
    let out = Command::cargo_bin("roundtrip")
        .unwrap()
        .current_dir(root)
        .args([
            "capture",
            "rpc",
            "docs/captures/pgbench-select.pcap",
            "--report",
            html.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let want = "of the 48.0us median time to the last byte of SELECT (202 of 204 requests), 48.0us is the server \
                and the network together (to the first response byte; one capture point cannot split them), 0ns \
                the transfer of the rest (last - first)";
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("docs/captures/pgbench-select.pcap: pcap"),
        "{text}"
    );
    assert_eq!(lines[1], want, "{text}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(&format!("<p class=\"answer\">{want}</p>")));
}
