//! `roundtrip capture rpc` (per-request latency per operation) and `roundtrip capture match` (the same requests
//! in a client-side and a server-side capture).

use super::super::args;
use super::super::output::{Exit, error_line, note, out_text};
use anyhow::Context;
use clap::Args;
use roundtrip::capture::CaptureInfo;
use roundtrip::capture::keep::{FlightRecorder, KeepDir};
use roundtrip::capture::rpc::Proto;
use roundtrip::capture::rpc::driver::ProtoChoice;
use roundtrip::capture::rpc::run::{self, RpcResult};
use roundtrip::capture::rpc::stats::StatsConfig;
use roundtrip::capture::rpc::tlskeys::KeyLog;
use roundtrip::doc::rpc::RpcDoc;
use roundtrip::terminal::escape_for_terminal as esc;
use roundtrip::units::fmt_nanos;
use std::path::PathBuf;
use std::time::Duration;

/// Help shown after `capture rpc --help`.
pub const RPC_HELP: &str = "Two latencies per request, both from the packet that completes the request: 'first' to \
the first packet of the response (server + one network round trip; tshark's rpc,srt) and 'last' to \
the packet that completes it (adds the transfer of the response; tshark's rpc.time, dns.time, http.time, and \
smb2,srt, which times a reassembled SMB2 response at its last packet). \
Protocols are chosen by the server port (2049/111 NFS, 5432 PostgreSQL, 3306 MySQL, 6379 Redis, 53 DNS, \
80/8080 HTTP, 1521 TNS, 445/139 SMB2, 11111 sockperf, 443 TLS), then by content; --proto forces one. TLS is recognised by its handshake (also after \
PostgreSQL's SSLRequest or a STARTTLS): without --keylog its requests are timed as turns of TLS records. Requests are paired with their responses by \
ONC-RPC XID, DNS ID or SMB2 message id within the connection, otherwise in order. SMB2 READ/WRITE bytes \
are shown per operation and errors by NT status.";

/// Arguments of `roundtrip capture rpc`.
#[derive(Debug, Args)]
pub struct RpcArgs {
    /// Capture file (pcap, pcapng, optionally .gz); or --live IFACE.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    #[command(flatten)]
    live: super::live::LiveArgs,
    /// Live flight recorder: write the packets of a connection around each request slower than this to
    /// --keep-dir (see the help's end).
    #[arg(long, value_parser = args::positive_duration, value_name = "DURATION", requires = "keep_dir")]
    keep_slow: Option<Duration>,
    /// Where the flight recorder writes its files (created mode 0700 if missing; files are mode 0600, never
    /// written through a symbolic link; at most 100 files and 256 MiB of them, the oldest rotated out).
    #[arg(long, value_name = "DIR", requires = "keep_slow")]
    keep_dir: Option<PathBuf>,
    /// Protocol: auto, nfs (any ONC-RPC), pgsql, mysql, redis, dns, http, tns, smb2, sockperf, tls or generic.
    #[arg(long, default_value = "auto", value_parser = parse_proto)]
    proto: ProtoChoice,
    /// One row per connection as well.
    #[arg(long)]
    by_conn: bool,
    /// Rows of count and latency per interval of this length (by response time); live: per operation, printed as
    /// each interval ends (default 1s).
    #[arg(long, alias = "interval", value_parser = args::positive_duration, value_name = "DURATION")]
    report_interval: Option<Duration>,
    /// How many of the slowest requests to list (0 for none).
    #[arg(long, default_value = "10", value_name = "N")]
    top: usize,
    #[command(flatten)]
    only: super::FilterArgs,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    expr: super::ExprArgs,
    /// TLS session keys (SSLKEYLOGFILE format, as Wireshark's tls.keylog_file): decrypt TLS 1.2/1.3 records
    /// and time the protocol inside.
    #[arg(long, value_parser = args::input_file, value_name = "FILE")]
    keylog: Option<PathBuf>,
    #[command(flatten)]
    pictures: super::super::report::PictureArgs,
}

pub(super) fn parse_proto(s: &str) -> Result<ProtoChoice, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(ProtoChoice::Auto);
    }
    Proto::parse(s).map(ProtoChoice::Force).ok_or_else(|| {
        format!(
            "unknown protocol '{s}': use auto, nfs, pgsql, mysql, redis, dns, http, tns, smb2, sockperf, tls or generic"
        )
    })
}

pub(super) fn warn_exit(info: &CaptureInfo) -> Exit {
    super::damage(info)
}

/// Says how TLS connections were timed.
fn tls_note(r: &RpcResult, keylog: Option<&std::path::Path>) {
    let c = &r.counts;
    let turns = c.tls_connections - c.tls_decrypted.min(c.tls_connections);
    if c.tls_decrypted > 0 {
        note(format!(
            "{} TLS connection(s) decrypted with the keys of {}",
            c.tls_decrypted,
            keylog.map(|p| p.display().to_string()).unwrap_or_default()
        ));
    }
    if turns == 0 {
        return;
    }
    match keylog {
        Some(p) if c.tls_no_key > 0 => note(format!(
            "{turns} TLS connection(s) without a working key in {}: timed as turns of TLS records \
             (tls turn: the client's records until the server answers); statements cannot be named",
            p.display()
        )),
        _ => note(format!(
            "{turns} TLS connection(s): timed as turns of TLS records (tls turn: the client's records until \
             the server answers); statements cannot be named without the session keys (--keylog FILE, \
             as SSLKEYLOGFILE writes it)"
        )),
    }
}

/// The live part of `capture rpc`: per-interval rows per operation as they end, and the flight recorder.
struct LiveRpc {
    counters: Option<std::sync::Arc<roundtrip::capture::live::LiveCounters>>,
    json: bool,
    recorder: Option<FlightRecorder>,
}

impl LiveRpc {
    fn print(&self, closed: Vec<(Duration, Vec<roundtrip::capture::rpc::stats::OpInterval>)>) {
        if closed.is_empty() {
            return;
        }
        let drops = super::live::drops_now(&self.counters);
        for (start, rows) in closed {
            let at = super::live::clock(start.as_nanos() as i64);
            let line = if rows.is_empty() {
                format!("{at}  no requests  | kernel drops {drops}")
            } else {
                rows.iter()
                    .map(|r| {
                        format!(
                            "{at}  {} {}  count {}  p50 {}  p99 {}  max {}  errors {}  | kernel drops {drops}",
                            r.proto.name(),
                            esc(&r.op),
                            r.count,
                            fmt_nanos(r.last_byte.p50_ns as f64),
                            fmt_nanos(r.last_byte.p99_ns as f64),
                            fmt_nanos(r.last_byte.max_ns as f64),
                            r.errors
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if let Err(e) = super::live::line(self.json, &line)
                && e.kind() == std::io::ErrorKind::BrokenPipe
            {
                std::process::exit(0);
            }
        }
    }
}

impl roundtrip::capture::rpc::Sink for LiveRpc {
    fn transaction(
        &mut self,
        conn: &roundtrip::capture::rpc::driver::ConnInfo,
        t: roundtrip::capture::rpc::Transaction,
    ) {
        if let Some(r) = &mut self.recorder
            && let Some(path) = r.transaction(conn, &t)
        {
            note(format!(
                "kept {} ({} {} took {})",
                path.display(),
                conn.proto.name(),
                esc(&t.op),
                fmt_nanos(t.last_byte().as_nanos() as f64)
            ));
        }
    }
    fn anomaly(
        &mut self,
        _conn: &roundtrip::capture::rpc::driver::ConnInfo,
        _a: roundtrip::capture::rpc::Anomaly,
    ) {
    }
    fn wants_transactions(&self) -> bool {
        // Only the flight recorder looks at them: without it the statistics' sink need not hand them over.
        self.recorder.is_some()
    }
    fn packet(
        &mut self,
        p: &roundtrip::capture::read::Packet<'_>,
        seg: &roundtrip::capture::rpc::driver::Segment<'_>,
    ) {
        if let Some(r) = &mut self.recorder {
            r.packet(p, seg);
        }
    }
    fn live_rows(&mut self, rows: roundtrip::capture::rpc::stats::LiveRows) {
        self.print(rows);
    }
}

/// Runs `roundtrip capture rpc`.
pub fn run_rpc(mut a: RpcArgs) -> anyhow::Result<Exit> {
    // `-i 100ms` (the old spelling of --report-interval) is taken as the report period for this release.
    if let Some(d) = a.live.take_report_interval("rpc") {
        a.report_interval = Some(super::stats::report_interval(a.report_interval, Some(d))?);
    }
    // Live, a word after the options is the filter expression's first, not a file.
    let file = if a.live.is_live() {
        None
    } else {
        a.file.clone()
    };
    a.live
        .validate(file.as_deref())
        .map_err(super::super::output::refused)?;
    if a.live.threads > 1 && a.keep_slow.is_some() {
        return Err(super::super::output::refused(format!(
            "--threads {} with --keep-slow: the flight recorder needs one reader; use --threads 1",
            a.live.threads
        )));
    }
    if a.keep_slow.is_some() && !a.live.is_live() {
        return Err(super::super::output::refused(
            "--keep-slow is the live flight recorder: add --live IFACE (on a file, use --top to list the slowest)",
        ));
    }
    let filter = a.only.with(if a.live.is_live() {
        a.expr.expr_after(a.file.as_deref())?
    } else {
        a.expr.expr()?
    });
    let live = a.live.is_live();
    let config = StatsConfig {
        top: a.top,
        interval: a.report_interval,
        by_conn: a.by_conn,
        // Live: one row per operation and interval as each ends.
        live_interval: live.then(|| a.report_interval.unwrap_or(Duration::from_secs(1))),
    };
    a.pictures
        .validate()
        .map_err(super::super::output::refused)?;
    let keylog = match &a.keylog {
        Some(p) => Some(std::sync::Arc::new(KeyLog::load(p)?)),
        None => None,
    };
    let label = match (&file, &a.live.live) {
        (Some(f), _) => f.display().to_string(),
        (None, i) => format!("{} (live)", i.as_deref().unwrap_or("")),
    };
    // The flight recorder's directory, opened (or created, 0700) before capturing: a regular file or a
    // symbolic link there is refused now.
    let keep_dir = match (&a.keep_slow, &a.keep_dir) {
        (Some(_), Some(d)) => Some(
            KeepDir::open(d)
                .map_err(|e| super::super::output::refused(format!("--keep-dir {e}")))?,
        ),
        _ => None,
    };
    let src = super::live::open(file.as_deref(), &a.live, &filter)
        .with_context(|| format!("cannot analyse {label}"))?;
    let recorder = match (&a.keep_slow, keep_dir) {
        (Some(t), Some(d)) => Some(FlightRecorder::new(
            d,
            *t,
            src.packets
                .link()
                .unwrap_or(roundtrip::capture::read::LinkType::ETHERNET),
            a.live.snaplen,
        )),
        _ => None,
    };
    let mut also = LiveRpc {
        counters: src.counters.clone(),
        json: a.json,
        recorder,
    };
    let r = if !src.more.is_empty() {
        // --threads N: each thread its own ring and driver, one aggregation (the cap is shared out).
        let n = src.more.len() + 1;
        let mut group = vec![src.packets];
        group.extend(src.more);
        run::run_rpc_fanout(
            group,
            &filter,
            a.proto,
            config,
            keylog,
            Some((a.live.max_connections as usize).div_ceil(n)),
            &mut also,
        )
    } else {
        // Live: the --max-connections cap and the live rows; a file is read whole.
        let mut none = run::NoSink;
        let (cap, sink): (_, &mut dyn roundtrip::capture::rpc::Sink) = if live {
            (Some(a.live.max_connections as usize), &mut also)
        } else {
            (None, &mut none)
        };
        run::run_rpc_on(src.packets, &filter, a.proto, config, keylog, cap, sink)
    };
    if live {
        // (The last interval's rows were printed at the end of the capture, before the totals.)
        if let Some(rec) = &also.recorder {
            let k = rec.summary();
            note(format!(
                "flight recorder: {} file(s) written to {} ({} bytes){}{}{}",
                k.files.len(),
                a.keep_dir
                    .as_deref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default(),
                k.bytes_written,
                if k.rotated > 0 {
                    format!(
                        "; {} older file(s) rotated out (the directory keeps at most {} of them, {} MiB)",
                        k.rotated,
                        roundtrip::capture::keep::MAX_FILES,
                        roundtrip::capture::keep::MAX_DISK_BYTES >> 20
                    )
                } else {
                    String::new()
                },
                if k.not_written > 0 {
                    format!(
                        "; {} slow request(s) not written (limit of files or bytes reached)",
                        k.not_written
                    )
                } else {
                    String::new()
                },
                k.error
                    .as_deref()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default()
            ));
        }
    }
    if a.pictures.wanted() || a.json {
        let doc = RpcDoc::new(r.clone());
        super::super::report::draw_and_print_doc(&a.pictures, a.json, &doc, &label)?;
    }
    if !a.json {
        out_text(roundtrip::report::text::rpc::rpc_text(&r))?;
    }
    tls_note(&r, a.keylog.as_deref());
    if let Some(l) = &r.capture.source
        && l.packets_cut > 0
        && r.counts.gap_bytes > 0
    {
        note(format!(
            "note: --snaplen {} cut {} packets; {} payload bytes were missing to the parsers (requests whose \
             headers were cut cannot be named or paired): raise --snaplen",
            l.snaplen, l.packets_cut, r.counts.gap_bytes
        ));
    }
    let exit = warn_exit(&r.capture);
    if super::live::failed(&r.capture) {
        if let Some(w) = r
            .capture
            .source
            .as_ref()
            .and_then(|s| s.stop_reason.as_ref())
        {
            error_line(format!("{}: {w}", r.capture.file));
        }
        return Ok(Exit::Failed);
    }
    if r.report.transactions == 0 && exit == Exit::Failed {
        // The damage already is the error (one line); why nothing paired follows from it.
        note(format!(
            "note: no request/response pair in the {} packets before the damage",
            r.capture.packets_read
        ));
        return Ok(exit);
    }
    if r.report.transactions == 0 && !live {
        error_line(format!(
            "{}: no request/response pair found in {} packets ({} TCP/UDP connections); if the protocol runs on \
             an unusual port, name it with --proto",
            r.capture.file, r.capture.packets_read, r.counts.connections
        ));
        return Ok(Exit::Failed);
    }
    Ok(exit)
}
