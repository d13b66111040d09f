//! Class 1: files are never created through a symbolic link. The flight recorder's names inside `--keep-dir`
//! (real `capture rpc --live lo --keep-slow` runs against a small RESP server of this test on a port of its
//! own), its directory's mode and bounds across runs; every output path a user names (`--write`, `--report`,
//! `--svg`, `--full-log`, `report -o`, `mesh --report`, `capture whatif --report/--svg`, `generate --dir`).

use super::common;
use super::common::procs::{Proc, bin, watchdog};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const LONG: Duration = Duration::from_secs(120);

/// A RESP server on 127.0.0.1 (port from the OS): answers `+OK` to each read after `delay`.
fn resp_server(delay: Duration) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    std::thread::sleep(delay);
                    if c.write_all(b"+OK\r\n").is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// One connection sending `GET k` (or `op k`) `n` times, each answered before the next.
fn resp_client(port: u16, op: &str, n: usize) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    let cmd = format!("*2\r\n${}\r\n{op}\r\n$1\r\nk\r\n", op.len());
    for _ in 0..n {
        s.write_all(cmd.as_bytes()).unwrap();
        let mut got = [0u8; 5];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"+OK\r\n");
    }
}

/// `roundtrip ARGS` started, waited for until it captures.
fn live(args: &[&str]) -> Proc {
    let mut c = Command::new(bin());
    c.args(args);
    let mut p = Proc::spawn("roundtrip live", c);
    p.wait_line("capturing on", LONG).unwrap();
    p
}

/// `capture rpc --live lo --proto redis --keep-slow 100ms --keep-dir KEEP tcp port PORT`.
fn recorder(keep: &Path, port: u16) -> Proc {
    live(&[
        "capture",
        "rpc",
        "--live",
        "lo",
        "--proto",
        "redis",
        "--keep-slow",
        "100ms",
        "--keep-dir",
        keep.to_str().unwrap(),
        "tcp",
        "port",
        &port.to_string(),
    ])
}

/// Runs roundtrip to its end: exit code, stdout, stderr.
fn rt(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The recorder's regular files in `dir` (symbolic links left out).
fn kept(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| n.ends_with(".pcap"))
        .filter(|n| {
            std::fs::symlink_metadata(dir.join(n))
                .unwrap()
                .file_type()
                .is_file()
        })
        .collect()
}

/// Waits (generously) until `f` holds.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < LONG, "waited {LONG:?} for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// `20261125T202336.123Z` of a Unix time in milliseconds (the recorder's stamp).
fn stamp(ms: u64) -> String {
    let t = Duration::from_millis(ms);
    roundtrip::capture::keep::stamp(t)
}

#[test]
fn flight_recorder_never_follows_a_link_planted_under_its_names() {
    if !common::require_root("AF_PACKET capture") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "keep symlinks");
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep");
    let victim = dir.path().join("victim");
    std::fs::create_dir(&keep).unwrap();
    std::fs::create_dir(&victim).unwrap();
    // The server answers only when the test says so (then after 300 ms): the links are planted between the
    // request and its answer, under every name the request's time can give (its stamp is taken between the
    // two clock readings around the send; 50 ms of margin each side), the name and its `-2` variant.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (go, gate) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = c.read(&mut buf).unwrap();
        gate.recv().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        c.write_all(b"+OK\r\n").unwrap();
        let _ = c.read(&mut buf);
    });
    let rt = recorder(&keep, port);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    let ms = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let t0 = ms();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap();
    let t1 = ms();
    for t in t0 - 50..=t1 + 50 {
        let base = format!("{}-127.0.0.1_{port}-GET", stamp(t));
        for name in [format!("{base}.pcap"), format!("{base}-2.pcap")] {
            symlink(victim.join(&name), keep.join(&name)).unwrap();
        }
    }
    go.send(()).unwrap();
    let mut got = [0u8; 5];
    s.read_exact(&mut got).unwrap();
    drop(s);
    server.join().unwrap();
    until("the kept file", || {
        kept(&keep).len() == 1 || !names(&victim).is_empty()
    });
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    assert!(
        f.output.contains("flight recorder: 1 file(s)"),
        "{}",
        f.output
    );
    assert!(
        names(&victim).is_empty(),
        "written through a planted link: {:?}",
        names(&victim)
    );
    let k = kept(&keep);
    assert!(k[0].ends_with("-3.pcap"), "{k:?}");
    assert_eq!(mode(&keep.join(&k[0])), 0o600);
}

#[test]
fn flight_recorder_caps_hold_across_runs_and_rotate_its_own_oldest_files() {
    if !common::require_root("AF_PACKET capture") {
        return;
    }
    let _w = watchdog(Duration::from_secs(400), "keep caps");
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep");
    std::fs::create_dir(&keep).unwrap();
    // Files the recorder did not write: never counted, never removed (a link of its pattern included).
    let victim = dir.path().join("victim.pcap");
    std::fs::write(&victim, "victim").unwrap();
    std::fs::write(keep.join("notes.pcap"), "mine").unwrap();
    std::fs::write(keep.join("20200101T000000.000Z-mine.txt"), "mine").unwrap();
    symlink(
        &victim,
        keep.join("20000101T000000.000Z-127.0.0.1_1-GET.pcap"),
    )
    .unwrap();
    let port = resp_server(Duration::from_millis(300));
    for (op, want) in [("GET", 70), ("SET", 70)] {
        let rt = recorder(&keep, port);
        let clients: Vec<_> = (0..want)
            .map(|_| std::thread::spawn(move || resp_client(port, op, 1)))
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        let tag = format!("-{op}");
        until("this run's files", || {
            kept(&keep).iter().filter(|n| n.contains(&tag)).count() == want
        });
        rt.signal(libc::SIGINT);
        let f = rt.finish(LONG);
        assert!(f.ok(), "{}", f.output);
        assert!(
            f.output
                .contains(&format!("flight recorder: {want} file(s)")),
            "{}",
            f.output
        );
        if op == "SET" {
            assert!(
                f.output.contains("; 40 older file(s) rotated out"),
                "{}",
                f.output
            );
        }
    }
    let k: Vec<String> = kept(&keep)
        .into_iter()
        .filter(|n| n.starts_with("20") && n.contains("_"))
        .filter(|n| !n.starts_with("2000"))
        .collect();
    assert_eq!(k.len(), 100, "{k:?}");
    assert_eq!(k.iter().filter(|n| n.contains("-SET")).count(), 70);
    assert_eq!(k.iter().filter(|n| n.contains("-GET")).count(), 30);
    for other in [
        "notes.pcap",
        "20200101T000000.000Z-mine.txt",
        "20000101T000000.000Z-127.0.0.1_1-GET.pcap",
    ] {
        assert!(
            std::fs::symlink_metadata(keep.join(other)).is_ok(),
            "{other} removed"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");
}

#[test]
fn flight_recorder_byte_cap_holds_across_runs() {
    if !common::require_root("AF_PACKET capture") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "keep bytes");
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep");
    std::fs::create_dir(&keep).unwrap();
    // An earlier run's files already hold the 256 MiB (sparse: no disk used), the older one first.
    let older = keep.join("20000101T000000.000Z-127.0.0.1_1-GET.pcap");
    let newer = keep.join("20000102T000000.000Z-127.0.0.1_1-GET.pcap");
    for (f, len) in [(&older, 128u64 << 20), (&newer, 128 << 20)] {
        std::fs::File::create(f).unwrap().set_len(len).unwrap();
    }
    let port = resp_server(Duration::from_millis(300));
    let rt = recorder(&keep, port);
    resp_client(port, "GET", 1);
    until("this run's file", || {
        kept(&keep).iter().any(|n| n.contains(&format!("_{port}-")))
    });
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    assert!(
        f.output.contains("flight recorder: 1 file(s)")
            && f.output.contains("; 1 older file(s) rotated out"),
        "{}",
        f.output
    );
    assert!(!older.exists(), "the oldest file was not rotated out");
    assert!(newer.exists(), "more than needed was rotated out");
}

#[test]
fn flight_recorder_creates_its_directory_0700_whatever_the_umask() {
    if !common::require_root("AF_PACKET capture") {
        return;
    }
    let _w = watchdog(Duration::from_secs(120), "keep 0700");
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("new/keep");
    let port = common::free_port().to_string();
    let out = Command::new("sh")
        .args(["-c", "umask 000; exec \"$0\" \"$@\""])
        .arg(bin())
        .args([
            "capture",
            "rpc",
            "--live",
            "lo",
            "-t",
            "100ms",
            "--keep-slow",
            "1s",
            "--keep-dir",
            keep.to_str().unwrap(),
            "tcp",
            "port",
            &port,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&keep), 0o700);
}

#[test]
fn keep_dir_naming_a_file_or_a_link_is_refused_before_capturing() {
    if !common::require_root("AF_PACKET capture") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "mine").unwrap();
    let link = dir.path().join("link");
    symlink(dir.path(), &link).unwrap();
    for (p, what) in [(&file, "a regular file"), (&link, "a symbolic link")] {
        let (code, stdout, stderr) = rt(&[
            "capture",
            "rpc",
            "--live",
            "lo",
            "-t",
            "10s",
            "--keep-slow",
            "1s",
            "--keep-dir",
            p.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("not a directory"), "{stderr}");
        assert!(stderr.contains(what), "{stderr}");
        assert!(!stderr.contains("capturing on"), "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

/// A pcap of a few RESP requests on loopback, written by `capture stats --live --write` (for `capture whatif`).
fn small_capture(path: &Path) {
    let port = resp_server(Duration::from_millis(5));
    let rt = live(&[
        "capture",
        "stats",
        "--live",
        "lo",
        "--write",
        path.to_str().unwrap(),
        "tcp",
        "port",
        &port.to_string(),
    ]);
    resp_client(port, "GET", 5);
    std::thread::sleep(Duration::from_millis(300));
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
}

/// Every command line that writes a file the user names, with `OUT` where the path goes.
fn writers(cap: &str, result: &str, pg_port: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&[
            "capture", "stats", "--live", "lo", "-t", "1s", "--write", "OUT",
        ]),
        v(&["ping", "127.0.0.1:1", "-c", "1", "--full-log", "OUT"]),
        v(&["ping", "127.0.0.1:1", "-c", "1", "--report", "OUT"]),
        v(&["ping", "127.0.0.1:1", "-c", "1", "--svg", "OUT"]),
        v(&[
            "db",
            &format!("postgres://127.0.0.1:{pg_port}/test"),
            "-c",
            "1",
            "--full-log",
            "OUT",
        ]),
        v(&["tcp", "-t", "1s", "--full-log", "OUT"]),
        v(&["report", result, "-o", "OUT"]),
        v(&["report", result, "--svg", "OUT"]),
        v(&["mesh", "--agent", "http://127.0.0.1:1", "--report", "OUT"]),
        v(&["capture", "whatif", cap, "--rtt", "10ms", "--report", "OUT"]),
        v(&["capture", "whatif", cap, "--rtt", "10ms", "--svg", "OUT"]),
        v(&["capture", "rpc", cap, "--report", "OUT"]),
    ]
}

fn with_out(args: &[String], out: &Path) -> Vec<String> {
    args.iter()
        .map(|a| {
            if a == "OUT" {
                out.to_str().unwrap().to_string()
            } else {
                a.clone()
            }
        })
        .collect()
}

#[test]
fn user_named_outputs_refuse_a_symlink_and_leave_its_target_untouched() {
    if !common::require_root("AF_PACKET capture") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "output symlinks");
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("small.pcap");
    small_capture(&cap);
    let result = dir.path().join("result.json");
    std::fs::write(&result, "{}").unwrap();
    // A free port: nothing would be measured there, and nothing should be tried before the refusal.
    let pg_port = common::free_port().to_string();
    for (i, args) in writers(cap.to_str().unwrap(), result.to_str().unwrap(), &pg_port)
        .iter()
        .enumerate()
    {
        let target = dir.path().join(format!("target{i}"));
        std::fs::write(&target, "victim").unwrap();
        let link = dir.path().join(format!("link{i}"));
        symlink(&target, &link).unwrap();
        let dangling = dir.path().join(format!("dangling{i}"));
        let nowhere = dir.path().join(format!("nowhere{i}"));
        symlink(&nowhere, &dangling).unwrap();
        for l in [&link, &dangling] {
            let a = with_out(args, l);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            let (code, stdout, stderr) = rt(&a);
            assert_eq!(code, 2, "{a:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{a:?}: {stderr}");
            assert!(stderr.contains("a symbolic link"), "{a:?}: {stderr}");
            assert!(stderr.contains(l.to_str().unwrap()), "{a:?}: {stderr}");
            assert!(stdout.is_empty(), "{a:?}: measured first: {stdout}");
        }
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "victim",
            "{args:?}"
        );
        assert!(!nowhere.exists(), "{args:?} created the link's target");
    }
    // generate --dir: a link planted under a page's name.
    let man = dir.path().join("man");
    std::fs::create_dir(&man).unwrap();
    let target = dir.path().join("man-target");
    std::fs::write(&target, "victim").unwrap();
    symlink(&target, man.join("roundtrip.1")).unwrap();
    let (code, _, stderr) = rt(&["generate", "man", "--dir", man.to_str().unwrap()]);
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("a symbolic link"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "victim");
}

/// A started `roundtrip server`, killed on drop.
struct Server(std::process::Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server() -> Server {
    let mut k = common::procs::Kids::default();
    let port = k.server(&[]);
    let child = k.0.pop().unwrap();
    Server(child, port)
}

#[test]
fn outputs_replace_a_regular_file_whole_and_stream_to_a_fifo_or_stdout() {
    if !common::require_root("AF_PACKET capture") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "output kinds");
    let dir = tempfile::tempdir().unwrap();
    let srv = server();
    let addr = format!("127.0.0.1:{}", srv.1);
    let log = dir.path().join("rtt.csv");
    let report = dir.path().join("r.html");
    let json = dir.path().join("r.json");
    // A rerun replaces the old output (keeping its mode) and leaves no temporary file.
    for old in ["old log", "old report"] {
        std::fs::write(&log, old).unwrap();
        std::fs::write(&report, old).unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o640)).unwrap();
        let out = Command::new(bin())
            .args(["ping", &addr, "-c", "20", "--warmup", "0s", "--json"])
            .arg("--full-log")
            .arg(&log)
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&json, &out.stdout).unwrap();
        assert!(std::fs::read_to_string(&log).unwrap().starts_with("seq,"));
        assert!(std::fs::read_to_string(&report).unwrap().contains("<html"));
        assert_eq!(mode(&log), 0o640);
    }
    assert_eq!(
        names(dir.path()),
        vec!["r.html", "r.json", "rtt.csv"],
        "temporary files left"
    );
    // A FIFO is written as it goes (no rename): --full-log and --write.
    let fifo = dir.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    let (code, _, stderr) = rt(&[
        "ping",
        &addr,
        "-c",
        "5",
        "--warmup",
        "0s",
        "--full-log",
        fifo.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let got = String::from_utf8(reader.join().unwrap()).unwrap();
    assert!(got.starts_with("seq,"), "{got}");
    assert_eq!(got.lines().count(), 6, "{got}");
    // `-`: standard output, the command's own results on standard error (tcpdump's -w -).
    // (Run in the temporary directory: a build that took `-` for a file name leaves it there.)
    let out = Command::new(bin())
        .args(["report", json.to_str().unwrap(), "-o", "-"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("<html"), "{stdout}");
    assert!(!dir.path().join("-").exists());
    let port = resp_server(Duration::from_millis(5));
    let stdout = dir.path().join("stdout.bin");
    let mut child = Command::new(bin())
        .args([
            "capture", "stats", "--live", "lo", "-c", "4", "--write", "-",
        ])
        .args(["tcp", "port", &port.to_string()])
        .stdout(Stdio::from(std::fs::File::create(&stdout).unwrap()))
        .stderr(Stdio::piped())
        .current_dir(dir.path())
        .spawn()
        .unwrap();
    let started = common::procs::wait_line(child.stderr.take().unwrap(), "capturing on");
    assert!(started.contains("capturing on"), "{started}");
    resp_client(port, "GET", 3);
    assert!(child.wait().unwrap().success());
    let bytes = std::fs::read(&stdout).unwrap();
    assert!(
        bytes.len() > 24 && bytes[..4] == 0xa1b2_3c4du32.to_le_bytes(),
        "not a pcap on stdout: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    assert!(!dir.path().join("-").exists());
}

#[test]
fn generate_writes_0755_directories_and_0644_files_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("share/man1");
    let comp = dir.path().join("completions");
    for args in [
        vec!["generate", "man", "--dir", man.to_str().unwrap()],
        vec!["generate", "complete-bash", "--dir", comp.to_str().unwrap()],
    ] {
        let out = Command::new("sh")
            .args(["-c", "umask 077; exec \"$0\" \"$@\""])
            .arg(bin())
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(mode(&dir.path().join("share")), 0o755);
    assert_eq!(mode(&man), 0o755);
    assert_eq!(mode(&comp), 0o755);
    assert_eq!(mode(&man.join("roundtrip.1")), 0o644);
    assert_eq!(mode(&man.join("roundtrip-capture-rpc.1")), 0o644);
    assert_eq!(mode(&comp.join("roundtrip")), 0o644);
    // A rerun replaces the pages in place.
    let out = Command::new(bin())
        .args(["generate", "man", "--dir", man.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        names(&man).iter().all(|n| n.ends_with(".1")),
        "{:?}",
        names(&man)
    );
}
