//! `roundtrip capture timeline`: one TCP connection packet by packet, with its diagnosis and time-sequence graph.

use super::super::output::{Exit, error_line, out, out_text};
use super::live::{self as live_cli};
use super::{Common, finish, live_out};
use clap::Args;
use roundtrip::capture::flows::TrackerConfig;
use roundtrip::capture::{self, CaptureInfo, Filter};
use roundtrip::doc::capture_timeline::TimelineDoc;
use roundtrip::report::text::capture::{capture_heading as heading, timeline_text};
use std::net::SocketAddr;

#[derive(Debug, Args)]
pub(super) struct TimelineArgs {
    #[command(flatten)]
    common: Common,
    /// Print absolute times (seconds since the first packet) beside the deltas.
    #[arg(long)]
    absolute: bool,
    /// Whose data the time-sequence graph (--report, --svg, --json) draws: the busier direction, the
    /// client's (the side that sent the SYN) or the server's.
    #[arg(long, value_enum, default_value = "busier")]
    data_from: DataFromArg,
    /// Print only the heading and the diagnosis, not one row per packet (for --report/--svg on big captures).
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    pictures: super::super::report::PictureArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DataFromArg {
    /// The direction that carried more payload.
    Busier,
    /// The client's data.
    Client,
    /// The server's data.
    Server,
}

/// The error for a filter no TCP connection passes: with `--flow`, the connections the file does hold (the
/// file is read a second time, without the flow), so the user can copy one.
fn no_connection(file: Option<&std::path::Path>, info: &CaptureInfo, filter: &Filter) -> String {
    let (Some((a, b)), Some(file)) = (filter.flow, file) else {
        return no_tcp(info, filter);
    };
    let others = Filter {
        flow: None,
        ..filter.clone()
    };
    let mut flows = match capture::run_flows(file, &others, TrackerConfig::default(), None) {
        Ok(r) => r.flows,
        Err(_) => Vec::new(),
    };
    if flows.is_empty() {
        return format!(
            "{}: --flow {a}-{b} is not in the file, which holds no TCP connection{} ({} packets)",
            info.file,
            if others.is_empty() {
                ""
            } else {
                " passing the other filters"
            },
            info.packets_read
        );
    }
    flows.sort_by_key(|f| {
        std::cmp::Reverse(f.client_to_server.payload_bytes + f.server_to_client.payload_bytes)
    });
    let shown: Vec<String> = flows
        .iter()
        .take(8)
        .map(|f| {
            format!(
                "{}-{} ({} packets)",
                f.client,
                f.server,
                f.client_to_server.packets + f.server_to_client.packets
            )
        })
        .collect();
    format!(
        "{}: --flow {a}-{b} is not in the file; its TCP connections{}: {}{} (give one of these to --flow)",
        info.file,
        if flows.len() > shown.len() {
            format!(", the {} largest of {}", shown.len(), flows.len())
        } else {
            String::new()
        },
        shown.join(", "),
        if flows.len() > shown.len() {
            ", ..."
        } else {
            ""
        }
    )
}

pub(super) fn timeline(a: TimelineArgs) -> anyhow::Result<Exit> {
    let filter = a.common.filter()?;
    a.pictures
        .validate()
        .map_err(super::super::output::refused)?;
    let graph = (a.common.json || a.pictures.wanted()).then_some(match a.data_from {
        DataFromArg::Busier => capture::DataFrom::Busier,
        DataFromArg::Client => capture::DataFrom::Client,
        DataFromArg::Server => capture::DataFrom::Server,
    });
    // Rows are only kept when printed: -q with --report/--svg holds the graph's records, not a row a packet.
    let keep_rows = a.common.json || !a.quiet;
    let src = a.common.open(&filter)?;
    let live = src.counters.is_some();
    let json = a.common.json;
    let quiet = a.quiet;
    let mut prev_ts: Option<i64> = None;
    let mut printed_head = false;
    let mut on_row = |row: &capture::TimelineRow, c: SocketAddr, srv: SocketAddr| {
        if quiet {
            return;
        }
        if !printed_head {
            printed_head = true;
            live_out(
                json,
                &format!(
                    "following {c} (client, >) - {srv} (server, <); columns: time delta dir flags seq ack len win in-flight notes"
                ),
            );
        }
        let delta = prev_ts.map_or(0, |p| row.ts_ns - p);
        prev_ts = Some(row.ts_ns);
        live_out(
            json,
            &format!(
                "{} {:.6} {} {} {} {} {} {} {} {}",
                live_cli::clock(row.ts_ns),
                delta as f64 / 1e9,
                row.direction.arrow(),
                row.flags,
                if row.len > 0 {
                    format!("{}:{}", row.seq, row.seq.wrapping_add(row.len))
                } else {
                    row.seq.to_string()
                },
                row.ack.map_or("-".into(), |a| a.to_string()),
                row.len,
                row.window_bytes,
                row.in_flight_bytes.map_or("-".into(), |f| f.to_string()),
                row.notes.join(",")
            ),
        );
    };
    let r = capture::run_timeline_on(
        src.packets,
        &filter,
        TrackerConfig::default(),
        graph,
        keep_rows && (!live || json),
        if live { Some(&mut on_row) } else { None },
    );
    let mut r = TimelineDoc::new(r);
    if r.flow.is_some() && a.pictures.wanted() {
        // The picture needs the graph, not a row per packet: a million rows would be held twice.
        let rows = std::mem::take(&mut r.rows);
        super::super::report::after_run(&a.pictures, &r, None, &a.common.label())?;
        r.rows = rows;
    }
    if a.common.json {
        out(roundtrip::doc::to_bytes(&r))?;
        let e = finish(&r.capture, true);
        if r.flow.is_none() {
            error_line(no_connection(a.common.file(), &r.capture, &filter));
            return Ok(Exit::Failed);
        }
        return Ok(e);
    }
    let Some(flow) = &r.flow else {
        out_text(format!("{}\n", heading(&r.capture)))?;
        let _ = finish(&r.capture, false);
        error_line(no_connection(a.common.file(), &r.capture, &filter));
        return Ok(Exit::Failed);
    };
    out_text(timeline_text(
        &r,
        flow,
        filter.flow.is_some(),
        a.absolute,
        a.quiet,
    ))?;
    Ok(finish(&r.capture, false))
}

fn no_tcp(info: &CaptureInfo, filter: &Filter) -> String {
    format!(
        "{}: no TCP connection {}among {} packets (list them with `roundtrip capture flows {}`)",
        info.file,
        if filter.is_empty() {
            ""
        } else {
            "matching the filter "
        },
        info.packets_read,
        info.file
    )
}
