//! `roundtrip compare`: ICMP, TCP handshake, application ping and the kernel's RTT, side by side.

use super::args;
use super::output::{Exit, error_line, note, out_text};
use clap::Args;
use roundtrip::doc::compare::CompareDoc;
use roundtrip::doc::{Header, Interrupted, kind};
use roundtrip::probe::compare::{self, CompareConfig, DEFAULT_SIZE, RowKind};
use roundtrip::probe::connect::ConnectMode;
use roundtrip::probe::icmp::IcmpMode;
use roundtrip::probe::target::Target;
use roundtrip::report::text::compare::compare_text;
use roundtrip::report::text::connect::dns_words;
use roundtrip::wire::sockperf::DEFAULT_PORT;
use std::time::Duration;

/// Arguments of `roundtrip compare`.
#[derive(Debug, Args)]
#[command(mut_arg("ipv6", |a| a.help("IPv6 only (with no HOST: the embedded server listens on ::1)")))]
pub struct CompareArgs {
    /// A host running `roundtrip server` (or sockperf server): HOST, HOST:PORT or [IPv6]:PORT (default port
    /// 11111). Without it, an embedded server on loopback answers.
    #[arg(value_name = "HOST[:PORT]")]
    target: Option<String>,
    /// Whole message size of the realistic ping row, header included (default: 250 B, the average SQL*Net packet
    /// in Frits Hoogland's "Performing in the cloud – network latency").
    #[arg(long, short = 's', visible_short_alias = 'm', default_value_t = DEFAULT_SIZE as u64, value_parser = args::size, value_name = "BYTES")]
    size: u64,
    /// Measurements per row.
    #[arg(long, short = 'c', short_alias = 'n', default_value = "50", value_parser = args::count)]
    count: u64,
    /// Time between measurements, the same for every row.
    #[arg(long, short = 'i', default_value = "20ms", value_parser = args::duration)]
    interval: Duration,
    /// Wait this long for any one answer.
    #[arg(long, default_value = "1s", value_parser = args::positive_duration)]
    timeout: Duration,
    /// Time the handshake with a raw SYN answered by RST, as hping3 -S (root or CAP_NET_RAW) [default: raw
    /// where allowed, else connect()].
    #[arg(long, conflicts_with = "no_raw")]
    raw: bool,
    /// Time the handshake with connect() even where raw sockets are allowed.
    #[arg(long)]
    no_raw: bool,
    #[command(flatten)]
    out: super::common::ResultArgs,
}

/// Runs `roundtrip compare`.
pub fn run(a: CompareArgs) -> anyhow::Result<Exit> {
    let target = match &a.target {
        Some(t) => Some(Target::parse(t, DEFAULT_PORT).map_err(super::output::refused)?),
        None => None,
    };
    let mut config = CompareConfig::new(None);
    config.count = a.count;
    config.interval = a.interval;
    config.timeout = a.timeout;
    config.size = usize::try_from(a.size).unwrap_or(usize::MAX);
    config.connect_mode = match (a.raw, a.no_raw) {
        (true, _) => Some(ConnectMode::Raw),
        (_, true) => Some(ConnectMode::Kernel),
        _ => None,
    };
    config.icmp_mode = IcmpMode::Auto;
    config.loopback_v6 = a.out.family.ipv6;
    config.validate().map_err(super::output::refused)?;
    a.out.pictures.validate().map_err(super::output::refused)?;
    let mut dns_ns = None;
    let mut dns_line = String::new();
    if let Some(t) = &target {
        let (addr, dns) = t.resolve(a.out.family.family())?;
        if t.host.parse::<std::net::IpAddr>().is_err() {
            dns_ns = Some(roundtrip::units::nanos(dns));
        }
        dns_line = dns_words(&t.host, dns);
        config.target = Some(addr);
    }
    config.cancel = super::common::cancel_on_ctrl_c();
    if !a.out.json {
        note(format!(
            "measuring: ICMP echo, TCP handshake, roundtrip ping {} B and {} B, {} each, {} apart ...",
            roundtrip::wire::sockperf::HEADER_LEN,
            config.size,
            config.count,
            roundtrip::units::fmt_duration(config.interval)
        ));
    }
    let result = compare::run(&config)?;
    // Four probes of --count each (ICMP, handshake, two ping sizes; the kernel's RTT is read, not probed).
    let interrupted = result.cancelled.then(|| {
        Interrupted::count(
            result.started.elapsed().unwrap_or_default(),
            result
                .rows
                .iter()
                .filter(|r| r.kind != RowKind::KernelSrtt)
                .map(|r| r.attempts)
                .sum(),
            config.count * 4,
            "measurements",
        )
    });
    let doc = || CompareDoc {
        header: Header::new(kind::COMPARE),
        started_unix_s: super::common::unix_s(result.started),
        target: a.target.clone(),
        address: result.addr.to_string(),
        embedded_server: result.embedded_server,
        dns_ns,
        count: config.count,
        interval_ns: roundtrip::units::nanos(config.interval),
        timeout_ns: roundtrip::units::nanos(config.timeout),
        size_bytes: config.size,
        rows: result.rows.clone(),
        tcp_info: result.tcp_info,
        conclusion: result.conclusion(),
        cancelled: result.cancelled,
        interrupted: interrupted.clone(),
    };
    let first_error = || {
        result
            .rows
            .iter()
            .find_map(|r| r.error.clone())
            .unwrap_or_default()
    };
    // Nothing measured: the error alone, no table of dashes.
    if !result.measured_anything() && !result.cancelled {
        error_line(format!(
            "nothing could be measured against {}: {}",
            result.addr,
            first_error()
        ));
        return Ok(Exit::Failed);
    }
    let label = a.target.clone().unwrap_or_else(|| "embedded server".into());
    a.out.show(
        doc,
        || {
            let whom = if result.embedded_server {
                format!("embedded roundtrip server on {} (loopback)", result.addr)
            } else {
                format!(
                    "{} ({}; {dns_line})",
                    target.as_ref().map_or(String::new(), |t| t.to_string()),
                    result.addr
                )
            };
            out_text(compare_text(&result, &whom, interrupted.as_ref()))?;
            Ok(())
        },
        &label,
    )?;
    // The application rows (what compare sets the others against) measured nothing: the comparison cannot
    // answer its question (exit 1); the rows that did measure stay on screen. A missing ICMP row alone
    // (not permitted here) leaves the application against the handshake: exit 0 with its note.
    let failed: Vec<&str> = result
        .rows
        .iter()
        .filter(|r| r.summary.count == 0 && r.error.is_some())
        .map(|r| r.label.as_str())
        .collect();
    let app_failed = result.rows.iter().any(|r| {
        matches!(r.kind, RowKind::PingHeader | RowKind::PingPayload) && r.summary.count == 0
    });
    if app_failed && !result.cancelled {
        error_line(format!(
            "{} of {} probes measured nothing against {} ({}): {}",
            failed.len(),
            result.rows.len(),
            result.addr,
            failed.join(", "),
            first_error()
        ));
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}
