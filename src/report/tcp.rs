//! The text of `roundtrip tcp`: the heading, one line per connection per interval, the closed lines, the
//! summary table with the verdicts, the full log's CSV rows, and for `--per-packet` one line per tcp_probe event and
//! the per-connection tally table.

use crate::doc::tcp_trace::TcpTraceConn;
use crate::report::text::Table;
use crate::tcpwatch::trace::ProbeEvent;
use crate::tcpwatch::{Closed, ConnSummary, Filter, Sample};
use crate::units::{fmt_bytes, fmt_duration};
use std::time::Duration;

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

fn opt_d(v: Option<Duration>) -> String {
    v.map_or("-".to_string(), fmt_duration)
}

fn opt_b(v: Option<u64>) -> String {
    v.map_or("-".to_string(), fmt_bytes)
}

fn conn_name(s: &Sample) -> String {
    format!("{} -> {}", s.conn.local, s.conn.remote)
}

fn pct(part: Option<Duration>, whole: Option<Duration>) -> String {
    match (part, whole) {
        (Some(p), Some(w)) if !w.is_zero() => {
            format!("{:.0}%", 100.0 * p.as_secs_f64() / w.as_secs_f64())
        }
        (Some(_), Some(_)) => "0%".into(),
        _ => "-".into(),
    }
}

// Integer formatting for the per-sample lines: with thousands of connections per interval, float
// formatting was most of the CPU. Same spellings as `units::fmt_duration` and `units::fmt_bytes`.

/// Writes `ns` with three significant digits and a unit (`812ns`, `41.3us`, `1.25ms`, `2.00s`).
fn put_ns(out: &mut String, ns: u64) {
    use std::fmt::Write as _;
    if ns < 1000 {
        let _ = write!(out, "{ns}ns");
        return;
    }
    let (base, unit) = if ns < 1_000_000 {
        (1_000u128, "us")
    } else if ns < 1_000_000_000 {
        (1_000_000, "ms")
    } else {
        (1_000_000_000, "s")
    };
    let n = u128::from(ns);
    if n >= 100 * base {
        let _ = write!(out, "{}{unit}", (n + base / 2) / base);
    } else if n >= 10 * base {
        let x = (n * 10 + base / 2) / base;
        let _ = write!(out, "{}.{}{unit}", x / 10, x % 10);
    } else {
        let x = (n * 100 + base / 2) / base;
        let _ = write!(out, "{}.{:02}{unit}", x / 100, x % 100);
    }
}

/// Writes a byte count with a binary unit (`64 B`, `1.0 KiB`, `12.5 MiB`).
fn put_bytes(out: &mut String, b: u64) {
    use std::fmt::Write as _;
    let b = u128::from(b);
    let (d, unit) = match b {
        0..1024 => {
            let _ = write!(out, "{b} B");
            return;
        }
        1024..1_048_576 => (1024u128, "KiB"),
        1_048_576..1_073_741_824 => (1_048_576, "MiB"),
        _ => {
            let x = (b * 100 + (1u128 << 29)) >> 30;
            let _ = write!(out, "{}.{:02} GiB", x / 100, x % 100);
            return;
        }
    };
    let x = (b * 10 + d / 2) / d;
    let _ = write!(out, "{}.{} {unit}", x / 10, x % 10);
}

fn put_opt<T: std::fmt::Display>(out: &mut String, v: Option<T>) {
    use std::fmt::Write as _;
    match v {
        Some(v) => {
            let _ = write!(out, "{v}");
        }
        None => out.push('-'),
    }
}

fn put_opt_ns(out: &mut String, v: Option<Duration>) {
    match v {
        Some(d) => put_ns(out, u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        None => out.push('-'),
    }
}

fn put_opt_bytes(out: &mut String, v: Option<u64>) {
    match v {
        Some(b) => put_bytes(out, b),
        None => out.push('-'),
    }
}

fn put_pct(out: &mut String, part: Option<Duration>, whole: Option<Duration>) {
    use std::fmt::Write as _;
    match (part, whole) {
        (Some(p), Some(w)) if !w.is_zero() => {
            let (p, w) = (p.as_nanos(), w.as_nanos());
            let _ = write!(out, "{}%", (p * 100 + w / 2) / w);
        }
        (Some(_), Some(_)) => out.push_str("0%"),
        _ => out.push('-'),
    }
}

/// Pads what was written since `from` with spaces to `width` characters (ASCII).
fn pad_from(out: &mut String, from: usize, width: usize) {
    let len = out.len() - from;
    for _ in len..width {
        out.push(' ');
    }
}

/// Appends "  7.0s " right-aligned to 7 characters plus a space.
fn put_at(out: &mut String, at: Duration) {
    use std::fmt::Write as _;
    let tenths = (at.as_millis() + 50) / 100;
    let text = format!("{}.{}s", tenths / 10, tenths % 10);
    let _ = write!(out, "{text:>7} ");
}

/// Appends the line of one connection at one sample (one per connection per interval).
pub fn put_sample_line(out: &mut String, s: &Sample) {
    use std::fmt::Write as _;
    let none = Default::default();
    let i = s.socket.info.as_ref().unwrap_or(&none);
    let nd = Default::default();
    let d = s.delta.as_ref().unwrap_or(&nd);
    put_at(out, s.at);
    let from = out.len();
    let _ = write!(out, "{} -> {}", s.conn.local, s.conn.remote);
    pad_from(out, from, 47);
    out.push(' ');
    let from = out.len();
    out.push_str(s.socket.state_name());
    pad_from(out, from, 11);
    out.push_str(" rtt ");
    put_opt_ns(out, i.rtt);
    out.push_str(" ±");
    put_opt_ns(out, i.rttvar);
    out.push_str(" min ");
    put_opt_ns(out, i.min_rtt);
    out.push_str("  cwnd ");
    put_opt(out, i.cwnd);
    out.push_str(" ssthresh ");
    put_opt(out, i.ssthresh);
    out.push_str("  in flight ");
    put_opt_bytes(out, i.in_flight_bytes());
    out.push_str(" (");
    put_opt(out, i.unacked);
    out.push_str(" seg)  peer wnd ");
    let wnd = |out: &mut String, w: Option<u32>, scale: Option<u8>| {
        put_opt_bytes(out, w.map(u64::from));
        out.push_str("(x");
        put_opt(out, scale.map(|s| 1u32 << s.min(14)));
        out.push(')');
    };
    wnd(out, i.snd_wnd, i.snd_wscale);
    out.push_str("  rcv wnd ");
    wnd(out, i.rcv_wnd, i.rcv_wscale);
    out.push_str(" space ");
    put_opt_bytes(out, i.rcv_space.map(u64::from));
    out.push_str("  mss ");
    put_opt(out, i.snd_mss);
    out.push_str("  rate ");
    match i.delivery_rate {
        Some(r) => {
            put_bytes(out, r);
            out.push_str("/s");
        }
        None => out.push('-'),
    }
    out.push_str("  retrans ");
    put_opt(out, i.retrans);
    out.push('/');
    put_opt(out, i.total_retrans);
    out.push_str(" lost ");
    put_opt(out, i.lost);
    out.push_str(" reord ");
    put_opt(out, i.reordering);
    out.push_str("  busy ");
    put_pct(out, d.busy, Some(d.elapsed));
    out.push_str(" rwnd ");
    put_pct(out, d.rwnd_limited, d.busy);
    out.push_str(" sndbuf ");
    put_pct(out, d.sndbuf_limited, d.busy);
    let _ = writeln!(out, "  => {}", s.verdict);
}

/// The line of a connection that went away.
pub fn closed_line(c: &Closed) -> String {
    format!(
        "{:>7} {:<47} closed (last sample at {:.1}s: {}, {} acked, {} received)\n",
        format!("{:.1}s", c.at.as_secs_f64()),
        conn_name(&c.last),
        c.last.at.as_secs_f64(),
        c.last.socket.state_name(),
        opt_b(c.last.socket.info.as_ref().and_then(|i| i.bytes_acked)),
        opt_b(c.last.socket.info.as_ref().and_then(|i| i.bytes_received)),
    )
}

/// Column names of the full log (`--full-log`).
pub const CSV_HEADER: &str = "at_s,local,remote,cookie,state,rtt_us,rttvar_us,min_rtt_us,cwnd,ssthresh,unacked,in_flight_bytes,snd_mss,snd_wnd,snd_wscale,rcv_wnd,rcv_wscale,rcv_space,delivery_rate_Bps,retrans,total_retrans,lost,reordering,busy_time_us,rwnd_limited_us,sndbuf_limited_us,bytes_acked,bytes_received,verdict\n";

/// One row of the full log: one connection at one sample.
pub fn csv_row(s: &Sample) -> String {
    let i = s.socket.info.clone().unwrap_or_default();
    let us = |d: Option<Duration>| d.map_or(String::new(), |d| d.as_micros().to_string());
    let o = |v: Option<String>| v.unwrap_or_default();
    let words = s.verdict.to_string().replace('"', "'");
    format!(
        "{:.6},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"\n",
        s.at.as_secs_f64(),
        s.conn.local,
        s.conn.remote,
        s.conn.cookie,
        s.socket.state_name(),
        us(i.rtt),
        us(i.rttvar),
        us(i.min_rtt),
        o(i.cwnd.map(|v| v.to_string())),
        o(i.ssthresh.map(|v| v.to_string())),
        o(i.unacked.map(|v| v.to_string())),
        o(i.in_flight_bytes().map(|v| v.to_string())),
        o(i.snd_mss.map(|v| v.to_string())),
        o(i.snd_wnd.map(|v| v.to_string())),
        o(i.snd_wscale.map(|v| v.to_string())),
        o(i.rcv_wnd.map(|v| v.to_string())),
        o(i.rcv_wscale.map(|v| v.to_string())),
        o(i.rcv_space.map(|v| v.to_string())),
        o(i.delivery_rate.map(|v| v.to_string())),
        o(i.retrans.map(|v| v.to_string())),
        o(i.total_retrans.map(|v| v.to_string())),
        o(i.lost.map(|v| v.to_string())),
        o(i.reordering.map(|v| v.to_string())),
        us(i.busy_time),
        us(i.rwnd_limited),
        us(i.sndbuf_limited),
        o(i.bytes_acked.map(|v| v.to_string())),
        o(i.bytes_received.map(|v| v.to_string())),
        words
    )
}

/// The filter in words: `port 5432, host 10.0.0.2`, or `every TCP connection`.
pub fn describe(f: &Filter) -> String {
    let mut v = Vec::new();
    if let Some(p) = f.port {
        v.push(format!("port {p}"));
    }
    if let Some(h) = f.host {
        v.push(format!("host {h}"));
    }
    if let Some(p) = f.pid {
        v.push(format!("pid {p}"));
    }
    if v.is_empty() {
        "every TCP connection".into()
    } else {
        v.join(", ")
    }
}

/// The summary table printed at the end of a sampled watch, then the verdict of each connection.
pub fn summary_text(conns: &[ConnSummary]) -> String {
    let mut t = Table::new(&[
        "connection",
        "samples",
        "rtt min",
        "mean",
        "max",
        "cwnd max",
        "acked",
        "received",
        "retrans",
        "busy",
        "rwnd lim",
        "sndbuf lim",
    ]);
    let mut verdicts = String::new();
    for c in conns {
        let d = c.delta.clone().unwrap_or_default();
        let name = format!(
            "{} -> {}{}",
            c.conn.local,
            c.conn.remote,
            if c.closed { " (closed)" } else { "" }
        );
        t.row(vec![
            name.clone(),
            c.samples.to_string(),
            opt_d(c.rtt_min),
            opt_d(c.rtt_mean),
            opt_d(c.rtt_max),
            opt(c.cwnd_max),
            opt_b(d.bytes_acked),
            opt_b(d.bytes_received),
            opt(d.retransmitted),
            opt_d(d.busy),
            pct(d.rwnd_limited, d.busy),
            pct(d.sndbuf_limited, d.busy),
        ]);
        verdicts.push_str(&format!("  {name}: {}\n", c.verdict));
    }
    format!("{}verdicts (whole watch):\n{verdicts}", t.render(2))
}

/// "until Ctrl-C" or "for 10.0s".
fn for_how_long(time: Option<Duration>) -> String {
    time.map_or("until Ctrl-C".to_string(), |t| {
        format!("for {}", fmt_duration(t))
    })
}

/// The heading of a sampled watch.
pub fn watch_heading(filter: &Filter, interval: Duration, time: Option<Duration>) -> String {
    format!(
        "roundtrip tcp: {} every {}, {}; the kernel's sock_diag view (as ss -ti)\n",
        describe(filter),
        fmt_duration(interval),
        for_how_long(time)
    )
}

/// The line of a sample that found no matching connection (printed once until one appears).
pub fn none_yet_line(at: Duration) -> String {
    format!(
        "{:>7} no matching connection yet, watching\n",
        format!("{:.1}s", at.as_secs_f64())
    )
}

/// The line at the end of a sampled watch, then the summary table when a connection matched.
pub fn watch_end(
    filter: &Filter,
    connections: &[ConnSummary],
    samples: u64,
    elapsed: Duration,
) -> String {
    if connections.is_empty() {
        format!(
            "--- no matching connection ({}) in {:.1}s ---\n",
            describe(filter),
            elapsed.as_secs_f64()
        )
    } else {
        format!(
            "--- {} connection(s), {} samples in {:.1}s ---\n{}",
            connections.len(),
            samples,
            elapsed.as_secs_f64(),
            summary_text(connections)
        )
    }
}

/// The heading of `--per-packet`, with the column names of the event lines.
pub fn trace_heading(filter: &Filter, time: Option<Duration>) -> String {
    format!(
        "roundtrip tcp --per-packet: {}, per arriving segment (tcp/tcp_probe), {}\n{:>9} {:<47} {:>7} {:>7} {:>9} {:>9} {:>5} {:>8} {:>9} {:>9}\n",
        describe(filter),
        for_how_long(time),
        "delta_us",
        "connection",
        "sent",
        "recv",
        "snd_wnd",
        "rcv_wnd",
        "cwnd",
        "ssthresh",
        "srtt_us",
        "unacked"
    )
}

/// Appends the line of one tcp_probe event, given the connection's previous event (the time and bytes sent
/// since it; zeros for its first).
pub fn put_trace_line(out: &mut String, e: &ProbeEvent, prev: Option<&ProbeEvent>) {
    use std::fmt::Write as _;
    let (delta_us, sent) = match prev {
        Some(p) => (
            e.time_ns.saturating_sub(p.time_ns) / 1000,
            e.snd_nxt.wrapping_sub(p.snd_nxt),
        ),
        None => (0, 0),
    };
    let _ = writeln!(
        out,
        "{delta_us:>9} {:<47} {sent:>7} {:>7} {:>9} {:>9} {:>5} {:>8} {:>9} {:>9}",
        format!("{} -> {}", e.local, e.remote),
        e.data_len,
        e.snd_wnd,
        e.rcv_wnd,
        e.cwnd,
        e.ssthresh,
        e.srtt_us,
        e.unacked()
    );
}

/// The line at the end of `--per-packet` and the table of the connections' tallies.
pub fn trace_end(conns: &[TcpTraceConn], events: u64, elapsed: Duration, lost: u64) -> String {
    let mut t = Table::new(&[
        "connection",
        "events",
        "data segs in",
        "acks in",
        "acked/ack",
        "segs/ack",
        "unacked max",
        "snd_wnd max",
    ]);
    for c in conns {
        t.row(vec![
            format!("{} -> {}", c.local, c.remote),
            c.events.to_string(),
            c.data_segments_in.to_string(),
            c.acks_in.to_string(),
            c.bytes_acked
                .checked_div(c.acks_in)
                .map_or("-".into(), fmt_bytes),
            c.segments_per_ack.map_or("-".into(), |v| format!("{v:.1}")),
            fmt_bytes(u64::from(c.unacked_max)),
            fmt_bytes(u64::from(c.snd_wnd_max)),
        ]);
    }
    format!(
        "--- {events} events of {} connection(s) in {:.1}s, {lost} lost by the kernel ---\n{}",
        conns.len(),
        elapsed.as_secs_f64(),
        t.render(2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcpwatch::diag::DiagSocket;
    use crate::tcpwatch::{ConnId, Delta, Verdict, info, judge};

    #[test]
    fn an_old_kernels_short_tcp_info_shows_dashes_and_names_the_missing_counter() {
        // A 4.4-era struct (104 bytes: up to tcpi_total_retrans), with bytes moving per the interval.
        let mut b = vec![0u8; 104];
        b[68..72].copy_from_slice(&2000u32.to_ne_bytes()); // rtt
        b[80..84].copy_from_slice(&10u32.to_ne_bytes()); // cwnd
        let old = info::decode(&b);
        let sock = DiagSocket::established("10.0.0.1:40000", "10.0.0.2:5432", 9, old);
        let delta = Delta {
            elapsed: Duration::from_secs(1),
            bytes_acked: Some(1000),
            ..Delta::default()
        };
        let verdict = judge(&delta, &sock);
        assert!(matches!(verdict, Verdict::Missing { .. }), "{verdict}");
        let s = Sample {
            conn: ConnId {
                local: sock.local,
                remote: sock.remote,
                cookie: 9,
            },
            at: Duration::from_secs(1),
            socket: sock,
            delta: Some(delta),
            verdict,
        };
        let mut line = String::new();
        put_sample_line(&mut line, &s);
        assert!(line.contains("rtt 2.00ms"), "{line}");
        assert!(line.contains("min -"), "{line}");
        assert!(line.contains("peer wnd -(x"), "{line}");
        assert!(line.contains("busy - rwnd - sndbuf -"), "{line}");
        assert!(line.contains("lacks tcpi_busy_time"), "{line}");
    }

    #[test]
    fn integer_formatting_matches_units() {
        for ns in [
            0u64,
            7,
            999,
            1000,
            1234,
            9_994,
            9_996,
            41_349,
            99_949,
            812_000,
            1_250_000,
            2_000_000_000,
            123_456_789_012,
        ] {
            let mut s = String::new();
            put_ns(&mut s, ns);
            assert_eq!(s, fmt_duration(Duration::from_nanos(ns)), "{ns}");
        }
        for b in [
            0u64,
            64,
            1023,
            1024,
            1536,
            10_000,
            1_048_575,
            13_107_200,
            5 << 30,
        ] {
            let mut s = String::new();
            put_bytes(&mut s, b);
            assert_eq!(s, fmt_bytes(b), "{b}");
        }
    }
}
