//! `roundtrip capture stats`: per-interval packets, bytes, rates and TCP events of a capture or a live interface.

use super::super::args;
use super::super::output::{Exit, out_text};
use super::live::{self as live_cli};
use super::{Common, finish, live_out};
use clap::Args;
use roundtrip::capture::{self};
use roundtrip::report::text::Table;
use roundtrip::report::text::capture::capture_heading as heading;
use roundtrip::units::fmt_nanos;
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Debug, Args)]
pub(super) struct StatsArgs {
    #[command(flatten)]
    common: Common,
    /// Length of each row's interval.
    #[arg(long, short = 'i', default_value = "1s", value_parser = args::positive_duration)]
    interval: Duration,
    /// Split every interval into client->server, server->client and other (the client sent the SYN; without
    /// one, the higher port is the client's).
    #[arg(long)]
    by_direction: bool,
    #[command(flatten)]
    pictures: super::super::report::PictureArgs,
}

/// Bits per second for humans.
fn fmt_bits(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.2} Mbit/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kbit/s", bps / 1e3)
    } else {
        format!("{bps:.0} bit/s")
    }
}

pub(super) fn stats(a: StatsArgs) -> anyhow::Result<Exit> {
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
        capture::run_stats_on(
            src.packets,
            &filter,
            a.interval,
            a.by_direction,
            &mut on_rows,
        )
    } else {
        let mut group = vec![src.packets];
        group.extend(src.more);
        capture::run_stats_fanout(group, &filter, a.interval, a.by_direction, &mut on_rows)
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
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}; {} matched; interval {}; sizes are on-wire bytes",
        heading(&r.capture),
        r.capture.packets_matched,
        fmt_nanos(a.interval.as_nanos() as f64)
    );
    let mut cols = vec!["time(s)"];
    if a.by_direction {
        cols.push("dir");
    }
    cols.extend([
        "packets", "bytes", "pkt/s", "bit/s", "min", "mean", "max", "stddev",
    ]);
    let mut t = Table::new(&cols);
    let live = r.capture.is_live();
    let cells = |row: &capture::stats::StatsRow, time: String, dir: bool| {
        let mut c = vec![time];
        if dir {
            c.push(row.direction.label().to_string());
        }
        c.extend([
            row.packets.to_string(),
            row.bytes.to_string(),
            format!("{:.1}", row.packets_per_s),
            fmt_bits(row.bits_per_s),
            row.size_min.to_string(),
            format!("{:.1}", row.size_mean),
            row.size_max.to_string(),
            format!("{:.1}", row.size_stddev),
        ]);
        c
    };
    // Live: the interval rows were printed as they ended; the summary is the total.
    for row in r.rows.iter().filter(|_| !live) {
        t.row(cells(row, format!("{:.3}", row.start_s), a.by_direction));
    }
    let span = match (r.first_ts_ns, r.last_ts_ns) {
        (Some(f), Some(l)) => (l - f) as f64 / 1e9,
        _ => 0.0,
    };
    t.row(cells(&r.total, format!("total {span:.3}s"), a.by_direction));
    s.push_str(&t.render(0));
    out_text(s)?;
    Ok(finish(&r.capture, false))
}
