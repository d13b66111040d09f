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
        command: "compare",
        old: "-n",
        new: "-c",
        counts: "measurements per row",
    },
    Renamed {
        command: "connect",
        old: "-n",
        new: "-c",
        counts: "attempts",
    },
    Renamed {
        command: "db",
        old: "-n",
        new: "-c",
        counts: "iterations",
    },
    Renamed {
        command: "icmp",
        old: "-n",
        new: "-c",
        counts: "echo requests",
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
        command: "ping",
        old: "-n",
        new: "-c",
        counts: "round trips",
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
    Renamed {
        command: "tcp",
        old: "--interval",
        new: "--report-interval",
        counts: "",
    },
    Renamed {
        command: "tcp",
        old: "--time",
        new: "--duration",
        counts: "",
    },
    Renamed {
        command: "tcp",
        old: "--trace",
        new: "--per-packet",
        counts: "",
    },
    Renamed {
        command: "tcp",
        old: "-i",
        new: "--report-interval",
        counts: "",
    },
];

/// A flag another tool's users type by habit (ping(8), hping3, sockperf, tcpdump) that roundtrip spells
/// differently: when clap refuses it, the one-line error names roundtrip's spelling.
#[derive(Debug, Clone, Copy)]
pub struct Habit {
    /// The tool whose flag it is: `"ping(8)"`, `"sockperf"`.
    pub tool: &'static str,
    /// The flag as that tool spells it: `-W`, `--mps`.
    pub flag: &'static str,
    /// The roundtrip commands that have the equivalent (the hint is given only there).
    pub commands: &'static [&'static str],
    /// roundtrip's equivalent: a flag (`--timeout`, `-t/--duration`), checked to exist on each of `commands`
    /// by a unit test, or a few words when it is not a flag (`HOST:PORT`).
    pub says: &'static str,
}

/// The commands whose target is HOST[:PORT] and that take sockperf's client flags.
const SOCKPERF_CLIENTS: &[&str] = &["ping", "load", "throughput", "sweep"];
/// The capture commands that read a file or capture live.
const CAPTURE_READERS: &[&str] = &[
    "capture stats",
    "capture timeline",
    "capture flows",
    "capture rpc",
];

/// Other tools' flags and roundtrip's equivalents, where roundtrip has one (each checked by a unit test).
pub const HABITS: &[Habit] = &[
    Habit {
        tool: "ping(8)",
        flag: "-W",
        commands: &["ping", "icmp", "connect", "compare"],
        says: "--timeout",
    },
    Habit {
        tool: "ping(8)",
        flag: "-w",
        commands: &["ping", "load", "throughput", "sweep"],
        says: "-t/--duration",
    },
    Habit {
        tool: "ping(8)",
        flag: "-f",
        commands: &["ping"],
        says: "no -i (the next message goes as soon as the answer arrives)",
    },
    Habit {
        tool: "hping3",
        flag: "-S",
        commands: &["connect", "compare"],
        says: "--raw",
    },
    Habit {
        tool: "hping3",
        flag: "-p",
        commands: &["connect"],
        says: "HOST:PORT",
    },
    Habit {
        tool: "sockperf",
        flag: "-p",
        commands: SOCKPERF_CLIENTS,
        says: "HOST:PORT",
    },
    Habit {
        tool: "sockperf",
        flag: "--port",
        commands: SOCKPERF_CLIENTS,
        says: "HOST:PORT",
    },
    Habit {
        tool: "sockperf",
        flag: "--ip",
        commands: SOCKPERF_CLIENTS,
        says: "HOST[:PORT], the first argument",
    },
    Habit {
        tool: "sockperf",
        flag: "--tcp",
        commands: SOCKPERF_CLIENTS,
        says: "nothing: TCP is the default (-u for UDP)",
    },
    Habit {
        tool: "sockperf",
        flag: "--mps",
        commands: &["ping", "load"],
        says: "--rate",
    },
    Habit {
        tool: "sockperf",
        flag: "--mps",
        commands: &["sweep"],
        says: "--rates",
    },
    Habit {
        tool: "sockperf",
        flag: "--msg-size",
        commands: &["ping", "load", "throughput"],
        says: "-s/--size",
    },
    Habit {
        tool: "sockperf",
        flag: "--msg-size",
        commands: &["sweep"],
        says: "--sizes",
    },
    Habit {
        tool: "sockperf",
        flag: "--time",
        commands: &["ping", "load", "throughput", "sweep", "demo"],
        says: "-t/--duration",
    },
    Habit {
        tool: "sockperf",
        flag: "--full-rtt",
        commands: &["ping"],
        says: "--full-log FILE.csv",
    },
    Habit {
        tool: "tcpdump",
        flag: "-r",
        commands: CAPTURE_READERS,
        says: "FILE, the first argument",
    },
    Habit {
        tool: "tcpdump",
        flag: "-w",
        commands: CAPTURE_READERS,
        says: "--write",
    },
    Habit {
        tool: "tcpdump",
        flag: "-s",
        commands: CAPTURE_READERS,
        says: "--snaplen",
    },
    Habit {
        tool: "tcpdump",
        flag: "-n",
        commands: CAPTURE_READERS,
        says: "nothing: addresses are never resolved",
    },
];

/// The hint for an argument clap refused on the command `path` (`"ping"`, `"capture stats"`), when it is
/// another tool's habit: `ping(8) -W: roundtrip says --timeout`.
pub fn habit_hint(path: &str, refused: &str) -> Option<String> {
    let flag = refused.split('=').next().unwrap_or(refused);
    HABITS
        .iter()
        .find(|h| h.flag == flag && h.commands.contains(&path))
        .map(|h| format!("{} {}: roundtrip says {}", h.tool, h.flag, h.says))
}

/// How far `a` is from `b` when one edit makes one the other: 1 for two neighbouring letters swapped (`rcp` for
/// `rpc`, `pnig` for `ping`), 2 for one letter changed, added or left out; `None` otherwise.
fn one_edit(a: &str, b: &str) -> Option<u8> {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a == b {
        return None;
    }
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    match long.len() - short.len() {
        0 => {
            let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            let swapped = diff.len() == 2
                && diff[1] == diff[0] + 1
                && a[diff[0]] == b[diff[1]]
                && a[diff[1]] == b[diff[0]];
            match diff.len() {
                1 => Some(2),
                2 if swapped => Some(1),
                _ => None,
            }
        }
        1 => (0..long.len())
            .any(|i| {
                let mut l = long.clone();
                l.remove(i);
                &l == short
            })
            .then_some(2),
        _ => None,
    }
}

/// The subcommand of `parent` a mistyped `word` most likely meant: one a single edit away, a swap of two
/// neighbouring letters first (which clap's own suggestion misses for short names: `rcp`).
pub fn suggest_subcommand(parent: &clap::Command, word: &str) -> Option<String> {
    parent
        .get_subcommands()
        .filter_map(|s| {
            let d = std::iter::once(s.get_name())
                .chain(s.get_all_aliases())
                .filter_map(|n| one_edit(word, n))
                .min()?;
            Some((d, s.get_name().to_string()))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

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

    /// Whether the command at `path` has the flag spelled `flag` (`-t`, `--duration`), aliases included.
    fn has_flag(path: &str, flag: &str) -> bool {
        let mut cmd = super::super::definitions();
        for w in path.split(' ') {
            cmd = cmd.find_subcommand(w).expect(path).clone();
        }
        cmd.get_arguments().any(|a| {
            if let Some(long) = flag.strip_prefix("--") {
                a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|v| v.contains(&long))
            } else {
                let c = flag.chars().nth(1);
                c.is_some()
                    && (a.get_short() == c
                        || a.get_all_short_aliases()
                            .is_some_and(|v| v.contains(&c.unwrap())))
            }
        })
    }

    #[test]
    fn every_habit_is_refused_and_its_equivalent_exists() {
        for h in HABITS {
            for &path in h.commands {
                assert!(
                    !has_flag(path, h.flag),
                    "{path} takes {} itself: {h:?}",
                    h.flag
                );
                let says = h.says.split_whitespace().next().unwrap();
                if says.starts_with('-') && !h.says.starts_with("no ") {
                    for flag in says.split('/') {
                        assert!(has_flag(path, flag), "{path} has no {flag}: {h:?}");
                    }
                }
            }
        }
        assert_eq!(
            habit_hint("ping", "--mps=100").as_deref(),
            Some("sockperf --mps: roundtrip says --rate")
        );
        assert_eq!(habit_hint("db", "-W"), None);
    }

    #[test]
    fn old_spellings_parse_and_new_ones_too() {
        // The probe commands' rows; capture, proxy, model, agent and mesh take other values and are run by
        // tests/vocab_capture.rs.
        let probes = ["compare", "connect", "db", "icmp", "ping", "tcp"];
        for r in RENAMED.iter().filter(|r| probes.contains(&r.command)) {
            let mut words = vec!["roundtrip".to_string()];
            words.extend(r.command.split(' ').map(String::from));
            let target: &[&str] = match r.command {
                "db" => &["postgres://u@127.0.0.1/d"],
                "tcp" => &[],
                "connect" => &["127.0.0.1:1"],
                _ => &["127.0.0.1"],
            };
            words.extend(target.iter().map(|s| s.to_string()));
            for flag in [r.old, r.new] {
                let mut w = words.clone();
                w.push(flag.to_string());
                if !matches!(flag, "--trace" | "--per-packet") {
                    w.push(if r.new == "-c" { "3" } else { "2s" }.into());
                }
                let m = super::super::definitions().try_get_matches_from(&w);
                assert!(m.is_ok(), "{w:?}: {}", m.unwrap_err());
            }
            let args: Vec<OsString> = words
                .iter()
                .chain([&r.old.to_string()])
                .map(OsString::from)
                .collect();
            assert_eq!(notices(&args).len(), 1, "{r:?}");
        }
    }

    #[test]
    fn one_edit_sees_transpositions() {
        assert_eq!(one_edit("rcp", "rpc"), Some(1));
        assert_eq!(one_edit("pnig", "ping"), Some(1));
        assert_eq!(one_edit("stat", "stats"), Some(2));
        assert_eq!(one_edit("rpc", "rpc"), None);
        assert_eq!(one_edit("tcp", "rpc"), None);
        let capture = super::super::definitions()
            .find_subcommand("capture")
            .unwrap()
            .clone();
        assert_eq!(suggest_subcommand(&capture, "rcp").as_deref(), Some("rpc"));
        // `tpc` is one letter from `tp` (throughput) and a swap from `tcp`: the swap wins.
        let top = super::super::definitions();
        assert_eq!(suggest_subcommand(&top, "tpc").as_deref(), Some("tcp"));
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
