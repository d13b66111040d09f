//! One vocabulary (docs/flags.md): the renamed spellings of src/cli/vocab.rs's `RENAMED` table.
//!
//! - No page, bench script, test, deploy manifest or `--help` example uses an old spelling on a `roundtrip
//!   COMMAND` command line of that command. The scan reads the table from the Rust text and only counts a token
//!   on a command line of the matching command: after `roundtrip` (or `$RT`, the bench scripts' name for it)
//!   and the command's words, up to the end of the shell command (`|`, `;`, `&&`, `>`, a closing backtick or
//!   quote); in Rust, a string array whose first string is the command (`["ping", host, "-c", "5"]`, also after
//!   `"netns", "exec", BIN`), the `.arg(..)`/`.args([..])` calls chained after it, and an array passed to a
//!   helper named after the command (`ping(&net, &["-c", "50"])`); in a manifest, an `args:` list.
//! - Each old spelling still parses and prints its one-line notice; sockperf's `-m` works with no notice;
//!   another tool's flag gets a hint naming roundtrip's, and a mistyped subcommand gets a suggestion.
//!
//! This file is the one place old spellings are used on purpose.

mod common;

use common::procs::{bin, parse_only};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One row of `RENAMED`.
#[derive(Debug, Clone)]
struct Row {
    command: Vec<String>,
    old: String,
    new: String,
}

/// The value of `field: "..."` in `chunk`.
fn field(chunk: &str, name: &str) -> Option<String> {
    let at = chunk.find(&format!("{name}: \""))? + name.len() + 3;
    let end = chunk[at..].find('"')?;
    Some(chunk[at..at + end].to_string())
}

/// The `RENAMED` table, read from the Rust text of src/cli/vocab.rs.
fn renamed() -> Vec<Row> {
    let text = std::fs::read_to_string(root().join("src/cli/vocab.rs")).unwrap();
    let start = text
        .find("pub const RENAMED: &[Renamed] = &[")
        .expect("RENAMED in src/cli/vocab.rs");
    let body = &text[start..];
    let body = &body[..body.find("\n];").expect("the end of RENAMED")];
    let rows: Vec<Row> = body
        .split("Renamed {")
        .skip(1)
        .map(|chunk| Row {
            command: field(chunk, "command")
                .expect(chunk)
                .split(' ')
                .map(String::from)
                .collect(),
            old: field(chunk, "old").expect(chunk),
            new: field(chunk, "new").expect(chunk),
        })
        .collect();
    assert!(!rows.is_empty(), "no rows read from RENAMED");
    rows
}

/// Command names as they are typed, to the name the table uses.
fn canonical(word: &str) -> &str {
    match word {
        "tp" => "throughput",
        w => w,
    }
}

/// Whether `token` is the old spelling `old` (`--time`, `--time=5s`, `-n`, `-n5`), as src/cli/vocab.rs's
/// `uses` sees it.
fn uses(token: &str, old: &str) -> bool {
    if token == old {
        return true;
    }
    if old.starts_with("--") {
        return token.strip_prefix(old).is_some_and(|r| r.starts_with('='));
    }
    old.len() == 2
        && token
            .strip_prefix(old)
            .and_then(|r| r.chars().next())
            .is_some_and(|c| c.is_ascii_digit() || c == '=')
}

/// The old spellings `args` (the words after `roundtrip`) uses for its command.
fn old_spellings_in(rows: &[Row], args: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for r in rows {
        let n = r.command.len();
        if args.len() < n
            || !args[..n]
                .iter()
                .zip(&r.command)
                .all(|(a, c)| canonical(a) == c)
        {
            continue;
        }
        for t in &args[n..] {
            if uses(t, &r.old) {
                found.push(format!("{} {} (now {})", r.command.join(" "), t, r.new));
            }
        }
    }
    found
}

/// Whether a shell word names the roundtrip program: `roundtrip`, `./target/release/roundtrip`,
/// `roundtrip:0.1.0` (an image), `$RT`.
fn is_program(word: &str) -> bool {
    let w = word
        .trim_start_matches(['`', '"', '\'', '(', '$'])
        .trim_end_matches(['"', '\'']);
    let w = w.trim_start_matches('{').trim_end_matches('}');
    if w == "RT" || w == "ROUNDTRIP" {
        return word.contains('$');
    }
    let base = w.rsplit('/').next().unwrap_or(w);
    base == "roundtrip" || base.starts_with("roundtrip:")
}

/// The words of each `roundtrip ...` command line in `line` (after the program, up to the end of that shell
/// command). `rust`: the line is Rust source, so a closing `"` ends a command line too.
fn command_lines(line: &str, rust: bool) -> Vec<Vec<String>> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if !is_program(w) || w.ends_with('`') || (rust && w.len() > 1 && w.ends_with('"')) {
            continue;
        }
        let mut args = Vec::new();
        for t in &words[i + 1..] {
            if matches!(*t, "|" | "||" | "&&" | ";" | "&" | "2>&1")
                || t.starts_with(['|', '>', '<', '#'])
                || t.starts_with("2>")
            {
                break;
            }
            let core = t.trim_matches(['`', '"', '\'', ',', ';', ')', '(', '[', ']']);
            args.push(core.to_string());
            if t.ends_with(['`', ';', ')', '|']) || (rust && t.ends_with('"')) {
                break;
            }
        }
        out.push(args);
    }
    out
}

/// Every text file the scan reads: docs, root pages (not the changelog, which names the old spellings),
/// bench scripts, tests (not this one), deploy manifests and the `--help` examples.
fn files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().map(|t| t.is_symlink()).unwrap_or(true) {
                continue;
            }
            if p.is_dir() {
                if !matches!(
                    p.file_name().and_then(|n| n.to_str()),
                    Some("fixtures" | "img")
                ) {
                    walk(&p, out);
                }
            } else {
                out.push(p);
            }
        }
    }
    let r = root();
    let mut out = Vec::new();
    for dir in ["docs", "bench", "tests", "deploy"] {
        walk(&r.join(dir), &mut out);
    }
    for f in std::fs::read_dir(&r).unwrap().flatten() {
        let p = f.path();
        if p.extension().is_some_and(|e| e == "md") && !p.ends_with("CHANGELOG.md") {
            out.push(p);
        }
    }
    out.push(r.join("src/cli/examples.rs"));
    out.retain(|p| {
        !p.ends_with("tests/vocab.rs")
            && !p.ends_with("tests/vocab_capture.rs")
            && matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("md" | "sh" | "rs" | "py" | "yaml" | "yml" | "toml" | "json" | "c") | None
            )
    });
    out.sort();
    out
}

/// The lines of `text` with shell continuations (`\` at the end) joined.
fn joined_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let (at, mut acc) = pending.take().unwrap_or((i + 1, String::new()));
        acc.push(' ');
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            acc.push_str(head);
            pending = Some((at, acc));
        } else {
            acc.push_str(line);
            out.push((at, acc));
        }
    }
    out.extend(pending);
    out
}

/// A string literal of Rust source or a bracket (with its byte offset).
#[derive(Debug)]
enum Tok {
    Str(String),
    Open(usize),
    Close(usize),
}

fn rust_tokens(s: &str) -> Vec<Tok> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = s[i..].find('\n').map_or(b.len(), |n| i + n);
                continue;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = s[i + 1..].bytes().take_while(|&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let from = i + 2 + hashes;
                let end = s[from..].find(&close).map_or(b.len(), |n| from + n);
                out.push(Tok::Str(s[from..end].to_string()));
                i = end + close.len();
                continue;
            }
            b'"' => {
                let mut j = i + 1;
                let mut v = String::new();
                while j < b.len() && b[j] != b'"' {
                    if b[j] == b'\\' {
                        j += 1;
                    }
                    j += 1;
                }
                v.push_str(&s[i + 1..j.min(b.len())]);
                out.push(Tok::Str(v));
                i = j + 1;
                continue;
            }
            b'\'' => {
                // A char literal ('[', '\'') or a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    i = s[i + 2..].find('\'').map_or(b.len(), |n| i + 3 + n);
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
                continue;
            }
            b'[' => out.push(Tok::Open(i)),
            b']' => out.push(Tok::Close(i)),
            _ => {}
        }
        i += 1;
    }
    out
}

/// The name of the function whose call encloses offset `at` on its line (`ping` in `ping(&net, &[`).
fn enclosing_call(s: &str, at: usize) -> Option<&str> {
    let line_start = s[..at].rfind('\n').map_or(0, |n| n + 1);
    let before = &s[line_start..at];
    let mut depth = 0i32;
    for (k, c) in before.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' if depth > 0 => depth -= 1,
            '(' => {
                let name = before[..k]
                    .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()?;
                return (!name.is_empty()).then_some(name);
            }
            _ => {}
        }
    }
    None
}

/// The roundtrip command lines in Rust source: string arrays that start with a command (or whose call is named
/// after one), with the `.arg`/`.args` calls chained after them.
fn rust_command_lines(s: &str, commands: &[&str]) -> Vec<(usize, Vec<String>)> {
    let toks = rust_tokens(s);
    let mut out = Vec::new();
    // Open arrays: the offset of `[` and the literals directly in it.
    let mut stack: Vec<(usize, Vec<String>)> = Vec::new();
    for tok in &toks {
        match tok {
            Tok::Str(v) => {
                if let Some(top) = stack.last_mut() {
                    top.1.push(v.clone());
                }
            }
            Tok::Open(at) => stack.push((*at, Vec::new())),
            Tok::Close(end) => {
                let Some((at, lits)) = stack.pop() else {
                    continue;
                };
                let line = s[..at].matches('\n').count() + 1;
                let line_text = &s[s[..at].rfind('\n').map_or(0, |n| n + 1)..at];
                let skip = lits
                    .iter()
                    .take_while(|l| matches!(l.as_str(), "netns" | "exec"))
                    .count();
                let mut args: Option<Vec<String>> = None;
                if lits
                    .get(skip)
                    .is_some_and(|c| commands.contains(&canonical(c)))
                    && !line_text.contains("sockperf")
                {
                    args = Some(lits[skip..].to_vec());
                } else if let Some(call) = enclosing_call(s, at)
                    && commands.contains(&call)
                {
                    let mut a = vec![call.to_string()];
                    a.extend(lits.iter().cloned());
                    args = Some(a);
                }
                if let Some(mut args) = args {
                    // The `.arg(..)` / `.args([..])` calls chained after it.
                    let mut rest = s[end + 1..].trim_start_matches([')', ' ', '\n']);
                    while let Some(r) = rest
                        .strip_prefix(".args(")
                        .or_else(|| rest.strip_prefix(".arg("))
                    {
                        let mut depth = 1;
                        let close = r
                            .char_indices()
                            .find(|&(_, c)| {
                                match c {
                                    '(' => depth += 1,
                                    ')' => depth -= 1,
                                    _ => {}
                                }
                                depth == 0
                            })
                            .map_or(r.len(), |(n, _)| n);
                        for t in rust_tokens(&r[..close]) {
                            if let Tok::Str(v) = t {
                                args.push(v);
                            }
                        }
                        rest = r[close..].trim_start_matches([')', ' ', '\n']);
                    }
                    out.push((line, args));
                }
            }
        }
    }
    out
}

/// The `args:` lists of a Kubernetes manifest, each as one command line.
fn manifest_command_lines(s: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = s.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim() != "args:" {
            continue;
        }
        let mut args = Vec::new();
        for item in &lines[i + 1..] {
            let t = item.trim();
            if t.starts_with('#') {
                continue;
            }
            let Some(v) = t.strip_prefix("- ") else {
                break;
            };
            args.push(v.trim_matches(['"', '\'']).to_string());
        }
        out.push((i + 1, args));
    }
    out
}

#[test]
fn no_page_script_test_or_manifest_uses_an_old_spelling() {
    let rows = renamed();
    let commands: Vec<&str> = rows.iter().map(|r| r.command[0].as_str()).collect();
    let mut bad = Vec::new();
    let mut lines_seen = 0;
    for f in files() {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let rel = f.strip_prefix(root()).unwrap().display().to_string();
        let rust = rel.ends_with(".rs");
        let mut found: Vec<(usize, Vec<String>)> = Vec::new();
        for (at, line) in joined_lines(&text) {
            for args in command_lines(&line, rust) {
                found.push((at, args));
            }
        }
        if rust {
            found.extend(rust_command_lines(&text, &commands));
        }
        if rel.ends_with(".yaml") || rel.ends_with(".yml") {
            found.extend(manifest_command_lines(&text));
        }
        for (at, args) in found {
            lines_seen += 1;
            for o in old_spellings_in(&rows, &args) {
                bad.push(format!("{rel}:{at}: {o}: `{}`", args.join(" ")));
            }
        }
    }
    // The scan must be seeing command lines at all (hundreds across the docs and tests).
    assert!(lines_seen > 200, "only {lines_seen} command lines found");
    assert!(
        bad.is_empty(),
        "old spellings (src/cli/vocab.rs RENAMED; docs/flags.md):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scan_sees_each_form() {
    let rows = renamed();
    let commands: Vec<&str> = rows.iter().map(|r| r.command[0].as_str()).collect();
    let words = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Shell: only on a roundtrip command line of the matching command.
    let l = command_lines(r#"x "$RT" ping 127.0.0.1 -n 5 | head -n 3"#, false);
    assert_eq!(old_spellings_in(&rows, &l[0]).len(), 1, "{l:?}");
    let l = command_lines("ip -n ns1 link; roundtrip ping 127.0.0.1 -c 5", false);
    assert!(old_spellings_in(&rows, &l[0]).is_empty(), "{l:?}");
    let l = command_lines("`roundtrip connect` takes `-n`", false);
    assert!(old_spellings_in(&rows, &l[0]).is_empty(), "{l:?}");
    let l = command_lines("roundtrip tcp --pid 1 [-i 1s]", false);
    assert_eq!(old_spellings_in(&rows, &l[0]).len(), 1, "{l:?}");
    let j = joined_lines("roundtrip db URL \\\n   -n 20\n");
    assert_eq!(
        old_spellings_in(&rows, &command_lines(&j[0].1, false)[0]).len(),
        1
    );
    // Rust: arrays, netns prefixes, chained args, helpers named after the command; not other tools.
    let src = r#"
        bin().args(["icmp", host, "-n", "1"]);
        Command::new("ip").args(["netns", "exec", ns, BIN, "tcp", "--port"]).arg(p).args(["-i", "1s"]);
        ping(&net, &["-n", "50"]);
        sh(&["ip", "-n", ns, "link"]);
        sockperf_client(&["ping-pong", "-m", "64"]);
    "#;
    let found: Vec<Vec<String>> = rust_command_lines(src, &commands)
        .into_iter()
        .map(|(_, a)| a)
        .filter(|a| !old_spellings_in(&rows, a).is_empty())
        .collect();
    assert_eq!(
        found,
        vec![
            words(&["icmp", "-n", "1"]),
            words(&["tcp", "--port", "-i", "1s"]),
            words(&["ping", "-n", "50"]),
        ]
    );
    let m = manifest_command_lines("args:\n  - ping\n  # c\n  - -n\n  - 5\nnext: 1\n");
    assert_eq!(old_spellings_in(&rows, &m[0].1).len(), 1);
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

#[test]
fn each_old_spelling_parses_and_prints_its_notice() {
    let cases: &[&[&str]] = &[
        &["ping", "127.0.0.1", "-n", "5"],
        &["icmp", "127.0.0.1", "-n", "5"],
        &["compare", "127.0.0.1", "-n", "5"],
        &["connect", "127.0.0.1:1", "-n", "5"],
        &["db", "postgres://u@127.0.0.1/d", "-n", "5"],
        &["tcp", "-i", "2s"],
        &["tcp", "--interval", "2s"],
        &["tcp", "--time", "3s"],
        &["tcp", "--trace"],
    ];
    let rows = renamed();
    for args in cases {
        let o = parse_only(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {err}");
        let row = rows
            .iter()
            .find(|r| r.command[0] == args[0] && args.contains(&r.old.as_str()))
            .unwrap_or_else(|| panic!("{args:?} has no row in RENAMED"));
        let want = format!("`{} {}` is now `{}`", args[0], row.old, row.new);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(
            lines[0].starts_with("roundtrip: note: ") && lines[0].contains(&want),
            "{args:?}: {err}"
        );
    }
    // Every row is covered above.
    for r in &rows {
        if ["ping", "icmp", "compare", "connect", "db", "tcp"].contains(&r.command[0].as_str()) {
            assert!(
                cases
                    .iter()
                    .any(|c| c[0] == r.command[0] && c.contains(&r.old.as_str())),
                "{r:?} has no case here"
            );
        }
    }
}

#[test]
fn new_spellings_and_sockperf_m_parse_without_a_notice() {
    let cases: &[&[&str]] = &[
        &["ping", "127.0.0.1", "-c", "5", "-s", "1k"],
        &["ping", "127.0.0.1", "-m", "1k", "-t", "2s"],
        &["load", "127.0.0.1", "--rate", "1k", "-m", "128"],
        &["throughput", "127.0.0.1", "-m", "64,1k"],
        &["tp", "127.0.0.1", "-s", "64,1k"],
        &["compare", "-m", "300", "-c", "3"],
        &["agent", "--peer", "127.0.0.1", "-m", "100"],
        &["icmp", "::1", "-c", "2", "-s", "100"],
        &["tcp", "--report-interval", "2s", "-t", "3s", "--per-packet"],
        &["demo", "-t", "1s"],
    ];
    for args in cases {
        let o = parse_only(args);
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // `-m` is shown in the help as sockperf's spelling; the old `-n` is not.
    let help = String::from_utf8_lossy(&run(&["ping", "--help"]).stdout).to_string();
    assert!(help.contains("-s, --size") && help.contains("-m"), "{help}");
    assert!(help.contains("-c, --count"), "{help}");
}

/// The one line a refused command line prints (exit 2).
fn refusal(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

#[test]
fn other_tools_habits_get_roundtrips_spelling() {
    for (args, says) in [
        (
            &["ping", "127.0.0.1", "-W", "1"][..],
            "ping(8) -W: roundtrip says --timeout",
        ),
        (
            &["icmp", "127.0.0.1", "-W", "1"][..],
            "ping(8) -W: roundtrip says --timeout",
        ),
        (
            &["ping", "127.0.0.1", "-w", "5"][..],
            "ping(8) -w: roundtrip says -t/--duration",
        ),
        (
            &["connect", "127.0.0.1", "-S", "-p", "80"][..],
            "hping3 -S: roundtrip says --raw",
        ),
        (
            &["ping", "127.0.0.1", "--mps=1000"][..],
            "sockperf --mps: roundtrip says --rate",
        ),
        (
            &["ping", "127.0.0.1", "--tcp"][..],
            "sockperf --tcp: roundtrip says nothing: TCP is the default",
        ),
        (
            &["tp", "127.0.0.1", "--msg-size", "64"][..],
            "sockperf --msg-size: roundtrip says -s/--size",
        ),
        (
            &["load", "127.0.0.1", "--time", "5"][..],
            "sockperf --time: roundtrip says -t/--duration",
        ),
        (
            &["capture", "stats", "-r", "x.pcap"][..],
            "tcpdump -r: roundtrip says FILE, the first argument",
        ),
    ] {
        let err = refusal(args);
        assert!(
            err.starts_with("roundtrip: error: ") && err.contains(says),
            "{args:?}: {err}"
        );
    }
    // A flag no other tool uses that way gets no hint.
    let err = refusal(&["ping", "127.0.0.1", "--bogus"]);
    assert!(!err.contains("roundtrip says"), "{err}");
}

#[test]
fn a_mistyped_subcommand_gets_a_suggestion() {
    for (args, meant) in [
        (&["capture", "rcp", "x.pcap"][..], "rpc"),
        (&["pnig", "127.0.0.1"][..], "ping"),
        (&["tpc"][..], "tcp"),
        (&["capture", "statss"][..], "stats"),
    ] {
        let err = refusal(args);
        assert!(
            err.contains(&format!("did you mean '{meant}'?")),
            "{args:?}: {err}"
        );
    }
}
