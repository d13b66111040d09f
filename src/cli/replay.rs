//! `roundtrip replay FILE --to HOST[:PORT]`: play a capture's application structure against a
//! `roundtrip server --allow-replay` and compare the replayed run time with the capture's and with the
//! prediction of `capture whatif` at the path's measured RTT.

use super::args;
use super::capture::parse_flow;
use super::output::{Exit, note, out, out_text};
use anyhow::Context;
use clap::Args;
use roundtrip::capture::Filter;
use roundtrip::probe::target::{Family, Target};
use roundtrip::replay::{self, ReplayConfig, ReplayResult};
use roundtrip::report::json;
use roundtrip::units::{fmt_bytes, fmt_duration};
use roundtrip::whatif::predict::{Network, PathKind, host_slow_start_after_idle, predict};
use roundtrip::whatif::profile::{AppProfile, ProfileError, ProfileOptions};
use roundtrip::wire::sockperf::DEFAULT_PORT;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `roundtrip replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A tcpdump capture (pcap or pcapng) of the application.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The `roundtrip server --allow-replay` to play against, as HOST, HOST:PORT or [IPv6]:PORT (default
    /// port 11111); put `roundtrip proxy --rtt 40ms` in front of it to replay at another RTT.
    #[arg(long, value_name = "HOST[:PORT]")]
    to: String,
    /// Replay only this connection, as CLIENT:PORT-SERVER:PORT (as `capture timeline --flow`).
    #[arg(long, visible_alias = "connection", value_name = "A:P-B:P", value_parser = parse_flow)]
    flow: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    /// The path's round-trip time, when known (e.g. the proxy's --rtt plus the base): skips the pings.
    #[arg(long, value_name = "DURATION", value_parser = args::duration)]
    expect_rtt: Option<Duration>,
    /// Prove the pre-shared key in FILE to the server (one started with the same --psk-file).
    #[arg(long, value_parser = args::input_file, value_name = "FILE")]
    psk_file: Option<PathBuf>,
    /// Pings (64 bytes, before the replay) whose smallest round trip is taken as the path's RTT for the
    /// prediction; 0 skips the measure and the prediction.
    #[arg(long, default_value = "10", value_parser = rtt_pings, value_name = "N")]
    rtt_pings: u64,
    /// Wait this long for the connection, the hello and each answer (on top of the answer's server time).
    #[arg(long, default_value = "10s", value_parser = args::positive_duration, allow_hyphen_values = true)]
    timeout: Duration,
    /// Refuse captures with more connections than this (each replayed connection is a thread).
    #[arg(long, default_value = "1000", value_parser = args::count, allow_hyphen_values = true, value_name = "N")]
    max_connections: u64,
    /// Read the capture as plain alternating request/response runs (no protocol decoder, no pipelining)
    /// instead of the turns `capture whatif` reads.
    #[arg(long)]
    generic: bool,
    /// Path kind for the prediction printed beside the replay (as `capture whatif --path`): tcp (a real path:
    /// slow start and receiver window per RTT) or relay (the delay of a TCP-terminating relay such as
    /// `roundtrip proxy --rtt`: no window limit).
    #[arg(long, default_value = "tcp", value_parser = parse_path)]
    path: PathKind,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    expr: super::capture::ExprArgs,
}

/// Runs `roundtrip replay`.
pub fn run(a: ReplayArgs) -> anyhow::Result<Exit> {
    // Everything that can be checked without the network first: the filter, the key, the target, the capture.
    let expr = a.expr.expr()?;
    let filter_text = expr.as_ref().map(|e| e.text().to_string());
    let psk = super::common::client_psk(a.psk_file.as_deref())?;
    let target = Target::parse(&a.to, DEFAULT_PORT).map_err(super::output::refused)?;
    let filter = Filter {
        flow: a.flow,
        expr,
        ..Filter::default()
    };
    let generic = replay::capture::generic_profile(&a.file, &filter)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let mut profile = if a.generic {
        generic.clone()
    } else {
        match AppProfile::from_capture(
            &a.file,
            &ProfileOptions {
                filter,
                ..ProfileOptions::default()
            },
        ) {
            Ok(p) => p,
            Err(ProfileError::Empty { .. }) if generic.capture.warning.is_some() => {
                // Damaged before anything replayable: the damage is the error, as every reader says it.
                return Ok(super::capture::damage(&generic.capture));
            }
            Err(ProfileError::Empty { path, what }) => {
                anyhow::bail!("{path}: nothing to replay: {what}")
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (to, _) = target.resolve(Family::Any)?;
    let mut config = ReplayConfig::new(to);
    config.psk = psk;
    config.timeout = a.timeout;
    config.max_connections = a.max_connections as usize;
    config.cancel = super::common::cancel_on_ctrl_c();
    // The decoders' turns may leave out messages they do not match (start-up, authentication): say how much.
    let bytes = |p: &AppProfile| -> u64 {
        p.connections
            .iter()
            .flat_map(|c| &c.turns)
            .map(|t| t.request_bytes + t.response_bytes)
            .sum()
    };
    let (in_turns, in_capture) = (bytes(&profile), bytes(&generic));
    if !a.generic && in_turns < in_capture {
        profile.notes.push(format!(
            "the decoded turns carry {in_turns} of the capture's {in_capture} payload bytes; --generic replays every byte as plain request/response runs"
        ));
    }
    if profile.connections.iter().all(|c| c.turns.is_empty()) && generic.capture.warning.is_some() {
        // Damaged before anything replayable: the damage is the error, said as every capture reader says it.
        return Ok(super::capture::damage(&generic.capture));
    }
    if profile.connections.iter().all(|c| c.turns.is_empty()) {
        let why = if profile.notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", profile.notes.join("; "))
        };
        anyhow::bail!(
            "{}: nothing to replay: {}{why}",
            a.file.display(),
            replay::ReplayError::Empty
        );
    }
    let rtt = if let Some(rtt) = a.expect_rtt {
        Some(rtt)
    } else if a.rtt_pings > 0 {
        Some(
            // Its errors name the server and say what to do (start it with --allow-replay, ...).
            replay::measure_rtt(&config, a.rtt_pings as usize)?,
        )
    } else {
        None
    };
    // What `capture whatif` predicts at this RTT, for the same profile.
    let predicted = rtt.map(|rtt| {
        let p = predict(
            &profile,
            &Network {
                rtt,
                bandwidth_bps: None,
                loss: 0.0,
                slow_start_after_idle: host_slow_start_after_idle(),
                path: a.path,
            },
        );
        Duration::from_secs_f64(p.predicted_s.max(0.0))
    });
    if !a.json {
        let turns: usize = profile.connections.iter().map(|c| c.turns.len()).sum();
        note(format!(
            "replaying {turns} turns to {to} (Ctrl-C stops and prints what was played)"
        ));
    }
    let started = std::time::Instant::now();
    let r = replay::replay(&profile, &config)?;
    let interrupted = r.cancelled.then(|| {
        json::Interrupted::count(
            started.elapsed(),
            r.connections.iter().map(|c| c.turns as u64).sum(),
            r.turns_planned as u64,
            "turns",
        )
    });
    // What the capture lacked, said once the replay ran (a refusal stays one line).
    for n in &profile.notes {
        note(format!("note: {n}"));
    }
    if a.json {
        out(json::envelope_bytes(
            "replay",
            Doc {
                filter: filter_text,
                cancelled: r.cancelled,
                interrupted,
                ..doc(&a.file, &r, rtt, predicted)
            },
        ))?;
    } else {
        out_text(text(&a.file, &r, rtt, predicted))?;
        if let Some(i) = interrupted {
            out_text(i.line())?;
        }
    }
    Ok(super::capture::damage(&generic.capture))
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[derive(Serialize)]
struct Doc {
    file: String,
    /// The `--filter` expression, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<String>,
    to: String,
    path_rtt_seconds: Option<f64>,
    captured_seconds: f64,
    predicted_seconds: Option<f64>,
    replayed_seconds: f64,
    connections: Vec<ConnDoc>,
    /// True when Ctrl-C stopped the replay before its last turn.
    cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupted: Option<json::Interrupted>,
}

#[derive(Serialize)]
struct ConnDoc {
    client: String,
    server: String,
    protocol: String,
    turns: usize,
    turns_planned: usize,
    captured_seconds: f64,
    replayed_seconds: f64,
    connect_seconds: f64,
    hello_seconds: f64,
    request_bytes_captured: u64,
    request_bytes_sent: u64,
    response_bytes_captured: u64,
    response_bytes_received: u64,
    request_padding_bytes: u64,
    response_padding_bytes: u64,
    capped_server_times: usize,
    turn_seconds: Vec<f64>,
}

fn doc(
    file: &std::path::Path,
    r: &ReplayResult,
    rtt: Option<Duration>,
    predicted: Option<Duration>,
) -> Doc {
    Doc {
        file: file.display().to_string(),
        filter: None,
        to: r.to.to_string(),
        path_rtt_seconds: rtt.map(secs),
        captured_seconds: secs(r.captured_duration),
        predicted_seconds: predicted.map(secs),
        replayed_seconds: secs(r.duration),
        cancelled: false,
        interrupted: None,
        connections: r
            .connections
            .iter()
            .map(|c| ConnDoc {
                client: c.captured.0.to_string(),
                server: c.captured.1.to_string(),
                protocol: c.protocol.clone(),
                turns: c.turns,
                turns_planned: c.turns_planned,
                captured_seconds: secs(c.captured_duration),
                replayed_seconds: secs(c.duration),
                connect_seconds: secs(c.connect),
                hello_seconds: secs(c.hello),
                request_bytes_captured: c.request_bytes.0,
                request_bytes_sent: c.request_bytes.1,
                response_bytes_captured: c.response_bytes.0,
                response_bytes_received: c.response_bytes.1,
                request_padding_bytes: c.padding.0,
                response_padding_bytes: c.padding.1,
                capped_server_times: c.capped_delays,
                turn_seconds: c.turn_times.iter().map(|d| secs(*d)).collect(),
            })
            .collect(),
    }
}

fn text(
    file: &std::path::Path,
    r: &ReplayResult,
    rtt: Option<Duration>,
    predicted: Option<Duration>,
) -> String {
    let mut s = String::new();
    let turns: usize = r.connections.iter().map(|c| c.turns).sum();
    let _ = writeln!(
        s,
        "replay of {} ({} connection{}, {turns} turns) to {}",
        file.display(),
        r.connections.len(),
        if r.connections.len() == 1 { "" } else { "s" },
        r.to
    );
    if let Some(rtt) = rtt {
        let _ = writeln!(
            s,
            "path RTT: {} (smallest of the pings before the replay)",
            fmt_duration(rtt)
        );
    }
    let _ = writeln!(
        s,
        "{:<44} {:>6} {:>11} {:>11} {:>10} {:>10}",
        "connection (captured)", "turns", "requests", "responses", "captured", "replayed"
    );
    for c in &r.connections {
        let _ = writeln!(
            s,
            "{:<44} {:>6} {:>11} {:>11} {:>10} {:>10}",
            format!("{} > {} {}", c.captured.0, c.captured.1, c.protocol),
            if c.turns < c.turns_planned {
                format!("{}/{}", c.turns, c.turns_planned)
            } else {
                c.turns.to_string()
            },
            fmt_bytes(c.request_bytes.0),
            fmt_bytes(c.response_bytes.0),
            fmt_duration(c.captured_duration),
            fmt_duration(c.duration)
        );
        if c.capped_delays > 0 {
            let _ = writeln!(
                s,
                "  {} server times over {} were capped",
                c.capped_delays,
                fmt_duration(roundtrip::wire::sockperf::MAX_REPLAY_DELAY)
            );
        }
    }
    if r.cancelled {
        // Only part of the run was played: no comparison with the capture or the prediction of all of it.
        let _ = writeln!(
            s,
            "total: replayed {} (the turns played; the capture's {} and the prediction cover every turn: not compared)",
            fmt_duration(r.duration),
            fmt_duration(r.captured_duration)
        );
        return s;
    }
    let mut total = format!("total: captured {}", fmt_duration(r.captured_duration));
    if let (Some(p), Some(rtt)) = (predicted, rtt) {
        let _ = write!(
            total,
            ", predicted at {} RTT {}",
            fmt_duration(rtt),
            fmt_duration(p)
        );
    }
    let _ = write!(total, ", replayed {}", fmt_duration(r.duration));
    if let Some(p) = predicted.filter(|p| !p.is_zero()) {
        let _ = write!(
            total,
            " (replayed / predicted {:.2}x)",
            r.duration.as_secs_f64() / p.as_secs_f64()
        );
    }
    let _ = writeln!(s, "{total}");
    let hello: Duration = r
        .connections
        .iter()
        .map(|c| c.hello)
        .max()
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "(each connection's hello with the server, {} at most, is not counted: the application did not pay it)",
        fmt_duration(hello)
    );
    s
}

fn parse_path(s: &str) -> Result<PathKind, String> {
    match s {
        "tcp" => Ok(PathKind::Tcp),
        "relay" => Ok(PathKind::Relay),
        _ => Err(format!("unknown path kind '{s}': use tcp or relay")),
    }
}

/// `--rtt-pings`: a whole number from 0 to 10,000.
fn rtt_pings(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n <= 10_000 => Ok(n),
        Ok(_) => Err(format!("'{s}' is more than 10000 pings")),
        Err(_) if s.starts_with('-') => Err(format!("'{s}' must not be negative")),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}
