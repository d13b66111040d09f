//! Writing to the terminal: stdout for results, stderr for progress and errors, exit codes.

use roundtrip::terminal::{escape_for_terminal, needs_escape};
use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};

/// How a command ended when it did not fail outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything worked.
    Ok,
    /// Results were printed, but the run failed or measured nothing (exit 1).
    Failed,
}

/// An argument refused by a check that runs before any I/O (a configuration's `validate()`): exit 2, as clap's
/// own refusals.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Turns a configuration check's error into a [`Refused`] (exit 2).
pub fn refused(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Refused(e.to_string()))
}

/// Set when an output file named `-` took standard output.
static STDOUT_TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// An output file named `-` takes standard output (as tcpdump's `-w -`): the command's own results then go to
/// standard error. A second output named `-` is refused (exit 2).
pub fn take_stdout() -> anyhow::Result<()> {
    if STDOUT_TAKEN.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return Err(refused(
            "two outputs name - (standard output): give a file name to all but one",
        ));
    }
    Ok(())
}

/// Writes bytes to stdout (to stderr when an output file named `-` took stdout: [`take_stdout`]).
pub fn out(bytes: impl AsRef<[u8]>) -> io::Result<()> {
    if STDOUT_TAKEN.load(std::sync::atomic::Ordering::Relaxed) {
        let mut e = io::stderr().lock();
        e.write_all(bytes.as_ref())?;
        return e.flush();
    }
    let mut o = io::stdout().lock();
    o.write_all(bytes.as_ref())?;
    o.flush()
}

/// Writes text meant for a terminal to stdout, every line passed through
/// [`escape_for_terminal`](roundtrip::terminal::escape_for_terminal): the line breaks the text was built with are
/// kept, and a control or bidi character that came from a packet, a file or a peer (and that the code which built
/// the text did not already escape) shows as a visible escape instead of acting on the terminal. JSON, CSV and
/// pcap bytes go through [`out`] unchanged.
pub fn out_text(s: impl AsRef<str>) -> io::Result<()> {
    out(escape_lines(s.as_ref()).as_bytes())
}

/// `s` with each line escaped for a terminal and the `\n` between lines kept.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    if !s.contains(|c| c != '\n' && needs_escape(c)) {
        return Cow::Borrowed(s);
    }
    let lines: Vec<Cow<'_, str>> = s.split('\n').map(escape_for_terminal).collect();
    Cow::Owned(lines.join("\n"))
}

/// Prints a one-line error to stderr; text from a peer or a file inside it is escaped for the terminal, and a
/// line break inside the message shows as `\x0a` (an error is one line).
pub fn error_line(msg: impl std::fmt::Display) {
    let msg = msg.to_string();
    let _ = writeln!(
        io::stderr(),
        "roundtrip: error: {}",
        escape_for_terminal(&msg)
    );
}

/// Prints a note to stderr, each line escaped for the terminal (see [`out_text`]).
pub fn note(msg: impl std::fmt::Display) {
    let msg = msg.to_string();
    let _ = writeln!(io::stderr(), "{}", escape_lines(&msg));
}

/// True when stderr is a terminal (progress indicators go there).
pub fn stderr_is_tty() -> bool {
    io::stderr().is_terminal()
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Turns a command's outcome into the exit code: 0 ok (also when stdout was closed early, as ripgrep does),
/// 2 refused before any I/O ([`Refused`]), 1 failed.
pub fn finish(result: anyhow::Result<Exit>) -> i32 {
    match result {
        Ok(Exit::Ok) => 0,
        Ok(Exit::Failed) => 1,
        Err(e) if is_broken_pipe(&e) => 0,
        // A filter that cannot be compiled for a file's link type is found before any packet is read.
        Err(e)
            if e.downcast_ref::<Refused>().is_some()
                || e.chain().any(|c| {
                    c.downcast_ref::<roundtrip::capture::bpf::CompileError>()
                        .is_some()
                }) =>
        {
            error_line(one_line(&e));
            2
        }
        Err(e) => {
            error_line(one_line(&e));
            1
        }
    }
}

/// The error and its causes on one line, leaving out a cause whose text the line already contains (our
/// errors name their source in their own message).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}
