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
//! - at most [`MAX_FILES`] files and [`MAX_DISK_BYTES`] bytes written per run; slow requests past that are
//!   counted, not written.
//!
//! File names: the time (UTC, `20261125T202336.123Z`), the server address and port with every character
//! other than letters, digits, `.` and `-` turned into `_` (so IPv6 `[::1]:5432` is `__1_5432`, safe on every
//! file system), the operation (same rule, at most 40 characters); `-2`, `-3`, ... when the name exists.
//! Files are created mode 0600: they hold queries.
#![forbid(unsafe_code)]

use super::read::{LinkType, Packet};
use super::rpc::Transaction;
use super::rpc::driver::{ConnInfo, Segment};
use super::write::{PcapWriter, WriteError};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Packets kept per connection.
pub const RING_PACKETS: usize = 256;
/// Bytes kept per connection.
pub const RING_BYTES: usize = 512 << 10;
/// Bytes kept over all connections.
pub const TOTAL_RING_BYTES: usize = 64 << 20;
/// Files written per run.
pub const MAX_FILES: u64 = 100;
/// Bytes written per run.
pub const MAX_DISK_BYTES: u64 = 256 << 20;

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
    /// Connection rings dropped to stay within [`TOTAL_RING_BYTES`].
    pub rings_dropped: u64,
    /// The first write error, if any.
    pub error: Option<String>,
}

/// Keeps recent packets per connection and writes those of slow requests.
#[derive(Debug)]
pub struct FlightRecorder {
    dir: PathBuf,
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
    /// Writes to `dir` (created if missing) the packets of requests slower than `threshold`.
    pub fn new(
        dir: &Path,
        threshold: Duration,
        link: LinkType,
        snaplen: u32,
    ) -> Result<Self, WriteError> {
        std::fs::create_dir_all(dir).map_err(|source| WriteError {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(FlightRecorder {
            dir: dir.to_path_buf(),
            threshold,
            link,
            snaplen,
            rings: HashMap::new(),
            total: 0,
            summary: KeepSummary::default(),
        })
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
        if self.summary.files.len() as u64 >= MAX_FILES
            || self.summary.bytes_written >= MAX_DISK_BYTES
        {
            self.summary.not_written += 1;
            return None;
        }
        let base = format!(
            "{}-{}-{}",
            stamp(t.request_ts),
            safe(&conn.server.to_string(), 60),
            safe(&t.op, 40)
        );
        let mut path = self.dir.join(format!("{base}.pcap"));
        let mut n = 2;
        while path.exists() {
            path = self.dir.join(format!("{base}-{n}.pcap"));
            n += 1;
        }
        let written =
            PcapWriter::create(&path, self.link, self.snaplen, 0o600).and_then(|mut w| {
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
                w.finish().map(|_| b)
            });
        match written {
            Ok(b) => {
                self.summary.bytes_written += b;
                self.summary.files.push(path.clone());
                Some(path)
            }
            Err(e) => {
                if self.summary.error.is_none() {
                    self.summary.error = Some(e.to_string());
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
    }
}
