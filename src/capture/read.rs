//! Streaming reader for pcap and pcapng files, optionally gzip-compressed.
//!
//! - pcap: microsecond (`a1b2c3d4`) and nanosecond (`a1b23c4d`) magic, either byte order.
//! - pcapng: several sections (each with its own byte order) and several interfaces per section, Enhanced,
//!   Simple and the obsolete Packet blocks, `if_tsresol` (powers of 10 and of 2) and `if_tsoffset`.
//! - gzip: detected by its magic bytes, decompressed on the fly (several concatenated members too).
//!
//! The reader keeps one large buffer and hands out packets that borrow from it ([`Packet::data`]), so reading
//! allocates nothing per packet. A corrupt or truncated file ends the stream with a [`ReadWarning`] giving the
//! byte offset (in the uncompressed stream) where reading stopped; every packet before it was delivered.
#![forbid(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Size of the read buffer. Large reads keep the system-call cost per byte negligible.
const BUF_SIZE: usize = 4 << 20;
/// Largest record or block accepted; anything larger is treated as corruption.
pub const MAX_RECORD: usize = 64 << 20;

/// Link-layer header type of a packet (the pcap LINKTYPE_ value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u16);

impl LinkType {
    /// BSD loopback / null: 4-byte address family in the capturing host's byte order.
    pub const NULL: LinkType = LinkType(0);
    /// Ethernet II (and 802.1Q / 802.1ad tagged frames).
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP, no link header (IPv4 or IPv6, from the version nibble).
    pub const RAW: LinkType = LinkType(101);
    /// OpenBSD loopback: 4-byte address family in network byte order.
    pub const LOOP: LinkType = LinkType(108);
    /// Linux cooked capture v1 (`tcpdump -i any` before libpcap 1.10).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux cooked capture v2 (`tcpdump -i any` with libpcap 1.10 and later).
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// The pcap DLT number as it appears in the file for `DLT_RAW` on some systems (12 and 14 are raw IP too).
    pub fn normalised(raw: u32) -> LinkType {
        match raw & 0xffff {
            12 | 14 => LinkType::RAW,
            v => LinkType(v as u16),
        }
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            LinkType::NULL => "null",
            LinkType::ETHERNET => "ethernet",
            LinkType::RAW => "raw",
            LinkType::LOOP => "loop",
            LinkType::LINUX_SLL => "linux-sll",
            LinkType::IPV4 => "ipv4",
            LinkType::IPV6 => "ipv6",
            LinkType::LINUX_SLL2 => "linux-sll2",
            _ => return write!(f, "linktype-{}", self.0),
        };
        f.write_str(name)
    }
}

/// The container format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic pcap with microsecond timestamps.
    PcapMicro,
    /// Classic pcap with nanosecond timestamps.
    PcapNano,
    /// pcapng.
    Pcapng,
}

/// One captured packet, borrowed from the reader's buffer until the next call to [`CaptureReader::next_packet`].
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Capture time in nanoseconds since the Unix epoch (negative before 1970).
    pub ts_ns: i64,
    /// Length of the packet on the wire (may exceed `data.len()` when the capture was snaplen-cut).
    pub orig_len: u32,
    /// The captured bytes, starting with the link-layer header.
    pub data: &'a [u8],
    /// Link-layer header type.
    pub link: LinkType,
    /// Interface index (pcapng; always 0 for pcap).
    pub interface: u32,
    /// Byte offset of the packet's record in the (uncompressed) file.
    pub offset: u64,
}

/// Opening a capture failed before any packet could be read.
#[derive(Debug, Error)]
pub enum OpenError {
    /// The file could not be opened or read.
    #[error("cannot read capture {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file does not start with a pcap, pcapng or gzip magic number.
    #[error(
        "{path} is not a pcap or pcapng capture (first bytes {magic}); write captures with tcpdump -w or dumpcap"
    )]
    NotACapture {
        /// The file.
        path: PathBuf,
        /// The first bytes, in hex.
        magic: String,
    },
    /// The file starts as a capture but ends inside its file header: nothing can be read.
    #[error(
        "{}: file truncated: {what} at byte offset 0; no packet before it (the file is damaged or was still being written)",
        path.display()
    )]
    HeaderCut {
        /// The file.
        path: PathBuf,
        /// What is missing.
        what: String,
    },
}

/// Why reading stopped before the end of the file. Everything before `offset` was delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWarning {
    /// Byte offset (in the uncompressed stream) of the record that could not be read.
    pub offset: u64,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for ReadWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte offset {}", self.message, self.offset)
    }
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    snaplen: u32,
    /// Timestamp units per second; `None` when a power of two (`tsresol_pow2`).
    units_per_sec: u64,
    pow2: Option<u8>,
    offset_s: i64,
}

impl Interface {
    fn ts_ns(&self, raw: u64) -> i64 {
        let ns = match self.pow2 {
            Some(p) => ((raw as u128 * 1_000_000_000u128) >> p) as i128,
            None if self.units_per_sec == 1_000_000_000 => raw as i128,
            None if self.units_per_sec == 1_000_000 => raw as i128 * 1000,
            None => raw as i128 * 1_000_000_000 / self.units_per_sec as i128,
        };
        let ns = ns + self.offset_s as i128 * 1_000_000_000;
        ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

#[derive(Debug)]
enum State {
    Pcap {
        big: bool,
        nano: bool,
        link: LinkType,
    },
    Pcapng {
        big: bool,
        interfaces: Vec<Interface>,
    },
    Done,
}

/// A streaming capture reader. Call [`next_packet`](Self::next_packet) until it returns `None`, then look at
/// [`warning`](Self::warning).
pub struct CaptureReader {
    src: Box<dyn Read + Send>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[0]`.
    base: u64,
    state: State,
    format: Format,
    warning: Option<ReadWarning>,
    gzip: bool,
    packets: u64,
}

impl fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("format", &self.format)
            .field("offset", &self.offset())
            .field("packets", &self.packets)
            .finish()
    }
}

#[inline]
fn u16_at(b: &[u8], big: bool) -> u16 {
    let a = [b[0], b[1]];
    if big {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

#[inline]
fn u32_at(b: &[u8], big: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const PCAPNG_BOM: u32 = 0x1A2B_3C4D;

impl CaptureReader {
    /// Opens a capture file (pcap, pcapng, or either gzip-compressed).
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let io_err = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        Self::from_reader(Box::new(file)).map_err(|e| match e {
            FromReaderError::Io(source) => io_err(source),
            FromReaderError::NotACapture(magic) => OpenError::NotACapture {
                path: path.to_path_buf(),
                magic,
            },
            FromReaderError::HeaderCut(what) => OpenError::HeaderCut {
                path: path.to_path_buf(),
                what,
            },
        })
    }

    /// Reads a capture from any byte source (for tests and stdin); detects gzip.
    pub fn from_reader(src: Box<dyn Read + Send>) -> Result<Self, FromReaderError> {
        let mut r = CaptureReader {
            src,
            buf: vec![0; BUF_SIZE],
            pos: 0,
            end: 0,
            eof: false,
            base: 0,
            state: State::Done,
            format: Format::PcapMicro,
            warning: None,
            gzip: false,
            packets: 0,
        };
        r.fill(4).map_err(FromReaderError::Io)?;
        if r.end >= 2 && r.buf[0] == 0x1f && r.buf[1] == 0x8b {
            // Re-wrap: the bytes already read belong to the gzip stream.
            let head = r.buf[..r.end].to_vec();
            let rest = std::mem::replace(&mut r.src, Box::new(io::empty()));
            let chained = io::Cursor::new(head).chain(rest);
            r.src = Box::new(flate2::read::MultiGzDecoder::new(
                io::BufReader::with_capacity(1 << 20, chained),
            ));
            r.pos = 0;
            r.end = 0;
            r.eof = false;
            r.gzip = true;
            r.fill(4).map_err(FromReaderError::Io)?;
        }
        if r.end < 4 {
            return Err(FromReaderError::NotACapture(hex(&r.buf[..r.end])));
        }
        let magic_le = u32::from_le_bytes([r.buf[0], r.buf[1], r.buf[2], r.buf[3]]);
        match magic_le {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
                let big = matches!(magic_le, 0xd4c3_b2a1 | 0x4d3c_b2a1);
                let nano = matches!(magic_le, 0xa1b2_3c4d | 0x4d3c_b2a1);
                r.format = if nano {
                    Format::PcapNano
                } else {
                    Format::PcapMicro
                };
                r.fill(24).map_err(FromReaderError::Io)?;
                if r.end < 24 {
                    // No link type, no packet: not a capture to report on, only the damage.
                    return Err(FromReaderError::HeaderCut(format!(
                        "pcap file header cut short ({} of 24 bytes)",
                        r.end
                    )));
                }
                let link = LinkType::normalised(u32_at(&r.buf[20..], big));
                r.pos = 24;
                r.state = State::Pcap { big, nano, link };
            }
            PCAPNG_SHB => {
                r.format = Format::Pcapng;
                r.state = State::Pcapng {
                    big: false,
                    interfaces: Vec::new(),
                };
            }
            _ => return Err(FromReaderError::NotACapture(hex(&r.buf[..r.end.min(8)]))),
        }
        Ok(r)
    }

    /// The container format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The link type of every packet of a pcap file (None for pcapng, whose interfaces each name theirs as
    /// their blocks come).
    pub fn pcap_link(&self) -> Option<LinkType> {
        match self.state {
            State::Pcap { link, .. } => Some(link),
            _ => None,
        }
    }

    /// True when the input was gzip-compressed.
    pub fn is_gzip(&self) -> bool {
        self.gzip
    }

    /// Bytes of the (uncompressed) file consumed so far.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Packets delivered so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Why reading stopped early, if it did.
    pub fn warning(&self) -> Option<&ReadWarning> {
        self.warning.as_ref()
    }

    fn warn(&mut self, offset: u64, message: String) {
        if self.warning.is_none() {
            self.warning = Some(ReadWarning { offset, message });
        }
        self.state = State::Done;
    }

    /// Makes at least `n` bytes available from `pos` (fewer only at end of input).
    fn fill(&mut self, n: usize) -> io::Result<()> {
        if self.end - self.pos >= n {
            return Ok(());
        }
        if self.pos + n > self.buf.len() {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
            if n > self.buf.len() {
                self.buf.resize(n, 0);
            }
        }
        while self.end - self.pos < n && !self.eof {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Like `fill`, but turns a short read or an I/O error into the end-of-stream warning. Returns false then.
    #[inline]
    fn need(&mut self, n: usize, what: &str) -> bool {
        if self.end - self.pos >= n {
            return true;
        }
        self.need_slow(n, what)
    }

    #[cold]
    fn need_slow(&mut self, n: usize, what: &str) -> bool {
        let at = self.offset();
        match self.fill(n) {
            Ok(()) if self.end - self.pos >= n => true,
            Ok(()) => {
                let have = self.end - self.pos;
                if have == 0 && what != "record body" && what != "block body" {
                    // Clean end of file between records.
                    self.state = State::Done;
                } else {
                    self.warn(
                        at,
                        format!("file truncated: {what} needs {n} bytes, only {have} left"),
                    );
                }
                false
            }
            Err(e) => {
                let msg = if self.gzip {
                    format!("gzip stream unreadable ({e})")
                } else {
                    format!("read error ({e})")
                };
                self.warn(at, msg);
                false
            }
        }
    }

    /// The next packet, or `None` at the end of the file or at the first unreadable record (see
    /// [`warning`](Self::warning)). The packet borrows the reader's buffer.
    pub fn next_packet(&mut self) -> Option<Packet<'_>> {
        match self.state {
            State::Done => None,
            State::Pcap { big, nano, link } => self.next_pcap(big, nano, link),
            State::Pcapng { .. } => self.next_pcapng(),
        }
    }

    /// The next packet for which `keep` returns true (the others are read and skipped; [`packets`](Self::packets)
    /// counts them too).
    pub fn next_packet_if(
        &mut self,
        keep: &mut dyn FnMut(&Packet<'_>) -> bool,
    ) -> Option<Packet<'_>> {
        loop {
            let p = self.next_packet()?;
            if keep(&p) {
                // Rebuilt from plain values so the borrow ends in this iteration (a conditional return of a
                // borrow from a loop is not accepted by the borrow checker yet).
                let (ptr, len, ts_ns, orig_len, link, interface, offset) = (
                    p.data.as_ptr() as usize,
                    p.data.len(),
                    p.ts_ns,
                    p.orig_len,
                    p.link,
                    p.interface,
                    p.offset,
                );
                let start = ptr - self.buf.as_ptr() as usize;
                return Some(Packet {
                    ts_ns,
                    orig_len,
                    data: &self.buf[start..start + len],
                    link,
                    interface,
                    offset,
                });
            }
        }
    }

    fn next_pcap(&mut self, big: bool, nano: bool, link: LinkType) -> Option<Packet<'_>> {
        if !self.need(16, "record header") {
            return None;
        }
        let at = self.offset();
        let h = &self.buf[self.pos..self.pos + 16];
        let sec = u32_at(h, big);
        let frac = u32_at(&h[4..], big);
        let incl = u32_at(&h[8..], big) as usize;
        let orig = u32_at(&h[12..], big);
        if incl > MAX_RECORD {
            self.warn(
                at,
                format!("corrupt pcap record: captured length {incl} is impossible"),
            );
            return None;
        }
        if (!nano && frac >= 1_000_000) || (nano && frac >= 1_000_000_000) {
            self.warn(
                at,
                format!("corrupt pcap record: sub-second timestamp {frac} out of range"),
            );
            return None;
        }
        if !self.need(16 + incl, "record body") {
            return None;
        }
        let start = self.pos + 16;
        self.pos = start + incl;
        self.packets += 1;
        let ts_ns = sec as i64 * 1_000_000_000
            + if nano {
                frac as i64
            } else {
                frac as i64 * 1000
            };
        Some(Packet {
            ts_ns,
            orig_len: orig.max(incl as u32),
            data: &self.buf[start..start + incl],
            link,
            interface: 0,
            offset: at,
        })
    }

    fn next_pcapng(&mut self) -> Option<Packet<'_>> {
        loop {
            if !self.need(12, "block header") {
                return None;
            }
            let at = self.offset();
            let State::Pcapng { big, .. } = &self.state else {
                return None;
            };
            let mut big = *big;
            let btype_le = u32::from_le_bytes(
                self.buf[self.pos..self.pos + 4]
                    .try_into()
                    .unwrap_or([0; 4]),
            );
            if btype_le == PCAPNG_SHB {
                // The byte-order magic decides the order of this section.
                let bom = &self.buf[self.pos + 8..self.pos + 12];
                big = match u32::from_le_bytes([bom[0], bom[1], bom[2], bom[3]]) {
                    PCAPNG_BOM => false,
                    0x4D3C_2B1A => true,
                    other => {
                        self.warn(
                            at,
                            format!("corrupt pcapng section header: byte-order magic {other:08x}"),
                        );
                        return None;
                    }
                };
            }
            let btype = u32_at(&self.buf[self.pos..], big);
            let blen = u32_at(&self.buf[self.pos + 4..], big) as usize;
            if blen < 12 || !blen.is_multiple_of(4) || blen > MAX_RECORD {
                self.warn(at, format!("corrupt pcapng block: length {blen}"));
                return None;
            }
            if !self.need(blen, "block body") {
                return None;
            }
            let start = self.pos;
            let trailer = u32_at(&self.buf[start + blen - 4..], big) as usize;
            if trailer != blen {
                self.warn(
                    at,
                    format!(
                        "corrupt pcapng block: leading length {blen} but trailing length {trailer}"
                    ),
                );
                return None;
            }
            self.pos += blen;
            let body_range = start + 8..start + blen - 4;
            match btype {
                PCAPNG_SHB => {
                    self.state = State::Pcapng {
                        big,
                        interfaces: Vec::new(),
                    };
                }
                1 => {
                    // Interface Description Block.
                    let body = &self.buf[body_range];
                    if body.len() < 8 {
                        self.warn(at, "corrupt pcapng interface block: too short".into());
                        return None;
                    }
                    let mut iface = Interface {
                        link: LinkType::normalised(u16_at(body, big) as u32),
                        snaplen: u32_at(&body[4..], big),
                        units_per_sec: 1_000_000,
                        pow2: None,
                        offset_s: 0,
                    };
                    let mut opts = &body[8..];
                    while opts.len() >= 4 {
                        let code = u16_at(opts, big);
                        let len = u16_at(&opts[2..], big) as usize;
                        let padded = (len + 3) & !3;
                        if code == 0 || opts.len() < 4 + len {
                            break;
                        }
                        let v = &opts[4..4 + len];
                        match (code, len) {
                            (9, 1) => {
                                let r = v[0];
                                if r & 0x80 != 0 {
                                    let p = r & 0x7f;
                                    if p <= 64 {
                                        iface.pow2 = Some(p);
                                    }
                                } else if r <= 19 {
                                    iface.units_per_sec = 10u64.pow(r as u32);
                                }
                            }
                            (14, 8) => {
                                let hi = u32_at(v, big) as u64;
                                let lo = u32_at(&v[4..], big) as u64;
                                iface.offset_s = if big {
                                    (hi << 32 | lo) as i64
                                } else {
                                    (lo << 32 | hi) as i64
                                };
                            }
                            _ => {}
                        }
                        if opts.len() < 4 + padded {
                            break;
                        }
                        opts = &opts[4 + padded..];
                    }
                    if let State::Pcapng { interfaces, .. } = &mut self.state {
                        interfaces.push(iface);
                    }
                }
                6 | 2 | 3 => {
                    let State::Pcapng { interfaces, .. } = &self.state else {
                        return None;
                    };
                    let body = &self.buf[body_range.clone()];
                    let (iface_id, ts_raw, incl, orig, data_off) = match btype {
                        6 | 2 => {
                            if body.len() < 20 {
                                self.warn(at, "corrupt pcapng packet block: too short".into());
                                return None;
                            }
                            let id = if btype == 6 {
                                u32_at(body, big)
                            } else {
                                u16_at(body, big) as u32
                            };
                            let hi = u32_at(&body[4..], big) as u64;
                            let lo = u32_at(&body[8..], big) as u64;
                            (
                                id,
                                hi << 32 | lo,
                                u32_at(&body[12..], big) as usize,
                                u32_at(&body[16..], big),
                                20,
                            )
                        }
                        _ => {
                            if body.len() < 4 {
                                self.warn(
                                    at,
                                    "corrupt pcapng simple packet block: too short".into(),
                                );
                                return None;
                            }
                            let orig = u32_at(body, big);
                            let snap = interfaces.first().map_or(u32::MAX, |i| {
                                if i.snaplen == 0 { u32::MAX } else { i.snaplen }
                            });
                            let incl = (orig.min(snap) as usize).min(body.len() - 4);
                            (0, 0, incl, orig, 4)
                        }
                    };
                    let Some(iface) = interfaces.get(iface_id as usize).copied() else {
                        self.warn(
                            at,
                            format!("corrupt pcapng packet block: interface {iface_id} was never described"),
                        );
                        return None;
                    };
                    if data_off + incl > body.len() {
                        self.warn(
                            at,
                            format!(
                                "corrupt pcapng packet block: captured length {incl} exceeds the block ({} bytes)",
                                body.len()
                            ),
                        );
                        return None;
                    }
                    let ds = body_range.start + data_off;
                    self.packets += 1;
                    return Some(Packet {
                        ts_ns: iface.ts_ns(ts_raw),
                        orig_len: orig.max(incl as u32),
                        data: &self.buf[ds..ds + incl],
                        link: iface.link,
                        interface: iface_id,
                        offset: at,
                    });
                }
                _ => {} // statistics, name resolution, custom blocks, ...
            }
        }
    }
}

/// Why [`CaptureReader::from_reader`] failed.
#[derive(Debug, Error)]
pub enum FromReaderError {
    /// Reading failed.
    #[error("read error: {0}")]
    Io(io::Error),
    /// Not a capture; the first bytes in hex.
    #[error("not a pcap or pcapng capture (first bytes {0})")]
    NotACapture(String),
    /// A capture's magic number, but its file header is cut short.
    #[error("file truncated: {0} at byte offset 0")]
    HeaderCut(String),
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "none: the file is empty".into();
    }
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
pub(crate) mod tests;
