//! Writing to the terminal: stdout for results, stderr for progress and errors, exit codes.

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

/// Writes bytes to stdout.
pub fn out(bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let mut o = io::stdout().lock();
    o.write_all(bytes.as_ref())?;
    o.flush()
}

/// Prints a one-line error to stderr.
pub fn error_line(msg: impl std::fmt::Display) {
    let _ = writeln!(io::stderr(), "roundtrip: error: {msg}");
}

/// Prints a one-line note to stderr.
pub fn note(msg: impl std::fmt::Display) {
    let _ = writeln!(io::stderr(), "{msg}");
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
