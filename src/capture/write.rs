//! Writing packets to a capture file: pcap with nanosecond timestamps (magic `a1b23c4d`) or pcapng (one
//! interface block with `if_tsresol` = 9, enhanced packet blocks), chosen by the file name (`.pcapng` or
//! not), so `capture ... --live --write` and the flight recorder leave files every tool reads and that
//! [`super::read`] reads back to the same packets.
//!
//! A path the user names (`--write`) is opened through [`crate::output_file`]: never through a symbolic link,
//! a regular file written beside the path and renamed over it at [`PcapWriter::finish`], a FIFO or `-`
//! (standard output) streamed. The flight recorder's files are created in its directory with
//! [`crate::output_file::at`] ([`PcapWriter::create_in`]).
#![forbid(unsafe_code)]

use super::read::{LinkType, Packet};
use crate::output_file::{self, OutputError, OutputFile};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Writing a capture file failed.
#[derive(Debug, Error)]
#[error("cannot write capture {path}: {source}")]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// What the system said.
    pub source: io::Error,
}

impl From<OutputError> for WriteError {
    fn from(e: OutputError) -> Self {
        match e {
            OutputError::Io { path, source } => WriteError { path, source },
            OutputError::Refused { ref path, .. } | OutputError::NoFolder { ref path, .. } => {
                WriteError {
                    path: path.clone(),
                    source: io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
                }
            }
        }
    }
}

/// Where a [`PcapWriter`] writes.
#[derive(Debug)]
enum Out {
    /// A path the user named.
    Named(OutputFile),
    /// A file created in the flight recorder's directory.
    File(File),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::Named(f) => f.write(buf),
            Out::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Named(f) => f.flush(),
            Out::File(f) => f.flush(),
        }
    }
}

/// A pcap or pcapng file being written.
#[derive(Debug)]
pub struct PcapWriter {
    out: BufWriter<Out>,
    path: PathBuf,
    ng: bool,
    error: Option<io::Error>,
    bytes: u64,
    packets: u64,
}

/// True when `path` names a pcapng file.
pub fn is_pcapng(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pcapng"))
}

impl PcapWriter {
    /// Opens `path`, a path the user named, through [`output_file::create`] (a regular file appears, whole,
    /// at [`finish`](Self::finish); a FIFO or `-` is streamed) and writes the file header for `link`.
    pub fn create(path: &Path, link: LinkType, snaplen: u32) -> Result<Self, WriteError> {
        let out = output_file::create(path)?;
        Self::start(Out::Named(out), path, link, snaplen)
    }

    /// Creates the new file `name` in the directory `dir` (opened with [`output_file::at::open_dir`]) with
    /// exactly the permission bits `mode`, never through a symbolic link and never over an existing file
    /// (`AlreadyExists` then), and writes the file header for `link`. `path` names it in errors.
    pub fn create_in(
        dir: &File,
        name: &str,
        path: &Path,
        link: LinkType,
        snaplen: u32,
        mode: u32,
    ) -> Result<Self, WriteError> {
        let f = output_file::at::create_new_at(dir, name, mode).map_err(|source| WriteError {
            path: path.to_path_buf(),
            source,
        })?;
        Self::start(Out::File(f), path, link, snaplen)
    }

    fn start(out: Out, path: &Path, link: LinkType, snaplen: u32) -> Result<Self, WriteError> {
        let err = |source| WriteError {
            path: path.to_path_buf(),
            source,
        };
        let mut w = PcapWriter {
            out: BufWriter::with_capacity(1 << 20, out),
            path: path.to_path_buf(),
            ng: is_pcapng(path),
            error: None,
            bytes: 0,
            packets: 0,
        };
        let head = if w.ng {
            let mut h = Vec::new();
            // Section header block.
            h.extend(0x0A0D_0D0Au32.to_le_bytes());
            h.extend(28u32.to_le_bytes());
            h.extend(0x1A2B_3C4Du32.to_le_bytes());
            h.extend(1u16.to_le_bytes());
            h.extend(0u16.to_le_bytes());
            h.extend((-1i64).to_le_bytes());
            h.extend(28u32.to_le_bytes());
            // Interface description block with if_tsresol = 9 (nanoseconds).
            h.extend(1u32.to_le_bytes());
            h.extend(32u32.to_le_bytes());
            h.extend(link.0.to_le_bytes());
            h.extend(0u16.to_le_bytes());
            h.extend(snaplen.to_le_bytes());
            h.extend(9u16.to_le_bytes());
            h.extend(1u16.to_le_bytes());
            h.extend([9, 0, 0, 0]);
            h.extend([0, 0, 0, 0]);
            h.extend(32u32.to_le_bytes());
            h
        } else {
            let mut h = Vec::with_capacity(24);
            h.extend(0xa1b2_3c4du32.to_le_bytes());
            h.extend(2u16.to_le_bytes());
            h.extend(4u16.to_le_bytes());
            h.extend(0i32.to_le_bytes());
            h.extend(0u32.to_le_bytes());
            h.extend(snaplen.to_le_bytes());
            h.extend(u32::from(link.0).to_le_bytes());
            h
        };
        w.out.write_all(&head).map_err(err)?;
        w.bytes = head.len() as u64;
        Ok(w)
    }

    /// Appends one packet; the first error is kept for [`finish`](Self::finish) and later packets are skipped.
    pub fn write(&mut self, p: &Packet<'_>) {
        if self.error.is_some() {
            return;
        }
        let r = if self.ng {
            let pad = (4 - p.data.len() % 4) % 4;
            let total = 32 + p.data.len() + pad;
            let ts = p.ts_ns.max(0) as u64;
            let mut h = [0u8; 28];
            h[0..4].copy_from_slice(&6u32.to_le_bytes());
            h[4..8].copy_from_slice(&(total as u32).to_le_bytes());
            h[12..16].copy_from_slice(&((ts >> 32) as u32).to_le_bytes());
            h[16..20].copy_from_slice(&(ts as u32).to_le_bytes());
            h[20..24].copy_from_slice(&(p.data.len() as u32).to_le_bytes());
            h[24..28].copy_from_slice(&p.orig_len.to_le_bytes());
            self.bytes += total as u64;
            self.out
                .write_all(&h)
                .and_then(|_| self.out.write_all(p.data))
                .and_then(|_| self.out.write_all(&[0u8; 3][..pad]))
                .and_then(|_| self.out.write_all(&(total as u32).to_le_bytes()))
        } else {
            let ts = p.ts_ns.max(0);
            let mut h = [0u8; 16];
            h[0..4].copy_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
            h[4..8].copy_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
            h[8..12].copy_from_slice(&(p.data.len() as u32).to_le_bytes());
            h[12..16].copy_from_slice(&p.orig_len.to_le_bytes());
            self.bytes += 16 + p.data.len() as u64;
            self.out
                .write_all(&h)
                .and_then(|_| self.out.write_all(p.data))
        };
        self.packets += 1;
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    /// Bytes written so far (headers included).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes and closes the file; a regular file the user named is renamed over its path now.
    pub fn finish(mut self) -> Result<(), WriteError> {
        let r = match self.error.take() {
            Some(e) => Err(e),
            None => self.out.flush(),
        };
        r.map_err(|source| WriteError {
            path: self.path.clone(),
            source,
        })?;
        let path = self.path.clone();
        match self.out.into_inner() {
            Ok(Out::Named(f)) => f.commit().map_err(WriteError::from),
            Ok(Out::File(_)) => Ok(()),
            Err(e) => Err(WriteError {
                path,
                source: e.into_error(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::read::CaptureReader;

    #[test]
    fn written_files_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a.pcap", "b.pcapng"] {
            let path = dir.path().join(name);
            let mut w = PcapWriter::create(&path, LinkType::ETHERNET, 65535).unwrap();
            let pkts: Vec<(i64, Vec<u8>, u32)> = vec![
                (1_700_000_000_123_456_789, vec![1, 2, 3], 3),
                (1_700_000_001_000_000_001, vec![9; 61], 1500),
            ];
            for (ts, d, l) in &pkts {
                w.write(&Packet {
                    ts_ns: *ts,
                    orig_len: *l,
                    data: d,
                    link: LinkType::ETHERNET,
                    interface: 0,
                    offset: 0,
                });
            }
            w.finish().unwrap();
            let mut r = CaptureReader::open(&path).unwrap();
            for (ts, d, l) in &pkts {
                let p = r.next_packet().unwrap();
                assert_eq!(
                    (p.ts_ns, p.data, p.orig_len, p.link),
                    (*ts, &d[..], *l, LinkType::ETHERNET)
                );
            }
            assert!(r.next_packet().is_none());
            assert!(r.warning().is_none(), "{name}: {:?}", r.warning());
        }
    }
}
