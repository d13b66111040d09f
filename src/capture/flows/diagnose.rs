//! One line saying what held a connection back, from its summary.

use super::{Dir, FlowSummary};

fn fmt_ns(ns: u64) -> String {
    crate::units::fmt_nanos(ns as f64)
}

/// One line saying what held a connection back, from its summary.
pub fn diagnose(s: &FlowSummary) -> String {
    let mut parts: Vec<String> = Vec::new();
    let (bulk_dir, bulk) = s.bulk();
    let (recv, who_recv) = match bulk_dir {
        Dir::ClientToServer => (&s.server_to_client, "server"),
        Dir::ServerToClient => (&s.client_to_server, "client"),
    };
    let sender = match bulk_dir {
        Dir::ClientToServer => "client",
        Dir::ServerToClient => "server",
    };
    match &*s.state {
        "reset_by_client" => parts.push("reset by the client".into()),
        "reset_by_server" => parts.push("reset by the server".into()),
        _ => {}
    }
    if bulk.payload_bytes == 0 {
        if s.packets() <= 3 && !s.handshake_seen {
            parts.push("no data seen".into());
        } else if s.handshake.is_none() && s.handshake_seen {
            parts.push("handshake not answered".into());
        } else {
            parts.push("no data exchanged".into());
        }
        return parts.join("; ");
    }
    let zero = recv.zero_windows;
    if zero > 0 {
        parts.push(format!(
            "{who_recv} advertised a zero window {zero} time{} (its application did not read fast enough)",
            if zero == 1 { "" } else { "s" }
        ));
    }
    let classified =
        bulk.receiver_limited_segments + bulk.sender_limited_segments + bulk.app_limited_segments;
    if classified > 0 {
        let pct = |n: u64| 100.0 * n as f64 / classified as f64;
        let (r, c, a) = (
            pct(bulk.receiver_limited_segments),
            pct(bulk.sender_limited_segments),
            pct(bulk.app_limited_segments),
        );
        if r >= 50.0 {
            parts.push(format!(
                "receiver-limited: in flight reached the {who_recv}'s window (in flight max {}, window max {}) in {r:.0}% of segments",
                crate::units::fmt_bytes(bulk.in_flight_max_bytes),
                crate::units::fmt_bytes(recv.window_max_bytes)
            ));
        } else if c >= a {
            parts.push(format!(
                "sender/congestion-limited: {sender} sent full segments with in flight below the window ({c:.0}% of segments)"
            ));
        } else {
            parts.push(format!(
                "application-limited: {sender} sent short writes with in flight below the window ({a:.0}% of segments)"
            ));
        }
    }
    if bulk.data_segments > 0 && bulk.retransmissions > 0 {
        parts.push(format!(
            "{} retransmission{} ({:.1}% of data segments)",
            bulk.retransmissions,
            if bulk.retransmissions == 1 { "" } else { "s" },
            100.0 * bulk.retransmissions as f64 / bulk.data_segments as f64
        ));
    }
    if recv.dup_acks > 0 {
        parts.push(format!(
            "{} duplicate ACKs from the {who_recv}",
            recv.dup_acks
        ));
    }
    if let Some(spa) = bulk.segments_per_ack
        && bulk.data_segments >= 20
    {
        if spa >= 8.0 {
            parts.push(format!(
                "{who_recv} ACKs every {spa:.1} segments (stretch ACKs)"
            ));
        } else if spa <= 1.2 {
            parts.push(format!("{who_recv} ACKs every segment"));
        }
    }
    if let Some(hs) = s.handshake
        && bulk.rtt.count >= 3
        && hs.rtt_ns > 0
        && bulk.rtt.p50_ns > 4 * hs.rtt_ns
        && bulk.rtt.p50_ns > 1_000_000
    {
        parts.push(format!(
            "data RTT p50 {} is {:.0}x the handshake RTT {} (queueing or delayed ACKs)",
            fmt_ns(bulk.rtt.p50_ns),
            bulk.rtt.p50_ns as f64 / hs.rtt_ns as f64,
            fmt_ns(hs.rtt_ns)
        ));
    }
    if parts.is_empty() {
        parts.push("no trouble seen".into());
    }
    parts.join("; ")
}
