//! Per-packet TCP state from the kernel's `tcp/tcp_probe` tracepoint, read through `perf_event_open` and its
//! ring buffers (one per CPU): no BPF compiler, no bpftrace. Root (or CAP_PERFMON) and tracefs are needed;
//! [`Tracer::open`] says which is missing.
//!
//! The record layout is read from the tracepoint's `format` file, so a kernel that moves a field still
//! decodes; a field the format lacks is an error naming it. The only unsafe code of the engine is here: the
//! `perf_event_open` system call and the shared ring buffer mapping.
#![allow(unsafe_code)] // perf_event_open and the mmap'd perf ring buffer

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{Ordering, fence};

/// Why tracing cannot run.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// No tracefs with the tcp_probe event.
    #[error(
        "the tcp/tcp_probe tracepoint is not available ({path}: {source}); mount tracefs (mount -t tracefs nodev /sys/kernel/tracing) as root"
    )]
    NoTracepoint {
        /// The file that could not be read.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// tracefs is there but this user may not read it.
    #[error("reading {path} needs root (or CAP_PERFMON with access to tracefs)")]
    NotPermitted {
        /// The file.
        path: PathBuf,
    },
    /// The format file lacks a field.
    #[error("the tcp_probe format has no field '{0}' (this kernel's event differs)")]
    MissingField(&'static str),
    /// perf_event_open refused.
    #[error(
        "perf_event_open of tcp/tcp_probe on CPU {cpu} failed: {source} (needs root or CAP_PERFMON)"
    )]
    Open {
        /// The CPU.
        cpu: usize,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// mmap of the ring buffer failed.
    #[error("mapping the perf ring buffer of CPU {cpu} failed: {source}")]
    Map {
        /// The CPU.
        cpu: usize,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Where each field of a tcp_probe record lies: (offset, size).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeFormat {
    fields: HashMap<String, (usize, usize)>,
}

const NEEDED: [&str; 13] = [
    "saddr",
    "daddr",
    "family",
    "data_len",
    "snd_nxt",
    "snd_una",
    "snd_cwnd",
    "ssthresh",
    "snd_wnd",
    "srtt",
    "rcv_wnd",
    "sock_cookie",
    "dport",
];

impl ProbeFormat {
    /// Parses the text of `events/tcp/tcp_probe/format`.
    pub fn parse(text: &str) -> Result<Self, TraceError> {
        let mut fields = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            let Some(rest) = line.strip_prefix("field:") else {
                continue;
            };
            let mut parts = rest.split(';').map(str::trim);
            let Some(decl) = parts.next() else { continue };
            let name = decl
                .rsplit([' ', '*'])
                .next()
                .unwrap_or("")
                .split('[')
                .next()
                .unwrap_or("")
                .to_string();
            let mut off = None;
            let mut size = None;
            for p in parts {
                if let Some(v) = p.strip_prefix("offset:") {
                    off = v.parse().ok();
                } else if let Some(v) = p.strip_prefix("size:") {
                    size = v.parse().ok();
                }
            }
            if let (Some(o), Some(s)) = (off, size) {
                fields.insert(name, (o, s));
            }
        }
        for f in NEEDED.iter().chain(["sport"].iter()) {
            if !fields.contains_key(*f) {
                return Err(TraceError::MissingField(f));
            }
        }
        Ok(ProbeFormat { fields })
    }

    fn get(&self, raw: &[u8], name: &str) -> Option<u64> {
        let &(o, s) = self.fields.get(name)?;
        let b = raw.get(o..o + s)?;
        Some(match s {
            1 => u64::from(b[0]),
            2 => u64::from(u16::from_ne_bytes([b[0], b[1]])),
            4 => u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            8 => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_ne_bytes(a)
            }
            _ => return None,
        })
    }

    fn addr(&self, raw: &[u8], name: &str, port: u16) -> Option<SocketAddr> {
        // A struct sockaddr_in or sockaddr_in6 in a 28-byte array.
        let &(o, s) = self.fields.get(name)?;
        let b = raw.get(o..o + s)?;
        let family = u16::from_ne_bytes([*b.first()?, *b.get(1)?]);
        let ip = match family {
            2 => IpAddr::V4(Ipv4Addr::new(*b.get(4)?, b[5], b[6], b[7])),
            10 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(b.get(8..24)?);
                let v6 = Ipv6Addr::from(a);
                v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
            }
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }

    /// Decodes one raw record; None when it is too short.
    pub fn decode(&self, time_ns: u64, raw: &[u8]) -> Option<ProbeEvent> {
        let g = |n: &str| self.get(raw, n);
        let sport = g("sport")? as u16;
        let dport = g("dport")? as u16;
        Some(ProbeEvent {
            time_ns,
            local: self.addr(raw, "saddr", sport)?,
            remote: self.addr(raw, "daddr", dport)?,
            cookie: g("sock_cookie")?,
            data_len: g("data_len")? as u32,
            snd_nxt: g("snd_nxt")? as u32,
            snd_una: g("snd_una")? as u32,
            cwnd: g("snd_cwnd")? as u32,
            ssthresh: g("ssthresh")? as u32,
            snd_wnd: g("snd_wnd")? as u32,
            srtt_us: g("srtt")? as u32,
            rcv_wnd: g("rcv_wnd")? as u32,
        })
    }
}

/// One tcp_probe event: a segment arrived on an established connection, and the sender state then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProbeEvent {
    /// perf clock, ns (only differences mean something).
    pub time_ns: u64,
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port.
    pub remote: SocketAddr,
    /// The socket cookie (the same as sock_diag's).
    pub cookie: u64,
    /// Payload bytes of the arriving segment (0: a pure ACK).
    pub data_len: u32,
    /// Next sequence number to send.
    pub snd_nxt: u32,
    /// Oldest unacknowledged sequence number.
    pub snd_una: u32,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Slow-start threshold, segments.
    pub ssthresh: u32,
    /// The peer's window, bytes.
    pub snd_wnd: u32,
    /// Smoothed RTT, microseconds.
    pub srtt_us: u32,
    /// This side's window, bytes.
    pub rcv_wnd: u32,
}

impl ProbeEvent {
    /// Bytes sent and not acknowledged: snd_nxt - snd_una.
    pub fn unacked(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }
}

/// One CPU's perf ring buffer.
struct Ring {
    _fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_off: usize,
    data_size: usize,
}

/// Data pages per CPU ring (1 MiB with 4 KiB pages: ~6,000 events between two reads, 20 ms apart).
const PAGES: usize = 256;

impl Ring {
    fn open(cpu: usize, id: u64) -> Result<Self, TraceError> {
        // struct perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes) used.
        let mut attr = [0u64; 16];
        attr[0] = 2 | (64u64 << 32); // type PERF_TYPE_TRACEPOINT, size 64
        attr[1] = id; // config
        attr[2] = 1; // sample_period
        attr[3] = (1 << 2) | (1 << 10); // PERF_SAMPLE_TIME | PERF_SAMPLE_RAW
        // SAFETY: the attribute buffer outlives the call and is at least `size` bytes; the other arguments
        // are plain integers.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                -1i32,
                cpu as i32,
                -1i32,
                8u64, // PERF_FLAG_FD_CLOEXEC
            )
        };
        if fd < 0 {
            return Err(TraceError::Open {
                cpu,
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: the kernel just returned this descriptor and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let map_len = page * (1 + PAGES);
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of the perf descriptor, checked for MAP_FAILED below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(TraceError::Map {
                cpu,
                source: io::Error::last_os_error(),
            });
        }
        let base = base.cast::<u8>();
        // SAFETY: offsets 1040 and 1048 (data_offset, data_size) lie in the first page of the mapping.
        let (off, size) = unsafe {
            (
                std::ptr::read_volatile(base.add(1040).cast::<u64>()),
                std::ptr::read_volatile(base.add(1048).cast::<u64>()),
            )
        };
        let (data_off, data_size) = if size == 0 {
            (page, page * PAGES)
        } else {
            (off as usize, size as usize)
        };
        Ok(Ring {
            _fd: fd,
            base,
            map_len,
            data_off,
            data_size,
        })
    }

    /// Copies out every complete record, calling `f(type, body)`; returns when the ring is empty.
    fn drain(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
        // SAFETY: data_head (1024) and data_tail (1032) are in the control page; the kernel writes head,
        // we write tail; the fences order the reads of the data against them (perf_event_open(2)).
        let head = unsafe { std::ptr::read_volatile(self.base.add(1024).cast::<u64>()) };
        fence(Ordering::Acquire);
        let mut tail = unsafe { std::ptr::read_volatile(self.base.add(1032).cast::<u64>()) };
        let mut rec = Vec::new();
        while tail < head {
            let copy = |from: u64, len: usize, out: &mut Vec<u8>| {
                out.clear();
                for k in 0..len {
                    let at = ((from as usize) + k) % self.data_size;
                    // SAFETY: `at` < data_size, inside the data area of the mapping.
                    out.push(unsafe { *self.base.add(self.data_off + at) });
                }
            };
            copy(tail, 8, &mut rec);
            let kind = u32::from_ne_bytes([rec[0], rec[1], rec[2], rec[3]]);
            let size = usize::from(u16::from_ne_bytes([rec[6], rec[7]]));
            if size < 8 {
                tail = head; // a corrupt header: drop the rest rather than loop
                break;
            }
            copy(tail + 8, size - 8, &mut rec);
            f(kind, &rec);
            tail += size as u64;
        }
        fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(self.base.add(1032).cast::<u64>(), tail) };
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base and map_len are the mapping made in `open`, unmapped once.
        unsafe {
            libc::munmap(self.base.cast(), self.map_len);
        }
    }
}

/// The tcp_probe tracepoint on every CPU.
pub struct Tracer {
    rings: Vec<Ring>,
    format: ProbeFormat,
    lost: u64,
}

const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;

/// The tracefs folders tried, in order.
pub const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

impl Tracer {
    /// Like [`Tracer::open`], but when tracefs is not mounted and `mount_if_needed` is set, first runs
    /// `mount -t tracefs nodev /sys/kernel/tracing` (root only; inside `ip netns exec` the mount stays in
    /// that command's private mount namespace).
    pub fn open_mounting(mount_if_needed: bool) -> Result<Self, TraceError> {
        match Self::open() {
            Err(TraceError::NoTracepoint { .. }) if mount_if_needed => {
                let _ = std::process::Command::new("mount")
                    .args(["-t", "tracefs", "nodev", TRACEFS[0]])
                    .stderr(std::process::Stdio::null())
                    .status();
                Self::open()
            }
            r => r,
        }
    }

    /// Opens the tracepoint on every online CPU.
    pub fn open() -> Result<Self, TraceError> {
        let mut last_err = None;
        let mut found = None;
        for root in TRACEFS {
            let dir = Path::new(root).join("events/tcp/tcp_probe");
            let fmt = std::fs::read_to_string(dir.join("format"));
            let id = std::fs::read_to_string(dir.join("id"));
            match (fmt, id) {
                (Ok(f), Ok(i)) => {
                    found = Some((f, i));
                    break;
                }
                (Err(e), _) | (_, Err(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Err(TraceError::NotPermitted {
                        path: dir.join("format"),
                    });
                }
                (Err(e), _) | (_, Err(e)) => {
                    last_err.get_or_insert(TraceError::NoTracepoint {
                        path: dir.join("format"),
                        source: e,
                    });
                }
            }
        }
        let Some((fmt, id)) = found else {
            return Err(last_err.unwrap_or(TraceError::MissingField("format")));
        };
        let format = ProbeFormat::parse(&fmt)?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| TraceError::MissingField("id"))?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|s| parse_cpu_list(s.trim()))
            .unwrap_or_else(|| (0..cpus).collect());
        let rings = online
            .into_iter()
            .map(|c| Ring::open(c, id))
            .collect::<Result<_, _>>()?;
        Ok(Tracer {
            rings,
            format,
            lost: 0,
        })
    }

    /// Events the kernel dropped because a ring was full, so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Appends every event waiting in the rings (in per-CPU order; sort by time if needed).
    pub fn read(&mut self, out: &mut Vec<ProbeEvent>) {
        let format = &self.format;
        let lost = &mut self.lost;
        for r in &mut self.rings {
            r.drain(&mut |kind, body| match kind {
                PERF_RECORD_SAMPLE => {
                    // u64 time, u32 raw size, raw bytes
                    if body.len() < 12 {
                        return;
                    }
                    let mut t = [0u8; 8];
                    t.copy_from_slice(&body[0..8]);
                    let n = u32::from_ne_bytes([body[8], body[9], body[10], body[11]]) as usize;
                    if let Some(raw) = body.get(12..12 + n)
                        && let Some(e) = format.decode(u64::from_ne_bytes(t), raw)
                    {
                        out.push(e);
                    }
                }
                PERF_RECORD_LOST if body.len() >= 16 => {
                    let mut v = [0u8; 8];
                    v.copy_from_slice(&body[8..16]);
                    *lost += u64::from_ne_bytes(v);
                }
                _ => {}
            });
        }
    }
}

/// Parses "0-3,5" into [0, 1, 2, 3, 5].
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT_6_18: &str = "name: tcp_probe\nID: 2273\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\tfield:__u8 saddr[28];\toffset:8;\tsize:28;\tsigned:0;\n\tfield:__u8 daddr[28];\toffset:36;\tsize:28;\tsigned:0;\n\tfield:__u16 sport;\toffset:64;\tsize:2;\tsigned:0;\n\tfield:__u16 dport;\toffset:66;\tsize:2;\tsigned:0;\n\tfield:__u16 family;\toffset:68;\tsize:2;\tsigned:0;\n\tfield:__u32 mark;\toffset:72;\tsize:4;\tsigned:0;\n\tfield:__u16 data_len;\toffset:76;\tsize:2;\tsigned:0;\n\tfield:__u32 snd_nxt;\toffset:80;\tsize:4;\tsigned:0;\n\tfield:__u32 snd_una;\toffset:84;\tsize:4;\tsigned:0;\n\tfield:__u32 snd_cwnd;\toffset:88;\tsize:4;\tsigned:0;\n\tfield:__u32 ssthresh;\toffset:92;\tsize:4;\tsigned:0;\n\tfield:__u32 snd_wnd;\toffset:96;\tsize:4;\tsigned:0;\n\tfield:__u32 srtt;\toffset:100;\tsize:4;\tsigned:0;\n\tfield:__u32 rcv_wnd;\toffset:104;\tsize:4;\tsigned:0;\n\tfield:__u64 sock_cookie;\toffset:112;\tsize:8;\tsigned:0;\n\tfield:const void * skbaddr;\toffset:120;\tsize:8;\tsigned:0;\n";

    #[test]
    fn format_and_record_decode() {
        let f = ProbeFormat::parse(FORMAT_6_18).unwrap();
        let mut raw = vec![0u8; 136];
        raw[8..10].copy_from_slice(&2u16.to_ne_bytes());
        raw[12..16].copy_from_slice(&[10, 0, 0, 1]);
        raw[36..38].copy_from_slice(&2u16.to_ne_bytes());
        raw[40..44].copy_from_slice(&[10, 0, 0, 2]);
        raw[64..66].copy_from_slice(&5000u16.to_ne_bytes());
        raw[66..68].copy_from_slice(&1521u16.to_ne_bytes());
        raw[80..84].copy_from_slice(&1000u32.to_ne_bytes());
        raw[84..88].copy_from_slice(&u32::MAX.to_ne_bytes()); // wraps: 1001 unacked
        raw[88..92].copy_from_slice(&10u32.to_ne_bytes());
        let e = f.decode(7, &raw).unwrap();
        assert_eq!(e.local, "10.0.0.1:5000".parse().unwrap());
        assert_eq!(e.remote, "10.0.0.2:1521".parse().unwrap());
        assert_eq!(e.unacked(), 1001);
        assert_eq!(e.cwnd, 10);
        for n in 0..raw.len() {
            let _ = f.decode(0, &raw[..n]);
        }
        assert!(f.decode(0, &raw[..100]).is_none());
        assert!(matches!(
            ProbeFormat::parse("format:\n"),
            Err(TraceError::MissingField(_))
        ));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
