//! The flight recorder of `capture rpc --live --keep-slow D --keep-dir DIR`: a short ring of each connection's
//! recent packets and, when a request takes longer than `D` (request end to the response's last byte), that
//! connection's packets around it (the ring: before the request, the request and the response up to its last
//! packet) written to `DIR/<time>-<server>-<op>.pcap`, ready for `capture timeline` or Wireshark. Nobody has to
//! be running tcpdump when the slow request happens.
//!
//! Bounds (memory and disk), all fixed:
//! - per connection, the last [`RING_PACKETS`] packets and at most [`RING_BYTES`] bytes;
//! - all rings together at most [`TOTAL_RING_BYTES`]; past it the rings of the eighth of the connections
//!   silent longest are dropped (counted);
//! - at most [`MAX_FILES`] files and [`MAX_DISK_BYTES`] bytes in the directory, counted across runs: the
//!   files of roundtrip's own naming pattern found there at the start count, and the oldest of them are
//!   removed first to make room (counted as rotated); any other file is never touched. Within one run the
//!   same bounds hold for the files it writes itself: slow requests past them are counted, not written.
//!
//! File names: the time (UTC, `20261125T202336.123Z`), the server address and port with every character
//! other than letters, digits, `.` and `-` turned into `_` (so IPv6 `[::1]:5432` is `__1_5432`, safe on every
//! file system), the operation (same rule, at most 40 characters); `-2`, `-3`, ... when the name exists.
//!
//! Files are created mode 0600 (they hold queries) relative to the directory, opened once
//! (`O_DIRECTORY|O_NOFOLLOW`), with `O_CREAT|O_EXCL|O_NOFOLLOW`: a name that exists, a symbolic link planted
//! there included, is never opened, the next free name is taken. A directory the recorder creates is 0700.
#![forbid(unsafe_code)]

use super::read::{LinkType, Packet};
use super::rpc::Transaction;
use super::rpc::driver::{ConnInfo, Segment};
use super::write::PcapWriter;
use crate::output_file::at;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Packets kept per connection.
pub const RING_PACKETS: usize = 256;
/// Bytes kept per connection.
pub const RING_BYTES: usize = 512 << 10;
/// Bytes kept over all connections.
pub const TOTAL_RING_BYTES: usize = 64 << 20;
/// Files of the recorder's naming pattern in the directory, across runs.
pub const MAX_FILES: u64 = 100;
/// Bytes of the recorder's files in the directory, across runs.
pub const MAX_DISK_BYTES: u64 = 256 << 20;
/// Names tried (`-2`, `-3`, ...) before a slow request is given up as not written.
const MAX_NAME_TRIES: u32 = 1000;
/// Bytes of a pcap file header and of a packet record's header.
const PCAP_HEADER: u64 = 24;
const PCAP_RECORD: u64 = 16;

type Key = (SocketAddr, SocketAddr);

fn key(a: SocketAddr, b: SocketAddr) -> Key {
    if a <= b { (a, b) } else { (b, a) }
}

#[derive(Debug, Default)]
struct Ring {
    packets: VecDeque<(i64, u32, Vec<u8>)>,
    bytes: usize,
    last_ts: i64,
}

/// What the recorder did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KeepSummary {
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Bytes written.
    pub bytes_written: u64,
    /// Slow requests not written because a bound was reached.
    pub not_written: u64,
    /// Files of earlier runs removed (oldest first) to keep the directory within the bounds.
    pub rotated: u64,
    /// Connection rings dropped to stay within [`TOTAL_RING_BYTES`].
    pub rings_dropped: u64,
    /// The first write error, if any.
    pub error: Option<String>,
}

/// The flight recorder's directory could not be used.
#[derive(Debug, Error)]
pub enum KeepDirError {
    /// The path exists and is not a directory (a regular file, a symbolic link, ...).
    #[error(
        "{path}: not a directory (it is {what}); give a directory, or a new name to create one"
    )]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// What is there.
        what: &'static str,
    },
    /// The system refused creating, opening or listing it.
    #[error("cannot use the directory {path}: {source}")]
    Io {
        /// The path given.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// The flight recorder's directory, opened once before capturing, and the files of earlier runs in it.
#[derive(Debug)]
pub struct KeepDir {
    path: PathBuf,
    dir: File,
    /// Earlier runs' files (name, bytes), oldest first.
    earlier: VecDeque<(String, u64)>,
    earlier_bytes: u64,
}

/// True when `name` is of the recorder's naming pattern: `YYYYMMDDTHHMMSS.mmmZ-` then letters, digits, `.`,
/// `-` and `_` only, ending in `.pcap`.
pub fn is_recorder_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.len() < 26 || !name.ends_with(".pcap") {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    digits(0..8)
        && b[8] == b'T'
        && digits(9..15)
        && b[15] == b'.'
        && digits(16..19)
        && b[19] == b'Z'
        && b[20] == b'-'
        && b[21..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
}

impl KeepDir {
    /// Opens `path` (`O_DIRECTORY|O_NOFOLLOW`), creating it mode 0700 when missing, and lists the files of the
    /// recorder's naming pattern already there (regular files only: a link is never counted or removed).
    /// A regular file, a symbolic link or anything else but a directory at `path` is refused.
    pub fn open(path: &Path) -> Result<KeepDir, KeepDirError> {
        let io_err = |source| KeepDirError::Io {
            path: path.to_path_buf(),
            source,
        };
        let created = match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => false,
            Ok(m) => {
                let t = m.file_type();
                use std::os::unix::fs::FileTypeExt;
                let what = if t.is_file() {
                    "a regular file"
                } else if t.is_symlink() {
                    "a symbolic link"
                } else if t.is_fifo() {
                    "a FIFO"
                } else if t.is_socket() {
                    "a socket"
                } else {
                    "a device"
                };
                return Err(KeepDirError::NotADirectory {
                    path: path.to_path_buf(),
                    what,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(path)
                    .map_err(io_err)?;
                true
            }
            Err(e) => return Err(io_err(e)),
        };
        let dir = at::open_dir(path).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) | Some(libc::ELOOP) => KeepDirError::NotADirectory {
                path: path.to_path_buf(),
                what: "no longer a directory",
            },
            _ => io_err(e),
        })?;
        if created {
            // 0700 whatever the umask: the files hold queries.
            dir.set_permissions(std::fs::Permissions::from_mode(0o700))
                .map_err(io_err)?;
        }
        let mut earlier = Vec::new();
        for e in std::fs::read_dir(path).map_err(io_err)? {
            let e = e.map_err(io_err)?;
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !is_recorder_name(&name) {
                continue;
            }
            if let Ok(st) = at::stat_at(&dir, &name)
                && st.regular
            {
                earlier.push((name, st.bytes));
            }
        }
        // The name begins with the time, fixed width: name order is time order.
        earlier.sort();
        let earlier_bytes = earlier.iter().map(|(_, b)| b).sum();
        Ok(KeepDir {
            path: path.to_path_buf(),
            dir,
            earlier: earlier.into(),
            earlier_bytes,
        })
    }

    /// The path given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Files of earlier runs found (and not yet rotated out).
    pub fn earlier_files(&self) -> usize {
        self.earlier.len()
    }
}

/// Keeps recent packets per connection and writes those of slow requests.
#[derive(Debug)]
pub struct FlightRecorder {
    dir: KeepDir,
    threshold: Duration,
    link: LinkType,
    snaplen: u32,
    rings: HashMap<Key, Ring>,
    total: usize,
    summary: KeepSummary,
}

/// File-name-safe text: letters, digits, `.` and `-` kept, anything else `_`.
pub fn safe(s: &str, max: usize) -> String {
    s.chars()
        .take(max)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `20261125T202336.123Z` of a Unix time.
pub fn stamp(t: Duration) -> String {
    let secs = t.as_secs() as i64;
    let (y, m, d) = crate::units::civil_date(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60,
        t.subsec_millis()
    )
}

impl FlightRecorder {
    /// Writes to `dir` (see [`KeepDir::open`]) the packets of requests slower than `threshold`.
    pub fn new(dir: KeepDir, threshold: Duration, link: LinkType, snaplen: u32) -> Self {
        FlightRecorder {
            dir,
            threshold,
            link,
            snaplen,
            rings: HashMap::new(),
            total: 0,
            summary: KeepSummary::default(),
        }
    }

    /// Remembers a packet of the connection `seg` belongs to.
    pub fn packet(&mut self, p: &Packet<'_>, seg: &Segment<'_>) {
        let k = key(seg.src(), seg.dst());
        let r = self.rings.entry(k).or_default();
        r.packets.push_back((p.ts_ns, p.orig_len, p.data.to_vec()));
        r.bytes += p.data.len();
        self.total += p.data.len();
        r.last_ts = p.ts_ns;
        while r.packets.len() > RING_PACKETS || (r.bytes > RING_BYTES && r.packets.len() > 1) {
            if let Some((_, _, d)) = r.packets.pop_front() {
                r.bytes -= d.len();
                self.total -= d.len();
            }
        }
        if self.total > TOTAL_RING_BYTES {
            self.shed();
        }
    }

    fn shed(&mut self) {
        let mut by_age: Vec<(i64, Key)> = self.rings.iter().map(|(k, r)| (r.last_ts, *k)).collect();
        let n = (by_age.len() / 8).max(1).min(by_age.len());
        if n == 0 {
            return;
        }
        by_age.select_nth_unstable_by_key(n - 1, |x| x.0);
        for (_, k) in by_age.into_iter().take(n) {
            if let Some(r) = self.rings.remove(&k) {
                self.total -= r.bytes;
                self.summary.rings_dropped += 1;
            }
        }
    }

    /// A completed request: written when slower than the threshold. Returns the file written.
    pub fn transaction(&mut self, conn: &ConnInfo, t: &Transaction) -> Option<PathBuf> {
        if t.last_byte() < self.threshold {
            return None;
        }
        let ring = self.rings.get(&key(conn.client, conn.server))?;
        let size = PCAP_HEADER
            + ring
                .packets
                .iter()
                .map(|(_, _, d)| PCAP_RECORD + d.len() as u64)
                .sum::<u64>();
        let run_files = self.summary.files.len() as u64;
        if run_files >= MAX_FILES || self.summary.bytes_written + size > MAX_DISK_BYTES {
            self.summary.not_written += 1;
            return None;
        }
        // Room across runs: the oldest files of earlier runs go first.
        while self.dir.earlier.len() as u64 + run_files + 1 > MAX_FILES
            || self.dir.earlier_bytes + self.summary.bytes_written + size > MAX_DISK_BYTES
        {
            let Some((name, bytes)) = self.dir.earlier.pop_front() else {
                break;
            };
            match at::unlink_at(&self.dir.dir, &name) {
                Ok(()) => self.summary.rotated += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.dir.earlier.push_front((name.clone(), bytes));
                    self.summary.not_written += 1;
                    if self.summary.error.is_none() {
                        self.summary.error = Some(format!(
                            "cannot remove {} to make room: {e}",
                            self.dir.path.join(&name).display()
                        ));
                    }
                    return None;
                }
            }
            self.dir.earlier_bytes -= bytes;
        }
        let base = format!(
            "{}-{}-{}",
            stamp(t.request_ts),
            safe(&conn.server.to_string(), 60),
            safe(&t.op, 40)
        );
        let mut written = None;
        for n in 1..=MAX_NAME_TRIES {
            let name = if n == 1 {
                format!("{base}.pcap")
            } else {
                format!("{base}-{n}.pcap")
            };
            let path = self.dir.path.join(&name);
            match PcapWriter::create_in(&self.dir.dir, &name, &path, self.link, self.snaplen, 0o600)
            {
                Err(e) if e.source.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    written = Some(Err(e));
                    break;
                }
                Ok(mut w) => {
                    for (ts, len, data) in &ring.packets {
                        w.write(&Packet {
                            ts_ns: *ts,
                            orig_len: *len,
                            data,
                            link: self.link,
                            interface: 0,
                            offset: 0,
                        });
                    }
                    let b = w.bytes();
                    written = Some(w.finish().map(|_| (b, path)));
                    break;
                }
            }
        }
        match written {
            Some(Ok((b, path))) => {
                self.summary.bytes_written += b;
                self.summary.files.push(path.clone());
                Some(path)
            }
            Some(Err(e)) => {
                if self.summary.error.is_none() {
                    self.summary.error = Some(e.to_string());
                }
                None
            }
            None => {
                self.summary.not_written += 1;
                if self.summary.error.is_none() {
                    self.summary.error = Some(format!(
                        "{MAX_NAME_TRIES} names taken in {} for {base}.pcap",
                        self.dir.path.display()
                    ));
                }
                None
            }
        }
    }

    /// What was written.
    pub fn summary(&self) -> &KeepSummary {
        &self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe() {
        let a: SocketAddr = "[::1]:5432".parse().unwrap();
        assert_eq!(safe(&a.to_string(), 60), "___1__5432");
        assert_eq!(safe("SELECT pg_sleep/../x", 40), "SELECT_pg_sleep_.._x");
        assert_eq!(
            stamp(Duration::new(1_764_102_216, 123_000_000)),
            "20251125T202336.123Z"
        );
        assert!(is_recorder_name(
            "20251125T202336.123Z-127.0.0.1_5432-SELECT.pcap"
        ));
        assert!(is_recorder_name(
            "20251125T202336.123Z-___1__5432-GET-2.pcap"
        ));
        assert!(!is_recorder_name("notes.pcap"));
        assert!(!is_recorder_name("20251125T202336.123Z-x.pcapng"));
        assert!(!is_recorder_name("20251125T202336.123Z-a b.pcap"));
    }

    #[test]
    fn a_regular_file_or_a_link_is_not_a_directory() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "").unwrap();
        let e = KeepDir::open(&f).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let l = d.path().join("l");
        std::os::unix::fs::symlink(d.path(), &l).unwrap();
        let e = KeepDir::open(&l).unwrap_err();
        assert!(e.to_string().contains("a symbolic link"), "{e}");
        let new = d.path().join("a/b");
        KeepDir::open(&new).unwrap();
        assert_eq!(
            std::fs::metadata(&new).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }
}
