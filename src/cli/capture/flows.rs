//! `roundtrip capture flows`: one line per TCP connection, as connections end (live) or as a table at the end,
//! with the pictures and the JSON document.

use super::super::args;
use super::super::output::{Exit, out, out_text};
use super::live as live_cli;
use super::{Common, finish, live_out};
use clap::Args;
use roundtrip::capture;
use roundtrip::capture::flows::{DirSummary, FlowSummary, TrackerConfig};
use roundtrip::doc::capture_flows::FlowsDoc;
use roundtrip::report::text::Table;
use roundtrip::report::text::capture::capture_heading as heading;
use roundtrip::units::fmt_nanos;
use std::fmt::Write as _;
use std::time::Duration;

fn rtt_cells(d: &DirSummary) -> [String; 3] {
    if d.rtt.count == 0 {
        return ["-".into(), "-".into(), "-".into()];
    }
    [
        fmt_nanos(d.rtt.min_ns as f64),
        fmt_nanos(d.rtt.p50_ns as f64),
        fmt_nanos(d.rtt.p99_ns as f64),
    ]
}

fn limit_cell(d: &DirSummary) -> String {
    let n = d.receiver_limited_segments + d.sender_limited_segments + d.app_limited_segments;
    if n == 0 {
        return "-".into();
    }
    format!(
        "{:.0}/{:.0}/{:.0}",
        100.0 * d.receiver_limited_segments as f64 / n as f64,
        100.0 * d.sender_limited_segments as f64 / n as f64,
        100.0 * d.app_limited_segments as f64 / n as f64
    )
}

fn flow_row(f: &FlowSummary) -> Vec<String> {
    let (dir, bulk) = f.bulk();
    let recv = if std::ptr::eq(bulk, &f.client_to_server) {
        &f.server_to_client
    } else {
        &f.client_to_server
    };
    let [rmin, r50, r99] = rtt_cells(bulk);
    vec![
        f.id.to_string(),
        f.client.to_string(),
        f.server.to_string(),
        format!("{:.3}s", f.duration_s),
        f.packets().to_string(),
        f.client_to_server.payload_bytes.to_string(),
        f.server_to_client.payload_bytes.to_string(),
        f.handshake
            .map_or("-".into(), |h| fmt_nanos(h.rtt_ns as f64)),
        dir.arrow().to_string(),
        rmin,
        r50,
        r99,
        bulk.in_flight_max_bytes.to_string(),
        bulk.in_flight_p50_bytes.to_string(),
        if recv.window_scale_known {
            recv.window_max_bytes.to_string()
        } else {
            // The raw 16-bit field: the scale was announced in a handshake the capture does not hold.
            format!("{}?", recv.window_max_bytes)
        },
        limit_cell(bulk),
        bulk.segments_per_ack
            .map_or("-".into(), |x| format!("{x:.1}")),
        (f.client_to_server.retransmissions + f.server_to_client.retransmissions).to_string(),
        (f.client_to_server.dup_acks + f.server_to_client.dup_acks).to_string(),
        (f.client_to_server.zero_windows + f.server_to_client.zero_windows).to_string(),
    ]
}

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
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}; {} TCP connections (at most {} open at once{}{})",
        heading(&r.capture),
        r.flows.len(),
        r.counters.max_open_flows,
        if readers > 1 {
            ", each thread's peak added"
        } else {
            ""
        },
        if r.counters.cap_evictions > 0 {
            format!(
                "; {} finished early at the cap of {} connections{}",
                r.counters.cap_evictions,
                a.common.live.max_connections,
                if readers > 1 {
                    format!(" ({} per thread)", config.max_open)
                } else {
                    String::new()
                }
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "bytes are TCP payload; rtt = data to its ACK at the capture point, in flight and limits for the direction \
         carrying more data (dir); limit = % of its segments receiver-/sender-/application-limited"
    );
    if r.flows
        .iter()
        .any(|f| !(f.client_to_server.window_scale_known && f.server_to_client.window_scale_known))
    {
        let _ = writeln!(
            s,
            "rwnd max N? = the raw window field, unscaled: the handshake announcing the window scale is not in \
             the capture, so the real window is unknown (N up to N x 16384 bytes)"
        );
    }
    // Live on `any`: connections are keyed by interface too; the table says which.
    let by_if = r.flows.iter().any(|f| f.interface.is_some());
    let mut cols = vec!["#"];
    if by_if {
        cols.push("interface");
    }
    cols.extend([
        "client",
        "server",
        "duration",
        "pkts",
        "bytes c>s",
        "bytes s>c",
        "hs rtt",
        "dir",
        "rtt min",
        "rtt p50",
        "rtt p99",
        "inflight max",
        "inflight p50",
        "rwnd max",
        "limit r/s/a",
        "seg/ack",
        "retrans",
        "dupack",
        "zerowin",
    ]);
    let mut t = Table::new(&cols);
    let mut names = live_cli::InterfaceNames::default();
    for f in &r.flows {
        let mut row = flow_row(f);
        if by_if {
            row.insert(1, names.name(f.interface.unwrap_or(0)));
        }
        t.row(row);
    }
    s.push_str(&t.render(0));
    if !r.flows.is_empty() {
        s.push_str("diagnosis:\n");
        for f in &r.flows {
            let _ = writeln!(s, "  #{} {}", f.id, f.diagnosis);
        }
    }
    out_text(s)?;
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
