//! Structure of issue 34: the live filter is compiled and attached by `capture::live` alone, and a filter too
//! big for the socket's option memory is refused in one line naming `net.core.optmem_max`, its value and the
//! bytes the program needs (class 7's message).

use crate::common::netns::{self, Ns};
use std::process::Command;

/// `port 1 or port 2 or ... port n`.
fn ports(n: u32) -> String {
    (1..=n)
        .map(|p| format!("port {p}"))
        .collect::<Vec<_>>()
        .join(" or ")
}

#[test]
fn live_filter_over_optmem_max_names_the_limit_and_the_bytes() {
    if !netns::available() {
        return;
    }
    // optmem_max is per network namespace: a small one in a namespace of our own makes a short filter too
    // big, whatever the host's value.
    let ns = Ns::new(&format!("rt-struct-optmem-{}", std::process::id()));
    assert!(ns.run(&["ip", "link", "set", "lo", "up"]).status.success());
    let set = ns.run(&["sysctl", "-qw", "net.core.optmem_max=2048"]);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_roundtrip")])
        .args([
            "capture",
            "stats",
            "--live",
            "lo",
            "--duration",
            "2s",
            "--filter",
        ])
        .arg(ports(40))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a refused filter fails the run: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("net.core.optmem_max (2048 bytes)"),
        "names the limit and its value: {err}"
    );
    // "its N classic instructions need about M bytes once the kernel has translated them": both figures given,
    // M past the limit.
    let needed = err
        .split("classic instructions need about ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        err.contains("its ") && needed.is_some_and(|m| m > 2048),
        "names the program's size and the bytes it needs: {err}"
    );
    assert!(
        err.contains("sysctl -w net.core.optmem_max="),
        "says what to do: {err}"
    );
    // The same filter with the namespace's default limit is taken.
    assert!(
        ns.run(&["sysctl", "-qw", "net.core.optmem_max=131072"])
            .status
            .success()
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_roundtrip")])
        .args([
            "capture",
            "stats",
            "--live",
            "lo",
            "--duration",
            "100ms",
            "--filter",
        ])
        .arg(ports(40))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
