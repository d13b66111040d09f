//! `roundtrip tcp`: the kernel's view of live TCP connections (sock_diag, as `ss -ti`), one line per
//! connection per interval, a closed line when one goes away, a verdict per connection and a summary.

use super::args;
use super::output::{Exit, note, out};
use anyhow::Context;
use clap::Args;
use roundtrip::doc::tcp::{TcpClosed, TcpDoc};
use roundtrip::doc::{self, Header, kind};
use roundtrip::report::text::Table;
use roundtrip::tcpwatch::{Closed, ConnSummary, Filter, Sample, Tick, Watcher};
use roundtrip::units::{fmt_bytes, fmt_duration};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Arguments of `roundtrip tcp`.
#[derive(Debug, Args)]
pub struct TcpArgs {
    /// Only connections with this local or remote port.
    #[arg(long, value_name = "PORT", value_parser = args::port)]
    port: Option<u16>,
    /// Only connections with this local or remote address.
    #[arg(long, value_name = "ADDR")]
    host: Option<IpAddr>,
    /// Only connections this process holds (needs permission to read /proc/PID/fd).
    #[arg(long)]
    pid: Option<u32>,
    /// Time between samples.
    #[arg(long, short = 'i', default_value = "1s", value_parser = args::positive_duration)]
    interval: Duration,
    /// Stop after this long [default: run until Ctrl-C].
    #[arg(long = "time", short = 't', value_parser = args::positive_duration)]
    time: Option<Duration>,
    /// Per packet, from the kernel's tcp/tcp_probe tracepoint (root): the DTrace columns of Kyle Hailey's "NFS Performance Issues at TCP level" and the ACK
    /// cadence, instead of sampling.
    #[arg(long)]
    trace: bool,
    /// Print one JSON document at the end instead of text.
    #[arg(long)]
    json: bool,
    /// Also write one CSV row per connection per sample.
    #[arg(long, value_name = "FILE.csv")]
    full_log: Option<PathBuf>,
    #[command(flatten)]
    pictures: super::report::PictureArgs,
}

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

/// Appends one line per connection per interval.
fn put_sample_line(out: &mut String, s: &Sample) {
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

fn closed_line(c: &Closed) -> String {
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

/// Column names of the full log.
const CSV_HEADER: &str = "at_s,local,remote,cookie,state,rtt_us,rttvar_us,min_rtt_us,cwnd,ssthresh,unacked,in_flight_bytes,snd_mss,snd_wnd,snd_wscale,rcv_wnd,rcv_wscale,rcv_space,delivery_rate_Bps,retrans,total_retrans,lost,reordering,busy_time_us,rwnd_limited_us,sndbuf_limited_us,bytes_acked,bytes_received,verdict\n";

fn csv_row(s: &Sample) -> String {
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

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn describe(f: &Filter) -> String {
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

/// The summary table printed at the end.
fn summary_text(conns: &[ConnSummary]) -> String {
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

/// Per-connection tally of a trace.
#[derive(Debug, Clone, Default, Serialize)]
struct TraceConn {
    local: String,
    remote: String,
    cookie: u64,
    events: u64,
    /// Segments that arrived with payload.
    data_segments_in: u64,
    /// Arriving pure ACKs that acknowledged new data.
    acks_in: u64,
    /// Bytes those ACKs acknowledged.
    bytes_acked: u64,
    /// Sender MSS from sock_diag (0: unknown).
    mss: u32,
    /// Mean data segments acknowledged per ACK (bytes per ACK / MSS).
    segments_per_ack: Option<f64>,
    unacked_max: u32,
    snd_wnd_max: u32,
    #[serde(skip)]
    last: Option<roundtrip::tcpwatch::trace::ProbeEvent>,
}

/// The document `roundtrip tcp --trace --json` prints (kind "tcp-trace").
#[derive(Debug, Clone, Serialize)]
struct TraceDoc {
    #[serde(flatten)]
    header: Header,
    started_unix_s: f64,
    filter: Filter,
    duration_ns: Option<u64>,
    events: u64,
    /// Events the kernel dropped because a ring buffer was full.
    lost_events: u64,
    connections: Vec<TraceConn>,
    /// The first matching events (at most [`FIRST_EVENTS`]), in time order per drain.
    first_events: Vec<roundtrip::tcpwatch::trace::ProbeEvent>,
}

/// How many events `--trace --json` keeps verbatim.
const FIRST_EVENTS: usize = 10_000;

fn run_trace(a: &TcpArgs, filter: Filter) -> anyhow::Result<Exit> {
    use roundtrip::tcpwatch::Sampler;
    use roundtrip::tcpwatch::trace::Tracer;
    use std::collections::HashMap;
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    });
    let mut tracer = match Tracer::open_mounting(root) {
        Ok(t) => t,
        Err(e) => anyhow::bail!(
            "--trace is not available: {e}; the sampled mode (roundtrip tcp without --trace) works without root"
        ),
    };
    let mut sampler = Sampler::open()?;
    let cancel = super::common::cancel_on_ctrl_c();
    let started = SystemTime::now();
    let start = Instant::now();
    if !a.json {
        out(format!(
            "roundtrip tcp --trace: {}, per arriving segment (tcp/tcp_probe), {}\n{:>9} {:<47} {:>7} {:>7} {:>9} {:>9} {:>5} {:>8} {:>9} {:>9}\n",
            describe(&filter),
            a.time.map_or("until Ctrl-C".to_string(), |t| format!(
                "for {}",
                fmt_duration(t)
            )),
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
        ))?;
    }
    let mut conns: HashMap<u64, TraceConn> = HashMap::new();
    let mut order: Vec<u64> = Vec::new();
    let mut wanted: HashMap<u64, u32> = HashMap::new();
    let mut refreshed: Option<Instant> = None;
    let mut events = Vec::new();
    let mut total: u64 = 0;
    let mut text = String::new();
    let mut first_events = Vec::new();
    loop {
        if refreshed.is_none_or(|t| t.elapsed() >= Duration::from_millis(200)) {
            let inodes = filter.pid_inodes().unwrap_or(Some(Default::default()));
            wanted = sampler
                .dump_all()?
                .into_iter()
                .filter(|s| {
                    filter
                        .port
                        .is_none_or(|p| s.local.port() == p || s.remote.port() == p)
                        && filter
                            .host
                            .is_none_or(|h| s.local.ip() == h || s.remote.ip() == h)
                        && inodes.as_ref().is_none_or(|i| i.contains(&s.inode))
                })
                .map(|s| (s.cookie, s.info.and_then(|i| i.snd_mss).unwrap_or(0)))
                .collect();
            refreshed = Some(Instant::now());
        }
        events.clear();
        tracer.read(&mut events);
        events.sort_by_key(|e| e.time_ns);
        text.clear();
        for e in &events {
            let Some(&mss) = wanted.get(&e.cookie) else {
                continue;
            };
            total += 1;
            if a.json && first_events.len() < FIRST_EVENTS {
                first_events.push(*e);
            }
            let c = conns.entry(e.cookie).or_insert_with(|| {
                order.push(e.cookie);
                TraceConn {
                    local: e.local.to_string(),
                    remote: e.remote.to_string(),
                    cookie: e.cookie,
                    ..TraceConn::default()
                }
            });
            c.mss = mss;
            c.events += 1;
            let (delta_us, sent, acked) = match &c.last {
                Some(p) => (
                    e.time_ns.saturating_sub(p.time_ns) / 1000,
                    e.snd_nxt.wrapping_sub(p.snd_nxt),
                    e.snd_una.wrapping_sub(p.snd_una),
                ),
                None => (0, 0, 0),
            };
            if e.data_len > 0 {
                c.data_segments_in += 1;
            } else if acked > 0 && acked < 1 << 30 {
                c.acks_in += 1;
                c.bytes_acked += u64::from(acked);
            }
            c.unacked_max = c.unacked_max.max(e.unacked());
            c.snd_wnd_max = c.snd_wnd_max.max(e.snd_wnd);
            c.last = Some(*e);
            if !a.json {
                use std::fmt::Write as _;
                let _ = writeln!(
                    text,
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
        }
        if !text.is_empty() {
            out(&text)?;
        }
        if cancel.load(Ordering::SeqCst) || a.time.is_some_and(|t| start.elapsed() >= t) {
            break;
        }
        // Drained often enough that a 1 MiB ring per CPU holds a 10 Gbit/s stream's ACKs in between.
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut list: Vec<TraceConn> = order.iter().filter_map(|k| conns.remove(k)).collect();
    for c in &mut list {
        c.segments_per_ack = (c.acks_in > 0 && c.mss > 0)
            .then(|| c.bytes_acked as f64 / c.acks_in as f64 / f64::from(c.mss));
    }
    if a.json {
        out(doc::to_bytes(&TraceDoc {
            header: Header::new(kind::TCP_TRACE),
            started_unix_s: started
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            filter: filter.clone(),
            duration_ns: a.time.map(ns),
            events: total,
            lost_events: tracer.lost(),
            connections: list,
            first_events,
        }))?;
        return Ok(Exit::Ok);
    }
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
    for c in &list {
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
    out(format!(
        "--- {total} events of {} connection(s) in {:.1}s, {} lost by the kernel ---\n{}",
        list.len(),
        start.elapsed().as_secs_f64(),
        tracer.lost(),
        t.render(2)
    ))?;
    Ok(Exit::Ok)
}

/// Shortest `--interval`: the kernel's counters move once per ACK at most; sampling faster only burns a CPU
/// (per packet, --trace is the tool).
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Most samples kept for --json or --report (each is a few hundred bytes).
const MAX_KEPT_SAMPLES: usize = 1_000_000;

/// Most rounds a run keeping every sample may last (`--time` / `--interval`).
const MAX_KEPT_ROUNDS: u128 = 100_000;

/// The bounds on what `--interval` and `--time` multiply, checked before any sampling.
fn check_bounds(a: &TcpArgs) -> anyhow::Result<()> {
    if a.interval < MIN_INTERVAL && !a.trace {
        anyhow::bail!(
            "--interval {} is shorter than 1ms, the shortest sampling interval (the kernel's counters change per ACK at most); give --interval 1ms or more, or --trace for every packet",
            fmt_duration(a.interval)
        );
    }
    let keep = a.json || a.pictures.wanted();
    if let Some(t) = a.time
        && keep
        && !a.trace
    {
        let rounds = t.as_nanos() / a.interval.as_nanos().max(1);
        if rounds > MAX_KEPT_ROUNDS {
            anyhow::bail!(
                "--time {} at --interval {} makes {rounds} rounds, and --json/--report keep every sample: at most {MAX_KEPT_ROUNDS} rounds; give --interval {} or more, or a shorter --time",
                fmt_duration(t),
                fmt_duration(a.interval),
                fmt_duration(Duration::from_nanos(
                    (t.as_nanos() / MAX_KEPT_ROUNDS + 1).min(u64::MAX as u128) as u64
                ))
            );
        }
    }
    Ok(())
}

/// Runs `roundtrip tcp`.
pub fn run(a: TcpArgs) -> anyhow::Result<Exit> {
    a.pictures.validate().map_err(super::output::refused)?;
    check_bounds(&a).map_err(super::output::refused)?;
    if let Some(path) = &a.full_log {
        super::report::check_output(path).map_err(super::output::refused)?;
    }
    if a.trace {
        if a.full_log.is_some() || a.pictures.wanted() {
            return Err(super::output::refused(
                "--trace prints per-packet lines and --json; --full-log and --report go with the sampled mode",
            ));
        }
        let filter = Filter {
            port: a.port,
            host: a.host,
            pid: a.pid,
        };
        if let Some(pid) = a.pid {
            filter
                .pid_inodes()
                .with_context(|| format!("--pid {pid}"))?;
        }
        return run_trace(&a, filter);
    }
    let filter = Filter {
        port: a.port,
        host: a.host,
        pid: a.pid,
    };
    // The pid is checked before any file is created.
    let mut watcher = Watcher::new(filter.clone())?;
    let mut full_log = match &a.full_log {
        Some(p) => {
            let f = File::create(p)
                .with_context(|| format!("creating the full log {}", p.display()))?;
            let mut w = BufWriter::new(f);
            w.write_all(CSV_HEADER.as_bytes())
                .with_context(|| format!("writing the full log {}", p.display()))?;
            Some(w)
        }
        None => None,
    };
    let cancel = super::common::cancel_on_ctrl_c();
    let started = SystemTime::now();
    let start = Instant::now();
    if !a.json {
        out(format!(
            "roundtrip tcp: {} every {}, {}; the kernel's sock_diag view (as ss -ti)\n",
            describe(&filter),
            fmt_duration(a.interval),
            a.time.map_or("until Ctrl-C".to_string(), |t| format!(
                "for {}",
                fmt_duration(t)
            ))
        ))?;
    }
    // Every sample is kept only when the JSON document or the report needs it (a long watch of many
    // connections would grow without bound otherwise).
    let keep = a.json || a.pictures.wanted();
    let mut samples: Vec<Sample> = Vec::new();
    let mut sample_count: u64 = 0;
    let mut closed: Vec<TcpClosed> = Vec::new();
    let mut said_none = false;
    // One buffer for every round's lines: allocating megabytes afresh each round cost page faults.
    let mut text = String::new();
    let mut round: u32 = 0;
    loop {
        let tick: Tick = watcher.poll()?;
        if let Some(w) = full_log.as_mut() {
            for s in &tick.samples {
                w.write_all(csv_row(s).as_bytes())
                    .context("writing the full log")?;
            }
        }
        if !a.json {
            text.clear();
            for c in &tick.closed {
                text.push_str(&closed_line(c));
            }
            for s in &tick.samples {
                put_sample_line(&mut text, s);
            }
            if tick.samples.is_empty() && !said_none {
                text.push_str(&format!(
                    "{:>7} no matching connection yet, watching\n",
                    format!("{:.1}s", tick.at.as_secs_f64())
                ));
            }
            out(&text)?;
        }
        said_none = tick.samples.is_empty();
        for c in &tick.closed {
            closed.push(TcpClosed {
                local: c.conn.local.to_string(),
                remote: c.conn.remote.to_string(),
                cookie: c.conn.cookie,
                at_ns: ns(c.at),
            });
        }
        sample_count += tick.samples.len() as u64;
        if keep {
            samples.extend(tick.samples);
            if samples.len() >= MAX_KEPT_SAMPLES {
                note(format!(
                    "stopped after {} samples: --json/--report keep every sample, and {MAX_KEPT_SAMPLES} is the most kept; raise --interval, narrow with --port/--host/--pid, or leave out --json/--report",
                    samples.len()
                ));
                break;
            }
        }
        // The next round on its schedule, or stop.
        round += 1;
        let next = a.interval * round;
        if a.time.is_some_and(|t| next > t) || cancel.load(Ordering::SeqCst) {
            break;
        }
        while start.elapsed() < next && !cancel.load(Ordering::SeqCst) {
            std::thread::sleep((next - start.elapsed()).min(Duration::from_millis(100)));
        }
        if cancel.load(Ordering::SeqCst) {
            break;
        }
    }
    if let Some(mut w) = full_log.take() {
        w.flush().context("writing the full log")?;
        if let Some(p) = &a.full_log {
            note(format!(
                "full log: {} rows in {}",
                samples.len(),
                p.display()
            ));
        }
    }
    let connections = watcher.summaries();
    let doc = TcpDoc {
        header: Header::new(kind::TCP),
        started_unix_s: started
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        filter: filter.clone(),
        interval_ns: ns(a.interval),
        duration_ns: a.time.map(ns),
        samples,
        closed,
        connections,
        cancelled: cancel.load(Ordering::SeqCst),
    };
    if a.pictures.wanted() {
        super::report::after_run(&a.pictures, &doc, None, &describe(&filter))?;
    }
    if a.json {
        out(doc::to_bytes(&doc))?;
    } else if doc.connections.is_empty() {
        out(format!(
            "--- no matching connection ({}) in {:.1}s ---\n",
            describe(&filter),
            start.elapsed().as_secs_f64()
        ))?;
    } else {
        out(format!(
            "--- {} connection(s), {} samples in {:.1}s ---\n{}",
            doc.connections.len(),
            sample_count,
            start.elapsed().as_secs_f64(),
            summary_text(&doc.connections)
        ))?;
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roundtrip::tcpwatch::diag::DiagSocket;
    use roundtrip::tcpwatch::{ConnId, Delta, Verdict, info, judge};

    #[test]
    fn an_old_kernels_short_tcp_info_shows_dashes_and_names_the_missing_counter() {
        // A 4.4-era struct (104 bytes: up to tcpi_total_retrans), with bytes moving per the interval.
        let mut b = vec![0u8; 104];
        b[68..72].copy_from_slice(&2000u32.to_ne_bytes()); // rtt
        b[80..84].copy_from_slice(&10u32.to_ne_bytes()); // cwnd
        let old = info::decode(&b);
        let sock = DiagSocket {
            local: "10.0.0.1:40000".parse().unwrap(),
            remote: "10.0.0.2:5432".parse().unwrap(),
            state: 1,
            cookie: 9,
            inode: 1,
            uid: 0,
            recv_q: 0,
            send_q: 0,
            info: Some(old),
            congestion: None,
            mem: None,
        };
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
