//! `--live IFACE` for `roundtrip capture stats|flows|rpc|timeline`: the options, opening the packet source (a
//! file or an interface: the analyses do not know which), and the live lines' common parts.

use super::args;
use super::output::out;
use anyhow::Context;
use clap::Args;
use roundtrip::capture::live::{self, LiveConfig, LiveCounters, LiveInfo};
use roundtrip::capture::read::LinkType;
use roundtrip::capture::{CaptureInfo, Filter, Packets, bpf, write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Options of a live capture.
#[derive(Debug, Args, Clone)]
pub struct LiveArgs {
    /// Capture live on this interface (`any` for all) instead of reading a file.
    #[arg(long, value_name = "IFACE")]
    pub live: Option<String>,
    /// Live: stop after this long.
    #[arg(long, short = 't', value_parser = args::positive_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    /// Live: stop after this many packets, counted after every filter (--filter, --host, --port, --flow; tcpdump's -c).
    #[arg(long, short = 'c', value_parser = args::count, value_name = "N")]
    pub count: Option<u64>,
    /// Live: bytes kept of each packet (tcpdump's -s).
    #[arg(long, default_value_t = live::DEFAULT_SNAPLEN, value_parser = args::snaplen, value_name = "BYTES")]
    pub snaplen: u32,
    /// Live: size of the kernel's ring buffer (e.g. 16M; at least 16k): packets arriving while it is full are dropped.
    #[arg(long, value_parser = args::positive_size, value_name = "SIZE")]
    pub buffer: Option<u64>,
    /// Live: put the interface in promiscuous mode (off by default: only this host's traffic).
    #[arg(long)]
    pub promisc: bool,
    /// Live: also save what was captured (pcap, or pcapng when the name ends in .pcapng; nanosecond times).
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Live: connections tracked at once; past it the longest silent are finished early (counted).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..), value_name = "N")]
    pub max_connections: u64,
    /// Live, capture stats|flows|rpc: reader threads. With N > 1 (only then) N rings join one PACKET_FANOUT
    /// group that shares the packets by flow hash, each connection on one thread, results merged; use it when
    /// one core cannot keep up (kernel drops while the reader takes a whole core). Not for timeline (one
    /// connection reaches one ring), --count, --write, --keep-slow. At most 4 per CPU.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
}

impl LiveArgs {
    /// True when capturing live.
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// Checks the options before any I/O (exit 2 on a mistake).
    pub fn validate(&self, file: Option<&Path>) -> anyhow::Result<()> {
        match (&self.live, file) {
            (Some(_), Some(f)) => anyhow::bail!(
                "give a capture FILE or --live IFACE, not both ({} and --live)",
                f.display()
            ),
            (None, None) => anyhow::bail!("give a capture FILE, or --live IFACE to capture live"),
            _ => {}
        }
        if !self.is_live() {
            for (set, name) in [
                (self.duration.is_some(), "--duration"),
                (self.count.is_some(), "--count"),
                (self.buffer.is_some(), "--buffer"),
                (self.promisc, "--promisc"),
                (self.write.is_some(), "--write"),
            ] {
                if set {
                    anyhow::bail!("{name} is for live capture: add --live IFACE (or drop {name})");
                }
            }
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.threads == 0 || self.threads > cpus * 4 {
            anyhow::bail!(
                "--threads {}: give 1 to {} (4 per CPU, {cpus} CPUs here)",
                self.threads,
                cpus * 4
            );
        }
        if self.threads > 1 && !self.is_live() {
            anyhow::bail!("--threads is for live capture: add --live IFACE (or drop --threads)");
        }
        if self.threads > 1 && (self.count.is_some() || self.write.is_some()) {
            anyhow::bail!(
                "--threads {} with --count or --write: these need one reader; use --threads 1",
                self.threads
            );
        }
        if let Some(b) = self.buffer
            && b < live::MIN_BUFFER
        {
            anyhow::bail!("--buffer {b}: the ring needs at least 16k");
        }
        if let Some(i) = &self.live {
            live::check_interface(i)?;
        }
        Ok(())
    }
}

/// A packet source and, when live, its running counters.
pub struct Opened {
    /// The source.
    pub packets: Packets,
    /// Live counters (kernel drops) for interval lines (every ring's, summed).
    pub counters: Option<Arc<LiveCounters>>,
    /// `--threads N`: the other N-1 captures of the fanout group.
    pub more: Vec<Packets>,
}

/// Opens `file` or the live interface (Ctrl-C/SIGTERM end a live capture).
/// `filter`'s expression runs in the kernel (live) or on each packet of the file.
pub fn open(file: Option<&Path>, a: &LiveArgs, filter: &Filter) -> anyhow::Result<Opened> {
    let Some(iface) = &a.live else {
        let f = file.context("no capture file")?;
        return Ok(Opened {
            packets: Packets::open_filtered(f, filter)?,
            counters: None,
            more: Vec::new(),
        });
    };
    // --host/--port/--flow join the expression in the kernel, so `--count` counts the packets that pass every
    // filter and the rest never reach user space (the analyses still check them: same result).
    let kernel_expr = kernel_expression(filter).map_err(super::output::refused)?;
    let program = match &kernel_expr {
        Some(e) => {
            let target = match live::link_of(iface) {
                Some(l) => bpf::Target::Link(l),
                None => bpf::Target::Cooked,
            };
            let opts = bpf::Options {
                drop_outgoing: false,
                snaplen: a.snaplen,
            };
            let p = e
                .compile(target, &opts)
                .map_err(|err| anyhow::anyhow!("--filter '{}': {err}", e.excerpt()))?;
            Some(
                p.insns()
                    .iter()
                    .map(|i| libc::sock_filter {
                        code: i.code,
                        jt: i.jt,
                        jf: i.jf,
                        k: i.k,
                    })
                    .collect(),
            )
        }
        None => None,
    };
    let stop = super::common::cancel_on_ctrl_c();
    let cfg = LiveConfig {
        interface: iface.clone(),
        snaplen: a.snaplen,
        buffer: a.buffer.unwrap_or(live::DEFAULT_BUFFER),
        promisc: a.promisc,
        duration: a.duration,
        count: a.count,
        filter: program,
    };
    let mut group = live::LiveCapture::open_fanout(cfg, a.threads, stop)?.into_iter();
    let cap = group.next().context("no capture opened")?;
    let more: Vec<Packets> = group
        .map(|c| Packets::live(c, filter.expr_text()))
        .collect();
    {
        let i = cap.info();
        super::output::note(format!(
            "capturing on {} ({}), {}ring {} blocks x {} KiB, snaplen {}{}; Ctrl-C ends and prints the summary",
            i.interface,
            cap.link(),
            if a.threads > 1 {
                format!(
                    "{} threads (PACKET_FANOUT by flow hash), each a ",
                    a.threads
                )
            } else {
                String::new()
            },
            i.ring_blocks,
            i.block_bytes / 1024,
            i.snaplen,
            kernel_expr
                .as_ref()
                .map(|e| format!(", filter '{}' in the kernel", e.text()))
                .unwrap_or_default()
        ));
    }
    let counters = cap.counters();
    let link: LinkType = cap.link();
    let mut pk = Packets::live(cap, filter.expr_text());
    if let Some(w) = &a.write {
        pk.set_writer(write::PcapWriter::create(w, link, a.snaplen, 0o644)?);
    }
    Ok(Opened {
        packets: pk,
        counters: Some(counters),
        more,
    })
}

/// The expression the kernel runs live: `--filter`'s, and `--host`, `--port`, `--flow` as pcap-filter
/// primitives (`ip host A`, `tcp port P or udp port P`, both directions of the address pair), so every
/// filter is applied before a packet reaches user space. `None` when there is no filter at all.
pub fn kernel_expression(filter: &Filter) -> anyhow::Result<Option<bpf::Expr>> {
    fn host(dir: &str, a: std::net::IpAddr) -> String {
        let fam = if a.is_ipv4() { "ip" } else { "ip6" };
        format!("{fam} {dir}host {a}")
    }
    let mut parts: Vec<String> = Vec::new();
    if let Some(e) = filter.expr.as_ref().filter(|e| !e.is_empty()) {
        parts.push(format!("({})", e.text()));
    }
    if let Some(h) = filter.host {
        parts.push(host("", h));
    }
    if let Some(p) = filter.port {
        parts.push(format!("(tcp port {p} or udp port {p})"));
    }
    if let Some((a, b)) = filter.flow {
        let one_way = |x: std::net::SocketAddr, y: std::net::SocketAddr| {
            format!(
                "({} and {} and (tcp or udp) and src port {} and dst port {})",
                host("src ", x.ip()),
                host("dst ", y.ip()),
                x.port(),
                y.port()
            )
        };
        parts.push(format!("({} or {})", one_way(a, b), one_way(b, a)));
    }
    if parts.is_empty() {
        return Ok(None);
    }
    if parts.len() == 1 && filter.fields_empty() {
        return Ok(filter.expr.clone());
    }
    let text = parts.join(" and ");
    bpf::Expr::parse(&text).map(Some).map_err(|e| {
        anyhow::anyhow!(
            "--host/--port/--flow as a kernel filter '{}': {e}",
            bpf::excerpt(&text, None)
        )
    })
}

/// Interface names by index (live `any` keys connections by interface), read from /sys/class/net once per
/// index; an interface that is gone is shown by its index (`if7`).
#[derive(Debug, Default)]
pub struct InterfaceNames(std::collections::HashMap<u32, String>);

impl InterfaceNames {
    /// The name of interface `index`.
    pub fn name(&mut self, index: u32) -> String {
        self.0
            .entry(index)
            .or_insert_with(|| {
                live::interfaces()
                    .into_iter()
                    .find(|n| {
                        std::fs::read_to_string(format!("/sys/class/net/{n}/ifindex"))
                            .ok()
                            .and_then(|s| s.trim().parse::<u32>().ok())
                            == Some(index)
                    })
                    .unwrap_or_else(|| format!("if{index}"))
            })
            .clone()
    }
}

/// `12:34:56.789` (UTC) of a Unix time in ns.
pub fn clock(ns: i64) -> String {
    let ms = ns.div_euclid(1_000_000);
    let sod = ms.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60,
        ms.rem_euclid(1000)
    )
}

/// The drop count of an interval line.
pub fn drops_now(c: &Option<Arc<LiveCounters>>) -> u64 {
    c.as_ref().map_or(0, |c| c.drops())
}

/// Prints one live line: to stdout, or to stderr when stdout gets the JSON document.
pub fn line(json: bool, s: &str) -> std::io::Result<()> {
    if json {
        eprintln!("{s}");
        Ok(())
    } else {
        out(format!("{s}\n"))
    }
}

/// The heading of a live capture's summary.
pub fn heading(info: &CaptureInfo, l: &LiveInfo) -> String {
    // The link types seen (none before the first packet).
    let link = if info.link_types.is_empty() {
        String::new()
    } else {
        format!(", {}", info.link_types.join("+"))
    };
    format!(
        "{} (live{link}): {} packets captured ({} bytes), {} dropped by the kernel, {} cut by snaplen {}; stopped: {}",
        l.interface,
        info.packets_read,
        info.file_bytes,
        l.kernel_drops,
        l.packets_cut,
        l.snaplen,
        l.stop_reason
            .as_ref()
            .map_or("-".to_string(), |r| r.to_string())
    )
}

/// Exit status of a live run: an interface that went down or a read error is a failure (the summary was
/// printed).
pub fn failed(info: &CaptureInfo) -> bool {
    matches!(
        info.source.as_ref().and_then(|s| s.stop_reason.as_ref()),
        Some(live::StopReason::InterfaceDown(_)) | Some(live::StopReason::Error(_))
    )
}
