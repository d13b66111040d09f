//! `roundtrip icmp`: ICMP echo round trips, as ping and fping measure them.

use super::args;
use super::output::{Exit, error_line, out_text};
use clap::Args;
use roundtrip::doc::icmp::IcmpDoc;
use roundtrip::doc::{Header, Interrupted, kind};
use roundtrip::probe::icmp::{self, IcmpConfig, IcmpMode, IcmpObserver, Probe, ProbeOutcome};
use roundtrip::probe::target::Target;
use roundtrip::report::text::connect::dns_words;
use roundtrip::report::text::summary_table;
use roundtrip::units::{fmt_duration, fmt_nanos};
use std::net::IpAddr;
use std::time::Duration;

/// Arguments of `roundtrip icmp`.
#[derive(Debug, Args)]
pub struct IcmpArgs {
    /// Host name or literal address (no port).
    #[arg(value_name = "HOST")]
    host: String,
    /// Number of echo requests.
    #[arg(long, short = 'c', short_alias = 'n', default_value = "5", value_parser = args::count)]
    count: u64,
    /// ICMP payload bytes after the 8-byte header, as ping -s.
    #[arg(long, short = 's', default_value = "56", value_parser = args::size, value_name = "BYTES")]
    size: u64,
    /// Time from one request to the next.
    #[arg(long, short = 'i', default_value = "1s", value_parser = args::duration)]
    interval: Duration,
    /// Wait this long for each reply.
    #[arg(long, default_value = "1s", value_parser = args::positive_duration)]
    timeout: Duration,
    /// Use the raw socket only (root or CAP_NET_RAW).
    #[arg(long, conflicts_with = "datagram")]
    raw: bool,
    /// Use the unprivileged ICMP datagram socket only (net.ipv4.ping_group_range), even as root.
    #[arg(long)]
    datagram: bool,
    #[command(flatten)]
    out: super::common::ResultArgs,
}

struct Printer {
    enabled: bool,
    addr: IpAddr,
    /// Every probe is kept for --json and the report only.
    keep: bool,
    probes: Vec<Probe>,
}

/// Most echo requests a run keeping every probe (--json, --report) makes.
const MAX_KEPT_PROBES: u64 = 1_000_000;

impl IcmpObserver for Printer {
    fn probe(&mut self, p: &Probe) {
        if self.enabled {
            let line = match &p.outcome {
                ProbeOutcome::Reply { bytes, ttl, rtt_ns } => format!(
                    "{bytes} bytes from {}: icmp_seq={}{} time={}\n",
                    self.addr,
                    p.seq,
                    ttl.map_or(String::new(), |t| format!(" ttl={t}")),
                    fmt_nanos(*rtt_ns as f64)
                ),
                ProbeOutcome::Timeout => format!("icmp_seq={}: no reply\n", p.seq),
                ProbeOutcome::Error { detail } => format!("icmp_seq={}: {detail}\n", p.seq),
            };
            let _ = out_text(line);
        }
        if self.keep {
            self.probes.push(p.clone());
        }
    }
}

/// Runs `roundtrip icmp`.
pub fn run(a: IcmpArgs) -> anyhow::Result<Exit> {
    let target = Target::parse(&a.host, 0).map_err(super::output::refused)?;
    if target.port != 0 {
        return Err(super::output::refused(format!(
            "'{}': ICMP has no ports; give the host alone (e.g. {})",
            a.host, target.host
        )));
    }
    let fam = a.out.family.family();
    let mut config = IcmpConfig::new(IpAddr::from([127, 0, 0, 1]));
    config.count = a.count;
    config.size = usize::try_from(a.size).unwrap_or(usize::MAX);
    config.interval = a.interval;
    config.timeout = a.timeout;
    config.mode = match (a.raw, a.datagram) {
        (true, _) => IcmpMode::Raw,
        (_, true) => IcmpMode::Datagram,
        _ => IcmpMode::Auto,
    };
    config.validate().map_err(super::output::refused)?;
    let keep = a.out.json || a.out.pictures.wanted();
    if keep && a.count > MAX_KEPT_PROBES {
        return Err(super::output::refused(format!(
            "-c {} is more than the {MAX_KEPT_PROBES} echo requests a run keeps for --json or --report (each probe is kept); give -c {MAX_KEPT_PROBES} or fewer, or leave out --json/--report",
            a.count
        )));
    }
    a.out.pictures.validate().map_err(super::output::refused)?;
    let (addr, dns) = target.resolve(fam)?;
    config.addr = addr.ip();
    config.cancel = super::common::cancel_on_ctrl_c();
    let literal = target.host.parse::<IpAddr>().is_ok();
    let mut printer = Printer {
        enabled: !a.out.json,
        addr: addr.ip(),
        keep,
        probes: Vec::new(),
    };
    let result = icmp::run(&config, &mut printer)?;
    let interrupted = result.cancelled.then(|| {
        Interrupted::count(
            result.started.elapsed().unwrap_or_default(),
            result.sent,
            config.count,
            "echo requests",
        )
    });
    let doc = || IcmpDoc {
        header: Header::new(kind::ICMP),
        started_unix_s: super::common::unix_s(result.started),
        target: a.host.clone(),
        address: addr.ip().to_string(),
        socket: result.socket,
        payload_bytes: result.size,
        count: config.count,
        interval_ns: roundtrip::units::nanos(config.interval),
        timeout_ns: roundtrip::units::nanos(config.timeout),
        dns_ns: (!literal).then(|| roundtrip::units::nanos(dns)),
        sent: result.sent,
        received: result.received,
        lost: result.lost(),
        errors: result.errors,
        rtt: result.rtt.summary(),
        probes: printer.probes.clone(),
        error: result.error.as_ref().map(|e| e.to_string()),
        cancelled: result.cancelled,
        interrupted: interrupted.clone(),
    };
    a.out.show(
        doc,
        || {
            let pct = if result.sent > 0 {
                100.0 * result.lost() as f64 / result.sent as f64
            } else {
                0.0
            };
            out_text(format!(
                "--- {} ICMP echo ({}, {} B payload; {}): sent {}  received {}  lost {} ({pct:.2}%)  errors {} ---\n",
                addr.ip(),
                result.socket,
                result.size,
                dns_words(&target.host, dns),
                result.sent,
                result.received,
                result.lost(),
                result.errors
            ))?;
            out_text(summary_table(&[("RTT", &result.rtt)]))?;
            if let Some(i) = &interrupted {
                out_text(i.line())?;
            }
            Ok(())
        },
        &target.host,
    )?;
    if let Some(e) = &result.error {
        error_line(e);
        return Ok(Exit::Failed);
    }
    if result.received == 0 && !result.cancelled {
        match &result.last_error {
            Some(d) => error_line(format!(
                "no echo reply from {}: {d} (check the address and your routes)",
                addr.ip()
            )),
            None => error_line(format!(
                "no echo reply from {} within {} to any of {} requests (host down, or ICMP blocked on the way; try `roundtrip connect HOST:PORT`)",
                addr.ip(),
                fmt_duration(config.timeout),
                result.sent
            )),
        }
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}
