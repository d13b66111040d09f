//! `roundtrip server`: answer ping-pong on TCP and UDP until Ctrl-C.

use super::args;
use super::output::{Exit, note};
use super::ratelimit::RateLimiter;
use anyhow::Context;
use clap::Args;
use roundtrip::server::{self, Limits, ServerConfig, ServerEvent, ServerHandle};
use roundtrip::units;
use roundtrip::wire::auth::Psk;
use roundtrip::wire::sockperf::DEFAULT_PORT;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `roundtrip server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address to listen on (default: every address, IPv6 and IPv4).
    #[arg(long, value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// TCP and UDP port (sockperf's default is 11111; 0 picks a free one).
    #[arg(long, short = 'p', default_value_t = DEFAULT_PORT, value_parser = args::port)]
    port: u16,
    /// Serve TCP only.
    #[arg(long, conflicts_with = "udp_only")]
    tcp_only: bool,
    /// Serve UDP only.
    #[arg(long)]
    udp_only: bool,
    /// Answer replay requests (`roundtrip replay`): each asks for an answer of a given size, at most 16 MiB,
    /// after a given server time, at most 10 s.
    #[arg(long)]
    allow_replay: bool,
    #[command(flatten)]
    guard: GuardArgs,
}

/// Who may use a responder and how much: shared by `server` and the fleet agent's responder.
#[derive(Debug, Args)]
pub struct GuardArgs {
    /// Answer only clients that prove the pre-shared key in FILE (at least 16 bytes; the same file on the
    /// clients). Without it, the server answers anyone, as sockperf does.
    #[arg(long, value_parser = args::input_file, value_name = "FILE")]
    psk_file: Option<PathBuf>,
    /// TCP clients connected at once; the one over is closed at once.
    #[arg(long, value_name = "N", default_value_t = Limits::MAX_CLIENTS)]
    max_clients: usize,
    /// TCP clients connected at once from one IP address.
    #[arg(long, value_name = "N", default_value_t = Limits::MAX_PER_ADDRESS)]
    max_per_address: usize,
    /// Time a client has to complete a message it started, and to take its answers.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = args::positive_duration)]
    message_deadline: Duration,
    /// Drop a TCP client that sent nothing for this long (0: never).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = args::duration)]
    idle_timeout: Duration,
    /// Longest UDP reverse stream (throughput --udp --reverse) a client may ask for.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = args::positive_duration)]
    max_reverse: Duration,
    /// UDP reverse streams at once, all clients together (one per client address).
    #[arg(long, value_name = "N", default_value_t = Limits::MAX_REVERSE_STREAMS)]
    max_reverse_streams: usize,
    /// Event loops serving TCP (0: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    threads: usize,
}

impl GuardArgs {
    /// The limits, checked before anything is opened.
    pub fn limits(&self) -> anyhow::Result<Limits> {
        for (v, flag) in [
            (self.max_clients, "--max-clients"),
            (self.max_per_address, "--max-per-address"),
            (self.max_reverse_streams, "--max-reverse-streams"),
        ] {
            if v == 0 {
                return Err(super::output::refused(format!("{flag} must be at least 1")));
            }
        }
        Ok(Limits {
            max_clients: self.max_clients,
            max_per_address: self.max_per_address,
            message_deadline: self.message_deadline,
            idle_timeout: (!self.idle_timeout.is_zero()).then_some(self.idle_timeout),
            max_reverse: self.max_reverse,
            max_reverse_streams: self.max_reverse_streams,
            threads: self.threads,
        })
    }

    /// The key, read and checked, when one was given.
    pub fn psk(&self) -> anyhow::Result<Option<Psk>> {
        let Some(path) = &self.psk_file else {
            return Ok(None);
        };
        let psk = Psk::from_file(path)?;
        if psk.readable_by_others {
            note(format!(
                "warning: {} can be read by other users of this machine (chmod 600 it)",
                path.display()
            ));
        }
        Ok(Some(psk))
    }

    /// The key file's path, for the start banner.
    pub fn psk_path(&self) -> Option<&std::path::Path> {
        self.psk_file.as_deref()
    }
}

/// Turns server events into log lines on stderr, at most one per reason per second, with the count of the
/// ones held back.
pub struct EventLog {
    limiter: Mutex<RateLimiter<&'static str>>,
}

impl EventLog {
    /// A log with nothing held back.
    pub fn new() -> Arc<Self> {
        Arc::new(EventLog {
            limiter: Mutex::new(RateLimiter::per_second()),
        })
    }

    /// Logs one event (or counts it when its reason already had a line this second).
    pub fn event(&self, ev: &ServerEvent) {
        let (key, line) = describe(ev);
        let admitted = self
            .limiter
            .lock()
            .expect("log limiter")
            .admit(key, Instant::now());
        if let Some(held) = admitted {
            if held > 0 {
                note(format!("{line} (and {held} more: {key})"));
            } else {
                note(line);
            }
        }
    }

    /// Prints a summary line for every reason whose lines were held back in the last second.
    pub fn flush(&self) {
        let held = self
            .limiter
            .lock()
            .expect("log limiter")
            .flush(Instant::now());
        for (key, n) in held {
            note(format!("... {n} more in the last second: {key}"));
        }
    }
}

/// The rate-limiting key and the log line of an event.
fn describe(ev: &ServerEvent) -> (&'static str, String) {
    match ev {
        ServerEvent::Connected { peer } => (
            "tcp clients connected",
            format!("tcp client {peer} connected"),
        ),
        ServerEvent::Disconnected {
            peer,
            messages,
            bytes,
            reason: None,
        } => (
            "tcp clients disconnected",
            format!("tcp client {peer} disconnected after {messages} messages, {bytes} bytes"),
        ),
        ServerEvent::Disconnected {
            peer,
            messages,
            bytes,
            reason: Some(r),
        } => (
            r.kind.name(),
            format!("tcp client {peer} dropped after {messages} messages, {bytes} bytes: {r}"),
        ),
        ServerEvent::Refused { peer, why } => (
            match why {
                server::RefuseReason::MaxClients(_) => "refused: --max-clients",
                server::RefuseReason::MaxPerAddress(_) => "refused: --max-per-address",
                server::RefuseReason::OutOfFiles => "refused: out of file descriptors",
            },
            format!("tcp client {peer} refused: {why}"),
        ),
        ServerEvent::AcceptFailed { why } => (
            "accept failed",
            format!("accepting a tcp client failed: {why}"),
        ),
        ServerEvent::Datagram {
            peer,
            issue,
            detail,
        } => (
            issue.name(),
            format!("udp {peer}: ignored ({}): {detail}", issue.name()),
        ),
        ServerEvent::ReverseStarted {
            peer,
            transport,
            size,
            duration,
        } => (
            "reverse streams",
            format!(
                "{transport} client {peer}: reverse stream of {size}-byte messages for {}",
                units::fmt_duration(*duration)
            ),
        ),
    }
}

/// Raises the soft limit on open files to the hard limit (servers hold one per client) and warns when it is
/// still below what `max_clients` needs.
pub fn raise_fd_limit(max_clients: usize) {
    match server::raise_fd_limit() {
        Ok(limit) if (limit as usize) < max_clients + 64 => note(format!(
            "warning: this process may open {limit} files, fewer than --max-clients {max_clients} needs: \
             connections beyond about {} are refused (raise `ulimit -n`)",
            (limit as usize).saturating_sub(64)
        )),
        Ok(_) => {}
        Err(e) => note(format!("warning: cannot read the open-file limit: {e}")),
    }
}

/// What the server is open to, in one line.
pub fn exposure(handle: &ServerHandle, psk: Option<&std::path::Path>) -> String {
    let addrs: Vec<IpAddr> = [handle.tcp_addr(), handle.udp_addr()]
        .into_iter()
        .flatten()
        .map(|a| a.ip())
        .collect();
    let loopback = addrs.iter().all(|ip| server::is_loopback(*ip));
    let everywhere = addrs.iter().any(|ip| ip.is_unspecified());
    let reach = if loopback {
        "reachable from this host only (loopback)"
    } else if everywhere {
        "reachable on every address of this host"
    } else {
        "reachable on that address"
    };
    let who = match psk {
        Some(p) => format!("clients must prove the key in {}", p.display()),
        None => "OPEN to anyone who can reach it (no --psk-file)".into(),
    };
    let l = handle.limits();
    format!(
        "{reach}; {who}; limits: {} clients, {} per address, {} to complete a message, idle {}, UDP reverse \
         streams need a cookie and last at most {} ({} at once)",
        l.max_clients,
        l.max_per_address,
        units::fmt_duration(l.message_deadline),
        l.idle_timeout
            .map_or("never".to_string(), units::fmt_duration),
        units::fmt_duration(l.max_reverse),
        l.max_reverse_streams
    )
}

/// Runs the server until Ctrl-C, logging client events to stderr (rate-limited).
pub fn run(a: ServerArgs) -> anyhow::Result<Exit> {
    let limits = a.guard.limits()?;
    let psk = a.guard.psk()?;
    let config = ServerConfig {
        bind: a.bind,
        port: a.port,
        tcp: !a.udp_only,
        udp: !a.tcp_only,
        psk,
        allow_replay: a.allow_replay,
        limits,
    };
    raise_fd_limit(config.limits.max_clients);
    let log = EventLog::new();
    let sink = log.clone();
    let handle =
        server::start(&config, move |ev| sink.event(&ev)).context("starting the server")?;
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    let mut parts = Vec::new();
    if let Some(a) = handle.tcp_addr() {
        parts.push(format!("tcp {a}"));
    }
    if let Some(a) = handle.udp_addr() {
        parts.push(format!("udp {a}"));
    }
    note(format!(
        "roundtrip server listening on {} (sockperf 3.x message format); Ctrl-C to stop",
        parts.join(" and ")
    ));
    note(exposure(&handle, a.guard.psk_path()));
    if a.allow_replay {
        note(format!(
            "replay requests are answered (--allow-replay): up to {} per answer, after up to {} of server time",
            units::fmt_bytes(roundtrip::wire::sockperf::MAX_REPLAY_ANSWER),
            units::fmt_duration(roundtrip::wire::sockperf::MAX_REPLAY_DELAY)
        ));
    }
    while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(1)) {
        log.flush();
    }
    let answered = handle.answered();
    handle.shutdown();
    log.flush();
    note(format!("stopped after answering {answered} messages"));
    Ok(Exit::Ok)
}
