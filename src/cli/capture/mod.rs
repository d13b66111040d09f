//! `roundtrip capture stats|timeline|flows`: what TCP did, from a tcpdump capture.

mod flows;
pub(super) mod live;
mod r#match;
mod rpc;
mod stats;
mod timeline;
mod whatif;

use super::args;
use super::output::{Exit, error_line, note, out, refused};
use clap::{Args, Subcommand};
use live::{self as live_cli, LiveArgs};
use roundtrip::capture::{CaptureInfo, Filter};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

const FILTER_HELP: &str = "Filters (all given must hold): --host ADDR matches either address; --port N either TCP/UDP \
port; --flow ADDR:PORT-ADDR:PORT one conversation in either direction (IPv6 as [ADDR]:PORT; ',' also separates); \
--filter EXPR (or words after FILE, as tcpdump takes them) a tcpdump expression such as 'tcp port 5432 or tcp \
port 6379', 'net 10.0.0.0/8 and not port 22' (subset: docs/capture-filter.md). \
Input: pcap (us or ns), pcapng, either gzip-compressed; link types Ethernet (VLAN), Linux cooked v1/v2 \
(tcpdump -i any), raw IP, BSD loopback. \
Live: -i/--live IFACE (or any) captures on an interface instead of reading FILE (root or CAP_NET_RAW), through the \
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
    Stats(stats::StatsArgs),
    /// Every packet of one TCP connection (tcpdump -ttt): delta, direction, flags, relative seq/ack, length,
    /// scaled window, bytes in flight.
    #[command(after_help = FILTER_HELP)]
    Timeline(timeline::TimelineArgs),
    /// One row per TCP connection: bytes, handshake and data RTT, in flight, window, retransmissions, and a
    /// diagnosis.
    #[command(after_help = FILTER_HELP)]
    Flows(flows::FlowsArgs),
    // --- issue 7: per-request latency and client/server matching (src/cli/capture/rpc.rs) ---
    /// Request/response latency per operation (NFS/ONC-RPC, PostgreSQL, MySQL, Redis, DNS, HTTP, TNS, sockperf,
    /// generic TCP turns), the slowest requests, and what could not be paired.
    #[command(after_help = rpc::RPC_HELP)]
    Rpc(rpc::RpcArgs),
    /// The same requests in a client-side and a server-side capture: latency at each end, the difference
    /// (network + client stack), the clock offset, and a verdict.
    #[command(after_help = r#match::MATCH_HELP)]
    Match(r#match::MatchArgs),
    /// An application's run time at another RTT, bandwidth and loss, predicted from today's capture: per
    /// connection turns, think/server/round-trip/transfer breakdown, chattiness and seconds per added ms.
    #[command(after_help = whatif::WHATIF_HELP)]
    Whatif(whatif::WhatifArgs),
    /// Compile a filter expression and print the classic BPF program (as `tcpdump -d`), for a link type or for
    /// the cooked socket of the `any` device.
    Bpf(BpfArgs),
}

/// Arguments of `roundtrip capture bpf`.
#[derive(Debug, Args)]
struct BpfArgs {
    /// Compile for: ethernet, linux-sll, linux-sll2, raw, ipv4, ipv6, null, loop (a file's or a SOCK_RAW
    /// socket's link type), a LINKTYPE number, or any (AF_PACKET SOCK_DGRAM: the ethertype is ancillary data).
    /// (tcpdump's -y)
    #[arg(
        short = 'y',
        long,
        alias = "link",
        default_value = "ethernet",
        value_name = "TYPE"
    )]
    linktype: String,
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
    let target = match a.linktype.as_str() {
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
            Err(_) => {
                return Err(refused(format!(
                    "--linktype '{n}' is not a link type: write ethernet, linux-sll, linux-sll2, raw, ipv4, ipv6, null, loop, any or a number"
                )));
            }
        },
    };
    let text = a.words.join(" ");
    let shown = roundtrip::capture::bpf::excerpt(&text, None);
    let expr = Expr::parse(&text).map_err(|e| refused(format!("'{shown}': {e}")))?;
    let opts = Options {
        drop_outgoing: a.drop_outgoing,
        snaplen: a.snaplen,
    };
    let p = expr
        .compile(target, &opts)
        .map_err(|e| refused(format!("'{shown}': {e}")))?;
    // The program is roundtrip's own text (tcpdump -d's layout, tabs included): nothing from the network in it.
    out(p.dump())?;
    Ok(Exit::Ok)
}

/// `--filter EXPR` or the expression as trailing words (tcpdump's way).
#[derive(Debug, Args)]
pub(super) struct ExprArgs {
    /// tcpdump filter expression (pcap-filter subset: host, net, port, portrange, src/dst, tcp, udp, icmp,
    /// icmp6, ip, ip6, arp, less, greater, and/or/not, tcp[tcpflags] ...), compiled to classic BPF and run on
    /// every packet; words after the file are taken the same way.
    #[arg(long = "filter", value_name = "EXPR", allow_hyphen_values = true)]
    filter: Option<String>,
    /// The filter expression as words after the file (as `tcpdump -r FILE port 5432`).
    #[arg(value_name = "EXPRESSION")]
    words: Vec<String>,
}

impl ExprArgs {
    /// The parsed expression (None when none was given). A bad expression is refused (exit 2), before any I/O.
    pub(super) fn expr(&self) -> anyhow::Result<Option<roundtrip::capture::bpf::Expr>> {
        self.expr_after(None)
    }

    /// Like [`expr`](Self::expr), with `lead` as the expression's first word: live (`--live lo port 5432`) the
    /// first word after the options is not a file.
    pub(super) fn expr_after(
        &self,
        lead: Option<&std::path::Path>,
    ) -> anyhow::Result<Option<roundtrip::capture::bpf::Expr>> {
        use roundtrip::capture::bpf::Expr;
        let mut words = self.words.clone();
        if let Some(l) = lead {
            words.insert(0, l.display().to_string());
        }
        let (text, r) = match (&self.filter, words.is_empty()) {
            (None, true) => return Ok(None),
            (Some(_), false) => {
                return Err(refused(format!(
                    "the filter expression is given twice (--filter and words after the file '{}'): give one",
                    roundtrip::capture::bpf::excerpt(&words.join(" "), None)
                )));
            }
            (Some(f), true) => (f.clone(), Expr::parse(f)),
            (None, false) => (words.join(" "), Expr::parse_words(&words)),
        };
        match r {
            Ok(e) if e.is_empty() => Ok(None),
            Ok(e) => Ok(Some(e)),
            Err(e) => Err(refused(format!(
                "--filter '{}': {e}",
                roundtrip::capture::bpf::excerpt(text.trim(), None)
            ))),
        }
    }
}

/// `--host`, `--port`, `--flow`: which packets of the capture count (stats, timeline, flows, rpc).
#[derive(Debug, Args)]
pub(super) struct FilterArgs {
    /// Only packets to or from this address.
    #[arg(long, value_parser = parse_host, value_name = "ADDR")]
    pub host: Option<IpAddr>,
    /// Only packets with this TCP/UDP port on either side.
    #[arg(long, value_name = "PORT", value_parser = args::port)]
    pub port: Option<u16>,
    /// Only this conversation: ADDR:PORT-ADDR:PORT (either order).
    #[arg(long, value_parser = parse_flow, value_name = "A:P-B:P")]
    pub flow: Option<(SocketAddr, SocketAddr)>,
}

impl FilterArgs {
    /// The filter of these options and `expr`.
    pub(super) fn with(&self, expr: Option<roundtrip::capture::bpf::Expr>) -> Filter {
        Filter {
            host: self.host,
            port: self.port,
            flow: self.flow,
            expr,
        }
    }
}

#[derive(Debug, Args)]
struct Common {
    /// Capture file (pcap, pcapng, optionally .gz); or --live IFACE.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    only: FilterArgs,
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

    /// Checks the file/live options (refused, exit 2, on a mistake) and opens the packet source: one reader (`capture
    /// timeline` follows one connection, which the kernel hands to one ring of a fanout group).
    fn open(&self, filter: &Filter) -> anyhow::Result<live_cli::Opened> {
        self.live.validate(self.file()).map_err(refused)?;
        if self.live.threads > 1 {
            return Err(refused(format!(
                "--threads {}: capture timeline follows one connection, whose packets all reach one ring of a fanout group, so more threads cannot help; use --threads 1",
                self.live.threads
            )));
        }
        live_cli::open(self.file(), &self.live, filter)
    }

    /// [`open`](Self::open) allowing `--threads N` (a fanout group: [`live_cli::Opened::more`]): capture stats,
    /// flows.
    fn open_group(&self, filter: &Filter) -> anyhow::Result<live_cli::Opened> {
        self.live.validate(self.file()).map_err(refused)?;
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

    /// The filter the options give (a bad expression is refused, exit 2).
    fn filter(&self) -> anyhow::Result<Filter> {
        Ok(self.only.with(if self.live.is_live() {
            self.expr.expr_after(self.file.as_deref())?
        } else {
            self.expr.expr()?
        }))
    }
}

/// Parses `--host`.
pub(super) fn parse_host(s: &str) -> Result<IpAddr, String> {
    Filter::parse_host(s).map_err(|e| e.to_string())
}

/// Parses `--flow`.
pub(super) fn parse_flow(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    Filter::parse_flow(s).map_err(|e| e.to_string())
}

/// Runs `roundtrip capture ...`.
pub fn run(a: CaptureArgs) -> anyhow::Result<Exit> {
    match a.command {
        CaptureCommand::Stats(s) => stats::stats(s),
        CaptureCommand::Timeline(t) => timeline::timeline(t),
        CaptureCommand::Flows(f) => flows::flows(f),
        CaptureCommand::Rpc(r) => rpc::run_rpc(r),
        CaptureCommand::Match(m) => r#match::run_match(m),
        CaptureCommand::Whatif(w) => whatif::run(w),
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

/// Reading that stopped before the end of the file (truncated, damaged, still being written) is an error for
/// every reader of a capture (stats, timeline, flows, rpc, match, whatif, replay), said the same way: one line
/// with the file, the reason and its byte offset, exit 1; the results of the packets before it are still
/// printed.
pub(super) fn damage(info: &CaptureInfo) -> Exit {
    match &info.warning {
        Some(w) => {
            error_line(format!(
                "{}: {w}; results cover the {} packets before it (the file is damaged or was still being written)",
                info.file, info.packets_read
            ));
            Exit::Failed
        }
        None => Exit::Ok,
    }
}
