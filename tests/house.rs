//! Rules of the house that the compiler does not check: the engines (everything in `src/` but the command line
//! and the exporters) never import `report` or `cli`; only `src/cli/` and the agent's HTTP pages, which render
//! on purpose, may import `report`. Doc comments and other comments do not count.

use std::path::{Path, PathBuf};

/// Files that may import `report` (besides `src/report/` itself and `src/cli/`): the agent's HTTP pages render
/// on purpose (`site.rs` draws the HTML matrix).
const MAY_RENDER: &[&str] = &["src/main.rs", "src/agent/http.rs", "src/agent/http/site.rs"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src/`: `src/probe/ping.rs` is `["probe", "ping"]`, `src/probe/mod.rs`
/// and `src/lib.rs` drop their file name.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_start_matches("src/")
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The lines of `text` that name `report` or `cli` at the crate root, comments removed.
fn imports_of_report_or_cli(rel: &str, text: &str) -> Vec<String> {
    let depth = module_path(rel).len();
    let up = |n: usize| "super::".repeat(n);
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        let mut hit = false;
        for m in ["report", "cli"] {
            hit |= code.contains(&format!("crate::{m}::"))
                || code.contains(&format!("crate::{m};"))
                || code.contains(&format!("roundtrip::{m}::"));
            if depth > 0 {
                hit |= code.contains(&format!("{}{m}::", up(depth)));
            }
            if let Some(i) = code.find("crate::{") {
                let rest = &code[i..];
                let group = &rest[..rest.find('}').unwrap_or(rest.len())];
                hit |= group
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == m);
            }
        }
        if hit {
            bad.push(format!("{rel}:{}: {}", n + 1, line.trim()));
        }
    }
    bad
}

#[test]
fn engines_do_not_import_report_or_cli() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut bad = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("src/cli/")
            || rel.starts_with("src/report/")
            || MAY_RENDER.contains(&rel.as_str())
        {
            continue;
        }
        bad.extend(imports_of_report_or_cli(
            &rel,
            &std::fs::read_to_string(f).unwrap(),
        ));
    }
    assert!(
        bad.is_empty(),
        "engine modules import report or cli (move the type down, or the rendering up):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scan_sees_every_spelling_and_skips_comments() {
    let hits = |rel: &str, t: &str| imports_of_report_or_cli(rel, t).len();
    assert_eq!(
        hits("src/probe/ping.rs", "use crate::report::json::FORMAT;"),
        1
    );
    assert_eq!(hits("src/probe/ping.rs", "use crate::{report, stats};"), 1);
    assert_eq!(hits("src/probe/ping.rs", "use super::super::cli::x;"), 1);
    assert_eq!(hits("src/probe/mod.rs", "use super::report::x;"), 1);
    assert_eq!(
        hits(
            "src/probe/ping.rs",
            "#[serde(with = \"crate::report::ser\")]"
        ),
        1
    );
    assert_eq!(
        hits("src/probe/ping.rs", "/// see [`crate::report::charts`]"),
        0
    );
    assert_eq!(
        hits("src/probe/ping.rs", "let x = 1; // crate::report::y"),
        0
    );
    // A module named `report` inside an engine is the engine's own.
    assert_eq!(hits("src/capture/rpc/mod.rs", "use super::report::x;"), 0);
    assert_eq!(
        hits("src/probe/ping.rs", "use crate::{reporting, stats};"),
        0
    );
}

/// The files allowed unsafe code, and why (the crate denies `unsafe_code` in src/lib.rs and src/main.rs, so
/// any other file that uses it does not compile). A new entry needs its reason here and in ARCHITECTURE.md's
/// "Unsafe code".
const UNSAFE_ALLOWED: &[(&str, &str)] = &[
    (
        "src/sys.rs",
        "the plain system calls behind safe, typed functions",
    ),
    (
        "src/capture/live/ring.rs",
        "the packet socket and the mmap'd TPACKET_V3 ring",
    ),
    ("src/probe/rxtime.rs", "recvmsg with SO_TIMESTAMPNS"),
    ("src/proxy/delay.rs", "recvmsg with SO_TIMESTAMPNS"),
    (
        "src/proxy/packet.rs",
        "the bridge's AF_PACKET socket, recvmmsg/sendmmsg",
    ),
    ("src/proxy/relay.rs", "splice through a pipe"),
    ("src/server/pktinfo.rs", "recvmsg/sendmsg with IP_PKTINFO"),
    (
        "src/tcpwatch/trace.rs",
        "perf_event_open and its mmap'd ring",
    ),
];

/// Files that must never hold unsafe code, whatever the crate's default: they parse bytes from the network.
const UNSAFE_FORBIDDEN: &[&str] = &[
    "src/agent/http.rs",
    "src/agent/http/site.rs",
    "src/agent/http/tests.rs",
    "src/proxy/control.rs",
];

/// Code of `text` with line comments removed (a `//` inside a string is kept).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(n, line)| {
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        (n + 1, code)
    })
}

/// `allow(unsafe_code)` (or `expect`/`warn`) in `text` outside comments: the lines.
fn unsafe_allows(text: &str) -> Vec<usize> {
    code_lines(text)
        .filter(|(_, c)| {
            let c: String = c.split_whitespace().collect();
            [
                "allow(unsafe_code",
                "expect(unsafe_code",
                "warn(unsafe_code",
            ]
            .iter()
            .any(|a| c.contains(a))
        })
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn unsafe_allow_list_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for top in ["src/lib.rs", "src/main.rs"] {
        let text = std::fs::read_to_string(root.join(top)).unwrap();
        assert!(
            text.lines().any(|l| l.trim() == "#![deny(unsafe_code)]"),
            "{top} must deny unsafe_code crate-wide"
        );
    }
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        let allows = unsafe_allows(&text);
        if !allows.is_empty() {
            // The allow is a module attribute with its reason on the same line.
            for n in &allows {
                let line = text.lines().nth(n - 1).unwrap();
                assert!(
                    line.trim_start().starts_with("#![allow(unsafe_code)] //") && line.len() > 40,
                    "{rel}:{n}: write `#![allow(unsafe_code)] // why` (a module attribute with its reason)"
                );
            }
            found.push(rel);
        }
    }
    found.sort();
    let mut want: Vec<String> = UNSAFE_ALLOWED.iter().map(|(f, _)| f.to_string()).collect();
    want.sort();
    assert_eq!(
        found, want,
        "the files allowing unsafe code differ from the documented list (tests/house.rs UNSAFE_ALLOWED, \
         ARCHITECTURE.md \"Unsafe code\")"
    );
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    for (f, _) in UNSAFE_ALLOWED {
        assert!(
            arch.contains(f),
            "ARCHITECTURE.md does not list {f} under \"Unsafe code\""
        );
    }
    for f in UNSAFE_FORBIDDEN {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        assert!(
            text.lines().any(|l| l.trim() == "#![forbid(unsafe_code)]"),
            "{f} parses network bytes: it must `#![forbid(unsafe_code)]`"
        );
    }
}

#[test]
fn the_command_line_has_no_libc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/cli"), &mut files);
    files.push(root.join("src/main.rs"));
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, code) in code_lines(&text) {
            let unsafe_code = ["unsafe {", "unsafe fn", "unsafe impl", "unsafe extern"]
                .iter()
                .any(|u| code.contains(u));
            if code.contains("libc::") || code.contains("libc;") || unsafe_code {
                bad.push(format!("{}:{n}: {}", f.display(), code.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "src/cli/ calls the system through the library (roundtrip::sys), never libc or unsafe:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_unsafe_scan_sees_allows_and_skips_comments() {
    assert_eq!(unsafe_allows("#![allow(unsafe_code)] // why\n"), vec![1]);
    assert_eq!(unsafe_allows("x\n#[allow( unsafe_code )]\n"), vec![2]);
    assert_eq!(unsafe_allows("#![expect(unsafe_code)]\n"), vec![1]);
    assert!(unsafe_allows("// #![allow(unsafe_code)]\n").is_empty());
    assert!(unsafe_allows("#![forbid(unsafe_code)]\n").is_empty());
}
