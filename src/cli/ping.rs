//! `roundtrip ping`: application-level ping-pong against a roundtrip or sockperf server.

use super::args;
use super::output::{Exit, error_line, note, out, out_text, stderr_is_tty};
use anyhow::Context;
use clap::Args;
use roundtrip::output_file::{self, OutputFile};
use roundtrip::probe::ping::{self, IntervalRow, Observer, PingConfig, Sample, Stop};
use roundtrip::report::csv::FullLog;
use roundtrip::report::{json, text};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `roundtrip ping`.
#[derive(Debug, Args)]
#[command(mut_arg("no_extensions", |a| a.help("Behave exactly as a sockperf client: no hello, no server timestamps")))]
pub struct PingArgs {
    /// Server as HOST, HOST:PORT or [IPv6]:PORT (default port 11111, as sockperf).
    #[arg(value_name = "HOST[:PORT]")]
    target: String,
    /// Use UDP instead of TCP.
    #[arg(long, short = 'u')]
    udp: bool,
    /// Whole message size including the 14-byte header, as sockperf -m (e.g. 64, 1k, 8KiB).
    #[arg(long, short = 's', visible_short_alias = 'm', default_value = "64", value_parser = args::size, allow_hyphen_values = true, value_name = "BYTES")]
    size: u64,
    /// How long to measure, after the warm-up [default: 10s].
    #[arg(long, short = 't', value_parser = args::positive_duration, allow_hyphen_values = true, conflicts_with = "count")]
    duration: Option<Duration>,
    /// Stop after this many round trips.
    #[arg(long, short = 'c', short_alias = 'n', value_parser = args::count, allow_hyphen_values = true)]
    count: Option<u64>,
    /// Send one message every DURATION whether or not the answers came, as ping(8): several in flight, loss and
    /// reordering counted by sequence number (exactly on UDP only: on TCP a retransmission holds later
    /// messages back). Default: back to back, the next message as soon as the answer arrives (sockperf
    /// ping-pong).
    #[arg(long, short = 'i', value_parser = args::positive_duration, allow_hyphen_values = true, conflicts_with = "rate")]
    interval: Option<Duration>,
    /// Messages per second, instead of --interval (e.g. 1000, 10k/s): sent on that schedule as with
    /// --interval, whether or not the answers came.
    #[arg(long, value_parser = args::rate, allow_hyphen_values = true, value_name = "N/s")]
    rate: Option<f64>,
    /// Unmeasured warm-up before measuring (0 for none).
    #[arg(long, default_value = "1s", value_parser = args::duration, allow_hyphen_values = true)]
    warmup: Duration,
    /// Print one row per this period.
    #[arg(long, default_value = "1s", value_parser = args::positive_duration, allow_hyphen_values = true)]
    report_interval: Duration,
    /// Wait this long for an answer: UDP counts it lost, TCP ends the run.
    #[arg(long, default_value = "2s", value_parser = args::positive_duration, allow_hyphen_values = true)]
    timeout: Duration,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Write one CSV row per round trip to FILE (seq, send and receive time, RTT, server time).
    #[arg(long, value_name = "FILE.csv")]
    full_log: Option<PathBuf>,
    /// Draw the RTT distribution in the terminal.
    #[arg(long)]
    histogram: bool,
    #[command(flatten)]
    client: super::common::ClientArgs,
    /// No per-interval rows, only the summary.
    #[arg(long, short = 'q')]
    quiet: bool,
    #[command(flatten)]
    family: super::common::FamilyArgs,
    #[command(flatten)]
    pictures: super::report::PictureArgs,
}

/// Progress and exports while a run goes on.
struct CliObserver {
    log: Option<FullLog<BufWriter<OutputFile>>>,
    rows_to_stdout: bool,
    progress: bool,
    last_progress: Instant,
    count: u64,
}

impl Observer for CliObserver {
    fn sample(&mut self, s: &Sample) {
        if let Some(log) = &mut self.log {
            log.write_sample(s);
        }
        self.count += 1;
        if self.progress
            && self.count.is_multiple_of(256)
            && self.last_progress.elapsed() > Duration::from_millis(100)
        {
            self.last_progress = Instant::now();
            let _ = write!(
                std::io::stderr(),
                "\r\x1b[K  {:.1}s  {} round trips ...",
                s.received.as_secs_f64(),
                self.count
            );
        }
    }
    fn interval(&mut self, row: &IntervalRow) {
        if self.progress {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
        if self.rows_to_stdout {
            let _ = out_text(text::interval_line(row));
        }
    }
}

/// Runs `roundtrip ping`.
pub fn run(a: PingArgs) -> anyhow::Result<Exit> {
    // Everything the user typed is checked before any I/O.
    let (target, link) = a.client.link_config(&a.target, a.udp, a.timeout)?;
    let transport = link.transport;
    let family = a.family.family();
    let interval = match (a.interval, a.rate) {
        (Some(i), _) => Some(i),
        (None, Some(r)) => Some(Duration::from_secs_f64(1.0 / r)),
        _ => None,
    };
    let stop = match (a.count, a.duration) {
        (Some(n), _) => Stop::Count(n),
        (None, Some(d)) => Stop::Duration(d),
        (None, None) => Stop::Duration(Duration::from_secs(10)),
    };
    let mut config = PingConfig::new(link.addr);
    config.link = link;
    config.size = usize::try_from(a.size).unwrap_or(usize::MAX);
    config.stop = stop;
    config.interval = interval;
    config.open_loop = interval.is_some();
    config.warmup = a.warmup;
    config.report_interval = a.report_interval;
    config.validate().map_err(super::output::refused)?;
    a.pictures.validate().map_err(super::output::refused)?;
    if let Some(path) = &a.full_log {
        super::report::check_output(path).map_err(super::output::refused)?;
    }

    let log = match &a.full_log {
        Some(p) => Some(
            output_file::create(p)
                .map_err(anyhow::Error::from)
                .and_then(|f| FullLog::new(BufWriter::new(f)).map_err(anyhow::Error::from))
                .with_context(|| format!("cannot create the full log {}", p.display()))?,
        ),
        None => None,
    };
    let addr = super::link::connect_to(&mut config.link, &target, family)?;
    config.cancel = super::common::cancel_on_ctrl_c();

    if !a.json {
        out_text(text::ping_heading(
            &target.to_string(),
            &addr.to_string(),
            &transport.to_string(),
            config.size,
        ))?;
    }
    let mut obs = CliObserver {
        log,
        rows_to_stdout: !a.json && !a.quiet,
        progress: stderr_is_tty(),
        last_progress: Instant::now(),
        count: 0,
    };
    let result = ping::run(&config, &mut obs);
    if obs.progress {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let result = result?;
    if a.json {
        let doc = json::PingDoc::new(&a.target, &result, stop, interval, a.warmup, a.timeout);
        out(json::to_bytes(&doc))?;
    } else {
        out_text(text::ping_summary(&result))?;
        if let Some(i) =
            json::Interrupted::of_stop(result.cancelled, stop, result.elapsed, result.sent)
        {
            out_text(i.line())?;
        }
        if a.histogram && !result.rtt.is_empty() {
            out_text(format!(
                "RTT distribution:\n{}",
                text::histogram(&result.rtt, 40)
            ))?;
        }
    }
    if let (Some(log), Some(path)) = (obs.log.take(), &a.full_log) {
        let (w, rows) = log
            .into_inner()
            .with_context(|| format!("writing the full log {}", path.display()))?;
        w.into_inner()
            .map_err(|e| anyhow::Error::from(e.into_error()))
            .and_then(|f| f.commit().map_err(anyhow::Error::from))
            .with_context(|| format!("writing the full log {}", path.display()))?;
        if !a.json {
            note(format!(
                "full log: {rows} rows written to {}",
                path.display()
            ));
        }
    }
    if a.pictures.wanted() {
        let doc = json::PingDoc::new(&a.target, &result, stop, interval, a.warmup, a.timeout);
        super::report::after_run(
            &a.pictures,
            &doc,
            a.full_log.as_deref(),
            &target.to_string(),
        )?;
    }
    if let Some(e) = &result.error {
        error_line(e);
        return Ok(Exit::Failed);
    }
    if result.received == 0 && !result.cancelled {
        error_line(format!(
            "no answer from {transport} {addr}: {} messages sent, none answered (is a server running there? a firewall?)",
            result.sent
        ));
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}
