//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod bridge_ns;
pub mod db;
pub mod lab;
pub mod netns;
pub mod procs;
pub mod prometheus;
pub mod samba;
pub mod tcpdump;

use std::path::PathBuf;

/// The folder of real captures beside the repository (../shared/captures), or None with a printed reason.
/// Under CI (ROUNDTRIP_REQUIRE_CAPTURES=1) a missing folder is a failure, not a skip.
pub fn captures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/captures");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var_os("ROUNDTRIP_REQUIRE_CAPTURES").is_some() {
        panic!("../shared/captures is missing but ROUNDTRIP_REQUIRE_CAPTURES is set");
    }
    eprintln!("SKIPPED: ../shared/captures is not beside this clone; capture tests need it");
    None
}

/// True when a local service answers on 127.0.0.1:`port`; under CI (ROUNDTRIP_REQUIRE_SERVICES=1) a
/// missing service is a failure, elsewhere the test prints that it was skipped.
pub fn service_up(port: u16, name: &str) -> bool {
    let ok = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        std::time::Duration::from_secs(2),
    )
    .is_ok();
    if !ok {
        if std::env::var_os("ROUNDTRIP_REQUIRE_SERVICES").is_some() {
            panic!(
                "{name} is not running on 127.0.0.1:{port} but ROUNDTRIP_REQUIRE_SERVICES is set"
            );
        }
        eprintln!("SKIPPED: {name} is not running on 127.0.0.1:{port}");
    }
    ok
}

/// True when a program is on PATH; otherwise prints that the test was skipped (a failure under CI).
pub fn have(program: &str) -> bool {
    let ok = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var_os("ROUNDTRIP_REQUIRE_SERVICES").is_some() {
            panic!("{program} is not installed but CI must have it (.ci/run installs it)");
        }
        eprintln!("SKIPPED: {program} is not installed");
    }
    ok
}

/// A test that cannot run here: prints `SKIPPED: {why}` and returns false, or fails under CI
/// (ROUNDTRIP_REQUIRE_SERVICES=1, set by .ci/run): a skip in CI would let a green run hide an untested path.
pub fn skip(why: &str) -> bool {
    if std::env::var_os("ROUNDTRIP_REQUIRE_SERVICES").is_some() {
        panic!("{why}, and under CI (ROUNDTRIP_REQUIRE_SERVICES set) a skip is a failure");
    }
    eprintln!("SKIPPED: {why}");
    false
}

/// True when running as root; otherwise [`skip`]s with `what` (e.g. "raw sockets"), which fails under CI.
pub fn require_root(what: &str) -> bool {
    is_root() || skip(&format!("this test needs root ({what})"))
}

/// True when running as root (namespaces, raw sockets). Tests that cannot run without root use
/// [`require_root`], so that CI fails instead of skipping.
pub fn is_root() -> bool {
    // SAFETY-free check: /proc/self/status has the effective uid.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// A TCP port free on 127.0.0.1 when asked (bound by the OS, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
