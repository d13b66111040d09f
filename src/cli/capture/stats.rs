//! `roundtrip capture stats`: per-interval packets, bytes, rates and TCP events of a capture or a live interface.

use super::super::args;
use super::super::output::{Exit, out_text};
use super::live::{self as live_cli};
use super::{Common, finish, live_out};
use clap::Args;
use roundtrip::capture::{self};
use roundtrip::report::text::capture::{fmt_bits, stats_text};
use std::time::Duration;

#[derive(Debug, Args)]
pub(super) struct StatsArgs {
    #[command(flatten)]
    common: Common,
    /// Length of each row's interval [default: 1s].
    #[arg(long, alias = "interval", value_parser = args::positive_duration, value_name = "DURATION")]
    report_interval: Option<Duration>,
    /// Split every interval into client->server, server->client and other (the client sent the SYN; without
    /// one, the higher port is the client's).
    #[arg(long)]
    by_direction: bool,
    #[command(flatten)]
    pictures: super::super::report::PictureArgs,
}

pub(super) fn stats(mut a: StatsArgs) -> anyhow::Result<Exit> {
    let interval = report_interval(
        a.report_interval,
        a.common.live.take_report_interval("stats"),
    )?;
    let filter = a.common.filter()?;
    a.pictures
        .validate()
        .map_err(super::super::output::refused)?;
    let src = a.common.open_group(&filter)?;
    let counters = src.counters.clone();
    let json = a.common.json;
    let by_dir = a.by_direction;
    let mut on_rows = |rows: &[capture::stats::StatsRow], start: i64| {
        let base = (rows[0].start_s * 1e9).round() as i64;
        for row in rows {
            let at = start + (row.start_s * 1e9).round() as i64 - base;
            live_out(
                json,
                &format!(
                    "{}{}  {} packets  {} bytes  {:.1} pkt/s  {}  size min/mean/max {}/{:.1}/{}  kernel drops {}",
                    live_cli::clock(at),
                    if by_dir {
                        format!("  {}", row.direction.label())
                    } else {
                        String::new()
                    },
                    row.packets,
                    row.bytes,
                    row.packets_per_s,
                    fmt_bits(row.bits_per_s),
                    row.size_min,
                    row.size_mean,
                    row.size_max,
                    live_cli::drops_now(&counters)
                ),
            );
        }
    };
    let r = if src.more.is_empty() {
        capture::run_stats_on(src.packets, &filter, interval, a.by_direction, &mut on_rows)
    } else {
        let mut group = vec![src.packets];
        group.extend(src.more);
        capture::run_stats_fanout(group, &filter, interval, a.by_direction, &mut on_rows)
    }
    .map_err(|e| match e {
        // The interval asked for makes too many rows: a refusal of the argument (exit 2).
        capture::CaptureError::TooManyRows { .. } => super::super::output::refused(e),
        e => e.into(),
    })?;
    let label = a.common.label();
    if a.pictures.wanted() || a.common.json {
        super::super::report::draw_and_print_doc(
            &a.pictures,
            a.common.json,
            &roundtrip::doc::capture_stats::StatsDoc::new(r.clone()),
            &label,
        )?;
    }
    if a.common.json {
        return Ok(finish(&r.capture, true));
    }
    out_text(stats_text(&r, interval, a.by_direction))?;
    Ok(finish(&r.capture, false))
}

/// The report period: `--report-interval`, or a duration given to `-i` (its old spelling, see
/// [`live_cli::LiveArgs::take_report_interval`]), else 1 s; both given is refused (exit 2).
pub(super) fn report_interval(
    given: Option<Duration>,
    from_i: Option<Duration>,
) -> anyhow::Result<Duration> {
    match (given, from_i) {
        (Some(_), Some(_)) => Err(super::super::output::refused(
            "the report period is given twice (--report-interval and a duration after -i): give --report-interval alone",
        )),
        (Some(d), None) | (None, Some(d)) => Ok(d),
        (None, None) => Ok(Duration::from_secs(1)),
    }
}
