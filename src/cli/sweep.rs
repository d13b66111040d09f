//! `roundtrip sweep`: latency percentiles over message size x offered rate.

use super::args;
use super::output::{Exit, error_line, note, out, out_text, stderr_is_tty};
use super::throughput::{SizeList, size_list};
use clap::Args;
use roundtrip::doc::load::LoadSettings;
use roundtrip::doc::sweep::{SweepDoc, sweep_interrupted};
use roundtrip::probe::load::LoadResult;
use roundtrip::probe::sweep::{self, Observer, SweepConfig};
use roundtrip::report::{json, traffic};
use roundtrip::units::fmt_bytes;
use std::time::Duration;

/// Arguments of `roundtrip sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Server as HOST, HOST:PORT or [IPv6]:PORT (default port 11111, as sockperf).
    #[arg(value_name = "HOST[:PORT]")]
    target: String,
    /// Message sizes including the 14-byte header, comma-separated.
    #[arg(long, default_value = "64,1k,16k", value_parser = size_list, allow_negative_numbers = true, value_name = "BYTES,...")]
    sizes: SizeList,
    /// Offered rates in messages per second, comma-separated.
    #[arg(long, default_value = "1k,10k,50k", value_parser = rate_list, allow_negative_numbers = true, value_name = "N/s,...")]
    rates: RateList,
    /// Ask for an answer to one message in N; lower than load's 100 so short cells get enough answers.
    #[arg(long, default_value = "10", value_parser = args::count, allow_negative_numbers = true, value_name = "N")]
    reply_every: u64,
    /// Use UDP instead of TCP.
    #[arg(long, short = 'u')]
    udp: bool,
    /// Measuring time per cell.
    #[arg(long, short = 't', default_value = "2s", value_parser = args::positive_duration)]
    duration: Duration,
    /// Warm-up per cell.
    #[arg(long, default_value = "500ms", value_parser = args::duration)]
    warmup: Duration,
    /// How long to wait for the last answers of a cell.
    #[arg(long, default_value = "2s", value_parser = args::positive_duration)]
    timeout: Duration,
    #[command(flatten)]
    send: super::load::OpenLoopArgs,
}

/// A list of rates in messages per second.
#[derive(Debug, Clone)]
pub struct RateList(pub Vec<f64>);

/// A comma-separated list of rates (`1k,10k,50k`), each more than 0.
pub fn rate_list(s: &str) -> Result<RateList, String> {
    let v = s
        .split(',')
        .map(|p| args::rate(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RateList(v))
}

struct Progress {
    tty: bool,
    done: usize,
    total: usize,
}

impl Observer for Progress {
    fn cell(&mut self, r: &LoadResult) {
        self.done += 1;
        if self.tty {
            note(format!(
                "  [{}/{}] {} at {}: {}",
                self.done,
                self.total,
                fmt_bytes(r.size as u64),
                traffic::fmt_rate(r.rate),
                if r.rate_held() {
                    "done"
                } else {
                    "rate not held"
                }
            ));
        }
    }
}

/// Runs `roundtrip sweep`.
pub fn run(a: SweepArgs) -> anyhow::Result<Exit> {
    let schedule = (a.reply_every, a.warmup, a.duration);
    let (target, base) = a.send.config(&a.target, a.udp, a.timeout, schedule)?;
    let transport = base.link.transport;
    let mut config = SweepConfig {
        base,
        sizes: a.sizes.0.clone(),
        rates: a.rates.0.clone(),
    };
    config.validate().map_err(super::output::refused)?;
    a.send.pictures.validate().map_err(super::output::refused)?;
    let addr = super::link::connect_to(&mut config.base.link, &target, a.send.family.family())?;
    config.base.cancel = super::common::cancel_on_ctrl_c();
    let total = config.sizes.len() * config.rates.len();
    if !a.send.json {
        out_text(format!(
            "roundtrip sweep {transport} {target} ({addr}): {total} cells of {:.1}s (+{:.1}s warm-up), open-loop schedule, one answer per {}; times are round trips (RTT)\n",
            a.duration.as_secs_f64(),
            a.warmup.as_secs_f64(),
            a.reply_every
        ))?;
    }
    let mut progress = Progress {
        tty: stderr_is_tty(),
        done: 0,
        total,
    };
    let mut result = sweep::run(&config, &mut progress)?;
    // The cell Ctrl-C cut before it sent a measured message is no measurement: no row of zeros for it.
    result.cells.retain(|c| !(c.cancelled && c.sent == 0));
    let doc = || {
        let settings = LoadSettings {
            target: a.target.clone(),
            address: addr.to_string(),
            transport,
            reply_every: a.reply_every,
            duration_s: a.duration.as_secs_f64(),
            warmup_s: a.warmup.as_secs_f64(),
        };
        SweepDoc::new(settings, &config.sizes, &config.rates, &result)
    };
    if a.send.json {
        out(json::to_bytes(&doc()))?;
    } else {
        out_text(traffic::sweep_table(&result))?;
        for c in result.cells.iter().filter(|c| !c.rate_held()) {
            out_text(format!(
                "{} at {}: {}\n",
                fmt_bytes(c.size as u64),
                traffic::fmt_rate(c.rate),
                traffic::rate_sentence(c)
            ))?;
        }
    }
    if !a.send.json
        && let Some(i) = sweep_interrupted(&result, total)
    {
        out_text(i.line())?;
    }
    if a.send.pictures.wanted() {
        super::report::after_run(&a.send.pictures, &doc(), None, &target.to_string())?;
    }
    let error = result.error.as_ref().map(|e| e.to_string()).or_else(|| {
        result
            .cells
            .iter()
            .find_map(|c| c.error.as_ref().map(|e| e.to_string()))
    });
    if let Some(e) = error {
        error_line(e);
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}
