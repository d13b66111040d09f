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
