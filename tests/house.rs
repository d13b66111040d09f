//! Rules of the house that the compiler does not check: the engines (everything in `src/` but the command line
//! and the exporters) never import `report` or `cli`; only `src/cli/` and the agent's HTTP pages, which render
//! on purpose, may import `report`. The top-level modules import down or sideways through the layers of
//! [`LAYERS`] and in no cycle, and no two peer files name each other's items. The unsafe code stays in the
//! files listed. Doc comments and other comments do not count.

use std::collections::{BTreeMap, BTreeSet};
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

// ---------------------------------------------------------------------------------------------------------
// The layers: which top-level module may import which, and no two files that import each other.
// ---------------------------------------------------------------------------------------------------------

/// The layers of the crate, bottom first (ARCHITECTURE.md "The layers" says the same): a module may import
/// modules of its own layer or of a lower one, never a higher one, and the top-level modules have no cycle.
/// Every top-level module of `src/lib.rs` (and `cli`, the binary's) is in exactly one layer; a new module
/// fails `top_level_modules_import_down_or_sideways` until it is placed here.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "units",
            "sys",
            "stats",
            "wire",
            "terminal",
            "resolve",
            "output_file",
        ],
    ),
    (
        "engines",
        &[
            "probe", "server", "db", "tcpwatch", "capture", "whatif", "model", "proxy", "replay",
            "mesh",
        ],
    ),
    ("documents", &["doc"]),
    ("exporters", &["report"]),
    ("services", &["agent"]),
    ("command line", &["cli"]),
];

/// A token of Rust source, as much as the scans need: comments are dropped, a string literal is one token
/// (its text kept: serde attributes name paths in strings).
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Str(String),
    Punct(char),
}

/// The tokens of `text` with their line numbers. Comments (line, nested block, doc) are skipped; string,
/// raw string, byte and char literals are read whole, so a `//` or a brace inside one is not code.
fn tokens(text: &str) -> Vec<(usize, Tok)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            let (start, mut s) = (line, String::new());
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    s.push(c[i]);
                    i += 1;
                }
                line += usize::from(c.get(i) == Some(&'\n'));
                if let Some(&x) = c.get(i) {
                    s.push(x);
                }
                i += 1;
            }
            i += 1;
            out.push((start, Tok::Str(s)));
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{7f}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ident(ch) {
            let start = i;
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // Raw strings r"..", r#".."#, br#".."#; byte literals b'x', b"..".
            let raw =
                matches!(word.as_str(), "r" | "br") && matches!(c.get(i), Some('"') | Some('#'));
            if raw {
                let mut hashes = 0;
                while c.get(i) == Some(&'#') {
                    hashes += 1;
                    i += 1;
                }
                if c.get(i) == Some(&'"') {
                    let (begin, mut s) = (line, String::new());
                    i += 1;
                    loop {
                        if i >= c.len() {
                            break;
                        }
                        if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                            i += 1 + hashes;
                            break;
                        }
                        line += usize::from(c[i] == '\n');
                        s.push(c[i]);
                        i += 1;
                    }
                    out.push((begin, Tok::Str(s)));
                    continue;
                }
            }
            if word == "b" && matches!(c.get(i), Some('"') | Some('\'')) {
                continue; // the literal itself is read next round
            }
            out.push((line, Tok::Ident(word)));
        } else if ch == ':' && next == Some(':') {
            out.push((line, Tok::Sep));
            i += 2;
        } else {
            out.push((line, Tok::Punct(ch)));
            i += 1;
        }
    }
    out
}

/// Reads a use tree (or a plain path) from `t[*i]` on, after `prefix`: `a::b::{c, d::{e, self}, f::*}`
/// gives `prefix::a::b::c`, `prefix::a::b::d::e`, `prefix::a::b::d` and `prefix::a::b::f`, each with the line
/// of its last name. A path in code
/// (`a::B::new`, `a::f::<T>`) ends where the next token is not `::` and an identifier.
fn use_tree(
    t: &[(usize, Tok)],
    i: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(usize, Vec<String>)>,
) {
    // The line of the path's last name (a group can span lines).
    let mut line = t.get(*i).map_or(0, |x| x.0);
    loop {
        match t.get(*i).map(|x| &x.1) {
            Some(Tok::Ident(s)) => {
                line = t[*i].0;
                if s != "self" || prefix.is_empty() {
                    prefix.push(s.clone());
                }
                *i += 1;
                if t.get(*i).map(|x| &x.1) == Some(&Tok::Sep) {
                    *i += 1;
                    continue;
                }
                out.push((line, prefix));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match t.get(*i).map(|x| &x.1) {
                        None => return,
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        Some(Tok::Ident(w)) if w == "as" => *i += 2,
                        Some(Tok::Ident(_)) | Some(Tok::Punct('{')) | Some(Tok::Punct('*')) => {
                            use_tree(t, i, prefix.clone(), out)
                        }
                        Some(_) => *i += 1,
                    }
                }
            }
            other => {
                // `*` (a glob names the module), `<` of a turbofish, or anything else: the path so far.
                if other == Some(&Tok::Punct('*')) {
                    *i += 1;
                }
                out.push((line, prefix));
                return;
            }
        }
    }
}

/// Every path of `text` that starts at `crate`, `super`, `self`, `roundtrip` or one of `children` (the
/// modules the file declares: `mod ping;` lets it write `ping::Stop`), written out in full, with the line
/// and the inline modules (`mod tests { .. }`) it sits in. Paths in strings count (`#[serde(with =
/// "crate::units::ser::ns")]`); paths in comments do not.
fn paths_in(text: &str, children: &[String]) -> Vec<(usize, Vec<String>, Vec<String>)> {
    fn scan(
        t: &[(usize, Tok)],
        children: &[String],
        inline_at: &dyn Fn(usize) -> Vec<String>,
        line_of_str: Option<usize>,
        out: &mut Vec<(usize, Vec<String>, Vec<String>)>,
    ) {
        let mut i = 0;
        while i < t.len() {
            let (line, tok) = &t[i];
            let line = line_of_str.unwrap_or(*line);
            let inline = inline_at(i);
            match tok {
                Tok::Str(s) => {
                    let inner = tokens(s);
                    scan(&inner, children, &|_| inline.clone(), Some(line), out);
                }
                Tok::Ident(w)
                    if (matches!(w.as_str(), "crate" | "super" | "self" | "roundtrip")
                        || children.contains(w))
                        && t.get(i + 1).map(|x| &x.1) == Some(&Tok::Sep)
                        && (i == 0 || t[i - 1].1 != Tok::Sep) =>
                {
                    let mut found = Vec::new();
                    let mut j = i;
                    use_tree(t, &mut j, Vec::new(), &mut found);
                    for (l, p) in found {
                        out.push((line_of_str.unwrap_or(l), inline.clone(), p));
                    }
                    i = j.max(i + 1);
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
    let t = tokens(text);
    // The inline modules open at each token: `mod NAME {` pushes NAME until its brace closes.
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut at = Vec::with_capacity(t.len());
    for (k, (_, tok)) in t.iter().enumerate() {
        match tok {
            Tok::Punct('{') => {
                depth += 1;
                let opens_mod = k >= 2
                    && t[k - 2].1 == Tok::Ident("mod".into())
                    && matches!(t[k - 1].1, Tok::Ident(_));
                if let (true, Tok::Ident(name)) = (opens_mod, &t[k - 1].1) {
                    stack.push((name.clone(), depth));
                }
            }
            Tok::Punct('}') => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth -= 1;
            }
            _ => {}
        }
        at.push(stack.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
    }
    let mut out = Vec::new();
    scan(&t, children, &|k| at[k].clone(), None, &mut out);
    out
}

/// The file modules `text` declares (`mod a;`, `pub(crate) mod b;`), each with the file a `#[path]` gives it.
fn declared_modules(text: &str) -> Vec<(String, Option<String>)> {
    let t = tokens(text);
    let mut out = Vec::new();
    for k in 0..t.len().saturating_sub(2) {
        let (Tok::Ident(m), Tok::Ident(name), Tok::Punct(';')) =
            (&t[k].1, &t[k + 1].1, &t[k + 2].1)
        else {
            continue;
        };
        if m != "mod" {
            continue;
        }
        // `#[path = "x.rs"]` just before (after any `pub(..)`).
        let mut b = k;
        while b > 0
            && (matches!(&t[b - 1].1, Tok::Ident(w) if w == "pub" || w == "crate")
                || matches!(t[b - 1].1, Tok::Punct('(') | Tok::Punct(')')))
        {
            b -= 1;
        }
        let path = match (b >= 4).then(|| &t[b - 4..b]) {
            Some(
                [
                    (_, Tok::Ident(p)),
                    (_, Tok::Punct('=')),
                    (_, Tok::Str(s)),
                    (_, Tok::Punct(']')),
                ],
            ) if p == "path" => Some(s.clone()),
            _ => None,
        };
        out.push((name.clone(), path));
    }
    out
}

/// A source file of `src/`: which crate (the binary is `src/main.rs` and `src/cli/`), its module path, and
/// the files its paths name.
struct SourceFile {
    rel: String,
    bin: bool,
    module: Vec<String>,
    text: String,
}

/// One path of a file that names an item of another file.
struct Edge {
    from: String,
    line: usize,
    to: String,
    path: String,
    /// One file is an ancestor module of the other (`src/a/mod.rs` or `src/a.rs` and `src/a/b.rs`).
    lineage: bool,
}

/// The files of `src/` with their module paths (`#[path]` honoured).
fn source_files(root: &Path) -> Vec<SourceFile> {
    let mut paths = Vec::new();
    rust_files(&root.join("src"), &mut paths);
    let mut files: Vec<SourceFile> = paths
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let bin = rel == "src/main.rs" || rel.starts_with("src/cli/");
            let module = if rel == "src/main.rs" {
                Vec::new()
            } else {
                module_path(&rel)
            };
            SourceFile {
                text: std::fs::read_to_string(f).unwrap(),
                rel,
                bin,
                module,
            }
        })
        .collect();
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    // `#[path = "x.rs"] mod m;` in src/a/b.rs: src/a/x.rs is module a::b::m.
    let mut moved = Vec::new();
    for f in &files {
        for (name, path) in declared_modules(&f.text) {
            if let Some(p) = path {
                let dir = f.rel.rsplit_once('/').map_or("", |(d, _)| d);
                let mut m = f.module.clone();
                m.push(name);
                moved.push((format!("{dir}/{p}"), m));
            }
        }
    }
    for (rel, m) in moved {
        if let Some(f) = files.iter_mut().find(|f| f.rel == rel) {
            f.module = m;
        }
    }
    files
}

/// The top-level module a file belongs to (`cli` for the binary); `None` for the crate roots.
fn top_of(f: &SourceFile) -> Option<String> {
    if f.bin {
        Some("cli".into())
    } else {
        f.module.first().cloned()
    }
}

/// Every path of every file resolved to the file that holds what it names: the longest module path that is
/// a file (an item of an inline module is in its file; a re-export names the file that re-exports it).
fn file_edges(files: &[SourceFile]) -> Vec<Edge> {
    let by_module: std::collections::HashMap<(bool, &[String]), &str> = files
        .iter()
        .map(|f| ((f.bin, f.module.as_slice()), f.rel.as_str()))
        .collect();
    let mut edges = Vec::new();
    for f in files {
        let children: Vec<String> = declared_modules(&f.text)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for (line, inline, p) in paths_in(&f.text, &children) {
            let ctx: Vec<String> = f.module.iter().chain(&inline).cloned().collect();
            let supers = p.iter().take_while(|s| *s == "super").count();
            let (bin, abs): (bool, Vec<String>) = match p[0].as_str() {
                "crate" => (f.bin, p[1..].to_vec()),
                "roundtrip" => (false, p[1..].to_vec()),
                "self" => (f.bin, ctx.iter().chain(&p[1..]).cloned().collect()),
                "super" if supers <= ctx.len() => (
                    f.bin,
                    ctx[..ctx.len() - supers]
                        .iter()
                        .chain(&p[supers..])
                        .cloned()
                        .collect(),
                ),
                "super" => continue,
                _ => (f.bin, f.module.iter().chain(&p).cloned().collect()),
            };
            let to = (0..=abs.len())
                .rev()
                .find_map(|n| by_module.get(&(bin, &abs[..n])));
            if let Some(to) = to {
                let to_module = &files.iter().find(|g| g.rel == *to).unwrap().module;
                let under = |a: &[String], b: &[String]| b.starts_with(a);
                edges.push(Edge {
                    from: f.rel.clone(),
                    line,
                    to: to.to_string(),
                    path: p.join("::"),
                    lineage: bin == f.bin
                        && (under(&f.module, to_module) || under(to_module, &f.module)),
                });
            }
        }
    }
    edges
}

/// A cycle of `graph` (its nodes in order, the first repeated at the end), if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(k) = path.iter().position(|p| p == n) {
            let mut cycle = path[k..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

/// The top-level modules of the library (`pub mod x;` in src/lib.rs) and `cli`.
fn top_level_modules(root: &Path) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let mut m: BTreeSet<String> = declared_modules(&lib).into_iter().map(|(n, _)| n).collect();
    m.insert("cli".into());
    m
}

#[test]
fn top_level_modules_import_down_or_sideways() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layer_of = |m: &str| LAYERS.iter().position(|(_, ms)| ms.contains(&m));
    let tops = top_level_modules(root);
    let placed: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|(_, ms)| ms.iter().map(|m| m.to_string()))
        .collect();
    let unplaced: Vec<_> = tops.difference(&placed).collect();
    let gone: Vec<_> = placed.difference(&tops).collect();
    assert!(
        unplaced.is_empty() && gone.is_empty(),
        "tests/house.rs LAYERS must place every top-level module once (and ARCHITECTURE.md say the same): \
         not placed {unplaced:?}, no such module {gone:?}"
    );
    for (_, ms) in LAYERS {
        for m in *ms {
            assert_eq!(
                LAYERS.iter().filter(|(_, x)| x.contains(m)).count(),
                1,
                "{m} is in two layers"
            );
        }
    }
    let files = source_files(root);
    let top: BTreeMap<&str, Option<String>> =
        files.iter().map(|f| (f.rel.as_str(), top_of(f))).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut example: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut up = Vec::new();
    for e in file_edges(&files) {
        let (Some(Some(a)), Some(Some(b))) = (top.get(e.from.as_str()), top.get(e.to.as_str()))
        else {
            continue;
        };
        if a == b {
            continue;
        }
        let (la, lb) = (layer_of(a).unwrap(), layer_of(b).unwrap());
        let at = format!("{}:{}: {}", e.from, e.line, e.path);
        if lb > la {
            up.push(format!(
                "{at} ({a}, {} layer, imports {b}, {} layer)",
                LAYERS[la].0, LAYERS[lb].0
            ));
        }
        graph.entry(a.clone()).or_default().insert(b.clone());
        example.entry((a.clone(), b.clone())).or_insert(at);
    }
    let mut wrong = Vec::new();
    if !up.is_empty() {
        wrong.push(format!(
            "imports that go up a layer (move the item down to where both can see it, see ARCHITECTURE.md \
             \"The layers\"):\n{}",
            up.join("\n")
        ));
    }
    if let Some(c) = find_cycle(&graph) {
        let steps: Vec<String> = c
            .windows(2)
            .map(|w| {
                format!(
                    "  {} -> {}  ({})",
                    w[0],
                    w[1],
                    example[&(w[0].clone(), w[1].clone())]
                )
            })
            .collect();
        wrong.push(format!(
            "the top-level modules import each other in a cycle {} (move the item that closes it down):\n{}",
            c.join(" -> "),
            steps.join("\n")
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn the_architecture_page_has_the_same_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let section = arch
        .split("\n## ")
        .find(|s| s.starts_with("The layers\n"))
        .expect("ARCHITECTURE.md has a section \"## The layers\"");
    // Its table: | layer | `a`, `b` | what |, bottom first.
    let rows: Vec<(String, Vec<String>)> = section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.strip_prefix('|')?.split('|').map(str::trim).collect();
            let modules: Vec<String> = cells
                .get(1)?
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .collect();
            (cells[0] != "layer" && !cells[0].starts_with("---"))
                .then(|| (cells[0].to_string(), modules))
        })
        .collect();
    let want: Vec<(String, Vec<String>)> = LAYERS
        .iter()
        .map(|(l, ms)| (l.to_string(), ms.iter().map(|m| m.to_string()).collect()))
        .collect();
    assert_eq!(
        rows, want,
        "ARCHITECTURE.md \"The layers\" table and tests/house.rs LAYERS must say the same, in the same order"
    );
}

/// Files that name items of each other, both ways: `(a, b, where a names b, where b names a)`.
///
/// A module's root file and the files below it are not counted: the root (`src/a/mod.rs`, or `src/a.rs` with
/// `src/a/`) declares its children, calls and re-exports what they make, and they share the module's own
/// types through `super::`; that is the module tree, one owner and its parts (a child `tests.rs` is one of
/// them). What is counted is two files neither of which owns the other, each naming the other's items: the
/// shared item belongs in one of them, or in the module root or a file both can see.
fn two_file_circles(edges: &[Edge]) -> Vec<(String, String, String, String)> {
    let mut first: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for e in edges {
        if e.from != e.to && !e.lineage {
            first
                .entry((e.from.as_str(), e.to.as_str()))
                .or_insert_with(|| format!("{}:{}: {}", e.from, e.line, e.path));
        }
    }
    let mut out = Vec::new();
    for ((a, b), at) in &first {
        if a < b
            && let Some(back) = first.get(&(*b, *a))
        {
            out.push((a.to_string(), b.to_string(), at.clone(), back.clone()));
        }
    }
    out
}

#[test]
fn no_two_files_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let circles = two_file_circles(&file_edges(&source_files(root)));
    let text: Vec<String> = circles
        .iter()
        .map(|(a, b, ab, ba)| format!("{a} <-> {b}\n  {ab}\n  {ba}"))
        .collect();
    assert!(
        circles.is_empty(),
        "{} pairs of files name items of each other (move the shared item to the file it belongs to, or \
         below both):\n{}",
        circles.len(),
        text.join("\n")
    );
}

#[test]
fn the_path_scan_reads_use_trees_strings_and_skips_comments() {
    let paths = |t: &str| -> Vec<String> {
        paths_in(t, &["ping".to_string()])
            .into_iter()
            .map(|(line, inline, p)| format!("{line}:{}:{}", inline.join("/"), p.join("::")))
            .collect()
    };
    assert_eq!(
        paths("use crate::{a::{b, c::D}, e::*};\nuse super::super::f::{self, G as H};"),
        [
            "1::crate::a::b",
            "1::crate::a::c::D",
            "1::crate::e",
            "2::super::super::f",
            "2::super::super::f::G"
        ]
    );
    // A group over several lines, as rustfmt writes a long one.
    assert_eq!(
        paths("use crate::probe::{\n    ping::Stop,\n    target::Target,\n};"),
        [
            "2::crate::probe::ping::Stop",
            "3::crate::probe::target::Target"
        ]
    );
    // Paths in code, in serde's strings, and through a declared child module; not in comments.
    assert_eq!(
        paths(
            "let x = roundtrip::units::parse::<u64>(s); // crate::report::y\n\
             #[serde(with = \"crate::units::ser::ns\")]\n\
             /// [`crate::doc::FORMAT`]\n\
             /* crate::cli::\n nested /* crate::x */ still */ ping::run(); pong::run();"
        ),
        [
            "1::roundtrip::units::parse",
            "2::crate::units::ser::ns",
            "5::ping::run"
        ]
    );
    // Strings and chars are not code: a brace or a `//` in them changes nothing.
    assert_eq!(
        paths(
            "let s = \"http://a/{\"; let c = '{'; let r = r#\"}\"#; let b = b'}'; crate::x::y();"
        ),
        ["1::crate::x::y"]
    );
    // Inline modules: a path inside `mod tests { .. }` knows it is there, and no longer after it.
    assert_eq!(
        paths(
            "fn f() { if a { } }\nmod tests {\n    use super::*;\n    fn g() { {} }\n}\nuse self::z;"
        ),
        ["3:tests:super", "6::self::z"]
    );
    // A path that does not start the expression (`x::crate`) or names no module root is not read.
    assert!(paths("let v = Vec::<u8>::new(); std::mem::drop(v); other::f();").is_empty());
}

#[test]
fn declared_modules_and_their_files() {
    assert_eq!(
        declared_modules(
            "pub mod a;\nmod b { }\n#[cfg(test)]\npub(crate) mod c;\n#[path = \"x.rs\"]\nmod d;"
        ),
        [
            ("a".to_string(), None),
            ("c".to_string(), None),
            ("d".to_string(), Some("x.rs".to_string()))
        ]
    );
}

/// A source file for the scanners' tests.
fn file(rel: &str, text: &str) -> SourceFile {
    SourceFile {
        rel: rel.into(),
        bin: rel == "src/main.rs" || rel.starts_with("src/cli/"),
        module: if rel == "src/main.rs" {
            Vec::new()
        } else {
            module_path(rel)
        },
        text: text.into(),
    }
}

#[test]
fn paths_resolve_to_the_files_that_hold_them() {
    let files = [
        file("src/lib.rs", "pub mod a;\npub mod b;"),
        file(
            "src/a/mod.rs",
            "mod x;\nmod y;\npub use x::X;\nfn f() { y::g(); }",
        ),
        file(
            "src/a/x.rs",
            "use super::y::Y;\npub struct X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::Z;\n}",
        ),
        file("src/a/y.rs", "use crate::a::x::X;\nuse crate::b::inner::Q;"),
        file(
            "src/b.rs",
            "pub mod inner { pub struct Q; }\nuse self::inner::Q;",
        ),
        file("src/main.rs", "mod cli;"),
        file(
            "src/cli/mod.rs",
            "use roundtrip::b::Q;\nuse crate::cli::x::f;",
        ),
        file("src/cli/x.rs", "use super::super::cli::x;"),
    ];
    let got: Vec<String> = file_edges(&files)
        .iter()
        .filter(|e| e.from != e.to)
        .map(|e| {
            format!(
                "{} -> {}{}",
                e.from,
                e.to,
                if e.lineage { " (lineage)" } else { "" }
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            "src/a/mod.rs -> src/a/x.rs (lineage)",
            "src/a/mod.rs -> src/a/y.rs (lineage)",
            "src/a/x.rs -> src/a/y.rs",
            "src/a/x.rs -> src/a/mod.rs (lineage)",
            "src/a/y.rs -> src/a/x.rs",
            "src/a/y.rs -> src/b.rs",
            "src/cli/mod.rs -> src/b.rs",
            "src/cli/mod.rs -> src/cli/x.rs (lineage)",
        ]
    );
    let circles = two_file_circles(&file_edges(&files));
    assert_eq!(circles.len(), 1);
    assert_eq!(
        (circles[0].0.as_str(), circles[0].1.as_str()),
        ("src/a/x.rs", "src/a/y.rs")
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
        None
    );
    assert_eq!(
        find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")])),
        Some(vec!["b".to_string(), "c".into(), "d".into(), "b".into()])
    );
}
