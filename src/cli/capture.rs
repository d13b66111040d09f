//! `roundtrip capture stats|timeline|flows`: what TCP did, from a tcpdump capture.

mod flows;

use super::args;
use super::capture_args::{ExprArgs, damage, refuse};
use super::capture_live::{self as live_cli, LiveArgs};
use super::output::{Exit, error_line, note, out, out_text};
use clap::{Args, Subcommand};
use roundtrip::capture::flows::TrackerConfig;
use roundtrip::capture::{self, CaptureInfo, Filter};
use roundtrip::doc::capture_timeline::TimelineDoc;
use roundtrip::report::text::Table;
use roundtrip::units::{fmt_bytes, fmt_nanos};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

const FILTER_HELP: &str = "Filters (all given must hold): --host ADDR matches either address; --port N either TCP/UDP \
port; --flow ADDR:PORT-ADDR:PORT one conversation in either direction (IPv6 as [ADDR]:PORT; ',' also separates); \
--filter EXPR (or words after FILE, as tcpdump takes them) a tcpdump expression such as 'tcp port 5432 or tcp \
port 6379', 'net 10.0.0.0/8 and not port 22' (subset: docs/capture-filter.md). \
Input: pcap (us or ns), pcapng, either gzip-compressed; link types Ethernet (VLAN), Linux cooked v1/v2 \
(tcpdump -i any), raw IP, BSD loopback. \
Live: --live IFACE (or any) captures on an interface instead of reading FILE (root or CAP_NET_RAW), through the \
same analyses; Ctrl-C, SIGTERM, --duration or --count end it and print the summary. Every interval line and the \
summary give the packets the KERNEL dropped (ring full: raise --buffer). With --json the live lines go to stderr \
and one document to stdout at the end.";

/// Arguments of `roundtrip capture`.
#[derive(Debug, Args)]
#[command(after_help = FILTER_HELP)]
pub struct CaptureArgs {
    #[command(subcommand)]
    command: CaptureCommand,
}

#[derive(Debug, Subcommand)]
enum CaptureCommand {
    /// Per-interval packets, bytes, packets/s, bit/s and packet sizes (tcpstat's view).
    #[command(after_help = FILTER_HELP)]
    Stats(StatsArgs),
    /// Every packet of one TCP connection (tcpdump -ttt): delta, direction, flags, relative seq/ack, length,
    /// scaled window, bytes in flight.
    #[command(after_help = FILTER_HELP)]
    Timeline(TimelineArgs),
    /// One row per TCP connection: bytes, handshake and data RTT, in flight, window, retransmissions, and a
    /// diagnosis.
    #[command(after_help = FILTER_HELP)]
    Flows(FlowsArgs),
    // --- issue 7: per-request latency and client/server matching (src/cli/capture_rpc.rs) ---
    /// Request/response latency per operation (NFS/ONC-RPC, PostgreSQL, MySQL, Redis, DNS, HTTP, TNS, sockperf,
    /// generic TCP turns), the slowest requests, and what could not be paired.
    #[command(after_help = super::capture_rpc::RPC_HELP)]
    Rpc(super::capture_rpc::RpcArgs),
    /// The same requests in a client-side and a server-side capture: latency at each end, the difference
    /// (network + client stack), the clock offset, and a verdict.
    #[command(after_help = super::capture_rpc::MATCH_HELP)]
    Match(super::capture_rpc::MatchArgs),
    /// An application's run time at another RTT, bandwidth and loss, predicted from today's capture: per
    /// connection turns, think/server/round-trip/transfer breakdown, chattiness and seconds per added ms.
    #[command(after_help = super::capture_whatif::WHATIF_HELP)]
    Whatif(super::capture_whatif::WhatifArgs),
    /// Compile a filter expression and print the classic BPF program (as `tcpdump -d`), for a link type or for
    /// the cooked socket of the `any` device.
    Bpf(BpfArgs),
}

/// Arguments of `roundtrip capture bpf`.
#[derive(Debug, Args)]
struct BpfArgs {
    /// Compile for: ethernet, linux-sll, linux-sll2, raw, ipv4, ipv6, null, loop (a file's or a SOCK_RAW
    /// socket's link type), a LINKTYPE number, or any (AF_PACKET SOCK_DGRAM: the ethertype is ancillary data).
    #[arg(long, default_value = "ethernet", value_name = "TYPE")]
    link: String,
    /// Add the check that drops packets this host sends (as on `lo`, so each packet is seen once).
    #[arg(long)]
    drop_outgoing: bool,
    /// The value an accepted packet returns (bytes kept).
    #[arg(long, default_value = "262144", value_parser = super::args::snaplen, value_name = "BYTES")]
    snaplen: u32,
    /// The expression, as words (as tcpdump takes it).
    #[arg(value_name = "EXPRESSION", required = true, allow_hyphen_values = true)]
    words: Vec<String>,
}

fn bpf_dump(a: BpfArgs) -> anyhow::Result<Exit> {
    use roundtrip::capture::bpf::{Expr, Options, Target};
    use roundtrip::capture::read::LinkType;
    let target = match a.link.as_str() {
        "any" | "cooked" => Target::Cooked,
        "ethernet" | "en10mb" => Target::Link(LinkType::ETHERNET),
        "linux-sll" | "sll" => Target::Link(LinkType::LINUX_SLL),
        "linux-sll2" | "sll2" => Target::Link(LinkType::LINUX_SLL2),
        "raw" => Target::Link(LinkType::RAW),
        "ipv4" => Target::Link(LinkType::IPV4),
        "ipv6" => Target::Link(LinkType::IPV6),
        "null" => Target::Link(LinkType::NULL),
        "loop" => Target::Link(LinkType::LOOP),
        n => match n.parse::<u16>() {
            Ok(v) => Target::Link(LinkType(v)),
            Err(_) => refuse(format!(
                "--link '{n}' is not a link type: write ethernet, linux-sll, linux-sll2, raw, ipv4, ipv6, null, loop, any or a number"
            )),
        },
    };
    let text = a.words.join(" ");
    let shown = roundtrip::capture::bpf::excerpt(&text, None);
    let expr = Expr::parse(&text).unwrap_or_else(|e| refuse(format!("'{shown}': {e}")));
    let opts = Options {
        drop_outgoing: a.drop_outgoing,
        snaplen: a.snaplen,
    };
    let p = expr
        .compile(target, &opts)
        .unwrap_or_else(|e| refuse(format!("'{shown}': {e}")));
    // The program is roundtrip's own text (tcpdump -d's layout, tabs included): nothing from the network in it.
    out(p.dump())?;
    Ok(Exit::Ok)
}

#[derive(Debug, Args)]
struct Common {
    /// Capture file (pcap, pcapng, optionally .gz); or --live IFACE.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    #[command(flatten)]
    live: LiveArgs,
    /// Only packets to or from this address.
    #[arg(long, value_parser = parse_host, value_name = "ADDR")]
    host: Option<IpAddr>,
    /// Only packets with this TCP/UDP port on either side.
    #[arg(long, value_name = "PORT", value_parser = args::port)]
    port: Option<u16>,
    /// Only this conversation: ADDR:PORT-ADDR:PORT (either order).
    #[arg(long, value_parser = parse_flow, value_name = "A:P-B:P")]
    flow: Option<(SocketAddr, SocketAddr)>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    expr: ExprArgs,
}

impl Common {
    /// The capture file (live: none; a word there is the filter expression's first).
    fn file(&self) -> Option<&std::path::Path> {
        if self.live.is_live() {
            None
        } else {
            self.file.as_deref()
        }
    }

    /// Checks the file/live options (exit 2 on a mistake) and opens the packet source: one reader (`capture
    /// timeline` follows one connection, which the kernel hands to one ring of a fanout group).
    fn open(&self, filter: &Filter) -> anyhow::Result<live_cli::Opened> {
        if let Err(e) = self.live.validate(self.file()) {
            refuse(e);
        }
        if self.live.threads > 1 {
            refuse(anyhow::anyhow!(
                "--threads {}: capture timeline follows one connection, whose packets all reach one ring of a fanout group, so more threads cannot help; use --threads 1",
                self.live.threads
            ));
        }
        live_cli::open(self.file(), &self.live, filter)
    }

    /// [`open`](Self::open) allowing `--threads N` (a fanout group: [`live_cli::Opened::more`]): capture stats,
    /// flows.
    fn open_group(&self, filter: &Filter) -> anyhow::Result<live_cli::Opened> {
        if let Err(e) = self.live.validate(self.file()) {
            refuse(e);
        }
        live_cli::open(self.file(), &self.live, filter)
    }

    /// What the reports name the input by.
    fn label(&self) -> String {
        match (self.file(), &self.live.live) {
            (Some(f), _) => f.display().to_string(),
            (None, Some(i)) => format!("{i} (live)"),
            (None, None) => String::new(),
        }
    }

    fn filter(&self) -> Filter {
        Filter {
            host: self.host,
            port: self.port,
            flow: self.flow,
            expr: if self.live.is_live() {
                self.expr.expr_after(self.file.as_deref())
            } else {
                self.expr.expr()
            },
        }
    }
}

fn parse_host(s: &str) -> Result<IpAddr, String> {
    Filter::parse_host(s).map_err(|e| e.to_string())
}

fn parse_flow(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    Filter::parse_flow(s).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
struct StatsArgs {
    #[command(flatten)]
    common: Common,
    /// Length of each row's interval.
    #[arg(long, short = 'i', default_value = "1s", value_parser = args::positive_duration)]
    interval: Duration,
    /// Split every interval into client->server, server->client and other (the client sent the SYN; without
    /// one, the higher port is the client's).
    #[arg(long)]
    by_direction: bool,
    #[command(flatten)]
    pictures: super::report::PictureArgs,
}

#[derive(Debug, Args)]
struct TimelineArgs {
    #[command(flatten)]
    common: Common,
    /// Print absolute times (seconds since the first packet) beside the deltas.
    #[arg(long)]
    absolute: bool,
    /// Whose data the time-sequence graph (--report, --svg, --json) draws: the busier direction, the
    /// client's (the side that sent the SYN) or the server's.
    #[arg(long, value_enum, default_value = "busier")]
    data_from: DataFromArg,
    /// Print only the heading and the diagnosis, not one row per packet (for --report/--svg on big captures).
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    pictures: super::report::PictureArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DataFromArg {
    /// The direction that carried more payload.
    Busier,
    /// The client's data.
    Client,
    /// The server's data.
    Server,
}

#[derive(Debug, Args)]
struct FlowsArgs {
    #[command(flatten)]
    common: Common,
    /// A connection silent this long (capture time) is finished and its memory freed.
    #[arg(long, default_value = "300s", value_parser = args::positive_duration)]
    idle_timeout: Duration,
    #[command(flatten)]
    pictures: super::report::PictureArgs,
}

/// Runs `roundtrip capture ...`.
pub fn run(a: CaptureArgs) -> anyhow::Result<Exit> {
    match a.command {
        CaptureCommand::Stats(s) => stats(s),
        CaptureCommand::Timeline(t) => timeline(t),
        CaptureCommand::Flows(f) => flows::flows(f),
        CaptureCommand::Rpc(r) => super::capture_rpc::run_rpc(r),
        CaptureCommand::Match(m) => super::capture_rpc::run_match(m),
        CaptureCommand::Whatif(w) => super::capture_whatif::run(w),
        CaptureCommand::Bpf(b) => bpf_dump(b),
    }
}

/// Exits 0 when stdout was closed (`| head`), else returns the error.
fn live_out(json: bool, s: &str) {
    if let Err(e) = live_cli::line(json, s)
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// Notes on stderr, and the exit status: reading that stopped early is an error (results are still printed).
fn finish(info: &CaptureInfo, json: bool) -> Exit {
    if live_cli::failed(info) {
        if let Some(r) = info.source.as_ref().and_then(|s| s.stop_reason.as_ref()) {
            error_line(format!("{}: {r}", info.file));
        }
        return Exit::Failed;
    }
    if !json && info.packets_not_ip > 0 {
        note(format!(
            "note: {} of {} packets were not IP or were cut before the IP header (first: {})",
            info.packets_not_ip,
            info.packets_read,
            info.not_ip_example.as_deref().unwrap_or("-")
        ));
    }
    damage(info)
}

fn heading(info: &CaptureInfo) -> String {
    if let Some(l) = &info.source {
        return live_cli::heading(info, l);
    }
    format!(
        "{}: {}{}, {} ({}), {} packets{}",
        info.file,
        info.format,
        if info.gzip { " (gzip)" } else { "" },
        if info.link_types.is_empty() {
            "no link type seen".to_string()
        } else {
            info.link_types.join("+")
        },
        fmt_bytes(info.file_bytes),
        info.packets_read,
        match (&info.filter, info.packets_filtered_out) {
            (Some(f), Some(n)) => format!(" ({n} left out by filter '{f}')"),
            _ => String::new(),
        }
    )
}

/// Bits per second for humans.
fn fmt_bits(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.2} Mbit/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kbit/s", bps / 1e3)
    } else {
        format!("{bps:.0} bit/s")
    }
}

fn stats(a: StatsArgs) -> anyhow::Result<Exit> {
    let filter = a.common.filter();
    a.pictures.validate().map_err(super::output::refused)?;
    let src = a.common.open_group(&filter)?;
    let counters = src.counters.clone();
    let json = a.common.json;
    let by_dir = a.by_direction;
    let mut on_rows = |rows: &[capture::stats::StatsRow], start: i64| {
        let base = (rows[0].start_s * 1e9).round() as i64;
        for row in rows {
            let at = start + (row.start_s * 1e9).round() as i64 - base;
            live_out(
                json,
                &format!(
                    "{}{}  {} packets  {} bytes  {:.1} pkt/s  {}  size min/mean/max {}/{:.1}/{}  kernel drops {}",
                    live_cli::clock(at),
                    if by_dir {
                        format!("  {}", row.direction.label())
                    } else {
                        String::new()
                    },
                    row.packets,
                    row.bytes,
                    row.packets_per_s,
                    fmt_bits(row.bits_per_s),
                    row.size_min,
                    row.size_mean,
                    row.size_max,
                    live_cli::drops_now(&counters)
                ),
            );
        }
    };
    let r = if src.more.is_empty() {
        capture::run_stats_on(
            src.packets,
            &filter,
            a.interval,
            a.by_direction,
            &mut on_rows,
        )
    } else {
        let mut group = vec![src.packets];
        group.extend(src.more);
        capture::run_stats_fanout(group, &filter, a.interval, a.by_direction, &mut on_rows)
    }
    .map_err(|e| match e {
        // The interval asked for makes too many rows: a refusal of the argument (exit 2).
        capture::CaptureError::TooManyRows { .. } => super::output::refused(e),
        e => e.into(),
    })?;
    let label = a.common.label();
    if a.pictures.wanted() || a.common.json {
        super::report::draw_and_print_doc(
            &a.pictures,
            a.common.json,
            &roundtrip::doc::capture_stats::StatsDoc::new(r.clone()),
            &label,
        )?;
    }
    if a.common.json {
        return Ok(finish(&r.capture, true));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}; {} matched; interval {}; sizes are on-wire bytes",
        heading(&r.capture),
        r.capture.packets_matched,
        fmt_nanos(a.interval.as_nanos() as f64)
    );
    let mut cols = vec!["time(s)"];
    if a.by_direction {
        cols.push("dir");
    }
    cols.extend([
        "packets", "bytes", "pkt/s", "bit/s", "min", "mean", "max", "stddev",
    ]);
    let mut t = Table::new(&cols);
    let live = r.capture.is_live();
    let cells = |row: &capture::stats::StatsRow, time: String, dir: bool| {
        let mut c = vec![time];
        if dir {
            c.push(row.direction.label().to_string());
        }
        c.extend([
            row.packets.to_string(),
            row.bytes.to_string(),
            format!("{:.1}", row.packets_per_s),
            fmt_bits(row.bits_per_s),
            row.size_min.to_string(),
            format!("{:.1}", row.size_mean),
            row.size_max.to_string(),
            format!("{:.1}", row.size_stddev),
        ]);
        c
    };
    // Live: the interval rows were printed as they ended; the summary is the total.
    for row in r.rows.iter().filter(|_| !live) {
        t.row(cells(row, format!("{:.3}", row.start_s), a.by_direction));
    }
    let span = match (r.first_ts_ns, r.last_ts_ns) {
        (Some(f), Some(l)) => (l - f) as f64 / 1e9,
        _ => 0.0,
    };
    t.row(cells(&r.total, format!("total {span:.3}s"), a.by_direction));
    s.push_str(&t.render(0));
    out_text(s)?;
    Ok(finish(&r.capture, false))
}

/// The error for a filter no TCP connection passes: with `--flow`, the connections the file does hold (the
/// file is read a second time, without the flow), so the user can copy one.
fn no_connection(file: Option<&std::path::Path>, info: &CaptureInfo, filter: &Filter) -> String {
    let (Some((a, b)), Some(file)) = (filter.flow, file) else {
        return no_tcp(info, filter);
    };
    let others = Filter {
        flow: None,
        ..filter.clone()
    };
    let mut flows = match capture::run_flows(file, &others, TrackerConfig::default(), None) {
        Ok(r) => r.flows,
        Err(_) => Vec::new(),
    };
    if flows.is_empty() {
        return format!(
            "{}: --flow {a}-{b} is not in the file, which holds no TCP connection{} ({} packets)",
            info.file,
            if others.is_empty() {
                ""
            } else {
                " passing the other filters"
            },
            info.packets_read
        );
    }
    flows.sort_by_key(|f| {
        std::cmp::Reverse(f.client_to_server.payload_bytes + f.server_to_client.payload_bytes)
    });
    let shown: Vec<String> = flows
        .iter()
        .take(8)
        .map(|f| {
            format!(
                "{}-{} ({} packets)",
                f.client,
                f.server,
                f.client_to_server.packets + f.server_to_client.packets
            )
        })
        .collect();
    format!(
        "{}: --flow {a}-{b} is not in the file; its TCP connections{}: {}{} (give one of these to --flow)",
        info.file,
        if flows.len() > shown.len() {
            format!(", the {} largest of {}", shown.len(), flows.len())
        } else {
            String::new()
        },
        shown.join(", "),
        if flows.len() > shown.len() {
            ", ..."
        } else {
            ""
        }
    )
}

fn timeline(a: TimelineArgs) -> anyhow::Result<Exit> {
    let filter = a.common.filter();
    a.pictures.validate().map_err(super::output::refused)?;
    let graph = (a.common.json || a.pictures.wanted()).then_some(match a.data_from {
        DataFromArg::Busier => capture::DataFrom::Busier,
        DataFromArg::Client => capture::DataFrom::Client,
        DataFromArg::Server => capture::DataFrom::Server,
    });
    // Rows are only kept when printed: -q with --report/--svg holds the graph's records, not a row a packet.
    let keep_rows = a.common.json || !a.quiet;
    let src = a.common.open(&filter)?;
    let live = src.counters.is_some();
    let json = a.common.json;
    let quiet = a.quiet;
    let mut prev_ts: Option<i64> = None;
    let mut printed_head = false;
    let mut on_row = |row: &capture::TimelineRow, c: SocketAddr, srv: SocketAddr| {
        if quiet {
            return;
        }
        if !printed_head {
            printed_head = true;
            live_out(
                json,
                &format!(
                    "following {c} (client, >) - {srv} (server, <); columns: time delta dir flags seq ack len win in-flight notes"
                ),
            );
        }
        let delta = prev_ts.map_or(0, |p| row.ts_ns - p);
        prev_ts = Some(row.ts_ns);
        live_out(
            json,
            &format!(
                "{} {:.6} {} {} {} {} {} {} {} {}",
                live_cli::clock(row.ts_ns),
                delta as f64 / 1e9,
                row.direction.arrow(),
                row.flags,
                if row.len > 0 {
                    format!("{}:{}", row.seq, row.seq.wrapping_add(row.len))
                } else {
                    row.seq.to_string()
                },
                row.ack.map_or("-".into(), |a| a.to_string()),
                row.len,
                row.window_bytes,
                row.in_flight_bytes.map_or("-".into(), |f| f.to_string()),
                row.notes.join(",")
            ),
        );
    };
    let r = capture::run_timeline_on(
        src.packets,
        &filter,
        TrackerConfig::default(),
        graph,
        keep_rows && (!live || json),
        if live { Some(&mut on_row) } else { None },
    );
    let mut r = TimelineDoc::new(r);
    if r.flow.is_some() && a.pictures.wanted() {
        // The picture needs the graph, not a row per packet: a million rows would be held twice.
        let rows = std::mem::take(&mut r.rows);
        super::report::after_run(&a.pictures, &r, None, &a.common.label())?;
        r.rows = rows;
    }
    if a.common.json {
        out(roundtrip::doc::to_bytes(&r))?;
        let e = finish(&r.capture, true);
        if r.flow.is_none() {
            error_line(no_connection(a.common.file(), &r.capture, &filter));
            return Ok(Exit::Failed);
        }
        return Ok(e);
    }
    let Some(flow) = &r.flow else {
        out_text(format!("{}\n", heading(&r.capture)))?;
        let _ = finish(&r.capture, false);
        error_line(no_connection(a.common.file(), &r.capture, &filter));
        return Ok(Exit::Failed);
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}\nconnection #{}: {} (client, >) - {} (server, <), {} packets, {}{}",
        heading(&r.capture),
        flow.id,
        flow.client,
        flow.server,
        r.capture.packets_matched,
        flow.state.replace('_', " "),
        if filter.flow.is_none() {
            "; first TCP connection that matched: choose another with --flow A:P-B:P"
        } else {
            ""
        }
    );
    let mut cols = vec!["delta"];
    if a.absolute {
        cols.push("time(s)");
    }
    cols.extend([
        "dir",
        "flags",
        "seq",
        "ack",
        "len",
        "win",
        "in flight",
        "notes",
    ]);
    let mut t = Table::new(&cols);
    let t0 = r.rows.first().map_or(0, |x| x.ts_ns);
    for row in r.rows.iter().filter(|_| !a.quiet) {
        let mut c = vec![format!("{:.6}", row.delta_ns as f64 / 1e9)];
        if a.absolute {
            c.push(format!("{:.6}", (row.ts_ns - t0) as f64 / 1e9));
        }
        let seq = if row.len > 0 {
            format!("{}:{}", row.seq, row.seq.wrapping_add(row.len))
        } else {
            row.seq.to_string()
        };
        c.extend([
            row.direction.arrow().to_string(),
            row.flags.clone(),
            seq,
            row.ack.map_or("-".into(), |a| a.to_string()),
            row.len.to_string(),
            row.window_bytes.to_string(),
            row.in_flight_bytes.map_or("-".into(), |f| f.to_string()),
            row.notes
                .iter()
                .map(|n| n.to_string())
                .chain(row.sack.iter().map(|b| format!("sack {}:{}", b[0], b[1])))
                .collect::<Vec<_>>()
                .join(","),
        ]);
        t.row(c);
    }
    // Live, the rows were printed as the packets came.
    if !a.quiet && !r.capture.is_live() {
        s.push_str(&t.render(0));
    }
    if let Some(g) = &r.seq_graph {
        let _ = writeln!(
            s,
            "time-sequence graph: data {} -> {}: {} segments ({} retransmitted), {} ACKs ({} with SACK blocks, {} with a zero window), {} zero-window periods",
            g.sender,
            g.receiver,
            g.data_segments,
            g.retransmitted_segments,
            g.acks,
            g.sack_packets,
            g.zero_window_packets,
            g.zero_windows.len()
        );
    }
    let _ = writeln!(s, "diagnosis: {}", flow.diagnosis);
    out_text(s)?;
    Ok(finish(&r.capture, false))
}

fn no_tcp(info: &CaptureInfo, filter: &Filter) -> String {
    format!(
        "{}: no TCP connection {}among {} packets (list them with `roundtrip capture flows {}`)",
        info.file,
        if filter.is_empty() {
            ""
        } else {
            "matching the filter "
        },
        info.packets_read,
        info.file
    )
}
