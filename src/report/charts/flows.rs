//! The `capture flows` report: per flow, bytes in flight and the windows over time.

use super::draw::{Options, Run, heading, typed};
use crate::capture::flows::{Dir, FlowSummary};
use crate::capture::{FlowSeries, SeriesBucket};
use crate::doc::capture_flows::FlowsDoc;
use crate::report::html::{Figure, Section, Table};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Chart, Mark, Series, Unit};
use crate::units::{fmt_bytes, fmt_nanos};

/// In-flight (min to max per bucket, strokes) and the receiver's window (band from min to max per bucket,
/// max as a line) of one flow's time series.
pub fn flow_chart(title: &str, s: &FlowSeries, opts: &Options) -> Chart {
    let mut x = Axis::linear("time since the connection's first packet", Unit::Seconds);
    x.min = Some(0.0);
    let mut c = Chart::new(title, x, Axis::linear("bytes", Unit::Bytes));
    c.width = opts.width;
    let mid = |b: &SeriesBucket| b.start_s + s.bucket_s / 2.0;
    // The window holds its value until the next packet changes it: each bucket's min..max is drawn as a
    // block from the bucket's start to the start of the next bucket with a window reading (or one bucket
    // wide for the last), so sparse captures show steps, never slopes that no packet carried.
    let readings: Vec<(f64, f64, f64)> = s
        .buckets
        .iter()
        .filter_map(|b| match (b.window_min_bytes, b.window_max_bytes) {
            (Some(lo), Some(hi)) => Some((b.start_s, lo as f64, hi as f64)),
            _ => None,
        })
        .collect();
    // The last reading holds to the end of the series (packets that carry no window, such as the other
    // side's data, still extend it).
    let series_end = s.buckets.last().map_or(0.0, |b| b.start_s + s.bucket_s);
    let mut win: Vec<(f64, f64, f64)> = Vec::with_capacity(2 * readings.len());
    for (i, &(start, lo, hi)) in readings.iter().enumerate() {
        let end = readings
            .get(i + 1)
            .map_or(series_end.max(start + s.bucket_s), |r| r.0);
        win.push((start, lo, hi));
        win.push((end, lo, hi));
    }
    let upper: Vec<(f64, f64)> = win.iter().map(|&(x, _, hi)| (x, hi)).collect();
    let fl: Vec<(f64, f64, f64)> = s
        .buckets
        .iter()
        .filter_map(|b| match (b.in_flight_min_bytes, b.in_flight_max_bytes) {
            (Some(lo), Some(hi)) => Some((mid(b), lo as f64, hi as f64)),
            _ => None,
        })
        .collect();
    c.push(Series::new(
        "advertised window (min to max)",
        1,
        Mark::Band(win),
    ));
    c.push(Series::new("advertised window max", 1, Mark::Line(upper)).dashed());
    c.push(Series::new(
        "bytes in flight (min to max)",
        0,
        Mark::Columns(fl),
    ));
    c.note = Some(format!(
        "Connection #{} ({}), {}; {} buckets of {}, min and max per bucket (no extreme dropped).",
        s.flow_id,
        match s.direction {
            Dir::ClientToServer => "client to server",
            Dir::ServerToClient => "server to client",
        },
        if s.chosen == "largest" {
            "the one with the most payload (pick another with --flow)"
        } else {
            "the only one that matched"
        },
        s.buckets.len(),
        fmt_nanos(s.bucket_s * 1e9)
    ));
    c
}

pub(super) fn capture_flows(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<FlowsDoc> = typed(runs)?;
    let mut sec = Section {
        heading: heading("TCP connections in a capture", runs),
        ..Default::default()
    };
    let mut t = Table {
        caption: "Connections (largest first, at most 20 per result)".into(),
        head: [
            "result",
            "#",
            "client",
            "server",
            "duration",
            "bytes c>s",
            "bytes s>c",
            "in flight max",
            "window max",
            "retrans",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        let mut flows: Vec<&FlowSummary> = d.flows.iter().collect();
        flows.sort_by_key(|f| {
            std::cmp::Reverse(f.client_to_server.payload_bytes + f.server_to_client.payload_bytes)
        });
        for f in flows.iter().take(20) {
            let (bulk, recv) =
                if f.server_to_client.payload_bytes > f.client_to_server.payload_bytes {
                    (&f.server_to_client, &f.client_to_server)
                } else {
                    (&f.client_to_server, &f.server_to_client)
                };
            t.rows.push(vec![
                r.label.clone(),
                f.id.to_string(),
                f.client.to_string(),
                f.server.to_string(),
                fmt_nanos(f.duration_s * 1e9),
                fmt_bytes(f.client_to_server.payload_bytes),
                fmt_bytes(f.server_to_client.payload_bytes),
                fmt_bytes(bulk.in_flight_max_bytes),
                fmt_bytes(recv.window_max_bytes),
                (f.client_to_server.retransmissions + f.server_to_client.retransmissions)
                    .to_string(),
            ]);
            sec.notes
                .push(format!("{} #{}: {}", r.label, f.id, f.diagnosis));
        }
        match &d.window_series {
            Some(s) => sec.figures.push(Figure {
                id: if sec.figures.is_empty() {
                    "flow".into()
                } else {
                    format!("flow-{}", sec.figures.len() + 1)
                },
                chart: flow_chart(
                    &if runs.len() == 1 {
                        "Bytes in flight vs advertised window".to_string()
                    } else {
                        format!("{}: bytes in flight vs advertised window", r.label)
                    },
                    s,
                    opts,
                ),
            }),
            None if !d.flows.is_empty() => sec.notes.push(format!(
                "{}: the document has no window_series (written by an older roundtrip): run capture flows again to draw in flight against the window.",
                r.label
            )),
            None => sec
                .notes
                .push(format!("{}: no TCP connection in the capture.", r.label)),
        }
    }
    sec.tables.push(t);
    Ok(sec)
}
