//! `--live IFACE` for `roundtrip capture stats|flows|rpc|timeline`: the options, opening the packet source (a
//! file or an interface: the analyses do not know which), and the live lines' common parts.

use super::super::args;
use super::super::output::out_text;
use anyhow::Context;
use clap::Args;
use roundtrip::capture::live::{self, LiveConfig, LiveCounters};
use roundtrip::capture::read::LinkType;
use roundtrip::capture::{CaptureInfo, Filter, Packets, write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Options of a live capture.
#[derive(Debug, Args, Clone)]
pub struct LiveArgs {
    /// Capture live on this interface (`any` for all) instead of reading a file (`-i` as tcpdump's).
    #[arg(long, short = 'i', value_name = "IFACE")]
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
    /// Live: also save what was captured (pcap, or pcapng when the name ends in .pcapng; nanosecond times). A
    /// file appears whole at the end (written beside it, then renamed); a FIFO or - (standard output, the
    /// results then go to standard error) is written as packets come. A symbolic link is refused.
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
    /// `capture stats|rpc -i DURATION`: `-i` was the report period there before it became the interface. For
    /// this release a `-i`/`--live` value that reads as a duration (`-i 100ms`) and names no interface is taken
    /// as the report period, with a one-line notice naming `--report-interval`; the capture then reads FILE.
    pub fn take_report_interval(&mut self, command: &str) -> Option<Duration> {
        let v = self.live.as_deref()?;
        let d = args::positive_duration(v).ok()?;
        if live::ifindex(v).is_some() {
            return None;
        }
        super::super::output::note(format!(
            "roundtrip: note: `capture {command} -i {v}` is a duration, taken as `--report-interval {v}` for this \
             release; `-i` is now the interface to capture on (as --live), and a duration there goes away in the \
             next release"
        ));
        self.live = None;
        Some(d)
    }

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
        // The file --write names: refused now (a symbolic link, a directory, a device), not after capturing.
        if let Some(w) = &self.write {
            super::super::report::check_output(w)?;
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
    let stop = super::super::common::cancel_on_ctrl_c();
    let cfg = LiveConfig {
        interface: iface.clone(),
        snaplen: a.snaplen,
        buffer: a.buffer.unwrap_or(live::DEFAULT_BUFFER),
        promisc: a.promisc,
        duration: a.duration,
        count: a.count,
        // --host/--port/--flow join the expression in the kernel, so `--count` counts the packets that pass
        // every filter and the rest never reach user space (the analyses still check them: same result).
        filter: filter.clone(),
    };
    let mut group = live::LiveCapture::open_fanout(cfg, a.threads, stop)
        .map_err(|e| match e {
            live::LiveError::Filter { source, .. } => {
                anyhow::anyhow!("--filter '{}': {}", source.expr, source.source)
            }
            e => e.into(),
        })?
        .into_iter();
    let cap = group.next().context("no capture opened")?;
    let more: Vec<Packets> = group
        .map(|c| Packets::live(c, filter.expr_text()))
        .collect();
    {
        let i = cap.info();
        super::super::output::note(format!(
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
            cap.kernel_filter()
                .map(|e| format!(", filter '{e}' in the kernel"))
                .unwrap_or_default()
        ));
    }
    let counters = cap.counters();
    let link: LinkType = cap.link();
    let mut pk = Packets::live(cap, filter.expr_text());
    if let Some(w) = &a.write {
        pk.set_writer(write::PcapWriter::create(w, link, a.snaplen)?);
    }
    Ok(Opened {
        packets: pk,
        counters: Some(counters),
        more,
    })
}

/// Interface names by index (live `any` keys connections by interface), looked up once per index; an
/// interface that is gone is shown by its index (`if7`).
#[derive(Debug, Default)]
pub struct InterfaceNames(std::collections::HashMap<u32, String>);

impl InterfaceNames {
    /// The name of interface `index`.
    pub fn name(&mut self, index: u32) -> String {
        self.0
            .entry(index)
            .or_insert_with(|| live::ifname(index).unwrap_or_else(|| format!("if{index}")))
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
        eprintln!("{}", super::super::output::escape_lines(s));
        Ok(())
    } else {
        out_text(format!("{s}\n"))
    }
}

/// Exit status of a live run: an interface that went down or a read error is a failure (the summary was
/// printed).
pub fn failed(info: &CaptureInfo) -> bool {
    matches!(
        info.source.as_ref().and_then(|s| s.stop_reason.as_ref()),
        Some(live::StopReason::InterfaceDown(_)) | Some(live::StopReason::Error(_))
    )
}
