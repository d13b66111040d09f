//! Classes 5, 6 and 9 of issue 34: text from packets and peers never reaches the terminal raw; no test or
//! example sends a packet off this machine (`*.invalid` is answered inside roundtrip). The control API's
//! bounds and HTTP points are in tests/proxy_security.rs.

use crate::common;
use crate::common::procs::{Proc, bin, watchdog};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

/// A Redis command name holding ESC (with a clear-screen sequence), BEL, NUL, DEL and U+202E RIGHT-TO-LEFT
/// OVERRIDE, as a RESP array of one bulk string.
const HOSTILE_NAME: &str = "SET\u{1b}[2J\u{7}\u{0}\u{7f}\u{202e}X";

/// The characters that must never be printed raw.
const RAW: [char; 5] = ['\u{1b}', '\u{7}', '\u{0}', '\u{7f}', '\u{202e}'];

fn assert_escaped(what: &str, text: &str) {
    for c in RAW {
        assert!(
            !text.contains(c),
            "{what}: {c:?} reached the terminal raw:\n{text:?}"
        );
    }
    assert!(
        text.contains("SET\\x1b[2J\\x07\\x00\\x7f\\u{202e}X"),
        "{what}: the op name is not shown escaped:\n{text}"
    );
}

/// Sends the hostile command to the real Redis and reads its error reply.
fn send_hostile_command() {
    let mut s = TcpStream::connect(("127.0.0.1", 6379)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let cmd = format!("*1\r\n${}\r\n{HOSTILE_NAME}\r\n", HOSTILE_NAME.len());
    for _ in 0..3 {
        s.write_all(cmd.as_bytes()).unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0 && buf[0] == b'-', "{:?}", &buf[..n]);
    }
}

/// `capture rpc --live lo` watching a Redis command whose name holds terminal controls: its interval lines and
/// the flight recorder's "kept" lines show the name escaped; so does `capture rpc FILE` on the file it wrote
/// (the operations table).
#[test]
fn op_names_from_packets_are_escaped_in_interval_lines_kept_lines_and_tables() {
    if !common::require_root("AF_PACKET capture") || !common::service_up(6379, "redis") {
        return;
    }
    let _w = watchdog(Duration::from_secs(300), "op names escaped");
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep");
    let file = dir.path().join("hostile.pcap");
    let mut c = Command::new(bin());
    c.args([
        "capture",
        "rpc",
        "--live",
        "lo",
        "--proto",
        "redis",
        "--report-interval",
        "200ms",
        "--keep-slow",
        "1us",
        "--keep-dir",
        keep.to_str().unwrap(),
        "--write",
        file.to_str().unwrap(),
        "tcp",
        "port",
        "6379",
    ]);
    let mut rt = Proc::spawn("capture rpc --live", c);
    rt.wait_line("capturing on", LONG).unwrap();
    send_hostile_command();
    rt.wait_line("kept ", LONG).unwrap();
    rt.wait_line("count 3", LONG).unwrap();
    rt.signal(libc::SIGINT);
    let f = rt.finish(LONG);
    assert!(f.ok(), "{}", f.output);
    let interval = f
        .stdout
        .lines()
        .find(|l| l.contains("count 3"))
        .unwrap()
        .to_string();
    assert_escaped("interval line", &interval);
    let kept = f.output.lines().find(|l| l.contains("kept ")).unwrap();
    assert_escaped("kept line", kept);
    assert_escaped("live run", &f.output);

    // The capture file it wrote, read back: the operations table.
    let out = Command::new(bin())
        .args(["capture", "rpc", file.to_str().unwrap(), "--proto", "redis"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_escaped("capture rpc FILE", &text);
}

/// Every command that resolves a name, given a name under `.invalid`, fails with the resolver's "not found"
/// and sends no DNS query: run in a namespace of ours whose default route leads into a veth pair with both
/// ends inside it (so even before the fix nothing could leave the machine), with tcpdump on `any` for port 53
/// there: zero packets.
#[test]
fn invalid_names_are_answered_without_a_dns_query() {
    if !common::require_root("network namespaces") || !common::have("tcpdump") {
        return;
    }
    let _w = watchdog(Duration::from_secs(600), "no dns query");
    let ns = common::netns::Ns::new(&format!("rtdns{}", std::process::id()));
    for args in [
        &["ip", "-n", &ns.0, "link", "set", "lo", "up"][..],
        &[
            "ip", "-n", &ns.0, "link", "add", "dns0", "type", "veth", "peer", "name", "dns1",
        ],
        &["ip", "-n", &ns.0, "link", "set", "dns0", "up"],
        &["ip", "-n", &ns.0, "link", "set", "dns1", "up"],
        &[
            "ip",
            "-n",
            &ns.0,
            "addr",
            "add",
            "192.0.2.1/24",
            "dev",
            "dns0",
        ],
        // A gateway whose link address is known: a packet to any other address goes out at once (no ARP
        // request standing in for it), and tcpdump sees it.
        &[
            "ip",
            "-n",
            &ns.0,
            "neigh",
            "add",
            "192.0.2.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "dns0",
            "nud",
            "permanent",
        ],
        &[
            "ip",
            "-n",
            &ns.0,
            "route",
            "add",
            "default",
            "via",
            "192.0.2.2",
        ],
    ] {
        common::netns::sh(args).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dns.pcap");
    let dump = common::tcpdump::Tcpdump::start_in(
        Some(&ns.0),
        &[
            "-i",
            "any",
            "-U",
            "-n",
            "-w",
            file.to_str().unwrap(),
            "udp port 53 or tcp port 53",
        ],
    );
    let host = format!("rt{}.no-such-host.invalid", std::process::id());
    let hp = format!("{host}:80");
    let pg = format!("postgres://u@{host}/test");
    let agent = format!("http://{host}:9100");
    let cases: Vec<Vec<&str>> = vec![
        vec!["ping", &host, "-c", "1"],
        vec!["connect", &hp],
        vec!["icmp", &host, "-c", "1"],
        vec!["compare", &host],
        vec!["db", &pg, "-c", "1"],
        vec!["mesh", "--agent", &agent],
        vec!["proxy", "--listen", "127.0.0.1:0", "--upstream", &hp],
        vec!["ping", "INVALID.", "-c", "1"],
    ];
    let mut outputs = Vec::new();
    for args in &cases {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns.0, &bin()]).args(args);
        outputs.push((
            args,
            common::procs::run("roundtrip", c, Duration::from_secs(120)),
        ));
    }
    dump.stop();
    let bytes = std::fs::read(&file).unwrap();
    let seen = Command::new("tcpdump")
        .args(["-n", "-r", file.to_str().unwrap()])
        .output()
        .unwrap();
    // A pcap file's header alone is 24 bytes: no packet.
    assert_eq!(
        bytes.len(),
        24,
        "DNS queries were sent:\n{}",
        String::from_utf8_lossy(&seen.stdout)
    );
    // And each failed as a lookup of a name that does not exist fails (exit 1, the resolver's words).
    for (args, f) in outputs {
        assert_eq!(
            f.status.and_then(|s| s.code()),
            Some(1),
            "{args:?}: {}",
            f.output
        );
        assert!(
            f.output.contains("cannot resolve") && f.output.contains("Name or service not known"),
            "{args:?}: {}",
            f.output
        );
    }
}

/// Names are resolved in one place (`src/resolve.rs`), so the `.invalid` rule holds for every command: no other
/// file of `src/` calls the system resolver.
#[test]
fn one_resolver_for_every_command() {
    fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, found);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("src/resolve.rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, l) in text.lines().enumerate() {
                    let code = l.split("//").next().unwrap_or("");
                    if [
                        "to_socket_addrs",
                        "ToSocketAddrs",
                        "lookup_host",
                        "getaddrinfo",
                    ]
                    .iter()
                    .any(|w| code.contains(w))
                    {
                        found.push(format!("{}:{}: {}", p.display(), i + 1, l.trim()));
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut found,
    );
    assert!(
        found.is_empty(),
        "resolve names through roundtrip::resolve::lookup:\n{}",
        found.join("\n")
    );
}

/// A peer's words inside an error line (a Redis error reply holding ESC, BEL and U+202E) print escaped.
#[test]
fn errors_carrying_peer_text_are_escaped() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().take(8) {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = c.read(&mut [0u8; 4096]);
            let _ = c.write_all("-ERR evil\u{1b}[2J\u{7}\u{202e}X\r\n".as_bytes());
            let _ = c.read(&mut [0u8; 4096]);
        }
    });
    let out = Command::new(bin())
        .args(["db", &format!("redis://127.0.0.1:{port}"), "-c", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    for c in RAW {
        assert!(!err.contains(c), "{c:?} reached the terminal raw: {err:?}");
    }
    assert!(err.contains("ERR evil\\x1b[2J\\x07\\u{202e}X"), "{err}");
}
