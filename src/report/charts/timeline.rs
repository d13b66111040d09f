//! The `capture timeline` report: the TCP time-sequence graph.

use super::draw::{Options, Run, heading, typed};
use crate::capture::seqgraph::{LinePoint, SeqGraph};
use crate::doc::capture_timeline::TimelineDoc;
use crate::report::html::{Figure, Section, Table};
use crate::report::load::LoadError;
use crate::report::svg::{Axis, Chart, Mark, Series, Unit};
use crate::units::fmt_nanos;

/// The time-sequence graph (Stevens/tcptrace): sequence number against time for one direction's data, with
/// the receiver's ACK line, window edge, SACK blocks and zero-window periods.
pub fn seq_chart(title: &str, g: &SeqGraph, opts: &Options) -> Chart {
    let mut x = Axis::linear("time since the connection's first packet", Unit::Seconds);
    x.min = Some(0.0);
    let mut c = Chart::new(
        title,
        x,
        Axis::linear("relative sequence number", Unit::Bytes),
    );
    c.width = opts.width;
    c.height = 560;
    // A line holds its last value to the end of the connection (until a packet says otherwise).
    let steps = |pts: &[LinePoint]| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = pts.iter().map(|p| (p.t_s, p.value as f64)).collect();
        if let Some(&(t, y)) = v.last()
            && t < g.duration_s
        {
            v.push((g.duration_s, y));
        }
        v
    };
    if !g.zero_windows.is_empty() {
        c.push(Series::new(
            "zero window",
            7,
            Mark::Spans(
                g.zero_windows
                    .iter()
                    .map(|z| (z.start_s, z.end_s))
                    .collect(),
            ),
        ));
    }
    c.push(Series::new(
        "window edge (ACK + advertised window)",
        2,
        Mark::Step(steps(&g.window_edge)),
    ));
    c.push(Series::new("ACK", 3, Mark::Step(steps(&g.ack))));
    if !g.sack.is_empty() {
        c.push(Series::new(
            "SACKed",
            4,
            Mark::Columns(
                g.sack
                    .iter()
                    .map(|s| (s.t_s, s.left as f64, s.right as f64))
                    .collect(),
            ),
        ));
    }
    c.push(Series::new(
        "data segments",
        0,
        Mark::Columns(
            g.segments
                .iter()
                .map(|s| (s.first_s, s.seq_lo as f64, s.seq_hi as f64))
                .collect(),
        ),
    ));
    if !g.retransmissions.is_empty() {
        c.push(Series::new(
            "retransmissions",
            1,
            Mark::Columns(
                g.retransmissions
                    .iter()
                    .map(|r| (r.t_s, r.seq as f64, r.end as f64))
                    .collect(),
            ),
        ));
        // A dot on each, so that retransmissions stay visible where a segment is less than a pixel tall.
        c.push(Series::new(
            "",
            1,
            Mark::Points(
                g.retransmissions
                    .iter()
                    .map(|r| (r.t_s, r.seq as f64))
                    .collect(),
            ),
        ));
    }
    c.note = Some(format!(
        "Connection #{}, data {} -> {} ({}); window scale {}.",
        g.flow_id,
        g.sender,
        g.receiver,
        if g.chosen == "asked" {
            "as --data-from asked"
        } else {
            "the busier direction"
        },
        g.window_scale
            .map_or("not negotiated: windows as sent".to_string(), |s| format!(
                "{s} (x{})",
                1u64 << s
            )),
    ));
    c
}

pub(super) fn capture_timeline(runs: &[Run], opts: &Options) -> Result<Section, LoadError> {
    let docs: Vec<TimelineDoc> = typed(runs)?;
    let mut sec = Section {
        heading: heading("TCP time-sequence graph", runs),
        ..Default::default()
    };
    let mut t = Table {
        caption: "What the graph shows".into(),
        head: [
            "result",
            "#",
            "data from",
            "to",
            "segments",
            "retransmitted",
            "ACKs with SACK",
            "zero-window ACKs",
            "zero-window periods",
            "drawn as",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (r, d) in runs.iter().zip(&docs) {
        if let Some(g) = &d.seq_graph {
            let merged = g.segments.iter().any(|s| s.segments > 1);
            t.rows.push(vec![
                r.label.clone(),
                g.flow_id.to_string(),
                g.sender.to_string(),
                g.receiver.to_string(),
                g.data_segments.to_string(),
                g.retransmitted_segments.to_string(),
                g.sack_packets.to_string(),
                g.zero_window_packets.to_string(),
                g.zero_windows.len().to_string(),
                if merged {
                    format!(
                        "new data merged per {} column, every retransmission apart",
                        fmt_nanos(g.column_s * 1e9)
                    )
                } else {
                    "one stroke per segment".into()
                },
            ]);
        }
        match &d.seq_graph {
            Some(g) => sec.figures.push(Figure {
                id: if sec.figures.is_empty() {
                    "time-sequence".into()
                } else {
                    format!("time-sequence-{}", sec.figures.len() + 1)
                },
                chart: seq_chart(
                    &if runs.len() == 1 {
                        "Sequence number over time (time-sequence graph)".to_string()
                    } else {
                        format!("{}: sequence number over time", r.label)
                    },
                    g,
                    opts,
                ),
            }),
            None => sec.notes.push(format!(
                "{}: the document has no seq_graph (no TCP connection matched, or it was written by an older roundtrip): run capture timeline --json again.",
                r.label
            )),
        }
    }
    sec.tables.push(t);
    sec.notes.push("Sequence numbers are relative to the sender's first (initial) sequence number; the ACK line is the receiver's cumulative ACK, the window edge its ACK plus its advertised window (scaled by the window scale of the handshake), SACKed ranges are the blocks it reported holding beyond the ACK, shaded periods are where it advertised a zero window.".into());
    Ok(sec)
}
