//! `roundtrip connect`: TCP handshake time and port state, per attempt and as a summary.

use super::args;
use super::output::{Exit, error_line, out_text};
use clap::Args;
use roundtrip::doc::connect::{ConnectCounts, ConnectDoc};
use roundtrip::doc::{Header, Interrupted, kind};
use roundtrip::probe::connect::{
    self, Attempt, ConnectConfig, ConnectMode, ConnectObserver, PortState,
};
use roundtrip::probe::target::Target;
use roundtrip::report::text::{self, summary_table};
use roundtrip::units::fmt_duration;
use std::time::Duration;

/// Arguments of `roundtrip connect`.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// Host and port: HOST:PORT or [IPv6]:PORT; names and literal addresses.
    #[arg(value_name = "HOST:PORT")]
    target: String,
    /// Number of attempts.
    #[arg(long, short = 'c', short_alias = 'n', default_value = "5", value_parser = args::count)]
    count: u64,
    /// Time from the start of one attempt to the start of the next.
    #[arg(long, short = 'i', default_value = "1s", value_parser = args::duration)]
    interval: Duration,
    /// Wait this long for an answer before calling the port filtered.
    #[arg(long, default_value = "1s", value_parser = args::positive_duration)]
    timeout: Duration,
    /// Send the SYN from a raw socket and answer the SYN-ACK with RST, as hping3 -S (root or CAP_NET_RAW).
    #[arg(long)]
    raw: bool,
    #[command(flatten)]
    out: super::common::ResultArgs,
}

struct Printer {
    enabled: bool,
}

impl ConnectObserver for Printer {
    fn attempt(&mut self, a: &Attempt) {
        if self.enabled {
            let _ = out_text(text::connect::attempt_line(a));
        }
    }
}

/// Runs `roundtrip connect`.
pub fn run(a: ConnectArgs) -> anyhow::Result<Exit> {
    let target = Target::parse(&a.target, 0).map_err(super::output::refused)?;
    if target.port == 0 {
        return Err(super::output::refused(format!(
            "no port in '{}': give HOST:PORT (e.g. {}:443)",
            a.target,
            if target.host.contains(':') {
                format!("[{}]", target.host)
            } else {
                target.host.clone()
            }
        )));
    }
    let fam = a.out.family.family();
    let mut config = ConnectConfig::new(std::net::SocketAddr::from(([127, 0, 0, 1], target.port)));
    config.count = a.count;
    config.interval = a.interval;
    config.timeout = a.timeout;
    config.mode = if a.raw {
        ConnectMode::Raw
    } else {
        ConnectMode::Kernel
    };
    config.validate().map_err(super::output::refused)?;
    a.out.pictures.validate().map_err(super::output::refused)?;

    let (addr, dns) = target.resolve(fam)?;
    config.addr = addr;
    config.cancel = super::common::cancel_on_ctrl_c();
    let literal = target.host.parse::<std::net::IpAddr>().is_ok();
    if !a.out.json {
        out_text(format!(
            "roundtrip connect {target} ({addr}): {} handshake, {} attempts, timeout {}; {}\n",
            config.mode,
            config.count,
            fmt_duration(config.timeout),
            text::connect::dns_words(&target.host, dns)
        ))?;
    }
    let result = connect::run(
        &config,
        &mut Printer {
            enabled: !a.out.json,
        },
    )?;
    let counts = ConnectCounts {
        open: result.count(PortState::Open),
        closed: result.count(PortState::Closed),
        filtered: result.count(PortState::Filtered),
        unreachable: result.count(PortState::Unreachable),
    };
    let verdict = result.verdict();
    let interrupted = result.cancelled.then(|| {
        Interrupted::count(
            result.started.elapsed().unwrap_or_default(),
            result.attempts.len() as u64,
            config.count,
            "attempts",
        )
    });
    let doc = || ConnectDoc {
        header: Header::new(kind::CONNECT),
        started_unix_s: super::common::unix_s(result.started),
        target: a.target.clone(),
        address: addr.to_string(),
        mode: result.mode,
        count: config.count,
        interval_ns: roundtrip::units::nanos(config.interval),
        timeout_ns: roundtrip::units::nanos(config.timeout),
        dns_ns: (!literal).then(|| roundtrip::units::nanos(dns)),
        verdict,
        counts: counts.clone(),
        handshake: result.handshake.summary(),
        refused: result.refused.summary(),
        attempts: result.attempts.clone(),
        error: result.error.as_ref().map(|e| e.to_string()),
        cancelled: result.cancelled,
        interrupted: interrupted.clone(),
    };
    a.out.show(
        doc,
        || {
            out_text(format!(
                "--- {addr}: port {}; {} attempts: {} open, {} closed, {} filtered, {} unreachable ---\n",
                verdict.map_or("unknown".to_string(), |v| v.to_string()),
                result.attempts.len(),
                counts.open,
                counts.closed,
                counts.filtered,
                counts.unreachable
            ))?;
            out_text(summary_table(&[
                ("handshake (SYN -> SYN-ACK)", &result.handshake),
                ("refused (SYN -> RST)", &result.refused),
            ]))?;
            if result.mode == ConnectMode::Raw && counts.open > 0 {
                out_text(
                    "raw mode: each SYN-ACK was answered with RST, so the server application never saw a connection \
                     (this machine's kernel, owning no socket for it, sends an identical RST too; the server ignores the second)\n",
                )?;
            }
            if let Some(i) = &interrupted {
                out_text(i.line())?;
            }
            Ok(())
        },
        &target.to_string(),
    )?;
    if let Some(e) = &result.error {
        error_line(e);
        return Ok(Exit::Failed);
    }
    if counts.open > 0 || result.cancelled {
        return Ok(Exit::Ok);
    }
    let last_detail = result
        .attempts
        .iter()
        .rev()
        .find_map(|x| x.detail.clone())
        .unwrap_or_default();
    match verdict {
        Some(PortState::Closed) => error_line(format!(
            "port {} on {} is closed: the host answered every SYN with RST (nothing listens there: check the port, or start the service)",
            addr.port(),
            addr.ip()
        )),
        Some(PortState::Filtered) => error_line(format!(
            "no answer from {addr} within {}: the port is filtered (a firewall drops the SYN) or the host is down (try a longer --timeout)",
            fmt_duration(config.timeout)
        )),
        Some(PortState::Unreachable) => error_line(format!(
            "{addr} is unreachable: {last_detail} (check the address, your routes and firewalls)"
        )),
        _ => error_line(format!("no handshake with {addr} completed")),
    }
    Ok(Exit::Failed)
}
