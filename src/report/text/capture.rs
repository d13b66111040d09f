//! The text of `roundtrip capture` summaries: the headings (what was read, a file or a live interface, and how
//! much), the `capture stats` table, the `capture flows` table and the `capture timeline` rows.

use crate::capture::CaptureInfo;
use crate::capture::StatsResult;
use crate::capture::flows::{DirSummary, FlowSummary};
use crate::capture::live::LiveInfo;
use crate::doc::capture_flows::FlowsDoc;
use crate::doc::capture_timeline::TimelineDoc;
use crate::report::text::Table;
use crate::units::{fmt_bytes, fmt_nanos};
use std::fmt::Write as _;
use std::time::Duration;

/// The heading of a capture's summary: the file, its format, link types, size and packets (or the live
/// heading).
pub fn capture_heading(info: &CaptureInfo) -> String {
    if let Some(l) = &info.source {
        return live_heading(info, l);
    }
    format!(
        "{}: {}{}, {} ({}), {} packets{}",
        info.file,
        info.format,
        if info.gzip { " (gzip)" } else { "" },
        if info.link_types.is_empty() {
            "no link type seen".to_string()
        } else {
            info.link_types.join("+")
        },
        fmt_bytes(info.file_bytes),
        info.packets_read,
        match (&info.filter, info.packets_filtered_out) {
            (Some(f), Some(n)) => format!(" ({n} left out by filter '{f}')"),
            _ => String::new(),
        }
    )
}

/// The heading of a live capture's summary.
pub fn live_heading(info: &CaptureInfo, l: &LiveInfo) -> String {
    // The link types seen (none before the first packet).
    let link = if info.link_types.is_empty() {
        String::new()
    } else {
        format!(", {}", info.link_types.join("+"))
    };
    format!(
        "{} (live{link}): {} packets captured ({} bytes), {} dropped by the kernel, {} cut by snaplen {}; stopped: {}",
        l.interface,
        info.packets_read,
        info.file_bytes,
        l.kernel_drops,
        l.packets_cut,
        l.snaplen,
        l.stop_reason
            .as_ref()
            .map_or("-".to_string(), |r| r.to_string())
    )
}

/// Bits per second for humans.
pub fn fmt_bits(bps: f64) -> String {
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

/// The summary table of `capture stats`: one row per interval of `interval` (none live: those were printed as
/// they ended) and the total; `by_direction` splits each by direction.
pub fn stats_text(r: &StatsResult, interval: Duration, by_direction: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}; {} matched; interval {}; sizes are on-wire bytes",
        capture_heading(&r.capture),
        r.capture.packets_matched,
        fmt_nanos(interval.as_nanos() as f64)
    );
    let mut cols = vec!["time(s)"];
    if by_direction {
        cols.push("dir");
    }
    cols.extend([
        "packets", "bytes", "pkt/s", "bit/s", "min", "mean", "max", "stddev",
    ]);
    let mut t = Table::new(&cols);
    let live = r.capture.is_live();
    let cells = |row: &crate::capture::stats::StatsRow, time: String, dir: bool| {
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
        t.row(cells(row, format!("{:.3}", row.start_s), by_direction));
    }
    let span = match (r.first_ts_ns, r.last_ts_ns) {
        (Some(f), Some(l)) => (l - f) as f64 / 1e9,
        _ => 0.0,
    };
    t.row(cells(&r.total, format!("total {span:.3}s"), by_direction));
    s.push_str(&t.render(0));
    s
}

/// RTT min, p50, p99 of a direction (`-` without samples).
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

/// The shares of receiver-, sender- and application-limited segments, in %.
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

/// One connection's row of the flows table.
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

/// The text of `capture flows`: the heading, one row per connection and its diagnosis. `readers` threads read
/// the capture, `max_connections` is the cap (`max_open` per thread); `name` names an interface by its index.
pub fn flows_text(
    r: &FlowsDoc,
    readers: usize,
    max_connections: u64,
    max_open: usize,
    name: &mut dyn FnMut(u32) -> String,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}; {} TCP connections (at most {} open at once{}{})",
        capture_heading(&r.capture),
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
                max_connections,
                if readers > 1 {
                    format!(" ({} per thread)", max_open)
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
    for f in &r.flows {
        let mut row = flow_row(f);
        if by_if {
            row.insert(1, name(f.interface.unwrap_or(0)));
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
    s
}

/// The text of `capture timeline` for the connection `flow` of `r`: the heading, one row per packet (unless
/// `quiet`, or live, where they were printed as they came; `absolute` adds the time since the first packet),
/// the time-sequence graph's counts and the diagnosis. `flow_given`: `--flow` chose the connection.
pub fn timeline_text(
    r: &TimelineDoc,
    flow: &FlowSummary,
    flow_given: bool,
    absolute: bool,
    quiet: bool,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}\nconnection #{}: {} (client, >) - {} (server, <), {} packets, {}{}",
        capture_heading(&r.capture),
        flow.id,
        flow.client,
        flow.server,
        r.capture.packets_matched,
        flow.state.replace('_', " "),
        if !flow_given {
            "; first TCP connection that matched: choose another with --flow A:P-B:P"
        } else {
            ""
        }
    );
    let mut cols = vec!["delta"];
    if absolute {
        cols.push("time(s)");
    }
    cols.extend([
        "dir",
        "flags",
        "seq",
        "ack",
        "len",
        "win",
        "in flight",
        "notes",
    ]);
    let mut t = Table::new(&cols);
    let t0 = r.rows.first().map_or(0, |x| x.ts_ns);
    for row in r.rows.iter().filter(|_| !quiet) {
        let mut c = vec![format!("{:.6}", row.delta_ns as f64 / 1e9)];
        if absolute {
            c.push(format!("{:.6}", (row.ts_ns - t0) as f64 / 1e9));
        }
        let seq = if row.len > 0 {
            format!("{}:{}", row.seq, row.seq.wrapping_add(row.len))
        } else {
            row.seq.to_string()
        };
        c.extend([
            row.direction.arrow().to_string(),
            row.flags.clone(),
            seq,
            row.ack.map_or("-".into(), |a| a.to_string()),
            row.len.to_string(),
            row.window_bytes.to_string(),
            row.in_flight_bytes.map_or("-".into(), |f| f.to_string()),
            row.notes
                .iter()
                .map(|n| n.to_string())
                .chain(row.sack.iter().map(|b| format!("sack {}:{}", b[0], b[1])))
                .collect::<Vec<_>>()
                .join(","),
        ]);
        t.row(c);
    }
    // Live, the rows were printed as the packets came.
    if !quiet && !r.capture.is_live() {
        s.push_str(&t.render(0));
    }
    if let Some(g) = &r.seq_graph {
        let _ = writeln!(
            s,
            "time-sequence graph: data {} -> {}: {} segments ({} retransmitted), {} ACKs ({} with SACK blocks, {} with a zero window), {} zero-window periods",
            g.sender,
            g.receiver,
            g.data_segments,
            g.retransmitted_segments,
            g.acks,
            g.sack_packets,
            g.zero_window_packets,
            g.zero_windows.len()
        );
    }
    let _ = writeln!(s, "diagnosis: {}", flow.diagnosis);
    s
}
