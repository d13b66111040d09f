//! `roundtrip tcp`: the kernel's view of live TCP connections (sock_diag, as `ss -ti`), one line per
//! connection per interval, a closed line when one goes away, a verdict per connection and a summary.

use super::args;
use super::output::{Exit, note, out, out_text};
use anyhow::Context;
use clap::Args;
use roundtrip::doc::tcp::{TcpClosed, TcpDoc};
use roundtrip::doc::tcp_trace::{FIRST_EVENTS, TcpTraceConn, TcpTraceDoc};
use roundtrip::doc::{self, Header, kind};
use roundtrip::output_file;
use roundtrip::report::tcp as text;
use roundtrip::tcpwatch::{Filter, Sample, Tick, Watcher};
use roundtrip::units::fmt_duration;
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
    /// Time between samples, each printing one line per connection.
    #[arg(long = "report-interval", alias = "interval", short_alias = 'i', default_value = "1s", value_parser = args::positive_duration)]
    interval: Duration,
    /// Stop after this long [default: run until Ctrl-C].
    #[arg(long = "duration", alias = "time", short = 't', value_parser = args::positive_duration)]
    time: Option<Duration>,
    /// Per packet, from the kernel's tcp/tcp_probe tracepoint (root): the DTrace columns of Kyle Hailey's "NFS Performance Issues at TCP level" and the ACK
    /// cadence, instead of sampling.
    #[arg(long = "per-packet", alias = "trace")]
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

fn run_trace(a: &TcpArgs, filter: Filter) -> anyhow::Result<Exit> {
    use roundtrip::tcpwatch::Sampler;
    use roundtrip::tcpwatch::trace::{ProbeEvent, Tracer};
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
            "--per-packet is not available: {e}; the sampled mode (roundtrip tcp without --per-packet) works without root"
        ),
    };
    let mut sampler = Sampler::open()?;
    let cancel = super::common::cancel_on_ctrl_c();
    let started = SystemTime::now();
    let start = Instant::now();
    if !a.json {
        out_text(text::trace_heading(&filter, a.time))?;
    }
    // Each connection's tally and its previous event.
    let mut conns: HashMap<u64, (TcpTraceConn, Option<ProbeEvent>)> = HashMap::new();
    let mut order: Vec<u64> = Vec::new();
    let mut wanted: HashMap<u64, u32> = HashMap::new();
    let mut refreshed: Option<Instant> = None;
    let mut events = Vec::new();
    let mut total: u64 = 0;
    let mut lines = String::new();
    let mut first_events = Vec::new();
    loop {
        if refreshed.is_none_or(|t| t.elapsed() >= Duration::from_millis(200)) {
            let inodes = filter.pid_inodes().unwrap_or(Some(Default::default()));
            wanted = sampler
                .dump_all()?
                .into_iter()
                .filter(|s| filter.matches(s, inodes.as_ref()))
                .map(|s| (s.cookie, s.info.and_then(|i| i.snd_mss).unwrap_or(0)))
                .collect();
            refreshed = Some(Instant::now());
        }
        events.clear();
        tracer.read(&mut events);
        events.sort_by_key(|e| e.time_ns);
        lines.clear();
        for e in &events {
            let Some(&mss) = wanted.get(&e.cookie) else {
                continue;
            };
            total += 1;
            if a.json && first_events.len() < FIRST_EVENTS {
                first_events.push(*e);
            }
            let (c, last) = conns.entry(e.cookie).or_insert_with(|| {
                order.push(e.cookie);
                (TcpTraceConn::new(e), None)
            });
            c.count(e, last.as_ref(), mss);
            if !a.json {
                text::put_trace_line(&mut lines, e, last.as_ref());
            }
            *last = Some(*e);
        }
        if !lines.is_empty() {
            out_text(&lines)?;
        }
        if cancel.load(Ordering::SeqCst) || a.time.is_some_and(|t| start.elapsed() >= t) {
            break;
        }
        // Drained often enough that a 1 MiB ring per CPU holds a 10 Gbit/s stream's ACKs in between.
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut list: Vec<TcpTraceConn> = order
        .iter()
        .filter_map(|k| conns.remove(k))
        .map(|(c, _)| c)
        .collect();
    for c in &mut list {
        c.finish();
    }
    if a.json {
        out(doc::to_bytes(&TcpTraceDoc {
            header: Header::new(kind::TCP_TRACE),
            started_unix_s: started
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            filter: filter.clone(),
            duration_ns: a.time.map(roundtrip::units::nanos),
            events: total,
            lost_events: tracer.lost(),
            connections: list,
            first_events,
        }))?;
        return Ok(Exit::Ok);
    }
    out_text(text::trace_end(
        &list,
        total,
        start.elapsed(),
        tracer.lost(),
    ))?;
    Ok(Exit::Ok)
}

/// Shortest `--report-interval`: the kernel's counters move once per ACK at most; sampling faster only burns a CPU
/// (per packet, --per-packet is the tool).
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Most samples kept for --json or --report (each is a few hundred bytes).
const MAX_KEPT_SAMPLES: usize = 1_000_000;

/// Most rounds a run keeping every sample may last (`--duration` / `--report-interval`).
const MAX_KEPT_ROUNDS: u128 = 100_000;

/// The bounds on what `--report-interval` and `--duration` multiply, checked before any sampling.
fn check_bounds(a: &TcpArgs) -> anyhow::Result<()> {
    if a.interval < MIN_INTERVAL && !a.trace {
        anyhow::bail!(
            "--report-interval {} is shorter than 1ms, the shortest sampling interval (the kernel's counters change per ACK at most); give --report-interval 1ms or more, or --per-packet for every packet",
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
                "--duration {} at --report-interval {} makes {rounds} rounds, and --json/--report keep every sample: at most {MAX_KEPT_ROUNDS} rounds; give --report-interval {} or more, or a shorter --duration",
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
    let filter = Filter {
        port: a.port,
        host: a.host,
        pid: a.pid,
    };
    if a.trace {
        if a.full_log.is_some() || a.pictures.wanted() {
            return Err(super::output::refused(
                "--per-packet prints per-packet lines and --json; --full-log and --report go with the sampled mode",
            ));
        }
        if let Some(pid) = a.pid {
            filter
                .pid_inodes()
                .with_context(|| format!("--pid {pid}"))?;
        }
        return run_trace(&a, filter);
    }
    // The pid is checked before any file is created.
    let mut watcher = Watcher::new(filter.clone())?;
    let mut full_log = match &a.full_log {
        Some(p) => {
            let f = output_file::create(p)
                .with_context(|| format!("creating the full log {}", p.display()))?;
            let mut w = BufWriter::new(f);
            w.write_all(text::CSV_HEADER.as_bytes())
                .with_context(|| format!("writing the full log {}", p.display()))?;
            Some(w)
        }
        None => None,
    };
    let cancel = super::common::cancel_on_ctrl_c();
    let started = SystemTime::now();
    let start = Instant::now();
    if !a.json {
        out_text(text::watch_heading(&filter, a.interval, a.time))?;
    }
    // Every sample is kept only when the JSON document or the report needs it (a long watch of many
    // connections would grow without bound otherwise).
    let keep = a.json || a.pictures.wanted();
    let mut samples: Vec<Sample> = Vec::new();
    let mut sample_count: u64 = 0;
    let mut closed: Vec<TcpClosed> = Vec::new();
    let mut said_none = false;
    // One buffer for every round's lines: allocating megabytes afresh each round cost page faults.
    let mut lines = String::new();
    let mut round: u32 = 0;
    loop {
        let tick: Tick = watcher.poll()?;
        if let Some(w) = full_log.as_mut() {
            for s in &tick.samples {
                w.write_all(text::csv_row(s).as_bytes())
                    .context("writing the full log")?;
            }
        }
        if !a.json {
            lines.clear();
            for c in &tick.closed {
                lines.push_str(&text::closed_line(c));
            }
            for s in &tick.samples {
                text::put_sample_line(&mut lines, s);
            }
            if tick.samples.is_empty() && !said_none {
                lines.push_str(&text::none_yet_line(tick.at));
            }
            out_text(&lines)?;
        }
        said_none = tick.samples.is_empty();
        for c in &tick.closed {
            closed.push(TcpClosed {
                local: c.conn.local.to_string(),
                remote: c.conn.remote.to_string(),
                cookie: c.conn.cookie,
                at_ns: roundtrip::units::nanos(c.at),
            });
        }
        sample_count += tick.samples.len() as u64;
        if keep {
            samples.extend(tick.samples);
            if samples.len() >= MAX_KEPT_SAMPLES {
                note(format!(
                    "stopped after {} samples: --json/--report keep every sample, and {MAX_KEPT_SAMPLES} is the most kept; raise --report-interval, narrow with --port/--host/--pid, or leave out --json/--report",
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
    if let Some(w) = full_log.take() {
        w.into_inner()
            .map_err(|e| anyhow::Error::from(e.into_error()))
            .and_then(|f| f.commit().map_err(anyhow::Error::from))
            .context("writing the full log")?;
        if let Some(p) = &a.full_log {
            note(format!("full log: {sample_count} rows in {}", p.display()));
        }
    }
    let connections = watcher.summaries();
    let doc = TcpDoc {
        header: Header::new(kind::TCP),
        started_unix_s: started
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        filter: filter.clone(),
        interval_ns: roundtrip::units::nanos(a.interval),
        duration_ns: a.time.map(roundtrip::units::nanos),
        samples,
        closed,
        connections,
        cancelled: cancel.load(Ordering::SeqCst),
    };
    if a.pictures.wanted() {
        super::report::after_run(&a.pictures, &doc, None, &text::describe(&filter))?;
    }
    if a.json {
        out(doc::to_bytes(&doc))?;
    } else {
        out_text(text::watch_end(
            &filter,
            &doc.connections,
            sample_count,
            start.elapsed(),
        ))?;
    }
    Ok(Exit::Ok)
}
