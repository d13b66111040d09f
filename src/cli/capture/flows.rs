//! `roundtrip capture flows`: one line per TCP connection, as connections end (live) or as a table at the end,
//! with the pictures and the JSON document.

use super::super::args;
use super::super::output::{Exit, out, out_text};
use super::live as live_cli;
use super::{Common, finish, live_out};
use clap::Args;
use roundtrip::capture;
use roundtrip::capture::flows::{FlowSummary, TrackerConfig};
use roundtrip::doc::capture_flows::FlowsDoc;
use roundtrip::report::text::capture::flows_text;
use roundtrip::units::fmt_nanos;
use std::time::Duration;

pub(super) fn flows(a: FlowsArgs) -> anyhow::Result<Exit> {
    let filter = a.common.filter()?;
    let config = TrackerConfig {
        idle_timeout: a.idle_timeout,
        ..TrackerConfig::default()
    };
    a.pictures
        .validate()
        .map_err(super::super::output::refused)?;
    let src = a.common.open_group(&filter)?;
    let live = src.counters.is_some();
    let readers = src.more.len() + 1;
    let config = TrackerConfig {
        // --threads N: the cap is shared out among the threads' trackers.
        max_open: if live {
            (a.common.live.max_connections as usize).div_ceil(readers)
        } else {
            usize::MAX
        },
        ..config
    };
    let json = a.common.json;
    let mut names = live_cli::InterfaceNames::default();
    let mut on_end = |f: &FlowSummary| {
        live_out(
            json,
            &format!(
                "{} end #{}{} {} > {} {:.3}s {} pkts, {} bytes c>s, {} bytes s>c, hs rtt {}, retrans {}, {}",
                live_cli::clock(f.last_ts_ns),
                f.id,
                f.interface
                    .map(|i| format!(" on {}", names.name(i)))
                    .unwrap_or_default(),
                f.client,
                f.server,
                f.duration_s,
                f.packets(),
                f.client_to_server.payload_bytes,
                f.server_to_client.payload_bytes,
                f.handshake
                    .map_or("-".into(), |h| fmt_nanos(h.rtt_ns as f64)),
                f.client_to_server.retransmissions + f.server_to_client.retransmissions,
                f.state
            ),
        );
    };
    let mut r = if src.more.is_empty() {
        capture::run_flows_on(src.packets, &filter, config, None, &mut on_end)
    } else {
        let mut group = vec![src.packets];
        group.extend(src.more);
        capture::run_flows_fanout(group, &filter, config, &mut on_end)
    };
    if let (Some(file), true) = (a.common.file(), a.common.json || a.pictures.wanted()) {
        r.window_series = capture::flow_series(file, &filter, config, &r.flows)?;
    }
    let label = a.common.label();
    let r = FlowsDoc::new(r);
    if a.pictures.wanted() {
        super::super::report::after_run(&a.pictures, &r, None, &label)?;
    }
    if a.common.json {
        out(roundtrip::doc::to_bytes(&r))?;
        return Ok(finish(&r.capture, true));
    }
    let mut names = live_cli::InterfaceNames::default();
    out_text(flows_text(
        &r,
        readers,
        a.common.live.max_connections,
        config.max_open,
        &mut |i| names.name(i),
    ))?;
    Ok(finish(&r.capture, false))
}

#[derive(Debug, Args)]
pub(super) struct FlowsArgs {
    #[command(flatten)]
    common: Common,
    /// A connection silent this long (capture time) is finished and its memory freed.
    #[arg(long, default_value = "300s", value_parser = args::positive_duration)]
    idle_timeout: Duration,
    #[command(flatten)]
    pictures: super::super::report::PictureArgs,
}
