//! Documentation that cannot drift from the program: every `roundtrip ...` command line shown in README.md,
//! docs/*.md and the other pages parses with the real argument definitions (or, for a usage synopsis, names only
//! flags that exist); the shown examples run and print what the page shows (below); every command has a page;
//! every page is linked from another; README stays one screen's worth; relative links resolve; every `--help`
//! ends with two or three examples that parse (the offline ones run); docs/json-format.md has a row for every
//! document kind; bench/README.md names every file under bench/ and has a dated row of figures for every script.
//! Also: the man pages render with `man -l` without a warning, and the bash completion completes a subcommand.
//!
//! **Which shown examples run.** A `$ roundtrip ...` line in a fenced block, with the lines under it up to the next
//! `$` line as its output. Offline examples (model, the captures in docs/captures and ../shared/captures, read
//! where they are) run in `offline_examples_run_and_print_what_the_docs_show`. Every other block runs as a
//! whole in `live_examples_print_what_the_docs_show`, on loopback: `roundtrip` is this build on PATH, curl and
//! pipes as a shell runs them; a `roundtrip server` on a free port stands for 127.0.0.1:11111 (and for a
//! `connect` target), a block's own listening addresses (--listen, --metrics, --control) move to free ports,
//! a `server`/`proxy`/`agent` line (or one ending in `&`) runs in the background until the block ends, the
//! databases are this machine's (PostgreSQL 5432, MariaDB 3306, Redis 6379; a block whose service is down is
//! skipped, a failure under CI), and `sudo` blocks run as root, alone, after the others. A block that cannot run
//! here is a row of [`NOT_RUN`] with the reason; a block neither run nor listed fails the test, and so does a
//! row that names no block.
//!
//! **How output is compared.** Offline: line by line as printed, numbers included (the same program on the same
//! file prints the same), only the columns' spacing aside. Live, by these rules (the command line itself is not
//! compared, so flags may be renamed; numbers never are, so a loaded machine does not fail it):
//! - every word must match: headers, row labels, section lines, verdicts (`application-limited`), units of sizes
//!   and counts (`64-byte`, `B`, `%`), and whether a line is there at all;
//! - a number may differ: it becomes `#` (its sign kept: `-24.4us` is not `24.4us`), and a measured unit glued
//!   to it or the word after it becomes its family (`<time>` ns/us/ms/s, `<size>` B/KiB/MiB.., `<rate>` x/s);
//!   a `-` (no value) matches any number; an address matches with or without its port;
//! - except a bare integer that the command line also gives (`-n 2000`, `--top 3`, `--connects 5`): it must be
//!   the same number in the run (a count or size the user asked for);
//! - blank lines and `note:` lines are not compared; consecutive lines that differ only in numbers (a progress
//!   line a second) count as their last one; a page line `...` stands for any lines the page leaves out;
//! - lines whose wording depends on the machine's load ([`VARIES`]) match from their start only, and the
//!   words `yes`/`NO` (sweep's `held` column) match each other; lines that appear or not with the load
//!   ([`OPTIONAL`]: sweep's cells whose rate was not held; `! ` warnings and the `see below` pointing to them) are
//!   dropped from both sides; consecutive rows alike but for numbers and `-` (no value) count as one;
//! - a background command is compared on the lines it printed before the next one ran (its start-up lines);
//!   a `$` line shown without output is run but not compared.

mod common;

use common::procs::{MODEL_BDP, MODEL_TRANSFER};

use common::procs::bin;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file of the project (not target/, .git/, fuzz corpora, or other checkouts).
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if e.file_type().map(|t| t.is_symlink()).unwrap_or(true) {
                continue;
            }
            if p.is_dir() {
                if !matches!(
                    name.as_str(),
                    "target" | ".git" | "corpus" | "artifacts" | "node_modules"
                ) {
                    walk(&p, out);
                }
            } else if name.ends_with(".md") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out.sort();
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// One command line shown in a page: where, the words after `roundtrip`, the shell text, and the output shown
/// under it (for `$ roundtrip ...` lines in a fenced block).
#[derive(Debug)]
struct Shown {
    at: String,
    /// An inline code span: a reference to a command (`roundtrip db`), checked for its command and flags only.
    inline: bool,
    line: String,
    output: Vec<String>,
}

/// The command lines of a page: `$ roundtrip ...` and `roundtrip ...` lines in fenced blocks (with the lines
/// shown after a `$` line up to the next prompt or the fence's end as its output), and `roundtrip ...` in inline
/// code spans.
fn shown_commands(path: &Path) -> Vec<Shown> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut in_fence = false;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.trim_start().starts_with("```") {
            in_fence = !in_fence;
            i += 1;
            continue;
        }
        let at = format!("{}:{}", rel(path), i + 1);
        if in_fence {
            let t = l.trim_start();
            let (prompt, cmd) = match t.strip_prefix("$ ") {
                Some(c) => (true, c.trim_start()),
                None => (false, t),
            };
            let cmd = cmd.strip_prefix("sudo ").unwrap_or(cmd);
            // `ip netns exec NS roundtrip ...`: the command run inside a namespace.
            let cmd = match cmd.strip_prefix("ip netns exec ") {
                Some(r) if prompt => r.split_once(' ').map_or(r, |(_, c)| c.trim_start()),
                _ => cmd,
            };
            if let Some(rest) = strip_program(cmd) {
                let mut line = rest.to_string();
                while line.ends_with('\\') && i + 1 < lines.len() {
                    line.pop();
                    i += 1;
                    line.push(' ');
                    line.push_str(lines[i].trim());
                }
                let mut output = Vec::new();
                if prompt {
                    let mut j = i + 1;
                    while j < lines.len()
                        && !lines[j].starts_with("$ ")
                        && !lines[j].trim_start().starts_with("```")
                    {
                        output.push(lines[j].to_string());
                        j += 1;
                    }
                    i = j - 1;
                }
                out.push(Shown {
                    at,
                    inline: false,
                    line,
                    output,
                });
            }
        } else {
            // Inline code spans: `roundtrip ...`, also when a span runs over a line break: the paragraph's
            // lines are read as one (a blank line or a fence ends it).
            let mut para = l.to_string();
            while i + 1 < lines.len()
                && !lines[i + 1].trim().is_empty()
                && !lines[i + 1].trim_start().starts_with("```")
            {
                i += 1;
                para.push(' ');
                para.push_str(lines[i].trim());
            }
            let mut rest = para.as_str();
            while let Some(s) = rest.find('`') {
                let after = &rest[s + 1..];
                let Some(e) = after.find('`') else { break };
                let span = &after[..e];
                if let Some(r) = strip_program(span) {
                    out.push(Shown {
                        at: at.clone(),
                        inline: true,
                        line: r.to_string(),
                        output: Vec::new(),
                    });
                }
                rest = &after[e + 1..];
            }
        }
        i += 1;
    }
    out
}

/// The words after the program name when `s` starts with it (roundtrip, ./target/release/roundtrip, ...).
fn strip_program(s: &str) -> Option<&str> {
    for p in [
        "roundtrip ",
        "./target/release/roundtrip ",
        "target/release/roundtrip ",
        "./roundtrip ",
    ] {
        if let Some(r) = s.strip_prefix(p) {
            return Some(r);
        }
    }
    None
}

/// Shell words of a command line up to the first unquoted pipe, redirection, `;`, `&` or comment.
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut have = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                have = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    cur.push(c);
                }
            }
            '"' => {
                have = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        c => cur.push(c),
                    }
                }
            }
            c if c.is_whitespace() => {
                if have {
                    words.push(std::mem::take(&mut cur));
                    have = false;
                }
            }
            '|' | '>' | '<' | ';' | '&' => break,
            '#' if !have => break,
            '2' if !have && chars.peek() == Some(&'>') => break,
            c => {
                cur.push(c);
                have = true;
            }
        }
    }
    if have {
        words.push(cur);
    }
    words
}

/// A usage synopsis rather than a command to run: placeholders (HOST, FILE...), optional parts, alternatives.
fn is_synopsis(words: &[String]) -> bool {
    words.iter().any(|w| {
        w.contains('[')
            || w.contains(']')
            || w.contains("...")
            || w.contains('(')
            || w.contains('{')
            || w == "|"
            || w.chars().filter(|c| c.is_ascii_alphabetic()).count() >= 2
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || !c.is_ascii_alphabetic())
                && !w.starts_with('-')
    })
}

/// In the flag set of a path that is an alias (`tp`) rather than a command of its own.
const ALIAS: &str = "(alias)";

/// Command paths (["capture", "rpc"]) and the long and short flags each accepts, read from `--help`.
fn command_tree() -> Vec<(Vec<String>, BTreeSet<String>)> {
    fn help(path: &[String]) -> String {
        let o = Command::new(bin())
            .args(path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "roundtrip {} --help failed",
            path.join(" ")
        );
        String::from_utf8(o.stdout).unwrap()
    }
    fn visit(path: Vec<String>, out: &mut Vec<(Vec<String>, BTreeSet<String>)>) {
        let h = help(&path);
        let mut flags = BTreeSet::new();
        let mut subs = Vec::new();
        let mut aliases = Vec::new();
        let mut section = "";
        for l in h.lines() {
            if !l.starts_with(' ') && l.ends_with(':') {
                section = if l.starts_with("Commands") {
                    "commands"
                } else if l.starts_with("Options") || l.starts_with("Arguments") {
                    "options"
                } else {
                    ""
                };
                continue;
            }
            let t = l.trim_start();
            if section == "commands"
                && l.starts_with("  ")
                && !l.starts_with("   ")
                && let Some(name) = t.split_whitespace().next()
                && name != "help"
            {
                subs.push(name.trim_end_matches(',').to_string());
            }
            // `throughput  Stream ... [alias: tp]` (maybe on the next line): the alias is a path of its own.
            if section == "commands"
                && let Some(a) = t
                    .split("[alias: ")
                    .nth(1)
                    .or_else(|| t.split("[aliases: ").nth(1))
            {
                let of = subs.last().cloned().unwrap_or_default();
                for alias in a.trim_end_matches(']').split(", ") {
                    aliases.push((of.clone(), alias.to_string()));
                }
            }
            if section == "options" && t.starts_with('-') {
                for w in t.split([' ', ',']) {
                    if w.starts_with('-') && w.len() > 1 {
                        flags.insert(w.split(['=', '<']).next().unwrap().to_string());
                    }
                }
            }
        }
        for s in subs {
            let mut p = path.clone();
            p.push(s.clone());
            visit(p.clone(), out);
            for (_, alias) in aliases.iter().filter(|(of, _)| *of == s) {
                let flags = out.iter().find(|(q, _)| *q == p).unwrap().1.clone();
                let mut a = path.clone();
                a.push(alias.clone());
                // Marked so that the page and man page checks skip it: an alias shares its command's.
                let mut flags = flags;
                flags.insert(ALIAS.to_string());
                out.push((a, flags));
            }
        }
        out.push((path, flags));
    }
    let mut out = Vec::new();
    visit(Vec::new(), &mut out);
    out
}

/// The longest command path the words start with.
fn path_of<'a>(
    tree: &'a [(Vec<String>, BTreeSet<String>)],
    words: &[String],
) -> &'a (Vec<String>, BTreeSet<String>) {
    tree.iter()
        .filter(|(p, _)| p.len() <= words.len() && p.iter().zip(words).all(|(a, b)| a == b))
        .max_by_key(|(p, _)| p.len())
        .unwrap()
}

fn all_shown() -> Vec<Shown> {
    markdown_files()
        .iter()
        .flat_map(|p| shown_commands(p))
        .collect()
}

#[test]
fn every_shown_command_line_parses() {
    let tree = command_tree();
    let shown = all_shown();
    assert!(
        shown.len() > 50,
        "found only {} command lines in the docs",
        shown.len()
    );
    let mut bad = Vec::new();
    let mut parsed = 0;
    for s in &shown {
        let words = shell_words(&s.line);
        if words.is_empty() {
            continue;
        }
        let (path, flags) = path_of(&tree, &words);
        if path.is_empty() && !words[0].starts_with('-') {
            // In a fenced block without a prompt, a line such as `roundtrip   71.7us ...` is output (a table row).
            if s.inline
                || s.output.is_empty()
                    && !words[0]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_lowercase())
            {
                continue;
            }
            bad.push(format!(
                "{}: `roundtrip {}`: no command {:?}",
                s.at, s.line, words[0]
            ));
            continue;
        }
        if s.inline || is_synopsis(&words) {
            for w in &words[path.len()..] {
                let flag = w.split('=').next().unwrap();
                let flag =
                    flag.trim_matches(|c| c == '[' || c == ']' || c == '(' || c == ')' || c == '|');
                if flag.starts_with('-')
                    && flag.len() > 1
                    && !flag.starts_with("---")
                    && !flags.contains(flag)
                {
                    bad.push(format!(
                        "{}: `roundtrip {}`: {flag} is not an option of `roundtrip {}`",
                        s.at,
                        s.line,
                        path.join(" ")
                    ));
                }
            }
            continue;
        }
        let o = common::procs::parse_only(&words);
        parsed += 1;
        // A page may show a refusal on purpose (the errors page): then the program must refuse it with the
        // same one-line error (by shape), not accept it.
        let shown_error = s
            .output
            .first()
            .filter(|l| l.starts_with("roundtrip: error:"));
        if let Some(expected) = shown_error {
            let err = String::from_utf8_lossy(&o.stderr);
            let got = err.lines().next().unwrap_or("");
            if !o.status.success() && shape(got) != shape(expected) {
                bad.push(format!(
                    "{}: `roundtrip {}`: the page shows {expected:?}, the program says {got:?}",
                    s.at, s.line
                ));
            }
            continue;
        }
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            bad.push(format!(
                "{}: `roundtrip {}`: {}",
                s.at,
                s.line,
                err.lines().next().unwrap_or("")
            ));
        }
    }
    assert!(
        parsed > 30,
        "only {parsed} command lines were concrete enough to parse"
    );
    assert!(
        bad.is_empty(),
        "{} command line(s) in the docs do not match the program:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Output compared by shape: digits masked, runs of spaces collapsed, trailing space dropped.
fn shape(s: &str) -> String {
    let masked: String = s
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    // 9 and 99.9 are the same shape: numbers may grow a digit between runs and recordings.
    let mut out = String::new();
    for w in masked.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        for c in w.chars() {
            if !(c == '9' && out.ends_with('9')) {
                out.push(c);
            }
        }
    }
    out
}

/// Examples that need no network and no root: the model, captures the project ships, completions.
fn runs_offline(words: &[String]) -> bool {
    match words.first().map(String::as_str) {
        Some("model") => true,
        Some("capture") => {
            words
                .iter()
                .any(|w| w.starts_with("docs/captures/") || w.starts_with("../shared/captures/"))
                && !words.iter().any(|w| w == "live" || w.starts_with("--live"))
        }
        Some("generate") => {
            words.get(1).is_some_and(|w| w.starts_with("complete"))
                && !words.iter().any(|w| w == "--dir")
        }
        _ => false,
    }
}

#[test]
fn offline_examples_run_and_print_what_the_docs_show() {
    let shown = all_shown();
    let tmp = tempfile::tempdir().unwrap();
    // Files the examples write (--report x.html) land here; docs/captures is the project's own, and
    // ../shared/captures the real captures beside the project (read where they are, never copied).
    let work = tmp.path().join("repo");
    std::fs::create_dir_all(work.join("docs")).unwrap();
    std::os::unix::fs::symlink(root().join("docs/captures"), work.join("docs/captures")).unwrap();
    let shared = common::captures_dir();
    if let Some(dir) = &shared {
        std::fs::create_dir(tmp.path().join("shared")).unwrap();
        std::os::unix::fs::symlink(dir, tmp.path().join("shared/captures")).unwrap();
    }
    let mut bad = Vec::new();
    let mut ran = 0;
    let mut compared = 0;
    for s in shown.iter().filter(|s| !s.output.is_empty()) {
        let words = shell_words(&s.line);
        if !runs_offline(&words) || is_synopsis(&words) {
            continue;
        }
        if shared.is_none() && s.line.contains("../shared/captures/") {
            continue;
        }
        // As the page shows it, pipes (| head) included; both streams, as a terminal shows them.
        let script = format!("{} {} 2>&1", common::procs::BIN, s.line);
        let o = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(&work)
            .output()
            .unwrap();
        ran += 1;
        let got = String::from_utf8_lossy(&o.stdout).to_string();
        let expect_fail = s.output.iter().any(|l| l.starts_with("roundtrip: error"));
        if !o.status.success() && !expect_fail && !s.line.contains('|') {
            bad.push(format!("{}: `roundtrip {}` failed:\n{got}", s.at, s.line));
            continue;
        }
        if s.output.is_empty() {
            continue;
        }
        compared += 1;
        // The same program on the same file prints the same: every line compared as it is (columns' spacing
        // aside), numbers included.
        let exact = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
        let want: Vec<String> = s
            .output
            .iter()
            .map(|l| exact(l))
            .filter(|l| !l.is_empty())
            .collect();
        let have: Vec<String> = got.lines().map(exact).filter(|l| !l.is_empty()).collect();
        if want != have {
            let first = want
                .iter()
                .zip(&have)
                .position(|(a, b)| a != b)
                .unwrap_or(want.len().min(have.len()));
            bad.push(format!(
                "{}: `roundtrip {}`: the output differs from the page's from line {} on:\n  page: {}\n  run:  {}",
                s.at,
                s.line,
                first + 1,
                want.get(first).map(String::as_str).unwrap_or("(nothing)"),
                have.get(first).map(String::as_str).unwrap_or("(nothing)")
            ));
        }
    }
    assert!(ran >= 5, "only {ran} offline examples ran");
    assert!(
        compared >= 3,
        "only {compared} examples had output to compare"
    );
    assert!(
        bad.is_empty(),
        "{} example(s) do not do what the docs show:\n{}",
        bad.len(),
        bad.join("\n\n")
    );
}

/// The first heading of each page under docs/.
fn doc_pages() -> Vec<(PathBuf, String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "md") {
            let text = std::fs::read_to_string(&p).unwrap();
            let h1 = text
                .lines()
                .find(|l| l.starts_with("# "))
                .unwrap_or("")
                .to_string();
            out.push((p, h1, text));
        }
    }
    out
}

fn names(heading: &str, name: &str) -> bool {
    let h = heading.replace('`', "");
    let needle = format!("roundtrip {name}");
    h.match_indices(&needle).any(|(i, _)| {
        h[i + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '-' || c == '_'))
    })
}

#[test]
fn every_command_has_a_page() {
    let tree = command_tree();
    let pages = doc_pages();
    let mut missing = Vec::new();
    for (path, _) in tree
        .iter()
        .filter(|(p, f)| !p.is_empty() && !f.contains(ALIAS))
    {
        let name = path.join(" ");
        let found = if path.len() == 1 {
            // A top-level command is named in the title of a page of its own (or of its family's).
            pages.iter().any(|(_, h1, _)| names(h1, &name))
        } else {
            // A subcommand has a section (any heading) on a page.
            pages.iter().any(|(_, _, text)| {
                text.lines()
                    .filter(|l| l.starts_with('#'))
                    .any(|l| names(l, &name))
            })
        };
        if !found {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "commands without a page in docs/ (a page whose title names `roundtrip CMD`; a subcommand needs a heading \
         naming `roundtrip CMD SUB`): {missing:?}"
    );
}

#[test]
fn every_page_is_linked_from_another() {
    let files = markdown_files();
    let mut orphans = Vec::new();
    for p in files
        .iter()
        .filter(|p| p.parent() == Some(&root().join("docs")))
    {
        let linked = files.iter().filter(|q| *q != p).any(|q| {
            links(q).iter().any(|l| {
                q.parent()
                    .unwrap()
                    .join(l.split('#').next().unwrap())
                    .canonicalize()
                    .ok()
                    == p.canonicalize().ok()
            })
        });
        if !linked {
            orphans.push(rel(p));
        }
    }
    assert!(
        orphans.is_empty(),
        "pages no other page links to: {orphans:?}"
    );
}

#[test]
fn readme_is_one_screen_and_a_bit() {
    let n = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        n <= 260,
        "README.md has {n} lines; keep it at most 260 and move detail to docs/"
    );
}

/// Relative link targets of a page: [text](target) outside fenced blocks and inline code.
fn links(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut in_fence = false;
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop inline code first.
        let mut plain = String::new();
        for (i, part) in l.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(s) = rest.find("](") {
            let after = &rest[s + 2..];
            let Some(e) = after.find(')') else { break };
            let target = after[..e].trim();
            let target = target.split_whitespace().next().unwrap_or("");
            if !target.is_empty()
                && !target.starts_with('#')
                && !target.contains("://")
                && !target.starts_with("mailto:")
            {
                out.push(target.to_string());
            }
            rest = &after[e + 1..];
        }
    }
    out
}

#[test]
fn relative_links_resolve() {
    let mut bad = Vec::new();
    let files = markdown_files();
    assert!(files.len() >= 10, "{files:?}");
    for p in &files {
        for l in links(p) {
            let file = l.split('#').next().unwrap();
            let target = p.parent().unwrap().join(file);
            if !target.exists() {
                bad.push(format!("{}: ({l}) does not exist", rel(p)));
            }
        }
    }
    assert!(bad.is_empty(), "broken relative links:\n{}", bad.join("\n"));
}

#[test]
fn man_pages_render_without_warnings() {
    if !common::have("man") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .args(["generate", "man", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // docs/generate.md shows this run's first line (its output is not compared by the offline test: it
    // writes files): the count of pages it shows is the count written.
    let said = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    let count = said
        .split_whitespace()
        .skip_while(|w| *w != "wrote")
        .nth(1)
        .unwrap_or("?")
        .to_string();
    let page = std::fs::read_to_string(root().join("docs/generate.md")).unwrap();
    assert!(
        page.contains(&format!("wrote {count} man pages"))
            && page.contains(&format!("{count} pages in this version")),
        "roundtrip generate man wrote {count} pages; docs/generate.md says otherwise"
    );
    let tree = command_tree();
    for (path, _) in tree.iter().filter(|(_, f)| !f.contains(ALIAS)) {
        let mut name = vec!["roundtrip".to_string()];
        name.extend(path.iter().cloned());
        let page = dir.path().join(format!("{}.1", name.join("-")));
        assert!(page.exists(), "no man page {}", page.display());
        let o = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(&page)
            .env("MANWIDTH", "100")
            .env("MAN_KEEP_FORMATTING", "0")
            .output()
            .unwrap();
        // Without a terminal man still prints groff's overstrikes (X\x08X for bold): drop them.
        let mut text = String::new();
        for c in String::from_utf8_lossy(&o.stdout).chars() {
            if c == '\x08' {
                text.pop();
            } else {
                text.push(c);
            }
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && err.trim().is_empty(),
            "man -l {}: {err}",
            page.display()
        );
        assert!(
            text.contains("SYNOPSIS") && text.contains(&name.join("-")),
            "{}: {text}",
            page.display()
        );
        // Every page, roundtrip.1 too, has the examples as a section of their own.
        assert!(
            text.contains("EXAMPLES\n"),
            "{} has no EXAMPLES section",
            page.display()
        );
    }
}

#[test]
fn bash_completion_completes_a_subcommand() {
    if !common::have("bash") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(bin())
        .args(["generate", "complete-bash", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = dir.path().join("roundtrip");
    // Source it, check it is registered, and call it as bash would on `roundtrip pi<TAB>` and
    // `roundtrip capture r<TAB>`.
    let script = format!(
        r#"source '{}' || exit 3
complete -p roundtrip || exit 4
COMP_WORDS=(roundtrip pi); COMP_CWORD=1; COMP_LINE='roundtrip pi'; COMP_POINT=${{#COMP_LINE}}
_roundtrip roundtrip pi roundtrip; echo "1:${{COMPREPLY[*]}}"
COMP_WORDS=(roundtrip capture r); COMP_CWORD=2; COMP_LINE='roundtrip capture r'; COMP_POINT=${{#COMP_LINE}}
_roundtrip roundtrip r capture; echo "2:${{COMPREPLY[*]}}"
COMP_WORDS=(roundtrip ping --histo); COMP_CWORD=2; COMP_LINE='roundtrip ping --histo'; COMP_POINT=${{#COMP_LINE}}
_roundtrip roundtrip --histo ping; echo "3:${{COMPREPLY[*]}}""#,
        file.display()
    );
    let o = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("-F _roundtrip roundtrip"), "{out}");
    assert!(
        out.lines().any(|l| l == "1:ping"),
        "roundtrip pi<TAB> did not complete to ping: {out}"
    );
    assert!(
        out.lines().any(|l| l == "2:rpc"),
        "roundtrip capture r<TAB> did not complete to rpc: {out}"
    );
    assert!(
        out.lines().any(|l| l == "3:--histogram"),
        "roundtrip ping --histo<TAB>: {out}"
    );
}

#[test]
fn zsh_and_fish_completions_name_every_command() {
    for what in ["complete-zsh", "complete-fish"] {
        let o = Command::new(bin())
            .arg("generate")
            .arg(what)
            .output()
            .unwrap();
        assert!(o.status.success());
        let text = String::from_utf8_lossy(&o.stdout);
        for cmd in ["ping", "capture", "rpc", "whatif", "generate", "mesh"] {
            assert!(text.contains(cmd), "{what} does not mention {cmd}");
        }
    }
}

#[test]
fn help_examples_parse_and_the_offline_ones_run() {
    let tree = command_tree();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("docs")).unwrap();
    std::os::unix::fs::symlink(
        root().join("docs/captures"),
        work.path().join("docs/captures"),
    )
    .unwrap();
    let mut bad = Vec::new();
    let mut ran = 0;
    for (path, _) in tree.iter().filter(|(_, f)| !f.contains(ALIAS)) {
        let o = Command::new(bin())
            .args(path)
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&o.stdout).to_string();
        let Some(examples) = help.split("\nExamples:\n").nth(1) else {
            bad.push(format!(
                "`roundtrip {} --help` has no examples",
                path.join(" ")
            ));
            continue;
        };
        // The help ENDS with them: after the heading only examples and the comment line above each.
        if let Some(other) = examples
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("roundtrip ") && !l.starts_with("# "))
        {
            bad.push(format!(
                "`roundtrip {} --help` goes on after its examples: {other:?}",
                path.join(" ")
            ));
        }
        let lines: Vec<&str> = examples
            .lines()
            .filter_map(|l| l.trim().strip_prefix("roundtrip "))
            .collect();
        if !(2..=3).contains(&lines.len()) {
            bad.push(format!(
                "`roundtrip {} --help` has {} examples, not two or three",
                path.join(" "),
                lines.len()
            ));
        }
        for line in lines {
            let words = shell_words(line);
            let o = common::procs::parse_only(&words);
            if !o.status.success() {
                bad.push(format!(
                    "help example `roundtrip {line}`: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
                continue;
            }
            // A file it reads from another example (ping.json) or from another host is not here; the rest run.
            if runs_offline(&words) && !line.contains("--from") {
                let o = Command::new(bin())
                    .args(&words)
                    .current_dir(work.path())
                    .output()
                    .unwrap();
                ran += 1;
                if !o.status.success() {
                    bad.push(format!(
                        "help example `roundtrip {line}` failed: {}",
                        String::from_utf8_lossy(&o.stderr)
                    ));
                }
            }
        }
    }
    assert!(ran >= 20, "only {ran} help examples ran");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn json_format_page_lists_every_offline_kind_and_its_fields() {
    let page = std::fs::read_to_string(root().join("docs/json-format.md")).unwrap();
    let runs: &[&[&str]] = &[
        &[
            "model", "tps", "--tps", "2000", "--rtt", "0.2ms", "--at", "1ms",
        ],
        &["model", "window", "--window", "64KiB", "--rtt", "40ms"],
        &MODEL_BDP,
        &[
            "model", "mathis", "--mss", "1448", "--loss", "0.1%", "--rtt", "40ms",
        ],
        &MODEL_TRANSFER,
        &["capture", "stats", "docs/captures/roundtrip-ping.pcap"],
        &["capture", "timeline", "docs/captures/roundtrip-ping.pcap"],
        &["capture", "flows", "docs/captures/roundtrip-ping.pcap"],
        &["capture", "rpc", "docs/captures/pgbench-select.pcap"],
        &[
            "capture",
            "match",
            "docs/captures/roundtrip-ping.pcap",
            "docs/captures/roundtrip-ping.pcap",
        ],
        &[
            "capture",
            "whatif",
            "docs/captures/pgbench-select.pcap",
            "--rtt",
            "5ms",
        ],
    ];
    let mut bad = Vec::new();
    for args in runs {
        let o = Command::new(bin())
            .args(*args)
            .arg("--json")
            .current_dir(root())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let kind = doc["kind"].as_str().unwrap();
        assert_eq!(doc["format"], "roundtrip");
        // The row of the kinds table that names this kind.
        let Some(row) = page
            .lines()
            .find(|l| l.starts_with('|') && l.contains(&format!("`{kind}`")))
        else {
            bad.push(format!(
                "kind {kind} ({args:?}) is not in docs/json-format.md"
            ));
            continue;
        };
        for key in doc.as_object().unwrap().keys() {
            if ["format", "format_version", "kind", "environment"].contains(&key.as_str()) {
                continue;
            }
            if !row.contains(key.as_str()) {
                bad.push(format!(
                    "kind {kind}: field {key} is not in its row of docs/json-format.md"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn bench_readme_names_every_script_with_its_latest_figures() {
    let readme = std::fs::read_to_string(root().join("bench/README.md")).unwrap();
    let (_, figures) = readme
        .split_once("## Latest figures")
        .expect("bench/README.md has a `## Latest figures` section");
    let mut bad = Vec::new();
    let mut scripts = 0;
    for e in std::fs::read_dir(root().join("bench")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name == "README.md" || e.path().is_dir() {
            continue;
        }
        if !readme.contains(&format!("`bench/{name}")) && !readme.contains(&format!("`{name}")) {
            bad.push(format!("bench/{name} is not named in bench/README.md"));
        }
        // A script a person runs (not lib.sh, which the others source) has a row of figures: its name, the
        // date they were recorded, what they were.
        if name.ends_with(".sh") && name != "lib.sh" {
            scripts += 1;
            let dated = figures.lines().any(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                cells.len() >= 4
                    && cells[1].contains(name.as_str())
                    && cells[2].len() == 10
                    && cells[2].chars().enumerate().all(|(i, c)| {
                        if i == 4 || i == 7 {
                            c == '-'
                        } else {
                            c.is_ascii_digit()
                        }
                    })
                    && !cells[3].is_empty()
            });
            if !dated {
                bad.push(format!(
                    "bench/{name} has no row (script | YYYY-MM-DD | result) under `## Latest figures`"
                ));
            }
        }
    }
    assert!(scripts >= 20, "only {scripts} scripts under bench/");
    assert!(
        figures.contains("2 shared") || figures.contains("machine"),
        "the latest figures do not say which machine they were recorded on"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn json_format_page_has_a_row_for_every_kind_the_library_names() {
    let page = std::fs::read_to_string(root().join("docs/json-format.md")).unwrap();
    let kinds = std::fs::read_to_string(root().join("src/doc/kind.rs")).unwrap();
    let mut names = Vec::new();
    for l in kinds.lines() {
        if let Some((_, v)) = l
            .trim()
            .strip_prefix("pub const ")
            .and_then(|r| r.split_once("= \""))
        {
            names.push(v.trim_end_matches("\";").to_string());
        }
    }
    assert!(names.len() >= 15, "{names:?}");
    let missing: Vec<&String> = names
        .iter()
        .filter(|k| {
            !page
                .lines()
                .any(|l| l.starts_with('|') && l.contains(&format!("`{k}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "kinds in src/doc/kind.rs without a row in docs/json-format.md: {missing:?}"
    );
}

// ---------- examples run on loopback, against the local databases, or on the captures beside the project ----------

/// A `$ ...` line of a fenced block (any program: curl too), with the output the page shows under it.
#[derive(Debug, Clone)]
struct Step {
    at: String,
    line: String,
    output: Vec<String>,
}

/// The fenced blocks of a page that hold at least one `$ roundtrip ...` line, each as its steps in order.
fn sessions(path: &Path) -> Vec<Vec<Step>> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut block: Option<Vec<Step>> = None;
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if t.starts_with("```") {
            match block.take() {
                Some(b) => {
                    if b.iter().any(|s| {
                        s.line
                            .match_indices("roundtrip ")
                            .any(|(k, _)| k == 0 || s.line[..k].ends_with([' ', ';', '(']))
                    }) {
                        out.push(b);
                    }
                }
                None => block = Some(Vec::new()),
            }
        } else if let Some(b) = block.as_mut()
            && let Some(cmd) = t.strip_prefix("$ ")
        {
            let at = format!("{}:{}", rel(path), i + 1);
            let mut line = cmd.trim().to_string();
            while line.ends_with('\\') && i + 1 < lines.len() {
                line.pop();
                i += 1;
                line.push(' ');
                line.push_str(lines[i].trim());
            }
            let mut output = Vec::new();
            while i + 1 < lines.len()
                && !lines[i + 1].trim_start().starts_with("$ ")
                && !lines[i + 1].trim_start().starts_with("```")
            {
                i += 1;
                output.push(lines[i].to_string());
            }
            b.push(Step { at, line, output });
        }
        i += 1;
    }
    out
}

fn strip_sudo(s: &str) -> &str {
    s.strip_prefix("sudo ").unwrap_or(s)
}

/// Shown examples that the tests do not run, with why: (page, the start of the first `$` line of the block with
/// its flags left out, so that renaming a flag does not unlist it).
/// Every block with a `$ roundtrip ...` line is either run (offline or live) or named here, and every row here
/// names a block that exists; so a new example is run unless someone writes down why it cannot be.
const NOT_RUN: &[(&str, &str, &str)] = &[
    (
        "docs/agent.md",
        "roundtrip agent 0.0.0.0",
        "three hosts 10.77.0.1-3 (a lab of namespaces); tests/agent.rs and tests/fleet.rs run the agent",
    ),
    (
        "docs/capture-filter.md",
        "roundtrip capture stats db.pcap",
        "db.pcap and raw.pcap are the reader's files; the refusals are compared by every_shown_command_line_parses",
    ),
    (
        "docs/capture-filter.md",
        "roundtrip capture stats raw.pcap",
        "raw.pcap is the reader's file",
    ),
    (
        "docs/capture-filter.md",
        "roundtrip capture bpf \"$(printf",
        "the refusal is compared by every_shown_command_line_parses; $(...) needs a shell the parse check does not use",
    ),
    (
        "docs/capture-filter.md",
        "roundtrip capture stats nfs_nfs_base.pcap udp",
        "the capture is named without its folder; tests/capture_filter.rs reads it from ../shared/captures",
    ),
    (
        "docs/capture-filter.md",
        "roundtrip capture bpf 'host 10.0.0.5 and tcp'",
        "prints a BPF program whose instructions are compared by tests/capture_filter.rs",
    ),
    (
        "docs/capture-live.md",
        "roundtrip capture stats lo 4s",
        "needs redis-benchmark's traffic during the capture; tests/capture_live.rs captures live traffic",
    ),
    (
        "docs/capture-live.md",
        "roundtrip capture rpc lo 4s",
        "needs redis-benchmark's traffic during the capture; tests/capture_live.rs captures live traffic",
    ),
    (
        "docs/capture-live.md",
        "roundtrip capture flows lo",
        "needs redis-benchmark's traffic during the capture; tests/capture_live.rs captures live traffic",
    ),
    (
        "docs/capture-live.md",
        "roundtrip capture timeline lo",
        "needs redis-benchmark's traffic during the capture; tests/capture_live.rs captures live traffic",
    ),
    (
        "docs/capture-live.md",
        "roundtrip capture rpc lo 3s",
        "needs pgbench's traffic during the capture; tests/capture_live.rs keeps slow requests",
    ),
    (
        "docs/capture-live.md",
        "roundtrip capture stats lo 2",
        "needs pgbench's traffic during the capture; tests/capture_live.rs runs --threads",
    ),
    (
        "docs/capture.md",
        "roundtrip capture flows bulk-lo.pcap",
        "bulk-lo.pcap is not shipped (a receiver that pauses, recorded once)",
    ),
    (
        "docs/capture.md",
        "roundtrip capture rpc smb.pcap",
        "smb.pcap is recorded against a Samba server; tests/capture_smb2.rs records one",
    ),
    (
        "docs/capture.md",
        "roundtrip capture rpc psql.pcap",
        "psql.pcap and t13.pcap are recorded with TLS keys; tests/capture_tls.rs records them",
    ),
    (
        "docs/capture.md",
        "roundtrip capture match client.pcap",
        "two captures of one run in two namespaces; tests/capture_match_netns.rs records them",
    ),
    (
        "docs/capture.md",
        "roundtrip capture whatif smb-get-20MB.pcap",
        "a 20 MB SMB capture not shipped; tests/capture_smb2.rs records one",
    ),
    (
        "docs/db-link.md",
        "roundtrip proxy 127.0.0.1:0 127.0.0.1:5432",
        "needs the rt_link_doc database with dblink set up; tests/db_link.rs builds one",
    ),
    (
        "docs/db.md",
        "roundtrip db 'mysql://app:S3cret%20pw@127.0.0.1:33061/db' 200",
        "a MySQL 8 server on 33061 (tests/mysql8_server.py, started by tests/db.rs)",
    ),
    (
        "docs/db.md",
        "roundtrip db 'mysql://app:S3cret%20pw@127.0.0.1:33061/db?get",
        "a MySQL 8 server on 33061 (tests/mysql8_server.py, started by tests/db.rs)",
    ),
    (
        "docs/errors-and-interruptions.md",
        "roundtrip proxy",
        "refusals: compared by every_shown_command_line_parses",
    ),
    (
        "docs/errors-and-interruptions.md",
        "head 3000 psql.pcap",
        "psql.pcap is the reader's capture",
    ),
    (
        "docs/errors-and-interruptions.md",
        "roundtrip load 127.0.0.1 10k",
        "interrupted with Ctrl-C by hand; tests/traffic.rs interrupts load",
    ),
    (
        "docs/errors-and-interruptions.md",
        "roundtrip replay docs/captures/pgbench-select.pcap",
        "interrupted with Ctrl-C by hand through a 40 ms proxy; tests/replay.rs runs replay",
    ),
    (
        "docs/generate.md",
        "roundtrip generate man",
        "checked by man_pages_render_without_warnings (the count of pages)",
    ),
    (
        "docs/limits.md",
        "roundtrip capture stats docs/captures/roundtrip-ping.pcap 1ns",
        "refusals: compared by every_shown_command_line_parses",
    ),
    (
        "docs/mesh.md",
        "roundtrip mesh http://127.0.0.1:19090 1m",
        "a Prometheus with a fleet's series; tests/mesh.rs serves recorded ones",
    ),
    (
        "docs/mesh.md",
        "roundtrip mesh http://127.0.0.1:19090 15s",
        "a Prometheus with a fleet's series; tests/mesh.rs serves recorded ones",
    ),
    (
        "docs/mesh.md",
        "roundtrip mesh http://127.0.0.1:19091",
        "refusals and unreachable servers; tests/mesh.rs",
    ),
    (
        "docs/proxy-bridge.md",
        "ip netns exec mid roundtrip proxy",
        "runs until Ctrl-C while ping and iperf3 cross it; the recipe itself is run by proxy_bridge_recipe_runs_as_shown",
    ),
    (
        "docs/proxy.md",
        "roundtrip proxy 127.0.0.1:15000 127.0.0.1:11111 0.0.0.0:9000",
        "refusals and a token file from another host",
    ),
    (
        "docs/replay.md",
        "roundtrip server",
        "pg50.pcap is recorded by the page's steps; tests/replay.rs records and replays one",
    ),
    (
        "docs/replay.md",
        "roundtrip replay pg50.pcap",
        "pg50.pcap is recorded by the page's steps; tests/replay.rs records and replays one",
    ),
    (
        "docs/report.md",
        "roundtrip compare 50",
        "outputs elided to the file names; tests/report.rs renders every kind",
    ),
    (
        "docs/report.md",
        "roundtrip report iperf3.json",
        "refusals of the reader's files; tests/report.rs",
    ),
    (
        "docs/tcp.md",
        "roundtrip tcp 10.78.9.2 1s",
        "two namespaces 10.78.9.1/2 with a delayed path; tests/tcp_watch.rs watches connections in namespaces",
    ),
    (
        "docs/tcp.md",
        "roundtrip tcp 10.78.9.2 2s",
        "two namespaces 10.78.9.1/2 with a delayed path; tests/tcp_watch.rs watches connections in namespaces",
    ),
];

/// Where a block runs: offline (the existing comparison), here on loopback, or not (with the reason).
enum Plan {
    Offline,
    Live,
    /// The row of [`NOT_RUN`] that says why.
    NotRun(usize),
}

fn plan(page: &str, steps: &[Step]) -> Plan {
    let first: Vec<&str> = strip_sudo(&steps[0].line)
        .split_whitespace()
        .filter(|w| !w.starts_with('-'))
        .collect();
    let first = first.join(" ");
    if let Some(k) = NOT_RUN
        .iter()
        .position(|(p, start, _)| *p == page && first.starts_with(start))
    {
        return Plan::NotRun(k);
    }
    let all_offline = steps
        .iter()
        .all(|s| strip_program(strip_sudo(&s.line)).is_some_and(|r| runs_offline(&shell_words(r))));
    if all_offline {
        Plan::Offline
    } else {
        Plan::Live
    }
}

/// The unit family of a unit word (`<time>`, `<size>`, `<rate>`): a live run may print 270us where the page
/// shows 1.02ms, or KiB/s for MiB/s.
fn unit_family(u: &str) -> Option<&'static str> {
    match u {
        "ns" | "us" | "µs" | "ms" | "s" => Some("<time>"),
        "B" | "KiB" | "MiB" | "GiB" | "TiB" | "kB" | "MB" | "GB" | "TB" => Some("<size>"),
        u if u.ends_with("/s") => Some("<rate>"),
        _ => None,
    }
}

/// The skeleton of a live output line (the rules are at the top of this file): words kept, each number masked
/// to `#` with its sign, a measured unit after it (glued or the next word) reduced to its family, and a bare
/// integer of `keep` (one the command line gives: a count, a size) kept as it is. `loose` keeps none.
fn skeleton(line: &str, keep: &BTreeSet<String>) -> String {
    // A difference of two medians may be printed as "not measurable" instead of a (negative) time.
    let mut line = line.replace("not measurable", "0ns");
    // A bar of a histogram: its length is a number.
    line.retain(|c| !('\u{2580}'..='\u{259f}').contains(&c));
    let collapsed = line.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some((_, what)) = VARIES.iter().find(|(p, _)| collapsed.starts_with(p)) {
        return format!("<{what}>");
    }
    let mut out: Vec<String> = Vec::new();
    let mut prev_number = false;
    for w in line.split_whitespace() {
        if !w.chars().any(|c| c.is_ascii_digit()) {
            // sweep's `held` column: whether a rate was held depends on the machine's load.
            if w == "yes" || w == "NO" {
                out.push("<held?>".to_string());
                prev_number = false;
                continue;
            }
            match unit_family(w).filter(|_| prev_number) {
                Some(f) => out.push(f.to_string()),
                None => out.push(w.to_string()),
            }
            prev_number = false;
            continue;
        }
        if w.chars().all(|c| c.is_ascii_digit()) && keep.contains(w) {
            out.push(w.to_string());
            prev_number = true;
            continue;
        }
        let mut m = String::new();
        for c in w.chars() {
            if c.is_ascii_digit() || (c == '.' || c == ',') && m.ends_with('#') {
                if !m.ends_with('#') {
                    m.push('#');
                }
            } else {
                m.push(c);
            }
        }
        // "9." at the end of a sentence: the dot was swallowed; give it back.
        if w.ends_with('.') && !m.ends_with('.') {
            m.push('.');
        }
        let unit = m.trim_start_matches(['-', '+']).trim_start_matches('#');
        let m =
            match unit_family(unit).filter(|_| m.trim_start_matches(['-', '+']).starts_with('#')) {
                Some(f) => format!("{}{f}", &m[..m.len() - unit.len()]),
                None => m,
            };
        prev_number = m == "#" || m == "-#" || m == "+#";
        // An address with or without its port (the test moves services to free ports).
        out.push(m.replace("#:#", "#"));
    }
    out.join(" ")
}

/// Lines whose wording depends on how loaded the machine is: (start of the line, columns' spacing aside; what it
/// says). Two lines that start with a row's start, or with starts of rows saying the same, match whatever follows.
const VARIES: &[(&str, &str)] = &[
    ("rate held:", "load: whether the rate was held"),
    ("rate NOT held:", "load: whether the rate was held"),
    (
        "roundtrip ping 14 B application to application",
        "compare: ping vs handshake",
    ),
    (
        "roundtrip ping 250 B the same with a realistic 250 B message",
        "compare: 250 B vs 14 B",
    ),
];

/// Lines that are there or not depending on the machine's load (sweep names each cell whose rate was not held):
/// dropped from both sides, as are warnings (`! 5 of 50 attempts not open`) and a row's `see below` pointing to
/// one.
const OPTIONAL: &[&str] = &[": rate NOT held: offered"];

/// The bare integers of a command line as the page shows it: counts and sizes the run must print the same.
fn kept_numbers(line: &str) -> BTreeSet<String> {
    shell_words(line)
        .into_iter()
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()))
        .collect()
}

/// Lines prepared for comparison: blank lines and `note:` lines dropped, a run of lines that differ only in
/// numbers (progress lines, one a second) taken as its last line.
fn prepared(lines: &[String], keep: &BTreeSet<String>) -> Vec<String> {
    let none = BTreeSet::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for l in lines {
        let t = l.trim();
        if t.is_empty()
            || t.starts_with("note:")
            || t.starts_with("! ")
            || OPTIONAL.iter().any(|o| t.contains(o))
        {
            continue;
        }
        // A row's pointer to its warning (`see below`) comes with the warning: both depend on the load.
        let t = t.strip_suffix("see below").map_or(t, str::trim_end);
        let loose = skeleton(t, &none);
        let strict = skeleton(t, keep);
        match out.last_mut() {
            Some(last) if same_line(&last.0, &loose) && t != "..." => last.1 = strict,
            _ => out.push((loose, strict)),
        }
    }
    out.into_iter().map(|(_, s)| s).collect()
}

/// Two skeleton lines are the same when their words are, a `-` (no value) standing for any number.
fn same_line(a: &str, b: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split(' ').collect(), b.split(' ').collect());
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| {
            x == y || *x == "-" && y.starts_with('#') || *y == "-" && x.starts_with('#')
        })
}

/// Compares a live run's output with the page's: None when it matches, else what differs. A page line `...`
/// stands for any number of lines. `prefix`: only as many page lines as the run printed (a background command's
/// start-up lines).
fn live_mismatch(
    page: &[String],
    run: &[String],
    keep: &BTreeSet<String>,
    prefix: bool,
) -> Option<String> {
    let p = prepared(page, keep);
    let r = prepared(run, keep);
    let (mut i, mut j) = (0, 0);
    while i < p.len() {
        if p[i] == "..." {
            if i + 1 == p.len() {
                return None;
            }
            match r[j..].iter().position(|l| same_line(l, &p[i + 1])) {
                Some(k) => j += k,
                None if prefix && j + 1 >= r.len() => return None,
                None => {
                    return Some(format!(
                        "page: {}\n  run:  (no such line after {})",
                        p[i + 1],
                        r.get(j).map(String::as_str).unwrap_or("the start")
                    ));
                }
            }
            i += 1;
            continue;
        }
        if j == r.len() {
            if prefix && j > 0 {
                return None;
            }
            return Some(format!("page: {}\n  run:  (nothing more)", p[i]));
        }
        if !same_line(&p[i], &r[j]) {
            return Some(format!("page: {}\n  run:  {}", p[i], r[j]));
        }
        i += 1;
        j += 1;
    }
    if j < r.len() && !prefix {
        return Some(format!("page: (nothing more)\n  run:  {}", r[j]));
    }
    None
}

/// Commands that take HOST[:PORT] and default to a `roundtrip server`'s port 11111.
const TO_SERVER: &[&str] = &["ping", "throughput", "tp", "load", "sweep"];

/// Services of this machine a block talks to: (what it names, port, name).
fn services(line: &str) -> Vec<(u16, &'static str)> {
    let mut v = Vec::new();
    if line.contains("postgres://") {
        v.push((5432, "PostgreSQL"));
    }
    if line.contains("redis://") {
        v.push((6379, "Redis"));
    }
    if line.contains("mysql://") && !line.contains(":33061") {
        v.push((3306, "MariaDB"));
    }
    v
}

/// Runs one block on loopback, as a shell would (pipes and curl included, `roundtrip` on PATH), with its
/// addresses made this machine's: a `roundtrip server` on a free port stands for 127.0.0.1:11111 (and for any
/// other port the block connects to without starting a listener there), and every listening address the block
/// gives (--listen, --metrics, --control) is a free port. Returns what did not match.
fn run_live_block(steps: &[Step], work: &Path, bindir: &Path) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    let mut bad = Vec::new();
    let mut kids = common::procs::Kids::default();
    let path = format!(
        "{}:{}",
        bindir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Addresses the block listens on, each a free port.
    let mut subs: Vec<(String, String)> = Vec::new();
    for s in steps {
        let words = shell_words(&s.line);
        for (k, w) in words.iter().enumerate() {
            if matches!(w.as_str(), "--listen" | "--metrics" | "--control")
                && let Some(a) = words.get(k + 1)
                && let Some(p) = a.strip_prefix("127.0.0.1:")
                && p != "0"
                && !subs.iter().any(|(f, _)| f == a)
            {
                subs.push((a.clone(), format!("127.0.0.1:{}", common::free_port())));
            }
        }
    }
    let starts_server = steps
        .iter()
        .any(|s| strip_program(strip_sudo(&s.line)).is_some_and(|r| r.starts_with("server ")));
    let mut server_port: Option<u16> = None;
    let mut after_background = false;
    for s in steps {
        let mut line = strip_sudo(&s.line).to_string();
        for (from, to) in &subs {
            line = line.replace(from.as_str(), to.as_str());
        }
        let rest = strip_program(&line).map(str::to_string);
        let words = rest.as_deref().map(shell_words).unwrap_or_default();
        let cmd = words.first().map(String::as_str).unwrap_or("");
        // The server the block starts itself: on a free port.
        let background =
            line.trim_end().ends_with('&') || matches!(cmd, "server" | "proxy" | "agent");
        if cmd == "server" {
            line = format!("{} --port 0", line.trim_end().trim_end_matches('&'));
        } else {
            // Any other 127.0.0.1:PORT the block connects to, and a bare 127.0.0.1 for ping and friends.
            let needs_server = line.contains("127.0.0.1:11111")
                || TO_SERVER.contains(&cmd) && words.iter().any(|w| w == "127.0.0.1")
                || cmd == "connect" && !line.contains("127.0.0.1:1 ")
                || cmd == "agent";
            if needs_server && server_port.is_none() && !starts_server {
                server_port = Some(doc_server(&mut kids));
            }
            if let Some(p) = server_port {
                line = line.replace("127.0.0.1:11111", &format!("127.0.0.1:{p}"));
                if cmd == "connect" {
                    line = line.replace("127.0.0.1:18555", &format!("127.0.0.1:{p}"));
                }
                if TO_SERVER.contains(&cmd) {
                    let mut ws: Vec<String> = line.split(' ').map(str::to_string).collect();
                    for w in ws.iter_mut() {
                        if w == "127.0.0.1" {
                            *w = format!("127.0.0.1:{p}");
                        }
                    }
                    line = ws.join(" ");
                }
            }
            line = line.trim_end().trim_end_matches('&').to_string();
        }
        let keep = kept_numbers(&s.line);
        if background {
            let mut c = Command::new("sh")
                .arg("-c")
                .arg(format!("exec 2>&1\nexec {line}"))
                .current_dir(work)
                .env("PATH", &path)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let out = c.stdout.take().unwrap();
            kids.0.push(c);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines() {
                    let Ok(l) = l else { break };
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
            // Its start-up lines: the first (generously waited for), then what follows within half a second.
            let mut got = Vec::new();
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => got.push(l),
                Err(_) => {
                    bad.push(format!("{}: `{line}` printed nothing in 60 s", s.at));
                    return bad;
                }
            }
            let until = Instant::now() + Duration::from_millis(500);
            while let Ok(l) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                got.push(l);
            }
            if cmd == "server" {
                match got
                    .iter()
                    .find(|l| l.contains("listening on 127.0.0.1:") || l.contains("tcp 127.0.0.1:"))
                {
                    Some(l) => server_port = Some(common::procs::port_in(l)),
                    None => {
                        bad.push(format!("{}: `{line}` did not start: {got:?}", s.at));
                        return bad;
                    }
                }
            }
            if let Some(m) = live_mismatch(&s.output, &got, &keep, true) {
                bad.push(format!("{}: `{}`:\n  {m}", s.at, s.line));
            }
            after_background = true;
            // The rest of its output is read (and dropped) by the thread until it is killed.
            std::thread::spawn(move || while rx.recv().is_ok() {});
            continue;
        }
        // After a background command (an agent that has not probed yet), try again for a while.
        let tries = if after_background { 15 } else { 1 };
        let mut last = None;
        for t in 0..tries {
            if t > 0 {
                std::thread::sleep(Duration::from_secs(1));
            }
            let o = Command::new("timeout")
                .args(["120", "sh", "-c", &format!("exec 2>&1\n{line}")])
                .current_dir(work)
                .env("PATH", &path)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let got: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            // A line shown without output is run; what it prints is not compared.
            if s.output.iter().all(|l| l.trim().is_empty()) {
                break;
            }
            last = live_mismatch(&s.output, &got, &keep, false);
            if last.is_none() {
                break;
            }
        }
        if let Some(m) = last {
            bad.push(format!("{}: `{}` (run as `{line}`):\n  {m}", s.at, s.line));
        }
    }
    bad
}

/// A `roundtrip server` on loopback, TCP and UDP, on a free port; returns the port.
fn doc_server(kids: &mut common::procs::Kids) -> u16 {
    let mut c = Command::new(bin())
        .args(["server", "--bind", "127.0.0.1", "--port", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("roundtrip server starts");
    let out = c.stderr.take().unwrap();
    kids.0.push(c);
    common::procs::port_in(&common::procs::wait_line(out, "listening on"))
}

#[test]
fn live_examples_print_what_the_docs_show() {
    let _dog = common::procs::watchdog(std::time::Duration::from_secs(600), "live doc examples");
    let mut blocks = Vec::new();
    let mut used = BTreeSet::new();
    let mut not_run = Vec::new();
    for p in markdown_files() {
        let page = rel(&p);
        for steps in sessions(&p) {
            // Only blocks that show output (or start something another line uses).
            if steps
                .iter()
                .all(|s| s.output.iter().all(|l| l.trim().is_empty()))
            {
                continue;
            }
            match plan(&page, &steps) {
                Plan::Offline => {}
                Plan::NotRun(k) => {
                    used.insert(k);
                    not_run.push(format!("{}: {}", steps[0].at, NOT_RUN[k].2));
                }
                Plan::Live => {
                    let needs: Vec<(u16, &str)> =
                        steps.iter().flat_map(|s| services(&s.line)).collect();
                    if needs
                        .iter()
                        .all(|(port, name)| common::service_up(*port, name))
                        && (!steps.iter().any(|s| s.line.starts_with("sudo "))
                            || common::require_root("raw sockets"))
                    {
                        blocks.push(steps);
                    }
                }
            }
        }
    }
    let stale: Vec<String> = NOT_RUN
        .iter()
        .enumerate()
        .filter(|(k, _)| !used.contains(k))
        .map(|(_, (pg, start, _))| format!("{pg}: {start}"))
        .collect();
    assert!(
        stale.is_empty(),
        "NOT_RUN rows that name no block with output: {stale:?}"
    );
    assert!(
        blocks.len() >= 15,
        "only {} live blocks found",
        blocks.len()
    );
    eprintln!("not run ({}):\n{}", not_run.len(), not_run.join("\n"));

    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    std::fs::create_dir_all(repo.join("docs")).unwrap();
    std::os::unix::fs::symlink(root().join("docs/captures"), repo.join("docs/captures")).unwrap();
    let bindir = PathBuf::from(common::procs::BIN)
        .parent()
        .unwrap()
        .to_path_buf();
    // A file the pages have the reader make: the server's pre-shared key (at least 16 bytes).
    std::fs::write(repo.join("fleet.key"), "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(
        repo.join("fleet.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // The blocks run side by side (a few at a time): each has its own server and ports, and nothing compares a
    // number, so a loaded machine only slows them.
    // Raw sockets (sudo) read every packet of loopback: they run afterwards, alone, so that the others' floods
    // do not overrun their buffers.
    let (alone, together): (Vec<_>, Vec<_>) = blocks
        .into_iter()
        .partition(|b| b.iter().any(|s| s.line.starts_with("sudo ")));
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let timed = |steps: &[Step]| {
        let t = std::time::Instant::now();
        let bad = run_live_block(steps, &repo, &bindir);
        eprintln!("{}: {:.1}s", steps[0].at, t.elapsed().as_secs_f64());
        bad
    };
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(steps) = together.get(k) else { break };
                    let bad = timed(steps);
                    results.lock().unwrap().extend(bad);
                }
            });
        }
    });
    let mut bad = results.into_inner().unwrap();
    for steps in &alone {
        bad.extend(timed(steps));
    }
    assert!(
        bad.is_empty(),
        "{} example(s) print something else than the docs show:\n{}",
        bad.len(),
        bad.join("\n\n")
    );
}

/// docs/proxy-bridge.md's recipe, run line by line as shown (namespaces of this test's own names): the control API
/// answers inside the middle namespace, and a client pings the server across the bridge.
#[test]
fn proxy_bridge_recipe_runs_as_shown() {
    if !common::require_root("network namespaces") || !common::have("curl") {
        return;
    }
    let _dog = common::procs::watchdog(std::time::Duration::from_secs(180), "proxy-bridge recipe");
    let page = std::fs::read_to_string(root().join("docs/proxy-bridge.md")).unwrap();
    let (_, after) = page
        .split_once("### Setting it up between namespaces")
        .expect("docs/proxy-bridge.md has its recipe section");
    let recipe: Vec<&str> = after
        .split("```")
        .nth(1)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let id = std::process::id() % 100_000;
    let names = [
        ("cli", format!("dcc{id}")),
        ("mid", format!("dcm{id}")),
        ("srv", format!("dcs{id}")),
    ];
    // Each namespace deleted on drop, however the test ends (the watchdog knows them too).
    let _ns: Vec<common::netns::Ns> = names
        .iter()
        .map(|(_, n)| common::netns::Ns::new(n))
        .collect();
    let local = |l: &str| -> String {
        let mut out = Vec::new();
        for w in l.split(' ') {
            let (word, semi) = match w.strip_suffix(';') {
                Some(x) => (x, ";"),
                None => (w, ""),
            };
            let word = names
                .iter()
                .find(|(n, _)| *n == word)
                .map_or(word.to_string(), |(_, m)| m.clone());
            out.push(format!("{word}{semi}"));
        }
        out.join(" ")
            .replace("roundtrip ", &format!("{} ", common::procs::BIN))
    };
    let mut kids = common::procs::Kids::default();
    let mut curled = false;
    for l in &recipe {
        let cmd = local(l);
        let cmd = cmd.split(" #").next().unwrap();
        if l.contains("ip netns add") {
            continue; // made above, with the names deleted on drop
        }
        if l.contains("roundtrip proxy --bridge") {
            let mut c = Command::new("sh")
                .arg("-c")
                .arg(format!("exec {cmd}"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let out = c.stdout.take().unwrap();
            kids.0.push(c);
            common::procs::wait_line(out, "control api on");
            continue;
        }
        let o = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "docs/proxy-bridge.md: `{l}` failed (run as `{cmd}`): {text}"
        );
        if l.contains("curl") {
            assert!(
                text.contains('{'),
                "`{l}`: no JSON from the control API: {text}"
            );
            curled = true;
        }
    }
    assert!(
        curled,
        "the recipe no longer shows how to reach the control API"
    );
    // Across the bridge: a server in srv, a ping from cli.
    let (srv, cli) = (&names[2].1, &names[0].1);
    let mut c = Command::new("ip")
        .args([
            "netns",
            "exec",
            srv,
            common::procs::BIN,
            "server",
            "--bind",
            "10.9.9.2",
            "--port",
            "0",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = c.stderr.take().unwrap();
    kids.0.push(c);
    let line = common::procs::wait_line(err, "listening on");
    let port: String = line
        .split("10.9.9.2:")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let o = Command::new("ip")
        .args([
            "netns",
            "exec",
            cli,
            common::procs::BIN,
            "ping",
            &format!("10.9.9.2:{port}"),
            "-c",
            "5",
            "-q",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ping across the recipe's bridge: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    drop(kids);
}

/// README says which commands take `--json`: every command that does not is named in that sentence.
#[test]
fn readme_names_every_command_without_json() {
    let tree = command_tree();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let para = readme
        .split("\n\n")
        .find(|p| p.contains("takes `--json`"))
        .expect("README.md says which commands take `--json`")
        .replace('\n', " ");
    let mut missing = Vec::new();
    for (path, flags) in &tree {
        let leaf = !tree
            .iter()
            .any(|(q, _)| q.len() > path.len() && q.starts_with(path));
        if path.is_empty() || !leaf || flags.contains(ALIAS) || flags.contains("--json") {
            continue;
        }
        if !para.contains(&format!("`{}`", path.join(" ")))
            && !para.contains(&format!("`{}`", path[0]))
        {
            missing.push(path.join(" "));
        }
    }
    assert!(
        missing.is_empty(),
        "README.md's `--json` sentence does not name these commands, which do not take --json: {missing:?}"
    );
}
