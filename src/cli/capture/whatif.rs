//! `roundtrip capture whatif`: an application's run time at another RTT, bandwidth and loss, predicted from a
//! capture of today's traffic.

use super::super::args;
use super::super::output::{Exit, note, out, out_text};
use super::{parse_flow, parse_host};
use anyhow::Context;
use clap::Args;
use roundtrip::capture::Filter;
use roundtrip::capture::rpc::Proto;
use roundtrip::capture::rpc::driver::ProtoChoice;
use roundtrip::report::json::envelope_bytes as doc;
use roundtrip::report::text::whatif::{ASSUMPTIONS, WhatifConn, whatif_text};
use roundtrip::report::whatif::{Bar, html, stacked_svg};
use roundtrip::whatif::predict::{self, Network, PathKind, Prediction};
use roundtrip::whatif::profile::{AppProfile, ProfileOptions};
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Help shown after `capture whatif --help`.
pub const WHATIF_HELP: &str = "Model: each connection's request/response turns (rpc decoders, generic turns \
otherwise) are replayed in their capture order: a request waits for the response it waited for in the capture \
plus the client's think time; server time (response start - request end - capture RTT) stays; each turn pays \
the new RTT; transfers follow TCP (initial window 10 MSS, growth per RTT, capped by the receiver window seen in \
the capture and by --bandwidth, default: the fastest transfer of the connection in the capture; slow start again \
after an idle longer than 200 ms + RTT when net.ipv4.tcp_slow_start_after_idle=1; --loss caps the rate by \
Mathis: MSS/RTT*1.22/sqrt(p)); a captured handshake costs one RTT.";

/// Arguments of `roundtrip capture whatif`.
#[derive(Debug, Args)]
pub struct WhatifArgs {
    /// Capture file (pcap, pcapng, optionally .gz).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// RTT(s) to predict for, comma separated (e.g. 0.6ms,5ms,40ms).
    #[arg(long, value_delimiter = ',', value_parser = args::duration, required = true)]
    rtt: Vec<Duration>,
    /// Path capacity (e.g. 1Gbit/s, 1gbit, 1Gbps or 1G); default: the fastest transfer seen per connection.
    #[arg(long, value_parser = args::bitrate, value_name = "BITRATE")]
    bandwidth: Option<u64>,
    /// Packet loss (e.g. 0.1%).
    #[arg(long, value_parser = args::probability)]
    loss: Option<f64>,
    /// Only this connection: ADDR:PORT-ADDR:PORT (either order).
    #[arg(long, visible_alias = "connection", value_parser = parse_flow, value_name = "A:P-B:P")]
    flow: Option<(SocketAddr, SocketAddr)>,
    /// Only packets to or from this address.
    #[arg(long, value_parser = parse_host, value_name = "ADDR")]
    host: Option<IpAddr>,
    /// Only packets with this TCP port on either side.
    #[arg(long, value_name = "PORT", value_parser = args::port)]
    port: Option<u16>,
    /// Protocol: auto, pgsql, mysql, redis, http, smb2, ... or generic.
    #[arg(long, default_value = "auto", value_parser = parse_proto)]
    proto: ProtoChoice,
    /// Path kind: tcp (a real path: slow start and receiver window per RTT) or relay (the delay of a
    /// TCP-terminating relay such as `roundtrip proxy --rtt` without --window: windows are no limit).
    #[arg(long, default_value = "tcp", value_parser = parse_path)]
    path: PathKind,
    /// One JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    expr: super::ExprArgs,
    /// HTML report with stacked breakdown bars per RTT.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// SVG of the stacked breakdown bars per RTT.
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
}

fn parse_proto(s: &str) -> Result<ProtoChoice, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(ProtoChoice::Auto);
    }
    Proto::parse(s).map(ProtoChoice::Force).ok_or_else(|| {
        format!("unknown protocol '{s}': use auto, pgsql, mysql, redis, http, smb2, tns or generic")
    })
}

fn parse_path(s: &str) -> Result<PathKind, String> {
    match s {
        "tcp" => Ok(PathKind::Tcp),
        "relay" | "proxy" => Ok(PathKind::Relay),
        _ => Err(format!("unknown path kind '{s}': use tcp or relay")),
    }
}

#[derive(Serialize)]
struct WhatifDoc<'a> {
    file: String,
    /// The `--filter` expression, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<&'a str>,
    capture_duration_s: f64,
    slow_start_after_idle: bool,
    path: PathKind,
    bandwidth_bps: Option<u64>,
    loss: f64,
    connections: Vec<WhatifConn>,
    predictions: &'a [Prediction],
    assumptions: &'a [&'a str],
    notes: &'a [String],
}

/// Most RTTs one run predicts for (each is a replay of the whole capture in the model).
const MAX_RTTS: usize = 100;

/// Runs `roundtrip capture whatif`.
pub fn run(a: WhatifArgs) -> anyhow::Result<Exit> {
    if a.rtt.len() > MAX_RTTS {
        return Err(super::super::output::refused(format!(
            "--rtt lists {} values, more than the {MAX_RTTS} one run predicts for (each re-runs the whole capture in the model); give {MAX_RTTS} or fewer",
            a.rtt.len()
        )));
    }
    // The output files first: a wrong path is refused before the capture is read.
    for p in a.report.iter().chain(a.svg.iter()) {
        super::super::report::check_output(p).map_err(super::super::output::refused)?;
    }
    let opts = ProfileOptions {
        filter: Filter {
            host: a.host,
            port: a.port,
            flow: a.flow,
            expr: a.expr.expr()?,
        },
        proto: a.proto,
    };
    let prof = AppProfile::from_capture(&a.file, &opts)?;
    let ssai = predict::host_slow_start_after_idle();
    let loss = a.loss.unwrap_or(0.0);
    let preds: Vec<Prediction> = a
        .rtt
        .iter()
        .map(|&rtt| {
            predict::predict(
                &prof,
                &Network {
                    rtt,
                    bandwidth_bps: a.bandwidth,
                    loss,
                    slow_start_after_idle: ssai,
                    path: a.path,
                },
            )
        })
        .collect();
    let conns: Vec<WhatifConn> = prof.connections.iter().map(WhatifConn::of).collect();
    let text = whatif_text(
        &a.file.display().to_string(),
        a.path,
        &prof,
        &conns,
        &preds,
        ssai,
    );
    if a.report.is_some() || a.svg.is_some() {
        let bars: Vec<Bar> = preds
            .iter()
            .map(|p| Bar {
                label: format!("{} ms", p.rtt_s * 1e3),
                parts: [
                    p.breakdown.think_s,
                    p.breakdown.server_s,
                    p.breakdown.round_trips_s,
                    p.breakdown.transfer_s,
                ],
            })
            .collect();
        let title = format!("what-if: {}", a.file.display());
        let svg = stacked_svg(&title, &bars);
        if let Some(p) = &a.svg {
            roundtrip::output_file::write(p, svg.as_bytes())
                .with_context(|| format!("writing {}", p.display()))?;
        }
        if let Some(p) = &a.report {
            roundtrip::output_file::write(p, html(&title, &svg, &text).as_bytes())
                .with_context(|| format!("writing {}", p.display()))?;
        }
    }
    if a.json {
        out(doc(
            "capture_whatif",
            WhatifDoc {
                file: a.file.display().to_string(),
                filter: opts.filter.expr_text(),
                capture_duration_s: prof.duration.as_secs_f64(),
                slow_start_after_idle: ssai,
                path: a.path,
                bandwidth_bps: a.bandwidth,
                loss,
                connections: conns,
                predictions: &preds,
                assumptions: &ASSUMPTIONS,
                notes: &prof.notes,
            },
        ))?;
        for n in &prof.notes {
            note(format!("note: {n}"));
        }
    } else {
        out_text(text)?;
    }
    Ok(super::damage(&prof.capture))
}
