//! The text of `roundtrip capture whatif`: what the capture holds today and what it would take at other RTTs.

use crate::report::text::Table;
use crate::whatif::predict::{PathKind, Prediction};
use crate::whatif::profile::{AppProfile, ConnProfile, RttSource};
use serde::Serialize;
use std::fmt::Write as _;
use std::net::SocketAddr;

/// The assumptions, printed with every result.
pub const ASSUMPTIONS: [&str; 5] = [
    "turns keep their capture order and dependencies; think and server times stay as captured",
    "each turn pays the new RTT once; a captured handshake pays one RTT",
    "TCP per direction (--path tcp): initial window 10 MSS, +bytes acked per RTT, capped by the receiver window seen in the capture; --path relay: no window limit",
    "rate capped by --bandwidth (default: the fastest transfer seen on the connection) and by Mathis with --loss",
    "connections are predicted independently; one opened after another's last request follows it, the others keep their start offsets",
];

/// One connection of the capture as `capture whatif` shows it (a row of its text, an entry of its JSON).
#[derive(Debug, Clone, Serialize)]
pub struct WhatifConn {
    /// The client.
    pub client: SocketAddr,
    /// The server.
    pub server: SocketAddr,
    /// The application protocol recognised.
    pub protocol: String,
    /// From its first to its last packet, seconds.
    pub duration_s: f64,
    /// Its round-trip time, seconds.
    pub rtt_s: f64,
    /// Where the RTT came from.
    pub rtt_source: &'static str,
    /// Request/response turns.
    pub turns: usize,
    /// Application round trips.
    pub round_trips: u64,
    /// Most requests outstanding at once.
    pub max_outstanding: u32,
    /// Client think time, seconds.
    pub think_s: f64,
    /// Server time, seconds.
    pub server_s: f64,
    /// Bytes the client sent.
    pub request_bytes: u64,
    /// Bytes the server sent.
    pub response_bytes: u64,
    /// The maximum segment size.
    pub mss: u32,
    /// The largest receive window seen, per direction.
    pub window_bytes: [u64; 2],
}

impl WhatifConn {
    /// The row of one profiled connection.
    pub fn of(c: &ConnProfile) -> WhatifConn {
        let b = c.bytes();
        WhatifConn {
            client: c.client,
            server: c.server,
            protocol: c.protocol.clone(),
            duration_s: c.duration.as_secs_f64(),
            rtt_s: c.rtt.as_secs_f64(),
            rtt_source: source(c.rtt_source),
            turns: c.turns.len(),
            round_trips: c.round_trips(),
            max_outstanding: c.turns.iter().map(|t| t.outstanding).max().unwrap_or(0),
            think_s: c.turns.iter().map(|t| t.think.as_secs_f64()).sum(),
            server_s: c.turns.iter().map(|t| t.server.as_secs_f64()).sum(),
            request_bytes: b[0],
            response_bytes: b[1],
            mss: c.mss,
            window_bytes: c.max_window,
        }
    }
}

fn source(s: RttSource) -> &'static str {
    match s {
        RttSource::Handshake => "handshake",
        RttSource::AckTiming => "ack timing",
        RttSource::Unknown => "unknown",
    }
}

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

fn secs(s: f64) -> String {
    if s >= 1.0 { format!("{s:.3} s") } else { ms(s) }
}

/// The text of `capture whatif`: the connections today, the predictions (whole capture, per connection) and
/// the assumptions; `file` names the capture.
pub fn whatif_text(
    file: &str,
    path: PathKind,
    prof: &AppProfile,
    conns: &[WhatifConn],
    preds: &[Prediction],
    ssai: bool,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} TCP connection(s), {} today, {} application round trips",
        file,
        conns.len(),
        secs(prof.duration.as_secs_f64()),
        prof.round_trips()
    );
    let mut t = Table::new(&[
        "connection",
        "proto",
        "today",
        "rtt",
        "turns",
        "round trips",
        "outstanding",
        "think",
        "server",
        "bytes up",
        "bytes down",
    ]);
    for c in conns {
        t.row(vec![
            format!("{} -> {}", c.client, c.server),
            c.protocol.clone(),
            secs(c.duration_s),
            format!(
                "{} ({})",
                crate::units::fmt_nanos(c.rtt_s * 1e9),
                c.rtt_source
            ),
            c.turns.to_string(),
            c.round_trips.to_string(),
            c.max_outstanding.to_string(),
            secs(c.think_s),
            secs(c.server_s),
            crate::units::fmt_bytes(c.request_bytes),
            crate::units::fmt_bytes(c.response_bytes),
        ]);
    }
    s.push_str(&t.render(2));
    let _ = writeln!(s, "\npredicted (whole capture):");
    let mut t = Table::new(&[
        "rtt",
        "predicted",
        "x today",
        "think",
        "server",
        "round trips",
        "transfer",
        "s per +1ms",
    ]);
    for p in preds {
        t.row(vec![
            ms(p.rtt_s),
            secs(p.predicted_s),
            format!("{:.2}", p.predicted_s / p.today_s.max(1e-9)),
            secs(p.breakdown.think_s),
            secs(p.breakdown.server_s),
            secs(p.breakdown.round_trips_s),
            secs(p.breakdown.transfer_s),
            format!("{:.4}", p.sensitivity_s_per_ms),
        ]);
    }
    s.push_str(&t.render(2));
    if conns.len() > 1 {
        let _ = writeln!(s, "\npredicted per connection:");
        let mut t = Table::new(&["connection", "rtt", "today", "predicted", "round trips"]);
        for p in preds {
            for c in &p.connections {
                t.row(vec![
                    format!("{} -> {}", c.client, c.server),
                    ms(p.rtt_s),
                    secs(c.today_s),
                    secs(c.predicted_s),
                    c.round_trips.to_string(),
                ]);
            }
        }
        s.push_str(&t.render(2));
    }
    let _ = writeln!(
        s,
        "\nassumptions (path: {}, slow start after idle: {}):",
        match path {
            PathKind::Tcp => "tcp",
            PathKind::Relay => "relay",
        },
        if ssai { "on" } else { "off" }
    );
    for x in ASSUMPTIONS {
        let _ = writeln!(s, "  - {x}");
    }
    for n in &prof.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}
