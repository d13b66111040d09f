//! Argument types, validation and dispatch; the only place that prints.
//!
//! Each subcommand lives in its own file named after it. Arguments are parsed and validated (units, ranges,
//! conflicts) before any socket is opened.

mod agent;
mod args;
mod capture;
mod common;
mod compare;
mod connect;
mod db;
mod demo;
mod examples;
mod generate;
mod icmp;
mod link;
mod load;
mod mesh;
mod model;
mod output;
mod ping;
mod proxy;
mod ratelimit;
mod replay;
mod report;
mod server;
mod sweep;
mod tcp;
mod throughput;
mod vocab;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Measure the round trip an application really pays: application-level ping-pong over TCP and UDP,
/// sockperf-compatible.
#[derive(Debug, Parser)]
#[command(name = "roundtrip", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer ping-pong messages on TCP and UDP (sockperf server compatible).
    Server(server::ServerArgs),
    /// Measure application-level round trips to a roundtrip or sockperf server.
    Ping(ping::PingArgs),
    /// Run TCP and UDP ping-pong against an embedded server on 127.0.0.1 and print one comparison table.
    Demo(demo::DemoArgs),
    /// Stream messages one way and report messages/s, MB/s, Mbit/s (and UDP loss) per size.
    #[command(visible_alias = "tp")]
    Throughput(throughput::ThroughputArgs),
    /// Latency under load: send at a fixed rate on an open-loop schedule, the server answers every Nth.
    Load(load::LoadArgs),
    /// Latency percentiles over message size x offered rate.
    Sweep(sweep::SweepArgs),
    /// Time the TCP handshake (SYN -> SYN-ACK) and report the port state: open, closed, filtered, unreachable.
    Connect(connect::ConnectArgs),
    /// ICMP echo round trips (raw socket as root, else the unprivileged ICMP datagram socket).
    Icmp(icmp::IcmpArgs),
    /// ICMP, TCP handshake, application ping and the kernel's RTT to one host, side by side, explained.
    Compare(compare::CompareArgs),
    /// Analyse a tcpdump capture: per-interval stats, one connection's timeline, per-connection TCP behaviour.
    Capture(capture::CaptureArgs),
    /// Put a far-away network between a client and its server: delay, jitter, rate, window, faults, UDP loss.
    Proxy(proxy::ProxyArgs),
    /// Play a capture's request/response structure (sizes, think and server times, order) against a
    /// `roundtrip server --allow-replay`, e.g. through `roundtrip proxy --rtt 40ms`, and time it.
    Replay(replay::ReplayArgs),
    /// Latency arithmetic, each formula with its source: TPS at another RTT, window and BDP limits, Mathis, frames on the wire.
    Model(model::ModelArgs),
    /// Round trips to PostgreSQL, MySQL/MariaDB, Redis or an Oracle listener, split into network, protocol
    /// and server time.
    Db(db::DbArgs),
    /// The kernel's view of live TCP connections (sock_diag, as ss -ti): RTT, cwnd, windows, in flight,
    /// limited time, and what limits each connection, sampled every interval.
    Tcp(tcp::TcpArgs),
    /// Probe many targets continuously (and answer their probes), for Prometheus: /metrics, /api/results
    /// and an HTML matrix.
    Agent(agent::AgentArgs),
    /// Draw saved --json results (and their full logs) as a self-contained HTML report or an SVG chart.
    Report(report::ReportArgs),
    /// The all-pairs matrix of a fleet: p50 / p99 RTT and loss per source x target, from Prometheus or agents.
    Mesh(mesh::MeshArgs),
    /// Man pages and shell completions (bash, zsh, fish), from the same definitions as this help.
    Generate(generate::GenerateArgs),
}

/// The command line definition: negative values reach our own checks and each command lists only the charts it
/// can draw. The man pages and completions (`roundtrip generate`) are built from it.
fn definitions() -> clap::Command {
    chart_choices(hyphen_values(Cli::command()), "")
}

/// [`definitions`] as users see them: every --help ends with examples (src/cli/examples.rs).
fn command() -> clap::Command {
    examples::attach(definitions())
}

/// Parses the command line, runs the command and returns the process exit code: 0 done (also `--help` and
/// `--version`), 2 refused before any I/O (bad arguments), 1 the run failed.
pub fn main() -> i32 {
    let parsed = command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => return refuse(&e),
    };
    // A renamed spelling's notice comes first, so a parse-only run (tests/vocab.rs) shows it too.
    for n in vocab::notices(&std::env::args_os().collect::<Vec<_>>()) {
        output::note(n);
    }
    // The documentation test (tests/docs.rs) checks the command lines the docs show against these definitions:
    // with ROUNDTRIP_PARSE_ONLY=1 a command line that parses exits 0 here, before anything runs.
    if std::env::var_os("ROUNDTRIP_PARSE_ONLY").is_some_and(|v| v == "1") {
        return 0;
    }
    let result = match cli.command {
        Command::Server(a) => server::run(a),
        Command::Ping(a) => ping::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Throughput(a) => throughput::run(a),
        Command::Load(a) => load::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Connect(a) => connect::run(a),
        Command::Icmp(a) => icmp::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Capture(a) => capture::run(a),
        Command::Proxy(a) => proxy::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Model(a) => model::run(a),
        Command::Db(a) => db::run(a),
        Command::Tcp(a) => tcp::run(a),
        Command::Report(a) => report::run(a),
        Command::Mesh(a) => mesh::run(a),
        Command::Agent(a) => agent::run(a),
        Command::Generate(a) => generate::run(a),
    };
    output::finish(result)
}

/// Lets every option that takes exactly one value accept a value starting with a hyphen, so `--rtt -20ms`
/// reaches the option's own parser (which refuses it in words: "must not be negative") instead of clap taking
/// `-2` for a flag. Options with an optional or a variable number of values are left alone: they would swallow
/// the next flag.
fn hyphen_values(mut cmd: clap::Command) -> clap::Command {
    let ids: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| {
            !a.is_positional()
                && a.get_action().takes_values()
                && a.get_num_args()
                    .is_none_or(|r| r.min_values() == 1 && r.max_values() == 1)
        })
        .map(|a| a.get_id().clone())
        .collect();
    for id in ids {
        cmd = cmd.mut_arg(id, |a| {
            let a = a.allow_hyphen_values(true);
            // A placeholder clap derived from the field's name (`<WARMUP>`) says what the value is for, which
            // the flag already says; name what to type instead.
            let derived = a.get_value_names().is_some_and(|n| {
                n.len() == 1 && n[0].as_str() == a.get_id().as_str().to_uppercase()
            });
            let kind = a.get_value_parser().type_id();
            let is = |t: std::any::TypeId| kind == t;
            use std::any::TypeId;
            if !derived {
                a
            } else if is(TypeId::of::<std::time::Duration>()) {
                a.value_name("DURATION")
            } else {
                a
            }
        });
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, hyphen_values);
    }
    cmd
}

/// Turns clap's refusal into our style: `roundtrip: error: ...` on one line on stderr, exit 2; help and
/// version go to stdout with exit 0.
fn refuse(e: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            2
        }
        _ => {
            output::error_line(clap_one_line(&e.render().to_string(), hint(e)));
            2
        }
    }
}

/// Our own tip for clap's refusal, replacing clap's: another tool's flag (`-W` of ping(8)) names roundtrip's
/// spelling, and a mistyped subcommand (`rcp`) names the one meant (src/cli/vocab.rs).
fn hint(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let words = command_words();
    match e.kind() {
        ErrorKind::UnknownArgument => match e.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(arg)) => vocab::habit_hint(&words.join(" "), arg),
            _ => None,
        },
        ErrorKind::InvalidSubcommand => {
            // One edit away first (a swap of two letters: `tpc` is `tcp`, not clap's `tp`), else clap's.
            let ours = || {
                let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidSubcommand) else {
                    return None;
                };
                let mut parent = definitions();
                for w in &words {
                    parent = parent.find_subcommand(w)?.clone();
                }
                vocab::suggest_subcommand(&parent, word)
            };
            let suggested = ours().or_else(|| match e.get(ContextKind::SuggestedSubcommand) {
                Some(ContextValue::Strings(s)) => s.first().cloned(),
                Some(ContextValue::String(s)) => Some(s.clone()),
                _ => None,
            })?;
            Some(format!("did you mean '{suggested}'?"))
        }
        _ => None,
    }
}

/// clap's multi-line error (message, the arguments it lists, tips, usage, "For more information") as one line:
/// the message, the tips in brackets (`ours` instead of clap's when given), and where to look
/// (`see 'roundtrip proxy --help'`).
fn clap_one_line(rendered: &str, ours: Option<String>) -> String {
    let mut message = String::new();
    let mut tips = Vec::new();
    let mut in_message = false;
    for line in rendered.lines() {
        let trimmed = line.trim();
        if let Some(m) = trimmed.strip_prefix("error: ") {
            message = m.trim_end_matches(':').to_string();
            in_message = true;
        } else if let Some(t) = trimmed.strip_prefix("tip: ") {
            in_message = false;
            if !t.starts_with("to pass ") {
                tips.push(t.to_string());
            }
        } else if trimmed.is_empty() || trimmed.starts_with("Usage: ") {
            in_message = false;
        } else if in_message {
            message.push_str(if message.ends_with(':') { " " } else { ": " });
            message.push_str(trimmed);
        }
    }
    if let Some(t) = ours {
        tips = vec![t];
    }
    if !tips.is_empty() {
        message.push_str(&format!(" ({})", tips.join("; ")));
    }
    format!("{message}; see '{} --help'", command_path())
}

/// `roundtrip capture stats` for `roundtrip capture stats x.pcap --bogus`: the subcommands named on the
/// command line, for the pointer to their help.
fn command_path() -> String {
    let mut path = vec!["roundtrip".to_string()];
    path.extend(command_words());
    path.join(" ")
}

/// The subcommands named at the front of the command line (`["capture", "stats"]`).
fn command_words() -> Vec<String> {
    let mut cmd = Cli::command();
    let mut path = Vec::new();
    for word in std::env::args().skip(1) {
        let Some(sub) = cmd.find_subcommand(&word).cloned() else {
            break;
        };
        path.push(sub.get_name().to_string());
        cmd = sub;
    }
    path
}

/// The charts each command's results can draw (`--chart`): the choices its help lists and the only ones it
/// accepts, so a wrong chart is refused before anything is measured. `report` draws any saved result.
fn charts_for(path: &str) -> Option<&'static [&'static str]> {
    Some(match path {
        "ping" | "connect" | "icmp" => &["percentiles", "distribution", "rtt-time"],
        "load" => &["percentiles", "distribution", "bars"],
        "sweep" => &["sweep"],
        "throughput" => &["throughput-time", "throughput-size"],
        "compare" | "capture match" => &["bars"],
        "db" => &["bars", "rtt-time", "percentiles"],
        "capture stats" => &["traffic"],
        "capture flows" => &["flow"],
        "capture timeline" => &["time-sequence"],
        "capture rpc" => &["ops"],
        "tcp" => &["tcp-rtt", "tcp-window"],
        _ => return None,
    })
}

/// Narrows every command's `--chart` to [`charts_for`] it.
fn chart_choices(mut cmd: clap::Command, path: &str) -> clap::Command {
    use clap::ValueEnum;
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    let has_chart = cmd.get_arguments().any(|a| a.get_id() == "chart");
    if has_chart && let Some(allowed) = charts_for(path) {
        let values: Vec<clap::builder::PossibleValue> = report::ChartId::value_variants()
            .iter()
            .filter_map(|c| c.to_possible_value())
            .filter(|v| allowed.contains(&v.get_name()))
            .collect();
        let parser = PossibleValuesParser::new(values)
            .map(|s| report::ChartId::from_str(&s, true).expect("a listed chart"));
        cmd = cmd.mut_arg("chart", |a| a.value_parser(parser));
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subs {
        let sub_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        cmd = cmd.mut_subcommand(name, |c| chart_choices(c, &sub_path));
    }
    cmd
}
