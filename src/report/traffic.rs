//! Text for the traffic commands: `throughput`, `load` and `sweep`. Their JSON documents are
//! [`crate::doc::throughput`], [`crate::doc::load`] and [`crate::doc::sweep`].

use super::text::{SUMMARY_COLUMNS, Table, summary_cells};
use crate::probe::load::LoadResult;
use crate::probe::ping::{PeerKind, Transport};
use crate::probe::sweep::SweepResult;
use crate::probe::throughput::{Direction, Loss, RateRow, ThroughputResult};
use crate::units::{fmt_bytes, fmt_nanos};
use std::fmt::Write;

fn peer_name(p: PeerKind) -> &'static str {
    match p {
        PeerKind::Roundtrip => "roundtrip server",
        PeerKind::Sockperf => "sockperf-compatible server",
        PeerKind::Unknown => "server",
    }
}

/// Formats a message rate: `812/s`, `41.3k/s`, `1.25M/s`.
pub fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M/s", r / 1e6)
    } else if r >= 1e4 {
        format!("{:.1}k/s", r / 1e3)
    } else if r >= 1e3 {
        format!("{:.2}k/s", r / 1e3)
    } else {
        format!("{r:.0}/s")
    }
}

// ---------------------------------------------------------------- throughput

/// The heading printed before a throughput run.
pub fn throughput_heading(
    target: &str,
    addr: &str,
    transport: Transport,
    streams: usize,
    reverse: bool,
    sync: bool,
) -> String {
    format!(
        "roundtrip throughput {transport} {target} ({addr}), {streams} stream{}, {}{}; rates count whole messages, header included\n",
        if streams == 1 { "" } else { "s" },
        if reverse {
            "server -> client"
        } else {
            "client -> server"
        },
        if sync {
            ", sync mode (each message answered before the next)"
        } else {
            ""
        }
    )
}

/// One per-interval line.
pub fn throughput_interval_line(size: usize, row: &RateRow) -> String {
    format!(
        "{:>8.2}s  {:>9}  {:>12} msgs  {:>10}  {:>9.2} MB/s  {:>10.1} Mbit/s\n",
        row.end_s,
        fmt_bytes(size as u64),
        row.messages,
        fmt_rate(row.messages_per_s),
        row.mb_per_s,
        row.mbit_per_s
    )
}

/// The totals table, one row per size (and per stream when there are several), then notes.
pub fn throughput_summary(r: &ThroughputResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "--- {} {} throughput, {}, peer: {} ---",
        r.transport,
        r.addr,
        match r.direction {
            Direction::ClientToServer => "client -> server",
            Direction::ServerToClient => "server -> client",
        },
        peer_name(r.peer)
    );
    let udp = r.transport == Transport::Udp;
    let mut header = vec![
        "size", "stream", "seconds", "messages", "msgs/s", "MB/s", "Mbit/s", "received",
    ];
    if udp {
        header.push("lost");
    }
    let mut t = Table::new(&header);
    for run in &r.runs {
        let received = |n: Option<u64>| n.map_or("-".to_string(), |n| n.to_string());
        let lost = |l: &Option<Loss>| {
            l.map_or("-".to_string(), |l| {
                format!("{} ({:.2}%)", l.lost, l.lost_pct)
            })
        };
        let mut row = vec![
            fmt_bytes(run.size as u64),
            if r.streams > 1 {
                "all".into()
            } else {
                "1".into()
            },
            format!("{:.2}", run.total.length_s),
            run.total.messages.to_string(),
            fmt_rate(run.total.messages_per_s),
            format!("{:.2}", run.total.mb_per_s),
            format!("{:.1}", run.total.mbit_per_s),
            received(run.received.map(|x| x.0)),
        ];
        if udp {
            row.push(lost(&run.loss));
        }
        t.row(row);
        if r.streams > 1 {
            for s in &run.streams {
                t.row(vec![
                    String::new(),
                    s.stream.to_string(),
                    format!("{:.2}", s.rate.length_s),
                    s.rate.messages.to_string(),
                    fmt_rate(s.rate.messages_per_s),
                    format!("{:.2}", s.rate.mb_per_s),
                    format!("{:.1}", s.rate.mbit_per_s),
                    received(s.received_messages),
                ]);
            }
        }
    }
    out.push_str(&t.render(0));
    out.push_str(match (r.direction, r.sync) {
        (_, true) => "messages: acknowledged by the server (sync mode); received: -\n",
        (Direction::ClientToServer, false) => {
            "messages: sent by the client in the measuring window; received: what the server counted over the whole run\n"
        }
        (Direction::ServerToClient, false) => {
            "messages: received by the client in the measuring window; received: the same over the whole stream\n"
        }
    });
    for run in &r.runs {
        if !run.rtt.is_empty() {
            let mut t = Table::new(&[
                "RTT (sync)",
                "min",
                "mean",
                "stddev",
                "p50",
                "p90",
                "p99",
                "p99.9",
                "p99.99",
                "max",
                "count",
            ]);
            let mut row = vec![fmt_bytes(run.size as u64)];
            row.extend(summary_cells(&run.rtt.summary()));
            t.row(row);
            out.push_str(&t.render(0));
        }
        if let Some(note) = run.receiver_note {
            let _ = writeln!(out, "{}: {note}", fmt_bytes(run.size as u64));
        }
    }
    out
}

/// The first error of a throughput result, for the one-line error message.
pub fn throughput_error(r: &ThroughputResult) -> Option<String> {
    r.error().map(|e| e.to_string())
}

// ---------------------------------------------------------------- load

/// The heading printed before a load run.
pub fn load_heading(
    target: &str,
    addr: &str,
    transport: Transport,
    size: usize,
    rate: f64,
    reply_every: u64,
) -> String {
    format!(
        "roundtrip load {transport} {target} ({addr}), {size}-byte messages at {} on an open-loop schedule, one answer per {reply_every}; times are round trips (RTT)\n",
        fmt_rate(rate)
    )
}

/// The sentence saying whether the rate was held.
pub fn rate_sentence(r: &LoadResult) -> String {
    let lag = r.lag.summary();
    let by_cut = if r.cancelled { " by the interrupt" } else { "" };
    if r.rate_held() {
        format!(
            "rate held: {} sent of {} scheduled{by_cut} ({}); schedule lag p99 {}",
            r.sent,
            r.scheduled_by_end(),
            fmt_rate(r.achieved_rate()),
            fmt_nanos(lag.p99_ns as f64)
        )
    } else {
        format!(
            "rate NOT held: offered {}, achieved {} ({} of {} scheduled messages sent{by_cut}, {:.1}%); the sender fell up to {} behind its schedule",
            fmt_rate(r.rate),
            fmt_rate(r.achieved_rate()),
            r.sent,
            r.scheduled_by_end(),
            if r.scheduled_by_end() > 0 {
                100.0 * r.sent as f64 / r.scheduled_by_end() as f64
            } else {
                0.0
            },
            fmt_nanos(lag.max_ns as f64)
        )
    }
}

/// The summary of a load run.
pub fn load_text(r: &LoadResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "--- {} {} load: {} x {}-byte messages in {:.2}s, peer: {} ---",
        r.transport,
        r.addr,
        r.sent,
        r.size,
        r.elapsed.as_secs_f64(),
        peer_name(r.peer)
    );
    let _ = writeln!(
        out,
        "answers requested {}  received {}  unanswered {}",
        r.requested,
        r.answered,
        r.unanswered()
    );
    let mut header = vec![""];
    header.extend(SUMMARY_COLUMNS);
    let mut t = Table::new(&header);
    for (name, s) in [
        ("RTT from scheduled send", r.latency_scheduled.summary()),
        ("RTT from actual send", r.latency_sent.summary()),
        ("schedule lag", r.lag.summary()),
    ] {
        let mut row = vec![name.to_string()];
        row.extend(summary_cells(&s));
        t.row(row);
    }
    out.push_str(&t.render(0));
    out.push_str(&rate_sentence(r));
    out.push('\n');
    out
}

// ---------------------------------------------------------------- sweep

/// The sweep table: one row per cell.
pub fn sweep_table(r: &SweepResult) -> String {
    let mut t = Table::new(&[
        "size", "offered", "achieved", "held", "answers", "p50", "p90", "p99", "p99.9", "max",
        "p99 sent", "lag p99",
    ]);
    for c in &r.cells {
        let s = c.latency_scheduled.summary();
        let f = |v: u64| {
            if s.count > 0 {
                fmt_nanos(v as f64)
            } else {
                "-".into()
            }
        };
        let sent = c.latency_sent.summary();
        t.row(vec![
            fmt_bytes(c.size as u64),
            fmt_rate(c.rate),
            fmt_rate(c.achieved_rate()),
            if c.rate_held() {
                "yes".into()
            } else {
                "NO".into()
            },
            format!("{}/{}", c.answered, c.requested),
            f(s.p50_ns),
            f(s.p90_ns),
            f(s.p99_ns),
            f(s.p99_9_ns),
            f(s.max_ns),
            if sent.count > 0 {
                fmt_nanos(sent.p99_ns as f64)
            } else {
                "-".into()
            },
            fmt_nanos(c.lag.summary().p99_ns as f64),
        ]);
    }
    let mut out = t.render(0);
    out.push_str(
        "p50..max: RTT from the scheduled send time (corrected for coordinated omission); p99 sent: from the actual send time\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_format() {
        assert_eq!(fmt_rate(812.0), "812/s");
        assert_eq!(fmt_rate(1_500.0), "1.50k/s");
        assert_eq!(fmt_rate(41_300.0), "41.3k/s");
        assert_eq!(fmt_rate(1_250_000.0), "1.25M/s");
    }
}
