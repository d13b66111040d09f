//! SMB2 in `capture rpc`, on a real capture: a real smbd (tests/common/samba.rs) on a free port, tcpdump on
//! loopback, smbclient running ls, put, a 5 MB get, mkdir, rmdir, a get of a missing file and allinfo; then
//! `roundtrip capture rpc FILE --json` against `tshark -d tcp.port==PORT,nbss -q -z smb2,srt` on the same file.
//!
//! tshark times a response at the frame where it dissects it: the frame that completes the response (the
//! last byte, after reassembly), from the frame that completes the request. So its SRT is our time to the
//! LAST byte; our time to the first byte is the same for one-segment responses and shorter for the READ of
//! the 5 MB file (its response spans many segments).

mod common;

use common::tcpdump::Tcpdump;

use common::samba::Samba;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One row of `tshark -z smb2,srt`: command code, name, calls, average SRT in seconds as printed.
#[derive(Debug)]
struct SrtRow {
    name: String,
    calls: u64,
    avg_s: f64,
}

/// `tshark -r FILE -d tcp.port==PORT,nbss -q -z smb2,srt`, by command code (tshark's Index column).
fn tshark_smb2_srt(file: &Path, port: u16) -> BTreeMap<u16, SrtRow> {
    let o = Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args([
            "-d",
            &format!("tcp.port=={port},nbss"),
            "-q",
            "-z",
            "smb2,srt",
        ])
        .output()
        .expect("tshark runs");
    assert!(
        o.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let mut rows = BTreeMap::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        // Index  Commands (words)  Calls  Min  Max  Avg  Sum
        if w.len() < 7 {
            continue;
        }
        let Ok(code) = w[0].parse::<u16>() else {
            continue;
        };
        let n = w.len();
        rows.insert(
            code,
            SrtRow {
                name: w[1..n - 5].join(" "),
                calls: w[n - 5].parse().unwrap(),
                avg_s: w[n - 2].parse().unwrap(),
            },
        );
    }
    rows
}

fn rpc_json(file: &Path, extra: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_roundtrip"))
        .args(["capture", "rpc"])
        .arg(file)
        .arg("--json")
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

#[test]
fn smbclient_session_agrees_with_tshark_smb2_srt() {
    if !common::have("tcpdump") || !common::have("tshark") {
        return;
    }
    let Some(smb) = Samba::start() else {
        return;
    };
    let port = smb.addr.port();
    smb.put_file("big", 5_000_000);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("up.txt");
    std::fs::write(&local, vec![b'x'; 12_345]).unwrap();
    let pcap = dir.path().join("smb.pcap");
    // tshark's SMB2 statistics on a loaded machine have been seen to leave out a command whose request and
    // response are both in the file (READ, once in a full-suite run): the session is recorded again, up to 3 times, while
    // the two disagree on which commands there are; a parser that invents or loses a command disagrees every
    // time, and the checks below run on the last recording either way.
    let mut attempt = 0;
    let (doc, ops, theirs) = loop {
        attempt += 1;
        let td = Tcpdump::port(&pcap, port);
        let commands = format!(
            "ls; put {} up.txt; get big /dev/null; mkdir d1; rmdir d1; get missing /dev/null; allinfo big",
            local.display()
        );
        let (_, out, _) = Samba::client(smb.addr, &commands);
        // let tcpdump write out the last packets before it is stopped
        std::thread::sleep(Duration::from_millis(500));
        td.stop();
        assert!(
            out.contains("NT_STATUS_OBJECT_NAME_NOT_FOUND"),
            "smbclient output: {out}"
        );
        assert!(
            smb.share_dir().join("up.txt").is_file(),
            "put failed: {out}"
        );

        // A port that is not 445: found by content.
        let doc = rpc_json(&pcap, &[]);
        let ops: BTreeMap<String, serde_json::Value> = doc["report"]["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                assert_eq!(o["proto"], "smb2", "{o}");
                (o["op"].as_str().unwrap().to_string(), o.clone())
            })
            .collect();
        let theirs = tshark_smb2_srt(&pcap, port);
        let same: Vec<String> = theirs
            .keys()
            .map(|c| roundtrip::capture::rpc::smb2::command_name(*c).to_string())
            .collect();
        if attempt == 3 || same.len() == ops.len() && same.iter().all(|n| ops.contains_key(n)) {
            break (doc, ops, theirs);
        }
        eprintln!(
            "note: tshark and roundtrip disagree on the commands of recording {attempt} ({same:?} vs {:?}); recording again",
            ops.keys().collect::<Vec<_>>()
        );
        let _ = std::fs::remove_file(smb.share_dir().join("up.txt"));
    };
    assert!(
        theirs.len() >= 8,
        "tshark saw too few SMB2 commands: {theirs:?}"
    );
    for (code, row) in &theirs {
        let name = roundtrip::capture::rpc::smb2::command_name(*code);
        let mine = ops
            .get(name.as_ref())
            .unwrap_or_else(|| panic!("tshark counts {} ({name}), we do not", row.name));
        assert_eq!(
            mine["last_byte"]["count"].as_u64(),
            Some(row.calls),
            "{name} count"
        );
        let last = mine["last_byte"]["mean_ns"].as_f64().unwrap();
        let first = mine["first_byte"]["mean_ns"].as_f64().unwrap();
        // tshark prints seconds with six decimals: within 1 us of its average.
        assert!(
            (last - row.avg_s * 1e9).abs() <= 1000.0,
            "{name}: our mean to the last byte {last} ns, tshark {} s",
            row.avg_s
        );
        assert!(first <= last + 0.5, "{name}: first {first} > last {last}");
        eprintln!(
            "{name:<16} calls {:>3}  tshark avg {:>9.6} s  ours last byte {:>9.6} s  first byte {:>9.6} s",
            row.calls,
            row.avg_s,
            last / 1e9,
            first / 1e9
        );
    }
    assert_eq!(
        ops.len(),
        theirs.len(),
        "we count commands tshark does not: {:?}",
        ops.keys().collect::<Vec<_>>()
    );

    // READ and WRITE bytes; the 5 MB READ response spans many segments.
    let read = &ops["READ"];
    assert_eq!(read["bytes"].as_u64(), Some(5_000_000));
    assert!(
        read["first_byte"]["mean_ns"].as_f64().unwrap()
            < read["last_byte"]["mean_ns"].as_f64().unwrap()
    );
    assert_eq!(ops["WRITE"]["bytes"].as_u64(), Some(12_345));
    // The missing file is an error with its NT status; SESSION_SETUP's MORE_PROCESSING_REQUIRED is not.
    assert_eq!(
        ops["CREATE"]["errors_by_status"]["STATUS_OBJECT_NAME_NOT_FOUND"].as_u64(),
        Some(1),
        "{}",
        ops["CREATE"]
    );
    assert_eq!(ops["SESSION_SETUP"]["errors"].as_u64(), Some(0));

    // --proto smb2 gives the same operations.
    let forced = rpc_json(&pcap, &["--proto", "smb2"]);
    assert_eq!(
        forced["report"]["transactions"],
        doc["report"]["transactions"]
    );

    // A text run names the statuses.
    let o = Command::new(env!("CARGO_BIN_EXE_roundtrip"))
        .args(["capture", "rpc"])
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(
        text.contains("CREATE STATUS_OBJECT_NAME_NOT_FOUND x1"),
        "{text}"
    );
    // `capture match` of the file with itself pairs every request by TCP sequence number (SMB2 message ids
    // restart in every connection, so they are not used as keys).
    let o = Command::new(env!("CARGO_BIN_EXE_roundtrip"))
        .args(["capture", "match"])
        .arg(&pcap)
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let n = doc["report"]["transactions"].as_u64().unwrap();
    assert!(
        text.contains(&format!("{n} matched")) && text.contains(&format!("0 xid, {n} tcp seq")),
        "{text}"
    );
    if std::env::var_os("SMB2_KEEP_PCAP").is_some() {
        let keep = std::env::temp_dir().join("roundtrip-smb2.pcap");
        std::fs::copy(&pcap, &keep).unwrap();
        eprintln!("capture kept in {} (port {port})\n{text}", keep.display());
    }
}
