//! One vocabulary: the spellings a release renamed, still accepted for one release with a one-line notice.
//!
//! docs/flags.md is the word list (each concept, its flag, what its value counts). When a flag is renamed, its
//! old spelling stays on the argument as a hidden alias (clap's `alias`/`short_alias`), so it parses, and gets a
//! row in [`RENAMED`], so using it prints one notice naming the new spelling. tests/vocab.rs reads this table and
//! checks that no page, bench script, test or manifest still uses an old spelling.

use std::ffi::OsString;

/// One renamed spelling.
#[derive(Debug, Clone, Copy)]
pub struct Renamed {
    /// The command it belongs to, as typed after `roundtrip` (`"proxy"`, `"capture stats"`); a row whose command is
    /// a family (`"capture"`) holds for each of its subcommands.
    pub command: &'static str,
    /// The old spelling: `--rate`, `-n`.
    pub old: &'static str,
    /// The spelling that replaces it: `--bandwidth`, `-c`.
    pub new: &'static str,
    /// What the value counts, when the notice should say it (`"bit/s"`), else empty.
    pub counts: &'static str,
}

/// Every renamed spelling, by command. Keep sorted by command, then old spelling.
pub const RENAMED: &[Renamed] = &[
    // Rows are added by the renames (docs/flags.md lists the words).
    Renamed {
        command: "agent",
        old: "--window",
        new: "--span",
        counts: "a duration",
    },
    Renamed {
        command: "capture bpf",
        old: "--link",
        new: "--linktype",
        counts: "a link type",
    },
    Renamed {
        command: "capture rpc",
        old: "--interval",
        new: "--report-interval",
        counts: "a duration",
    },
    Renamed {
        command: "capture stats",
        old: "--interval",
        new: "--report-interval",
        counts: "a duration",
    },
    Renamed {
        command: "mesh",
        old: "--window",
        new: "--span",
        counts: "a duration",
    },
    Renamed {
        command: "model bdp",
        old: "--rate",
        new: "--bandwidth",
        counts: "bit/s",
    },
    Renamed {
        command: "model transfer",
        old: "--link",
        new: "--bandwidth",
        counts: "bit/s",
    },
    Renamed {
        command: "proxy",
        old: "--rate",
        new: "--bandwidth",
        counts: "bit/s",
    },
    Renamed {
        command: "proxy",
        old: "--rate-total",
        new: "--bandwidth-total",
        counts: "bit/s",
    },
];

/// The subcommand words at the front of `args` (after the program name): `["capture", "stats"]`.
fn command_words(args: &[OsString]) -> Vec<String> {
    let mut cmd = super::definitions();
    let mut words = Vec::new();
    for a in args.iter().skip(1) {
        let Some(w) = a.to_str() else { break };
        let Some(sub) = cmd.find_subcommand(w).cloned() else {
            break;
        };
        words.push(sub.get_name().to_string());
        cmd = sub;
    }
    words
}

/// Whether `token` is `old` (`--rate`, `--rate=5`, `-n`, `-n5`).
fn uses(token: &str, old: &str) -> bool {
    if token == old {
        return true;
    }
    if old.starts_with("--") {
        return token.strip_prefix(old).is_some_and(|r| r.starts_with('='));
    }
    // A short flag with its value attached (`-n5`); not `--n...`.
    old.len() == 2 && token.starts_with(old) && !token.starts_with("--")
}

/// The notices for the old spellings used on this command line (one line each, for stderr).
pub fn notices(args: &[OsString]) -> Vec<String> {
    let words = command_words(args);
    let path = words.join(" ");
    let mut out = Vec::new();
    let rest: Vec<&str> = args
        .iter()
        .skip(1 + words.len())
        .take_while(|a| a.to_str() != Some("--"))
        .filter_map(|a| a.to_str())
        .collect();
    for r in RENAMED {
        let applies = path == r.command || path.starts_with(&format!("{} ", r.command));
        if !applies || !rest.iter().any(|t| uses(t, r.old)) {
            continue;
        }
        let counts = if r.counts.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.counts)
        };
        out.push(format!(
            "roundtrip: note: `{path} {}` is now `{}`{counts}; the old spelling goes away in the next release",
            r.old, r.new
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_sees_both_forms() {
        assert!(uses("--rate", "--rate"));
        assert!(uses("--rate=5", "--rate"));
        assert!(!uses("--rates", "--rate"));
        assert!(uses("-n", "-n"));
        assert!(uses("-n5", "-n"));
        assert!(!uses("--n", "-n"));
    }

    #[test]
    fn every_row_names_a_real_command() {
        let defs = super::super::definitions();
        for r in RENAMED {
            let mut cmd = defs.clone();
            for w in r.command.split(' ') {
                cmd = cmd
                    .find_subcommand(w)
                    .unwrap_or_else(|| panic!("{}: no such command", r.command))
                    .clone();
            }
            assert!(r.old.starts_with('-') && r.new.starts_with('-'), "{r:?}");
        }
    }
}
