//! The text of `roundtrip proxy`: the counters printed when the relay (or the bridge) stops.

use crate::proxy::CountersDoc;
use crate::proxy::bridge::BridgeCounters;
use crate::report::text::Table;
use crate::units::{fmt_bytes, fmt_duration};
use std::time::Duration;

/// The counters `proxy` prints when it stops: connections and faults (TCP) or datagrams (`udp`), and bytes.
pub fn proxy_counters_text(counters: &CountersDoc, udp: bool) -> String {
    let t = &counters.total;
    let mut table = Table::new(&["", "value"]);
    let rows: Vec<(&str, u64)> = if udp {
        vec![
            ("datagrams in", t.datagrams_in),
            ("datagrams out", t.datagrams_out),
            ("lost", t.datagrams_lost),
            ("duplicated", t.datagrams_duplicated),
            ("reordered", t.datagrams_reordered),
        ]
    } else {
        vec![
            ("connections", t.accepted),
            ("upstream failures", t.upstream_failures),
            ("fault resets", t.fault_resets),
            ("fault stalls", t.fault_stalls),
            ("fault closes", t.fault_closes),
            ("refused over the limit", t.refused),
            ("closed idle", t.idle_closed),
            ("relay loops closed", t.relay_loops),
        ]
    };
    for (k, v) in rows {
        table.row(vec![k.to_string(), v.to_string()]);
    }
    table.row(vec!["bytes up".into(), fmt_bytes(t.bytes_up)]);
    table.row(vec!["bytes down".into(), fmt_bytes(t.bytes_down)]);
    format!("\n{}", table.render(2))
}

/// The counters `proxy --bridge` prints when it stops, one column per direction (`ab`, `ba` name them).
pub fn bridge_counters_text(total: &BridgeCounters, ab: &str, ba: &str) -> String {
    let mut t = Table::new(&["", ab, ba]);
    let (x, y) = (&total.a_to_b, &total.b_to_a);
    let rows: [(&str, u64, u64); 9] = [
        ("frames in", x.frames_in, y.frames_in),
        ("frames out", x.frames_out, y.frames_out),
        ("lost", x.lost, y.lost),
        ("dropped, queue full", x.queue_full, y.queue_full),
        ("duplicated", x.duplicated, y.duplicated),
        ("queued at the end", x.queued_frames, y.queued_frames),
        ("late (> 250 us)", x.late, y.late),
        ("send errors", x.send_errors, y.send_errors),
        ("control refused", total.control_refused, 0),
    ];
    for (k, p, q) in rows {
        t.row(vec![k.to_string(), p.to_string(), q.to_string()]);
    }
    t.row(vec![
        "bytes out".into(),
        fmt_bytes(x.bytes_out),
        fmt_bytes(y.bytes_out),
    ]);
    t.row(vec![
        "latest release".into(),
        fmt_duration(Duration::from_nanos(x.max_late_ns)),
        fmt_duration(Duration::from_nanos(y.max_late_ns)),
    ]);
    format!("\n{}", t.render(2))
}
