//! `roundtrip load`: latency under load on an open-loop schedule (sockperf under-load, corrected for
//! coordinated omission).

use super::args;
use super::output::{Exit, error_line, note, out, out_text};
use super::throughput::message_size;
use clap::Args;
use roundtrip::doc::load::LoadDoc;
use roundtrip::probe::load::{self, LoadConfig};
use roundtrip::probe::target::Target;
use roundtrip::report::{json, traffic};
use std::time::Duration;

/// Arguments of `roundtrip load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Server as HOST, HOST:PORT or [IPv6]:PORT (default port 11111, as sockperf).
    #[arg(value_name = "HOST[:PORT]")]
    target: String,
    /// Offered rate in messages per second (e.g. 10000, 10k/s, 100k).
    #[arg(long, short = 'r', value_parser = args::rate, allow_negative_numbers = true, value_name = "N/s")]
    rate: f64,
    /// Ask for an answer to one message in N (seq % N == 0), as sockperf --reply-every.
    #[arg(long, default_value = "100", value_parser = args::count, allow_negative_numbers = true, value_name = "N")]
    reply_every: u64,
    /// Whole message size including the 14-byte header (e.g. 64, 1k).
    #[arg(long, short = 's', visible_short_alias = 'm', default_value = "64", value_parser = message_size, allow_negative_numbers = true, value_name = "BYTES")]
    size: usize,
    /// Use UDP instead of TCP.
    #[arg(long, short = 'u')]
    udp: bool,
    /// How long to measure, after the warm-up.
    #[arg(long, short = 't', default_value = "10s", value_parser = args::positive_duration)]
    duration: Duration,
    /// Time on the same schedule before measuring (0 for none).
    #[arg(long, default_value = "1s", value_parser = args::duration)]
    warmup: Duration,
    /// How long to wait for the last answers after the last send.
    #[arg(long, default_value = "2s", value_parser = args::positive_duration)]
    timeout: Duration,
    #[command(flatten)]
    send: OpenLoopArgs,
}

/// The tail of the open-loop commands (load, sweep): `--json`, the link flags, the pictures, `--realtime`,
/// `-4`/`-6`.
#[derive(Debug, Args)]
pub struct OpenLoopArgs {
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: super::common::ClientArgs,
    #[command(flatten)]
    pub pictures: super::report::PictureArgs,
    /// Run the sender as a real-time thread (SCHED_FIFO) so other processes cannot delay it (root or
    /// CAP_SYS_NICE); it pauses 300 us after every 2 ms of busy sending to stay under the kernel's RT limit.
    #[arg(long)]
    pub realtime: bool,
    #[command(flatten)]
    pub family: super::common::FamilyArgs,
}

impl OpenLoopArgs {
    /// The configuration load and sweep start from: the link to `target` ([`ClientArgs::link_config`]
    /// (super::common::ClientArgs::link_config)), `--realtime` and the schedule (one answer per `reply_every`,
    /// `warmup` then `duration`).
    pub fn config(
        &self,
        target: &str,
        udp: bool,
        timeout: Duration,
        (reply_every, warmup, duration): (u64, Duration, Duration),
    ) -> anyhow::Result<(Target, LoadConfig)> {
        let (target, link) = self.client.link_config(target, udp, timeout)?;
        let mut config = LoadConfig::new(link.addr);
        config.link = link;
        config.realtime = self.realtime;
        config.reply_every = reply_every;
        config.warmup = warmup;
        config.duration = duration;
        Ok((target, config))
    }
}

/// Runs `roundtrip load`.
pub fn run(a: LoadArgs) -> anyhow::Result<Exit> {
    let schedule = (a.reply_every, a.warmup, a.duration);
    let (target, mut config) = a.send.config(&a.target, a.udp, a.timeout, schedule)?;
    let transport = config.link.transport;
    config.size = a.size;
    config.rate = a.rate;
    config.validate().map_err(super::output::refused)?;
    a.send.pictures.validate().map_err(super::output::refused)?;
    let addr = super::link::connect_to(&mut config.link, &target, a.send.family.family())?;
    config.cancel = super::common::cancel_on_ctrl_c();
    if !a.send.json {
        out_text(traffic::load_heading(
            &target.to_string(),
            &addr.to_string(),
            transport,
            a.size,
            a.rate,
            a.reply_every,
        ))?;
    }
    let result = load::run(&config)?;
    if a.send.json {
        out(json::to_bytes(&LoadDoc::new(
            &a.target, &result, a.duration, a.warmup,
        )))?;
    } else {
        out_text(traffic::load_text(&result))?;
        if result.cancelled {
            out(json::Interrupted::duration(result.elapsed, a.duration).line())?;
        }
    }
    if a.send.pictures.wanted() {
        let doc = LoadDoc::new(&a.target, &result, a.duration, a.warmup);
        super::report::after_run(&a.send.pictures, &doc, None, &target.to_string())?;
    }
    if !result.rate_held() && !result.cancelled && a.send.json {
        note(traffic::rate_sentence(&result));
    }
    if let Some(e) = &result.error {
        error_line(e);
        return Ok(Exit::Failed);
    }
    if result.answered == 0 && result.requested > 0 && !result.cancelled {
        error_line(format!(
            "no answer from {transport} {addr}: {} answers requested, none came (is a server running there? a firewall?)",
            result.requested
        ));
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}
