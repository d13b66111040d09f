//! The packet source every capture analysis reads ([`Packets`]): a capture file or a live interface, with the
//! `--filter` program of a file, decoding, and the counts of what was read ([`CaptureInfo`]).

use super::decode::{self, Decoded};
use super::read::{self, CaptureReader, Format, Packet, ReadWarning};
use super::{CaptureError, CaptureInfo, Filter, bpf, live, write};
use std::borrow::Cow;
use std::path::Path;

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

/// One step of [`Packets::next_into`]: [`Next`] without the decoding, which went to the caller's slot.
#[derive(Debug)]
pub enum Step<'a> {
    /// A packet.
    Packet(Packet<'a>),
    /// Live only: no packet for a while; the wall-clock time (Unix ns), so intervals can close.
    Tick(i64),
}

/// The packet source every capture analysis reads: a file ([`Packets::open`]) or a live interface
/// ([`Packets::live`]); it decodes packets and counts what it saw. One pipeline: the analyses take a `Packets`,
/// never a path.
#[derive(Debug)]
pub struct Packets {
    src: Source,
    pub(super) info: CaptureInfo,
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
        let mut d = None;
        Some(match self.next_into(decode_it, &mut d)? {
            Step::Packet(p) => Next::Packet(p, d),
            Step::Tick(t) => Next::Tick(t),
        })
    }

    /// [`Packets::next_event`] with the decoding written into the caller's `slot` (set when `decode_it` and
    /// the packet is IP, else left as it was): the per-packet loop of `capture rpc` reads it in place instead
    /// of having it moved out through the returned event. Always inlined: `capture rpc` then keeps the packet
    /// in registers instead of a returned `Step` (44 instructions per request fewer on a pgbench capture).
    #[inline(always)]
    pub fn next_into<'s>(
        &'s mut self,
        decode_it: bool,
        slot: &mut Option<Decoded<'s>>,
    ) -> Option<Step<'s>> {
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
            Err(t) => return Some(Step::Tick(t)),
        };
        if decode_it {
            decode_noting(&mut self.info, &p, self.tcp_options, slot);
        }
        Some(Step::Packet(p))
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
            // A pcap file has one link type: an expression tcpdump refuses for it is refused before reading.
            if let Source::File(r) = &pk.src
                && let Some(link) = r.pcap_link()
                && let Err(source) = e.compile(bpf::Target::Link(link), &bpf::Options::default())
            {
                return Err(CaptureError::Filter {
                    expr: e.text().to_string(),
                    link,
                    source,
                });
            }
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
        let mut d = None;
        decode_noting(&mut self.info, &p, self.tcp_options, &mut d);
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

    pub(super) fn matched(&mut self) {
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

/// Decodes `p` into `slot`, counting (and remembering the first of) the packets that are not IP.
#[inline(always)]
fn decode_noting<'a>(
    info: &mut CaptureInfo,
    p: &Packet<'a>,
    opts: decode::TcpOptions,
    slot: &mut Option<Decoded<'a>>,
) {
    if let Err(e) = decode::decode_into(p.link, p.data, p.orig_len, opts, slot) {
        info.packets_not_ip += 1;
        if info.not_ip_example.is_none() {
            info.not_ip_example = Some(format!("packet {}: {e}", info.packets_read));
        }
    }
}
