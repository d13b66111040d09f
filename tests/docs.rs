//! Documentation that cannot drift from the program: every `roundtrip ...` command line shown in README.md,
//! docs/*.md and the other pages parses with the real argument definitions (or, for a usage synopsis, names only
//! flags that exist); the shown examples that need no network and no root (model, capture on the captures the
//! project ships, generate) run, and their output has the shape the page shows; every command has a page; every
//! page is linked from another; README stays one screen's worth; relative links resolve; every `--help` ends with
//! two or three examples that parse (the offline ones run); docs/json-format.md has a row for every document kind;
//! bench/README.md names every file under bench/ and has a dated row of figures for every script. Also: the man
//! pages render with `man -l` without a warning, and the bash completion completes a subcommand.

mod common;

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
        let o = Command::new(bin())
            .args(&words)
            .env("ROUNDTRIP_PARSE_ONLY", "1")
            .output()
            .unwrap();
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
            words.iter().any(|w| w.starts_with("docs/captures/"))
                && !words.iter().any(|w| w == "live")
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
    let work = tempfile::tempdir().unwrap();
    // Files the examples write (--report x.html) land here; docs/captures is the project's own.
    std::fs::create_dir(work.path().join("docs")).unwrap();
    std::os::unix::fs::symlink(
        root().join("docs/captures"),
        work.path().join("docs/captures"),
    )
    .unwrap();
    let mut bad = Vec::new();
    let mut ran = 0;
    let mut compared = 0;
    for s in shown.iter().filter(|s| !s.output.is_empty()) {
        let words = shell_words(&s.line);
        if !runs_offline(&words) || is_synopsis(&words) {
            continue;
        }
        // As the page shows it, pipes (| head) included; both streams, as a terminal shows them.
        let script = format!("{} {} 2>&1", common::procs::BIN, s.line);
        let o = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(work.path())
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
        let want: Vec<String> = s
            .output
            .iter()
            .map(|l| shape(l))
            .filter(|l| !l.is_empty())
            .collect();
        let have: Vec<String> = got.lines().map(shape).filter(|l| !l.is_empty()).collect();
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
            let o = Command::new(bin())
                .args(&words)
                .env("ROUNDTRIP_PARSE_ONLY", "1")
                .output()
                .unwrap();
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
        &["model", "bdp", "--bandwidth", "1gbit", "--rtt", "40ms"],
        &[
            "model", "mathis", "--mss", "1448", "--loss", "0.1%", "--rtt", "40ms",
        ],
        &[
            "model",
            "transfer",
            "--bytes",
            "8KiB",
            "--bandwidth",
            "1gbit",
        ],
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
