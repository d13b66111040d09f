//! `roundtrip throughput` (alias `tp`): one-way streaming rates per message size.

use super::args;
use super::output::{Exit, error_line, out, out_text};
use clap::Args;
use roundtrip::doc::throughput::{ThroughputDoc, throughput_interrupted};
use roundtrip::probe::throughput::{self, Observer, RateRow, ThroughputConfig};
use roundtrip::report::{json, traffic};
use roundtrip::units;
use roundtrip::wire::sockperf::HEADER_LEN;
use std::time::Duration;

/// Arguments of `roundtrip throughput`.
#[derive(Debug, Args)]
#[command(mut_arg("no_extensions", |a| a.help("Behave exactly as a sockperf client: no hello, so no receiver counts and no --reverse")))]
pub struct ThroughputArgs {
    /// Server as HOST, HOST:PORT or [IPv6]:PORT (default port 11111, as sockperf).
    #[arg(value_name = "HOST[:PORT]")]
    target: String,
    /// Use UDP instead of TCP.
    #[arg(long, short = 'u')]
    udp: bool,
    /// Whole message size including the 14-byte header; a comma-separated list runs each in turn
    /// (e.g. 64,1k,8k,64k).
    #[arg(long, short = 's', visible_short_alias = 'm', default_value = "64", value_parser = size_list, allow_negative_numbers = true, value_name = "BYTES[,BYTES...]")]
    size: SizeList,
    /// Parallel connections (TCP) or sockets (UDP).
    #[arg(long, short = 'P', default_value = "1", value_parser = args::count, allow_negative_numbers = true, value_name = "N")]
    streams: u64,
    /// How long to measure each size.
    #[arg(long, short = 't', default_value = "10s", value_parser = args::positive_duration)]
    duration: Duration,
    /// The server sends and this side counts (needs `roundtrip server`; as iperf3 -R).
    #[arg(long, short = 'R')]
    reverse: bool,
    /// oratcptest sync mode: each message is answered before the next goes out.
    #[arg(long, conflicts_with = "reverse")]
    sync: bool,
    /// Print one row per this period.
    #[arg(long, default_value = "1s", value_parser = args::positive_duration)]
    report_interval: Duration,
    /// How long to wait for answers, counts and the end of a reverse stream.
    #[arg(long, default_value = "2s", value_parser = args::positive_duration)]
    timeout: Duration,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// No per-interval rows, only the totals.
    #[arg(long, short = 'q')]
    quiet: bool,
    #[command(flatten)]
    client: super::common::ClientArgs,
    #[command(flatten)]
    pictures: super::report::PictureArgs,
    #[command(flatten)]
    family: super::common::FamilyArgs,
}

/// A list of message sizes in bytes.
#[derive(Debug, Clone)]
pub struct SizeList(pub Vec<usize>);

/// One message size: a byte count of at least the 14-byte header.
pub fn message_size(s: &str) -> Result<usize, String> {
    let n = units::parse_size(s).map_err(|e| e.to_string())?;
    if n == 0 {
        return Err(format!("size '{s}' must be more than 0"));
    }
    if n < HEADER_LEN as u64 {
        return Err(format!(
            "size '{s}' is smaller than the {HEADER_LEN}-byte sockperf header every message carries"
        ));
    }
    usize::try_from(n).map_err(|_| format!("size '{s}' is too large"))
}

/// A comma-separated list of message sizes (`64,1k,8k`).
pub fn size_list(s: &str) -> Result<SizeList, String> {
    let v = s
        .split(',')
        .map(|p| message_size(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SizeList(v))
}

struct Rows {
    print: bool,
}

impl Observer for Rows {
    fn interval(&mut self, size: usize, row: &RateRow) {
        if self.print {
            let _ = out_text(traffic::throughput_interval_line(size, row));
        }
    }
}

/// Runs `roundtrip throughput`.
pub fn run(a: ThroughputArgs) -> anyhow::Result<Exit> {
    let (target, link) = a.client.link_config(&a.target, a.udp, a.timeout)?;
    let transport = link.transport;
    let mut config = ThroughputConfig::new(link.addr);
    config.link = link;
    config.sizes = a.size.0.clone();
    config.streams = usize::try_from(a.streams).unwrap_or(usize::MAX);
    config.duration = a.duration;
    config.reverse = a.reverse;
    config.sync = a.sync;
    config.report_interval = a.report_interval;
    config.validate().map_err(super::output::refused)?;
    a.pictures.validate().map_err(super::output::refused)?;
    // Throughput against message size is one point per size: a single size draws no line.
    if a.pictures.chart == Some(super::report::ChartId::ThroughputSize) && config.sizes.len() < 2 {
        return Err(super::output::refused(
            "--chart throughput-size draws one point per message size: give several with --size (e.g. --size 64,1k,8k), or pick --chart throughput-time",
        ));
    }
    let addr = super::link::connect_to(&mut config.link, &target, a.family.family())?;
    config.cancel = super::common::cancel_on_ctrl_c();
    if !a.json {
        out_text(traffic::throughput_heading(
            &target.to_string(),
            &addr.to_string(),
            transport,
            config.streams,
            a.reverse,
            a.sync,
        ))?;
    }
    let mut rows = Rows {
        print: !a.json && !a.quiet,
    };
    let mut result = throughput::run(&config, &mut rows)?;
    // A size whose streams failed before a message was counted is no measurement: no row of zeros for it;
    // when no size measured anything, the error alone.
    let failed = |r: &throughput::SizeRun| r.error.is_some() && r.total.messages == 0;
    // The size Ctrl-C cut before its first counted message: no row of zeros either.
    let cut = result.cancelled;
    result
        .runs
        .retain(|r| !(cut && r.error.is_none() && r.total.messages == 0));
    if result.runs.iter().all(failed)
        && let Some(e) = result.error()
    {
        error_line(e);
        return Ok(Exit::Failed);
    }
    let first_error = result.error().cloned();
    result.runs.retain(|r| !failed(r));
    if a.json {
        out(json::to_bytes(&ThroughputDoc::new(
            &a.target,
            &result,
            &config.sizes,
            config.duration,
        )))?;
    } else {
        out_text(traffic::throughput_summary(&result))?;
        if let Some(i) = throughput_interrupted(&result, config.sizes.len(), config.duration) {
            out_text(i.line())?;
        }
    }
    if a.pictures.wanted() {
        let doc = ThroughputDoc::new(&a.target, &result, &config.sizes, config.duration);
        super::report::after_run(&a.pictures, &doc, None, &target.to_string())?;
    }
    if let Some(e) = first_error {
        error_line(e);
        return Ok(Exit::Failed);
    }
    if result.runs.iter().all(|r| r.total.messages == 0) && !result.cancelled {
        error_line(format!(
            "nothing got through to {transport} {addr} (is a server running there? a firewall?)"
        ));
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}
