//! Capture analysis: read tcpdump captures fast and show what TCP did.
//!
//! - [`read`]: streaming pcap / pcapng / gzip reader that hands out borrowed packets.
//! - [`decode`](mod@decode): link layer, IPv4/IPv6, TCP (with options), UDP.
//! - [`flows`]: TCP connection tracking (RTT, in flight, window, retransmissions, ...) and the in-order
//!   stream hook ([`flows::StreamSink`]).
//! - [`stats`]: tcpstat's per-interval view.
//! - [`seqgraph`]: the TCP time-sequence graph of one connection (`capture timeline --report`).
//! - [`rpc`]: per-request latency of application protocols (`capture rpc`); [`matching`]: the same requests
//!   in a client-side and a server-side capture (`capture match`).
//!
//! The drivers here ([`stats`](fn@run_stats), [`run_flows`], [`run_timeline`]) read a file once, apply a
//! [`Filter`] and return typed results; a file that cannot be read to its end still gives its results, with
//! the reason in `warning`.
//!
//! For other analyses (issue 7), read packets with [`Packets`]:
//! ```no_run
//! # use roundtrip::capture::{Packets, Filter};
//! let mut pk = Packets::open(std::path::Path::new("x.pcap")).unwrap();
//! while let Some((pkt, decoded)) = pk.next_decoded() {
//!     let _ = (pkt.ts_ns, decoded.map(|d| d.payload_len));
//! }
//! ```

pub mod bpf;
pub mod decode;
pub mod flows;
pub mod keep;
pub mod live;
pub mod matching;
pub mod read;
pub mod rpc;
pub mod seqgraph;
pub mod stats;
pub mod write;

use decode::Decoded;
use flows::{FlowSummary, FlowTracker, PacketInfo, StreamSink, TrackerConfig, TrackerCounters};
use read::{CaptureReader, Format, OpenError, Packet, ReadWarning};
use serde::{Deserialize, Serialize};
use stats::{StatsDir, StatsEngine, StatsRow};
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use thiserror::Error;

/// A filter argument that could not be understood.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FilterError {
    /// `--host` is not an IP address.
    #[error(
        "--host '{0}' is not an IP address (give e.g. 10.0.0.1 or ::1; names are not resolved)"
    )]
    Host(String),
    /// `--flow` is not two endpoints.
    #[error(
        "--flow '{0}' is not two endpoints: write ADDR:PORT-ADDR:PORT, e.g. 10.0.0.1:40000-10.0.0.2:80 or [::1]:5201-[::1]:40000"
    )]
    Flow(String),
    /// `--flow` names endpoints no TCP/UDP conversation can have.
    #[error("--flow '{0}': {1} (write the two ends of one conversation, ADDR:PORT-ADDR:PORT)")]
    FlowEndpoints(String, &'static str),
}

/// Which packets to look at. All given conditions must hold; the empty filter takes everything.
///
/// Syntax (documented in `roundtrip capture --help`):
/// - `--host ADDR`: either address is ADDR.
/// - `--port N`: either TCP/UDP port is N.
/// - `--flow A:P-B:P` (or `A:P,B:P`): one TCP/UDP conversation, either direction; IPv6 as `[ADDR]:PORT`.
/// - `--filter EXPR`: a tcpdump expression ([`bpf`]), compiled to classic BPF for each link type of the file
///   and run on the raw packet bytes by [`Packets`] (open it with [`Packets::open_filtered`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Either address.
    pub host: Option<IpAddr>,
    /// Either port.
    pub port: Option<u16>,
    /// Both endpoints, in either order.
    pub flow: Option<(SocketAddr, SocketAddr)>,
    /// A tcpdump filter expression (`--filter`); applied by [`Packets::open_filtered`], not by
    /// [`matches`](Self::matches).
    pub expr: Option<bpf::Expr>,
}

impl Filter {
    /// True when no condition is set.
    pub fn is_empty(&self) -> bool {
        self.fields_empty() && self.expr.is_none()
    }

    /// True when `--host`, `--port` and `--flow` are all unset (the conditions [`matches`](Self::matches) checks).
    pub fn fields_empty(&self) -> bool {
        self.host.is_none() && self.port.is_none() && self.flow.is_none()
    }

    /// The expression's text, for the JSON documents (None without `--filter`).
    pub fn expr_text(&self) -> Option<&str> {
        self.expr.as_ref().map(|e| e.text())
    }

    /// Parses `--host`.
    pub fn parse_host(s: &str) -> Result<IpAddr, FilterError> {
        s.trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| FilterError::Host(s.to_string()))
    }

    /// Parses `--flow`.
    pub fn parse_flow(s: &str) -> Result<(SocketAddr, SocketAddr), FilterError> {
        let err = || FilterError::Flow(s.to_string());
        let (a, b) = s
            .split_once(',')
            .or_else(|| s.split_once('-'))
            .or_else(|| s.split_once(' '))
            .ok_or_else(err)?;
        let a: SocketAddr = a.trim().parse().map_err(|_| err())?;
        let b: SocketAddr = b.trim().parse().map_err(|_| err())?;
        if a.port() == 0 || b.port() == 0 {
            return Err(FilterError::FlowEndpoints(
                s.to_string(),
                "port 0 is never on the wire",
            ));
        }
        if a == b {
            return Err(FilterError::FlowEndpoints(
                s.to_string(),
                "it names the same endpoint twice",
            ));
        }
        Ok((a, b))
    }

    /// True when the packet passes `--host/--port/--flow`. Non-IP packets pass only when none is set. The
    /// expression (`--filter`) is checked on the raw bytes by [`Packets::open_filtered`].
    #[inline]
    pub fn matches(&self, d: Option<&Decoded<'_>>) -> bool {
        if self.fields_empty() {
            return true;
        }
        let Some(d) = d else { return false };
        if let Some(h) = self.host
            && d.src != h
            && d.dst != h
        {
            return false;
        }
        let ports = d.ports();
        if let Some(p) = self.port {
            match ports {
                Some((s, t)) if s == p || t == p => {}
                _ => return false,
            }
        }
        if let Some((a, b)) = self.flow {
            let Some((sp, dp)) = ports else { return false };
            let src = SocketAddr::new(d.src, sp);
            let dst = SocketAddr::new(d.dst, dp);
            if !((src == a && dst == b) || (src == b && dst == a)) {
                return false;
            }
        }
        true
    }
}

/// What reading the file found, besides the analysis.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CaptureInfo {
    /// The file as given.
    pub file: String,
    /// "pcap", "pcap-ns" or "pcapng".
    pub format: Cow<'static, str>,
    /// True when gzip-compressed.
    pub gzip: bool,
    /// Uncompressed bytes read.
    pub file_bytes: u64,
    /// Packets read.
    pub packets_read: u64,
    /// Packets that passed the filter.
    pub packets_matched: u64,
    /// Packets that could not be decoded down to IP (ARP, other link types, headers cut short).
    pub packets_not_ip: u64,
    /// The first undecodable packet's reason, for the note.
    pub not_ip_example: Option<String>,
    /// Link types seen (names).
    pub link_types: Vec<String>,
    /// Why reading stopped before the end of the file, with the byte offset.
    pub warning: Option<String>,
    /// Byte offset of the unreadable record, when reading stopped early.
    pub warning_offset: Option<u64>,
    /// The `--filter` expression, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Packets the `--filter` program rejected (in `packets_read`, not in `packets_matched`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets_filtered_out: Option<u64>,
    /// A live capture: the interface, snap length, kernel drops and why it stopped (absent for files, which
    /// `file` .. `warning` describe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<live::LiveInfo>,
}

impl CaptureInfo {
    /// True for a live capture.
    pub fn is_live(&self) -> bool {
        self.source.is_some()
    }

    /// Where the packets came from: a file (its name, the bytes read, why reading stopped early) or an
    /// interface (its name, snap length, kernel drops, why the capture stopped). The document keeps the file
    /// fields at the top of `capture` and the interface under `capture.source`, as format version 1 has them.
    pub fn origin(&self) -> Origin<'_> {
        match &self.source {
            Some(live) => Origin::Interface(live),
            None => Origin::File {
                file: &self.file,
                bytes: self.file_bytes,
                warning: self.warning.as_deref(),
            },
        }
    }
}

/// The source part of a capture document, as one type: a file or an interface ([`CaptureInfo::origin`]).
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// A pcap or pcapng file.
    File {
        /// The file as given.
        file: &'a str,
        /// Uncompressed bytes read.
        bytes: u64,
        /// Why reading stopped before the end of the file.
        warning: Option<&'a str>,
    },
    /// A live capture on an interface: name, snap length, kernel drops and the stop reason.
    Interface(&'a live::LiveInfo),
}

/// An error that prevents any analysis.
#[derive(Debug, Error)]
pub enum CaptureError {
    /// The file could not be opened or is not a capture.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// `--interval` would make more rows than [`MAX_STATS_ROWS`] over the capture's span.
    #[error(
        "--interval {} makes more than {max} rows over this capture (it spans {}); give --interval {} or more",
        fmt_span(*interval_ns), fmt_span(*span_ns), fmt_span(*smallest_ns),
        max = MAX_STATS_ROWS
    )]
    TooManyRows {
        /// The interval asked for, ns.
        interval_ns: u64,
        /// The capture's span (first to last matching packet), ns.
        span_ns: u64,
        /// The smallest interval that fits the span read, ns.
        smallest_ns: u64,
    },
}

/// Most rows `capture stats` makes (empty intervals included, each direction counted): beyond this a
/// table is no longer readable and its memory grows with the span divided by the interval.
pub const MAX_STATS_ROWS: u64 = 100_000;

/// A duration for a message: the largest unit that keeps it at or above 1, rounded up to 3 significant
/// digits.
fn fmt_span(ns: u64) -> String {
    let (div, unit) = match ns {
        0..1_000 => (1.0, "ns"),
        1_000..1_000_000 => (1e3, "us"),
        1_000_000..1_000_000_000 => (1e6, "ms"),
        _ => (1e9, "s"),
    };
    let v = ns as f64 / div;
    let scale = 10f64.powi(2 - v.log10().floor().max(0.0) as i32);
    format!("{}{unit}", (v * scale).ceil() / scale)
}

/// The [`CaptureError::TooManyRows`] for `span_ns` at `interval`, or None when the rows fit.
fn stats_rows_check(span_ns: u64, interval: Duration, by_direction: bool) -> Option<CaptureError> {
    let per = if by_direction { 3 } else { 1 };
    let iv = (interval.as_nanos().max(1)).min(u64::MAX as u128) as u64;
    // Rows: the intervals the span touches (one more than span / interval, one more for the alignment of
    // the first), for each direction.
    let rows = (span_ns / iv).saturating_add(2).saturating_mul(per);
    (rows > MAX_STATS_ROWS).then(|| CaptureError::TooManyRows {
        interval_ns: iv,
        span_ns,
        smallest_ns: (span_ns / (MAX_STATS_ROWS / per - 2)).max(1) + 1,
    })
}

/// Where packets come from: a capture file or a live interface.
#[derive(Debug)]
enum Source {
    File(CaptureReader),
    Live(Box<live::LiveCapture>),
}

/// One step of [`Packets::next_event`].
#[derive(Debug)]
pub enum Next<'a> {
    /// A packet and its decoding (`None` when not IP, or when decoding was not asked for).
    Packet(Packet<'a>, Option<Decoded<'a>>),
    /// Live only: no packet for a while; the wall-clock time (Unix ns), so intervals can close.
    Tick(i64),
}

/// The packet source every capture analysis reads: a file ([`Packets::open`]) or a live interface
/// ([`Packets::live`]); it decodes packets and counts what it saw. One pipeline: the analyses take a `Packets`,
/// never a path.
#[derive(Debug)]
pub struct Packets {
    src: Source,
    info: CaptureInfo,
    links: Vec<read::LinkType>,
    writer: Option<write::PcapWriter>,
    captured_bytes: u64,
    bpf: Option<FileBpf>,
    tcp_options: decode::TcpOptions,
}

/// The `--filter` program of a file, compiled per link type, and what it rejected.
#[derive(Debug)]
struct FileBpf {
    progs: bpf::LinkPrograms,
    rejected: u64,
    /// Link types the expression cannot be compiled for, with the packets skipped and the reason.
    uncompiled: Vec<(read::LinkType, u64, String)>,
}

impl FileBpf {
    #[inline]
    fn keep(&mut self, p: &Packet<'_>) -> bool {
        match self.progs.matches(p.link, p.data, p.orig_len) {
            Ok(true) => true,
            Ok(false) => {
                self.rejected += 1;
                false
            }
            Err(e) => {
                let e = e.to_string();
                self.rejected += 1;
                match self.uncompiled.iter_mut().find(|u| u.0 == p.link) {
                    Some(u) => u.1 += 1,
                    None => self.uncompiled.push((p.link, 1, e)),
                }
                false
            }
        }
    }
}

impl Packets {
    /// Reads packets from a live capture (see [`live`]) whose kernel filter was compiled from `filter`.
    pub fn live(cap: live::LiveCapture, filter: Option<&str>) -> Self {
        Packets {
            info: CaptureInfo {
                file: cap.info().interface.clone(),
                format: Cow::Borrowed("live"),
                source: Some(cap.info().clone()),
                filter: filter.map(str::to_string),
                ..CaptureInfo::default()
            },
            src: Source::Live(Box::new(cap)),
            links: Vec::new(),
            writer: None,
            captured_bytes: 0,
            bpf: None,
            tcp_options: decode::TcpOptions::All,
        }
    }

    /// Which TCP options the decoded packets carry (all unless set): an analysis that never reads them skips
    /// their parsing ([`decode::TcpOptions`]).
    pub fn set_tcp_options(&mut self, opts: decode::TcpOptions) {
        self.tcp_options = opts;
    }

    /// Also writes every packet read to `w` (`--write`).
    pub fn set_writer(&mut self, w: write::PcapWriter) {
        self.writer = Some(w);
    }

    /// The link type of a live capture's packets (files: `None`, each packet carries its own).
    pub fn link(&self) -> Option<read::LinkType> {
        match &self.src {
            Source::Live(l) => Some(l.link()),
            Source::File(_) => None,
        }
    }

    /// True when connections must be keyed by interface too: a live capture on `any`.
    pub fn keys_by_interface(&self) -> bool {
        match &self.src {
            Source::Live(l) => l.info().interface == "any",
            Source::File(_) => false,
        }
    }

    /// True when reading a live interface.
    pub fn is_live(&self) -> bool {
        matches!(self.src, Source::Live(_))
    }

    /// Ends a live capture early (e.g. `--count` counted by an analysis); files ignore it.
    pub fn stop(&mut self, why: live::StopReason) {
        if let Source::Live(l) = &mut self.src {
            l.close(why);
        }
    }

    /// The next packet (decoded when `decode`), or on a live interface a [`Next::Tick`] when time went on.
    #[inline]
    pub fn next_event(&mut self, decode_it: bool) -> Option<Next<'_>> {
        let p = match raw_step(
            &mut self.src,
            &mut self.info,
            &mut self.links,
            &mut self.bpf,
            &mut self.writer,
            &mut self.captured_bytes,
            true,
        )? {
            Ok(p) => p,
            Err(t) => return Some(Next::Tick(t)),
        };
        if !decode_it {
            return Some(Next::Packet(p, None));
        }
        let d = decode_noting(&mut self.info, &p, self.tcp_options);
        Some(Next::Packet(p, d))
    }
    /// Opens a capture file.
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        Self::open_file(path)
    }

    fn open_file(path: &Path) -> Result<Self, CaptureError> {
        let reader = CaptureReader::open(path)?;
        let format = match reader.format() {
            Format::PcapMicro => "pcap",
            Format::PcapNano => "pcap-ns",
            Format::Pcapng => "pcapng",
        };
        Ok(Packets {
            info: CaptureInfo {
                file: path.display().to_string(),
                format: Cow::Borrowed(format),
                gzip: reader.is_gzip(),
                ..CaptureInfo::default()
            },
            src: Source::File(reader),
            links: Vec::new(),
            writer: None,
            captured_bytes: 0,
            bpf: None,
            tcp_options: decode::TcpOptions::All,
        })
    }

    /// Opens a capture file whose packets are then filtered by `filter`'s expression (`--filter`): the packets
    /// the program rejects are counted in `packets_read` but never handed out. `--host/--port/--flow` stay
    /// the caller's to check ([`Filter::matches`]).
    pub fn open_filtered(path: &Path, filter: &Filter) -> Result<Self, CaptureError> {
        let mut pk = Packets::open(path)?;
        if let Some(e) = &filter.expr {
            pk.info.filter = Some(e.text().to_string());
            pk.bpf = Some(FileBpf {
                progs: bpf::LinkPrograms::new(e.clone()),
                rejected: 0,
                uncompiled: Vec::new(),
            });
        }
        Ok(pk)
    }

    /// The next raw packet, without decoding (live: without ticks).
    #[inline]
    pub fn next_raw(&mut self) -> Option<Packet<'_>> {
        raw_step(
            &mut self.src,
            &mut self.info,
            &mut self.links,
            &mut self.bpf,
            &mut self.writer,
            &mut self.captured_bytes,
            false,
        )?
        .ok()
    }

    /// The next packet and its decoding (`None` for packets that are not IP; live: without ticks).
    #[inline(always)]
    pub fn next_decoded(&mut self) -> Option<(Packet<'_>, Option<Decoded<'_>>)> {
        let p = match raw_step(
            &mut self.src,
            &mut self.info,
            &mut self.links,
            &mut self.bpf,
            &mut self.writer,
            &mut self.captured_bytes,
            false,
        )? {
            Ok(p) => p,
            Err(_) => return None,
        };
        let d = decode_noting(&mut self.info, &p, self.tcp_options);
        Some((p, d))
    }

    /// Finishes reading and returns what was found (warning included; live: the kernel's counters and why it
    /// stopped).
    pub fn finish(mut self) -> CaptureInfo {
        self.info.link_types = self.links.iter().map(|l| l.to_string()).collect();
        match &mut self.src {
            Source::File(reader) => {
                self.info.file_bytes = reader.offset();
                if let Some(w) = reader.warning() {
                    self.info.warning = Some(w.to_string());
                    self.info.warning_offset = Some(w.offset);
                }
            }
            Source::Live(l) => {
                self.info.file_bytes = self.captured_bytes;
                self.info.source = Some(l.close(live::StopReason::Interrupted));
            }
        }
        if let Some(w) = self.writer.take()
            && let Err(e) = w.finish()
            && self.info.warning.is_none()
        {
            self.info.warning = Some(e.to_string());
        }
        if let Some(b) = &self.bpf {
            self.info.packets_filtered_out = Some(b.rejected);
            if let Some((link, n, e)) = b.uncompiled.first() {
                let w = format!("--filter: {e}; {n} packets of link type {link} skipped");
                self.info.warning = Some(match self.info.warning.take() {
                    Some(prev) => format!("{prev}; {w}"),
                    None => w,
                });
            }
        }
        self.info
    }

    /// The reader's warning so far.
    pub fn warning(&self) -> Option<&ReadWarning> {
        match &self.src {
            Source::File(r) => r.warning(),
            Source::Live(_) => None,
        }
    }

    fn matched(&mut self) {
        self.info.packets_matched += 1;
    }
}

/// One packet (or a live tick) from `src`, counted in `info`, passed through a file's `--filter` program and
/// written to `writer`. A live capture's filter ran in the kernel.
#[inline(always)]
fn raw_step<'a>(
    src: &'a mut Source,
    info: &mut CaptureInfo,
    links: &mut Vec<read::LinkType>,
    bpf: &mut Option<FileBpf>,
    writer: &mut Option<write::PcapWriter>,
    captured_bytes: &mut u64,
    ticks: bool,
) -> Option<Result<Packet<'a>, i64>> {
    let p = match src {
        Source::File(r) => r.next_packet_if(&mut |p| {
            info.packets_read += 1;
            if links.last() != Some(&p.link) && !links.contains(&p.link) {
                links.push(p.link);
            }
            bpf.as_mut().is_none_or(|b| b.keep(p))
        })?,
        Source::Live(l) => match l.next(ticks) {
            live::LiveNext::Packet(p) => {
                info.packets_read += 1;
                if links.last() != Some(&p.link) && !links.contains(&p.link) {
                    links.push(p.link);
                }
                p
            }
            live::LiveNext::Tick(t) => return Some(Err(t)),
            live::LiveNext::End => return None,
        },
    };
    if let Some(w) = writer {
        w.write(&p);
    }
    *captured_bytes += p.data.len() as u64;
    Some(Ok(p))
}

/// Decodes `p`, counting (and remembering the first of) the packets that are not IP.
#[inline(always)]
fn decode_noting<'a>(
    info: &mut CaptureInfo,
    p: &Packet<'a>,
    opts: decode::TcpOptions,
) -> Option<Decoded<'a>> {
    match decode::decode_inline(p.link, p.data, p.orig_len, opts) {
        Ok(d) => Some(d),
        Err(e) => {
            info.packets_not_ip += 1;
            if info.not_ip_example.is_none() {
                info.not_ip_example = Some(format!("packet {}: {e}", info.packets_read));
            }
            None
        }
    }
}

/// Result of `capture stats`.
#[derive(Debug, Clone, Serialize)]
pub struct StatsResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// Interval length.
    pub interval_s: f64,
    /// First packet (Unix ns).
    pub first_ts_ns: Option<i64>,
    /// Last packet (Unix ns).
    pub last_ts_ns: Option<i64>,
    /// Per-interval rows.
    pub rows: Vec<StatsRow>,
    /// The whole capture (rates over first to last packet).
    pub total: StatsRow,
}

/// Live: an interval's row is handed out this long after the interval ended (the ring hands a block over at
/// most [`live::BLOCK_TIMEOUT_MS`] after its first packet).
pub const LIVE_GRACE_NS: i64 = 250_000_000;

/// `capture stats`: per-interval packet counts, rates and sizes.
pub fn run_stats(
    path: &Path,
    filter: &Filter,
    interval: Duration,
    by_direction: bool,
) -> Result<StatsResult, CaptureError> {
    run_stats_on(
        Packets::open_filtered(path, filter)?,
        filter,
        interval,
        by_direction,
        &mut |_, _| {},
    )
}

/// [`run_stats`] on any packet source. On a live one, `on_rows` gets the rows of each interval once it ended,
/// with the interval's start (Unix ns); files never call it. Rows are bounded in total (files and live alike):
/// past [`MAX_STATS_ROWS`] packets are no longer counted and the run ends in [`CaptureError::TooManyRows`].
pub fn run_stats_on(
    mut pk: Packets,
    filter: &Filter,
    interval: Duration,
    by_direction: bool,
    on_rows: &mut dyn FnMut(&[StatsRow], i64),
) -> Result<StatsResult, CaptureError> {
    let mut eng = StatsEngine::new(interval, by_direction);
    // The rows are bounded in total (MAX_STATS_ROWS): once the span read so far needs more, packets are no
    // longer counted (memory stays what it is) and the rest of the file is only read for its last
    // timestamp, so that the refusal can name the interval that fits.
    let per: u128 = if by_direction { 3 } else { 1 };
    let limit_ns = (interval.as_nanos().max(1) * (MAX_STATS_ROWS as u128 / per - 2))
        .min(i64::MAX as u128) as i64;
    let mut over: Option<(i64, i64)> = None; // (first, latest) once over the cap
    let mut take = |eng: &mut StatsEngine, ts: i64, len: u32, dir: StatsDir| {
        if let Some((_, latest)) = over.as_mut() {
            *latest = (*latest).max(ts);
            return;
        }
        if let Some(first) = eng.first_ts_ns()
            && ts.saturating_sub(first) > limit_ns
        {
            over = Some((first, ts.max(eng.last_ts_ns().unwrap_or(ts))));
            return;
        }
        eng.add(ts, len, dir);
    };
    if !pk.is_live() && filter.fields_empty() && !by_direction {
        // Fast path: no decoding at all.
        let mut n = 0u64;
        while let Some(p) = pk.next_raw() {
            take(&mut eng, p.ts_ns, p.orig_len, StatsDir::All);
            n += 1;
        }
        pk.info.packets_matched = n;
    } else if !pk.is_live() {
        while let Some((p, d)) = pk.next_decoded() {
            if !filter.matches(d.as_ref()) {
                continue;
            }
            let dir = if by_direction {
                StatsDir::from_dir(d.as_ref().and_then(flows::guess_dir))
            } else {
                StatsDir::All
            };
            take(&mut eng, p.ts_ns, p.orig_len, dir);
            pk.matched();
        }
    } else {
        if let Some(src) = &pk.info.source {
            eng.set_origin(src.started_unix_ns);
        }
        let decode_it = !filter.fields_empty() || by_direction;
        let mut matched = 0u64;
        while let Some(ev) = pk.next_event(decode_it) {
            match ev {
                Next::Tick(now) => {
                    let rows = eng.completed(now - LIVE_GRACE_NS);
                    if !rows.is_empty() {
                        let start =
                            eng.origin_ns().unwrap_or(0) + (rows[0].start_s * 1e9).round() as i64;
                        on_rows(&rows, start);
                    }
                }
                Next::Packet(p, d) => {
                    if !filter.matches(d.as_ref()) {
                        continue;
                    }
                    let dir = if by_direction {
                        StatsDir::from_dir(d.as_ref().and_then(flows::guess_dir))
                    } else {
                        StatsDir::All
                    };
                    take(&mut eng, p.ts_ns, p.orig_len, dir);
                    matched += 1;
                }
            }
        }
        pk.info.packets_matched = matched;
        // The last, partial interval too (through the end of the capture).
        {
            let end = eng
                .last_ts_ns()
                .unwrap_or(i64::MIN)
                .max(live::now_unix_ns());
            let rows = eng.completed(end.saturating_add(interval.as_nanos() as i64));
            if !rows.is_empty() {
                let start = eng.origin_ns().unwrap_or(0) + (rows[0].start_s * 1e9).round() as i64;
                on_rows(&rows, start);
            }
        }
    }
    finish_stats(eng, over, interval, by_direction, || pk.finish())
}

/// [`run_stats_on`] on the captures of one `PACKET_FANOUT` group (`--threads N`, see [`live`]): one thread
/// per capture, each with its own [`StatsEngine`]; every [`live::TICK`] each moves its counts into a shared
/// engine, and the intervals every thread has passed are handed to `on_rows`. Counters add, so the rows and
/// totals are those of one thread reading every packet.
pub fn run_stats_fanout(
    group: Vec<Packets>,
    filter: &Filter,
    interval: Duration,
    by_direction: bool,
    on_rows: &mut (dyn FnMut(&[StatsRow], i64) + Send),
) -> Result<StatsResult, CaptureError> {
    use std::sync::Mutex;
    let n = group.len();
    let origin = group
        .first()
        .and_then(|p| p.info.source.as_ref())
        .map(|s| s.started_unix_ns);
    let mut master = StatsEngine::new(interval, by_direction);
    if let Some(o) = origin {
        master.set_origin(o);
    }
    struct Shared<'a> {
        master: StatsEngine,
        marks: Vec<i64>,
        on_rows: &'a mut (dyn FnMut(&[StatsRow], i64) + Send),
    }
    impl Shared<'_> {
        fn emit(&mut self, before: i64) {
            let rows = self.master.completed(before);
            if !rows.is_empty() {
                let start =
                    self.master.origin_ns().unwrap_or(0) + (rows[0].start_s * 1e9).round() as i64;
                (self.on_rows)(&rows, start);
            }
        }
    }
    let shared = Mutex::new(Shared {
        master,
        marks: vec![i64::MIN; n],
        on_rows,
    });
    let per: u128 = if by_direction { 3 } else { 1 };
    let limit_ns = (interval.as_nanos().max(1) * (MAX_STATS_ROWS as u128 / per - 2))
        .min(i64::MAX as u128) as i64;
    let decode_it = !filter.fields_empty() || by_direction;
    let results: Vec<(CaptureInfo, Option<(i64, i64)>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = group
            .into_iter()
            .enumerate()
            .map(|(i, mut pk)| {
                let shared = &shared;
                sc.spawn(move || {
                    let mut eng = StatsEngine::new(interval, by_direction);
                    if let Some(o) = origin {
                        eng.set_origin(o);
                    }
                    let mut over: Option<(i64, i64)> = None;
                    let mut matched = 0u64;
                    let sync = |eng: &mut StatsEngine, mark: i64| {
                        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                        eng.drain_into(&mut s.master);
                        s.marks[i] = mark;
                        let low = s.marks.iter().copied().min().unwrap_or(mark);
                        if low != i64::MIN && low != i64::MAX {
                            s.emit(low - LIVE_GRACE_NS);
                        }
                    };
                    while let Some(ev) = pk.next_event(decode_it) {
                        match ev {
                            Next::Tick(now) => sync(&mut eng, now),
                            Next::Packet(p, d) => {
                                if !filter.matches(d.as_ref()) {
                                    continue;
                                }
                                let dir = if by_direction {
                                    StatsDir::from_dir(d.as_ref().and_then(flows::guess_dir))
                                } else {
                                    StatsDir::All
                                };
                                matched += 1;
                                if let Some((_, latest)) = over.as_mut() {
                                    *latest = (*latest).max(p.ts_ns);
                                    continue;
                                }
                                if let Some(first) = eng.first_ts_ns()
                                    && p.ts_ns.saturating_sub(first) > limit_ns
                                {
                                    over = Some((first, p.ts_ns));
                                    continue;
                                }
                                eng.add(p.ts_ns, p.orig_len, dir);
                            }
                        }
                    }
                    sync(&mut eng, i64::MAX);
                    let mut info = pk.finish();
                    info.packets_matched = matched;
                    (info, over)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut shared = shared.into_inner().unwrap_or_else(|e| e.into_inner());
    let end = shared
        .master
        .last_ts_ns()
        .unwrap_or(i64::MIN)
        .max(live::now_unix_ns());
    shared.emit(end.saturating_add(interval.as_nanos() as i64));
    let eng = shared.master;
    let over = results
        .iter()
        .filter_map(|r| r.1)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    finish_stats(eng, over, interval, by_direction, || {
        merge_infos(results.into_iter().map(|r| r.0).collect())
    })
}

/// The end of a stats run, one reader or a fanout group: the row bound checked over the time the capture
/// covered (`over`, a file's own first and last packet times when known, else the engine's), then the rows,
/// the totals and the capture's description (`capture`, taken only when the check passed).
fn finish_stats(
    eng: StatsEngine,
    over: Option<(i64, i64)>,
    interval: Duration,
    by_direction: bool,
    capture: impl FnOnce() -> CaptureInfo,
) -> Result<StatsResult, CaptureError> {
    let first = eng.first_ts_ns();
    let last = eng.last_ts_ns();
    let span = match (over, first, last) {
        (Some((a, b)), _, _) | (None, Some(a), Some(b)) => Some(b.saturating_sub(a).max(0) as u64),
        _ => None,
    };
    if let Some(e) = span.and_then(|s| stats_rows_check(s, interval, by_direction)) {
        return Err(e);
    }
    let (rows, total) = eng.finish();
    Ok(StatsResult {
        capture: capture(),
        interval_s: interval.as_secs_f64(),
        first_ts_ns: first,
        last_ts_ns: last,
        rows,
        total,
    })
}

/// One [`CaptureInfo`] of a fanout group's captures: counts add, the kernel counters of every ring add.
pub fn merge_infos(infos: Vec<CaptureInfo>) -> CaptureInfo {
    let sources: Vec<live::LiveInfo> = infos.iter().filter_map(|i| i.source.clone()).collect();
    let mut it = infos.into_iter();
    let mut m = it.next().unwrap_or_default();
    for i in it {
        m.file_bytes += i.file_bytes;
        m.packets_read += i.packets_read;
        m.packets_matched += i.packets_matched;
        m.packets_not_ip += i.packets_not_ip;
        if m.not_ip_example.is_none() {
            m.not_ip_example = i.not_ip_example;
        }
        for l in i.link_types {
            if !m.link_types.contains(&l) {
                m.link_types.push(l);
            }
        }
        if m.warning.is_none() {
            m.warning = i.warning;
        }
    }
    m.source = live::LiveCapture::merge_info(&sources);
    m
}

/// Result of `capture flows`.
#[derive(Debug, Clone, Serialize)]
pub struct FlowsResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// Tracker counters.
    pub counters: TrackerCounters,
    /// One summary per TCP connection, in order of first packet.
    pub flows: Vec<FlowSummary>,
    /// In flight against the receiver's window over time for one connection (see [`flow_series`]); `None`
    /// when not asked for or when no TCP connection matched.
    pub window_series: Option<FlowSeries>,
}

/// Buckets of a [`FlowSeries`]: about one per pixel column of a report chart.
pub const FLOW_SERIES_BUCKETS: usize = 800;

/// One time bucket of a [`FlowSeries`]: the smallest and largest value seen in it (empty buckets are left out).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct SeriesBucket {
    /// Start of the bucket, seconds since the connection's first packet.
    pub start_s: f64,
    /// Smallest bytes in flight after a data segment of the data direction, when one was sent in the bucket.
    pub in_flight_min_bytes: Option<u64>,
    /// Largest bytes in flight in the bucket.
    pub in_flight_max_bytes: Option<u64>,
    /// Smallest window (scaled) advertised by the receiving side in the bucket.
    pub window_min_bytes: Option<u64>,
    /// Largest window advertised by the receiving side in the bucket.
    pub window_max_bytes: Option<u64>,
}

/// Bytes in flight of one connection's data direction against the window its receiver advertised, over
/// time: a bounded series (at most [`FLOW_SERIES_BUCKETS`] buckets of equal length over the connection's
/// life), min and max per bucket, so no extreme is dropped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowSeries {
    /// The connection's number (as in `flows`).
    pub flow_id: u64,
    /// The client end.
    pub client: SocketAddr,
    /// The server end.
    pub server: SocketAddr,
    /// The data direction drawn (the one that carried more payload).
    pub direction: flows::Dir,
    /// Why this connection: "only" (one matched) or "largest" (most payload bytes of several).
    pub chosen: Cow<'static, str>,
    /// Length of one bucket, seconds.
    pub bucket_s: f64,
    /// Non-empty buckets in time order.
    pub buckets: Vec<SeriesBucket>,
}

/// Reads `path` again for the connection of `flows` that carried the most payload and returns its
/// [`FlowSeries`] (None when `flows` is empty). `filter` is the one the flows were found with.
pub fn flow_series(
    path: &Path,
    filter: &Filter,
    config: TrackerConfig,
    flows: &[FlowSummary],
) -> Result<Option<FlowSeries>, CaptureError> {
    let Some(f) = flows.iter().max_by_key(|f| {
        (
            f.client_to_server.payload_bytes + f.server_to_client.payload_bytes,
            std::cmp::Reverse(f.id),
        )
    }) else {
        return Ok(None);
    };
    let (dir, _) = f.bulk();
    let n = FLOW_SERIES_BUCKETS;
    let span_ns = (f.last_ts_ns - f.first_ts_ns).max(1);
    let bucket_ns = (span_ns as f64 / n as f64).max(1.0);
    let only = Filter {
        flow: Some((f.client, f.server)),
        ..filter.clone()
    };
    #[derive(Clone, Copy, Default)]
    struct Acc {
        fl: Option<(u64, u64)>,
        win: Option<(u64, u64)>,
    }
    fn widen(r: &mut Option<(u64, u64)>, v: u64) {
        *r = Some(match *r {
            Some((a, b)) => (a.min(v), b.max(v)),
            None => (v, v),
        });
    }
    let mut acc = vec![Acc::default(); n];
    let mut pk = Packets::open_filtered(path, &only)?;
    let mut tr = FlowTracker::new(config);
    while let Some((p, d)) = pk.next_decoded() {
        let Some(d) = d else { continue };
        if p.ts_ns < f.first_ts_ns || p.ts_ns > f.last_ts_ns || !only.matches(Some(&d)) {
            continue;
        }
        let Some(info) = tr.process(p.ts_ns, p.orig_len, &d) else {
            continue;
        };
        let i = (((p.ts_ns - f.first_ts_ns) as f64 / bucket_ns) as usize).min(n - 1);
        if info.dir == dir {
            if info.payload_len > 0
                && let Some(v) = info.in_flight
            {
                widen(&mut acc[i].fl, v);
            }
        } else {
            widen(&mut acc[i].win, info.window);
        }
    }
    let buckets = acc
        .iter()
        .enumerate()
        .filter(|(_, a)| a.fl.is_some() || a.win.is_some())
        .map(|(i, a)| SeriesBucket {
            start_s: i as f64 * bucket_ns / 1e9,
            in_flight_min_bytes: a.fl.map(|x| x.0),
            in_flight_max_bytes: a.fl.map(|x| x.1),
            window_min_bytes: a.win.map(|x| x.0),
            window_max_bytes: a.win.map(|x| x.1),
        })
        .collect();
    Ok(Some(FlowSeries {
        flow_id: f.id,
        client: f.client,
        server: f.server,
        direction: dir,
        chosen: Cow::Borrowed(if flows.len() == 1 { "only" } else { "largest" }),
        bucket_s: bucket_ns / 1e9,
        buckets,
    }))
}

/// `capture flows`: one summary per TCP connection. `sink`, when given, receives every connection's payload
/// in order.
pub fn run_flows(
    path: &Path,
    filter: &Filter,
    config: TrackerConfig,
    sink: Option<&mut dyn StreamSink>,
) -> Result<FlowsResult, CaptureError> {
    Ok(run_flows_on(
        Packets::open_filtered(path, filter)?,
        filter,
        config,
        sink,
        &mut |_| {},
    ))
}

/// Live: finished connections kept for the final table (the oldest are dropped past it, and counted).
pub const LIVE_MAX_FINISHED: usize = 100_000;

/// [`run_flows`] on any packet source. On a live one `on_end` gets each connection's summary when it ends
/// (FIN/RST and linger, idle timeout, or the connection cap), and the final table keeps the last
/// [`LIVE_MAX_FINISHED`].
pub fn run_flows_on(
    pk: Packets,
    filter: &Filter,
    config: TrackerConfig,
    sink: Option<&mut dyn StreamSink>,
    on_end: &mut dyn FnMut(&FlowSummary),
) -> FlowsResult {
    flows_on(pk, filter, config, None, sink, on_end)
}

/// [`run_flows_on`] on the captures of one `PACKET_FANOUT` group (`--threads N`, see [`live`]): one thread per
/// capture, each running [`run_flows_on`]'s loop with its own tracker (the kernel hands every packet of a
/// connection to the same capture, so each connection is tracked whole by one thread). Connections are numbered
/// from one shared counter; `on_end` gets each connection as it ends, from whichever thread (one at a time);
/// the result is every thread's connections in number order, their counters added and the captures' counts
/// and kernel counters summed ([`merge_infos`]). `config.max_open` is per thread.
pub fn run_flows_fanout(
    group: Vec<Packets>,
    filter: &Filter,
    config: TrackerConfig,
    on_end: &mut (dyn FnMut(&FlowSummary) + Send),
) -> FlowsResult {
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};
    let ids = Arc::new(AtomicU64::new(1));
    let on_end = Mutex::new(on_end);
    let results: Vec<FlowsResult> = std::thread::scope(|sc| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|pk| {
                let (ids, on_end) = (ids.clone(), &on_end);
                sc.spawn(move || {
                    let mut each = |f: &FlowSummary| {
                        let mut g = on_end.lock().unwrap_or_else(|e| e.into_inner());
                        (*g)(f)
                    };
                    flows_on(pk, filter, config, Some(ids), None, &mut each)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut counters = TrackerCounters::default();
    let mut flows = Vec::new();
    let mut infos = Vec::new();
    for r in results {
        counters.add(&r.counters);
        flows.extend(r.flows);
        infos.push(r.capture);
    }
    flows.sort_by_key(|f| f.id);
    FlowsResult {
        capture: merge_infos(infos),
        counters,
        flows,
        window_series: None,
    }
}

fn flows_on(
    mut pk: Packets,
    filter: &Filter,
    config: TrackerConfig,
    ids: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    mut sink: Option<&mut dyn StreamSink>,
    on_end: &mut dyn FnMut(&FlowSummary),
) -> FlowsResult {
    let by_if = pk.keys_by_interface();
    // The flow table reads TCP options only on SYNs (MSS and window scale).
    pk.set_tcp_options(decode::TcpOptions::SynOnly);
    let mut tr = FlowTracker::new(TrackerConfig {
        key_by_interface: by_if,
        ..config
    });
    if let Some(ids) = ids {
        tr.share_ids(ids);
    }
    let live = pk.is_live();
    let mut kept: std::collections::VecDeque<FlowSummary> = std::collections::VecDeque::new();
    let mut dropped = 0u64;
    let mut matched = 0u64;
    while let Some(ev) = pk.next_event(true) {
        let Next::Packet(p, d) = ev else { continue };
        let Some(d) = d else { continue };
        if !filter.matches(Some(&d)) {
            continue;
        }
        matched += 1;
        if by_if {
            tr.set_interface(p.interface);
        }
        tr.process_with(p.ts_ns, p.orig_len, &d, flows::reborrow(&mut sink));
        if live {
            for f in tr.take_finished() {
                on_end(&f);
                if kept.len() >= LIVE_MAX_FINISHED {
                    kept.pop_front();
                    dropped += 1;
                }
                kept.push_back(f);
            }
        }
    }
    pk.info.packets_matched = matched;
    let (mut flows, counters) = tr.finish_all(sink);
    if live {
        let _ = dropped;
        let mut all: Vec<FlowSummary> = kept.into_iter().collect();
        all.append(&mut flows);
        all.sort_by_key(|s| s.id);
        flows = all;
    }
    FlowsResult {
        capture: pk.finish(),
        counters,
        flows,
        window_series: None,
    }
}

/// One line of `capture timeline`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimelineRow {
    /// Packet time, Unix ns.
    pub ts_ns: i64,
    /// Time since the previous packet of the connection.
    pub delta_ns: u64,
    /// Direction.
    pub direction: flows::Dir,
    /// Flags, tcpdump style.
    pub flags: String,
    /// Relative sequence number.
    pub seq: u32,
    /// Relative acknowledgement number.
    pub ack: Option<u32>,
    /// Payload length.
    pub len: u32,
    /// Advertised window (scaled).
    pub window_bytes: u64,
    /// Bytes in flight from the sender after this packet.
    pub in_flight_bytes: Option<u64>,
    /// Notes: retransmission, out-of-order, dup-ack, zero-window, keep-alive.
    pub notes: Vec<Cow<'static, str>>,
    /// SACK blocks (left, right edge), relative to the other side's initial sequence number.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub sack: Vec<[u32; 2]>,
}

/// Which direction's data the time-sequence graph draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFrom {
    /// The direction that carried more payload.
    Busier,
    /// The client's data (the side that sent the SYN).
    Client,
    /// The server's data.
    Server,
}

/// Result of `capture timeline`.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// The connection shown (its summary), when one matched.
    pub flow: Option<FlowSummary>,
    /// One row per packet of that connection (empty when not asked for).
    pub rows: Vec<TimelineRow>,
    /// Its time-sequence graph, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq_graph: Option<seqgraph::SeqGraph>,
}

fn notes(i: &PacketInfo) -> Vec<&'static str> {
    let mut n = Vec::new();
    if i.retransmission {
        n.push("retransmission");
    }
    if i.out_of_order {
        n.push("out-of-order");
    }
    if i.dup_ack {
        n.push("dup-ack");
    }
    if i.zero_window {
        n.push("zero-window");
    }
    if i.keep_alive {
        n.push("keep-alive");
    }
    n
}

/// `capture timeline`: every packet of one TCP connection (the first connection that passes `filter`) when
/// `keep_rows`, and with `graph` its time-sequence graph.
pub fn run_timeline(
    path: &Path,
    filter: &Filter,
    config: TrackerConfig,
    graph: Option<DataFrom>,
    keep_rows: bool,
) -> Result<TimelineResult, CaptureError> {
    Ok(run_timeline_on(
        Packets::open_filtered(path, filter)?,
        filter,
        config,
        graph,
        keep_rows,
        None,
    ))
}

/// Live: receives each row of the connection followed, with its client and server, as it comes.
pub type OnRow<'a> = &'a mut dyn FnMut(&TimelineRow, SocketAddr, SocketAddr);

/// [`run_timeline`] on any packet source; `on_row` (live) gets every row as it comes, whether or not
/// `keep_rows` keeps them for the result.
pub fn run_timeline_on(
    mut pk: Packets,
    filter: &Filter,
    config: TrackerConfig,
    graph: Option<DataFrom>,
    keep_rows: bool,
    mut on_row: Option<OnRow<'_>>,
) -> TimelineResult {
    let live = pk.is_live();
    let by_if = pk.keys_by_interface();
    let mut tr = FlowTracker::new(TrackerConfig {
        key_by_interface: by_if,
        ..config
    });
    let mut chosen: Option<u64> = None;
    let mut rows = Vec::new();
    // Both directions are collected while reading (the busier one is known only at the end).
    let mut graphs = graph.map(|_| {
        [
            seqgraph::SeqGraphBuilder::new(flows::Dir::ClientToServer),
            seqgraph::SeqGraphBuilder::new(flows::Dir::ServerToClient),
        ]
    });
    let mut prev_ts: Option<i64> = None;
    let mut matched = 0u64;
    while let Some(ev) = pk.next_event(true) {
        let Next::Packet(p, d) = ev else { continue };
        let Some(d) = d else { continue };
        if d.tcp().is_none() || !filter.matches(Some(&d)) {
            continue;
        }
        let ts = p.ts_ns;
        let len = p.orig_len;
        if by_if {
            tr.set_interface(p.interface);
        }
        let Some(info) = tr.process(ts, len, &d) else {
            continue;
        };
        if chosen.is_none()
            && live
            && filter.flow.is_none()
            && info.flags & (decode::flags::SYN | decode::flags::ACK) != decode::flags::SYN
        {
            // Live without --flow: follow the first connection that starts, not one caught midway.
            continue;
        }
        let id = *chosen.get_or_insert(info.flow_id);
        if info.flow_id != id {
            continue;
        }
        if let Some(g) = &mut graphs {
            for b in g.iter_mut() {
                b.add(ts, &info, &d);
            }
        }
        let want_row = keep_rows || on_row.is_some();
        let sack = match (d.tcp(), info.rel_ack) {
            _ if !want_row => Vec::new(),
            (Some(t), Some(rel_ack)) if t.sack_count > 0 => {
                let base = t.ack.wrapping_sub(rel_ack);
                t.sack[..usize::from(t.sack_count).min(t.sack.len())]
                    .iter()
                    .map(|&(l, r)| [l.wrapping_sub(base), r.wrapping_sub(base)])
                    .collect()
            }
            _ => Vec::new(),
        };
        matched += 1;
        let delta = prev_ts.map_or(0, |p| ts.saturating_sub(p).max(0) as u64);
        prev_ts = Some(ts);
        if !want_row {
            continue;
        }
        let row = TimelineRow {
            ts_ns: ts,
            delta_ns: delta,
            direction: info.dir,
            flags: decode::flags_text(info.flags),
            seq: info.rel_seq,
            ack: info.rel_ack,
            len: info.payload_len,
            window_bytes: info.window,
            in_flight_bytes: info.in_flight,
            notes: notes(&info).into_iter().map(Cow::Borrowed).collect(),
            sack,
        };
        if let Some(f) = on_row.as_mut() {
            let (src, dst) = match d.ports() {
                Some((sp, dp)) => (SocketAddr::new(d.src, sp), SocketAddr::new(d.dst, dp)),
                None => continue,
            };
            let (c, s) = if info.dir == flows::Dir::ClientToServer {
                (src, dst)
            } else {
                (dst, src)
            };
            f(&row, c, s);
        }
        if keep_rows {
            rows.push(row);
        }
    }
    pk.info.packets_matched = matched;
    let (flows, _) = tr.finish_all(None);
    let flow = chosen.and_then(|id| flows.into_iter().find(|f| f.id == id));
    let seq_graph = match (graphs, graph, &flow) {
        (Some([c2s, s2c]), Some(from), Some(f)) => Some(match from {
            DataFrom::Client => c2s.finish(f, "asked"),
            DataFrom::Server => s2c.finish(f, "asked"),
            DataFrom::Busier => match f.bulk().0 {
                flows::Dir::ClientToServer => c2s.finish(f, "busier"),
                flows::Dir::ServerToClient => s2c.finish(f, "busier"),
            },
        }),
        _ => None,
    };
    TimelineResult {
        capture: pk.finish(),
        flow,
        rows,
        seq_graph,
    }
}

#[cfg(test)]
mod tests {
    use super::decode::decode;
    use super::*;

    #[test]
    fn filter_syntax() {
        let (a, b) = Filter::parse_flow("10.0.0.1:40000-10.0.0.2:80").unwrap();
        assert_eq!(a, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(b.port(), 80);
        let (a, _) = Filter::parse_flow("[::1]:5201,[::1]:40000").unwrap();
        assert_eq!(a.port(), 5201);
        assert!(Filter::parse_flow("[::1]:5201-[::2]:1").is_ok());
        assert!(matches!(
            Filter::parse_flow("10.0.0.1:0-10.0.0.2:80"),
            Err(FilterError::FlowEndpoints(_, _))
        ));
        assert!(matches!(
            Filter::parse_flow("10.0.0.1:80,10.0.0.1:80"),
            Err(FilterError::FlowEndpoints(_, _))
        ));
        assert!(matches!(
            Filter::parse_flow("10.0.0.1-10.0.0.2"),
            Err(FilterError::Flow(_))
        ));
        assert!(Filter::parse_host("::1").is_ok());
        assert!(Filter::parse_host("[::1]").is_ok());
        assert!(matches!(
            Filter::parse_host("localhost"),
            Err(FilterError::Host(_))
        ));
    }

    #[test]
    fn filter_matches_either_direction() {
        use decode::tests::ipv4_tcp;
        let p = ipv4_tcp(
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            40000,
            80,
            0,
            0,
            decode::flags::ACK,
            b"",
        );
        let d = decode(read::LinkType::RAW, &p, p.len() as u32).unwrap();
        let f = |host: Option<&str>, port: Option<u16>, flow: Option<&str>| Filter {
            host: host.map(|h| Filter::parse_host(h).unwrap()),
            port,
            flow: flow.map(|x| Filter::parse_flow(x).unwrap()),
            expr: None,
        };
        assert!(f(None, None, None).matches(Some(&d)));
        assert!(f(None, None, None).matches(None));
        assert!(!f(Some("1.1.1.1"), None, None).matches(None));
        assert!(f(Some("2.2.2.2"), Some(80), None).matches(Some(&d)));
        assert!(!f(Some("2.2.2.3"), None, None).matches(Some(&d)));
        assert!(!f(None, Some(81), None).matches(Some(&d)));
        assert!(f(None, None, Some("2.2.2.2:80-1.1.1.1:40000")).matches(Some(&d)));
        assert!(!f(None, None, Some("2.2.2.2:80-1.1.1.1:40001")).matches(Some(&d)));
    }

    /// Random and truncated bytes never panic the reader, the decoder or the tracker.
    #[test]
    fn random_and_truncated_input_never_panics() {
        use read::tests::{epb, idb, pcap_header, pcap_record, shb};
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let pkt = decode::tests::ipv4_tcp(
            [1, 2, 3, 4],
            [5, 6, 7, 8],
            1,
            2,
            3,
            4,
            decode::flags::SYN,
            b"abc",
        );
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        for big in [false, true] {
            let mut f = pcap_header(big, false, 101, 65535);
            f.extend(pcap_record(big, 1, 2, &pkt, pkt.len() as u32));
            f.extend(pcap_record(big, 1, 3, &pkt, pkt.len() as u32));
            seeds.push(f);
            let mut f = shb(big);
            f.extend(idb(big, 101, 0, Some(9)));
            f.extend(epb(big, 0, 5, &pkt, pkt.len() as u32));
            seeds.push(f);
        }
        let run = |bytes: Vec<u8>| {
            let Ok(mut r) = CaptureReader::from_reader(Box::new(std::io::Cursor::new(bytes)))
            else {
                return;
            };
            let mut tr = FlowTracker::new(TrackerConfig::default());
            while let Some(p) = r.next_packet() {
                if let Ok(d) = decode(p.link, p.data, p.orig_len) {
                    tr.process(p.ts_ns, p.orig_len, &d);
                }
            }
            let _ = tr.finish_all(None);
        };
        for seed in &seeds {
            for cut in 0..seed.len() {
                run(seed[..cut].to_vec());
            }
            for _ in 0..600 {
                let mut m = seed.clone();
                for _ in 0..(rnd() % 6 + 1) {
                    let i = (rnd() as usize) % m.len();
                    m[i] = rnd() as u8;
                }
                run(m);
            }
        }
        // Pure noise through every link type decoder.
        for _ in 0..5000 {
            let n = (rnd() % 120) as usize;
            let b: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
            for link in [0u16, 1, 101, 108, 113, 228, 229, 276] {
                let _ = decode(read::LinkType(link), &b, rnd() as u32);
            }
        }
    }
}
