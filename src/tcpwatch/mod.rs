//! The kernel's view of live TCP connections, sampled without capturing: the sock_diag / inet_diag netlink
//! interface `ss -ti` uses (unprivileged), for IPv4 and IPv6. Each interval a [`Watcher`] dumps every TCP
//! socket, keeps the ones the [`Filter`] matches and returns one typed [`Sample`] per connection (RTT,
//! windows, cwnd, in flight, the kernel's busy / rwnd-limited / sndbuf-limited time counters) with the
//! [`Delta`] since the previous sample and a [`Verdict`] in words, plus the connections that went away.
//!
//! - [`diag`]: the netlink messages (request and reply parsing, tested on a captured reply).
//! - [`info`]: `struct tcp_info` decoded by length (older kernels: missing fields are `None`).
//! - [`procfs`]: socket inodes of a process, for `--pid`.
//! - [`trace`]: per-packet state from the `tcp/tcp_probe` tracepoint (perf_event_open, root).
//!
//! Nothing here prints.
#![deny(unsafe_code)]

pub mod diag;
pub mod info;
pub mod procfs;
pub mod trace;

use diag::{DiagSocket, Family, LIVE_STATES, NETLINK_SOCK_DIAG};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What can go wrong while sampling.
#[derive(Debug, thiserror::Error)]
pub enum TcpWatchError {
    /// The netlink socket could not be opened.
    #[error("cannot open a NETLINK_SOCK_DIAG socket: {0}")]
    Open(#[source] io::Error),
    /// Sending the dump request or reading the reply failed.
    #[error("sock_diag dump of {family} TCP sockets failed: {source}")]
    Io {
        /// "IPv4" or "IPv6".
        family: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The kernel's reply could not be parsed (or was an error).
    #[error("sock_diag dump of {family} TCP sockets: {source}")]
    Parse {
        /// "IPv4" or "IPv6".
        family: &'static str,
        /// The error.
        #[source]
        source: diag::ParseError,
    },
    /// `--pid` names no running process.
    #[error("no process with pid {0} (/proc/{0} does not exist)")]
    NoSuchPid(u32),
    /// The process's file descriptors could not be read.
    #[error("cannot read the sockets of pid {pid} from /proc/{pid}/fd: {source}")]
    Pid {
        /// The process.
        pid: u32,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// Which connections to watch; every set condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// Local or remote port.
    pub port: Option<u16>,
    /// Local or remote address.
    pub host: Option<IpAddr>,
    /// Only sockets this process holds (re-read every sample, so new connections are seen).
    pub pid: Option<u32>,
}

impl Filter {
    /// True when `s` passes the port and host conditions and, given the pid's socket inodes, belongs to it.
    pub fn matches(&self, s: &DiagSocket, inodes: Option<&HashSet<u32>>) -> bool {
        if let Some(p) = self.port
            && s.local.port() != p
            && s.remote.port() != p
        {
            return false;
        }
        if let Some(h) = self.host
            && s.local.ip() != h
            && s.remote.ip() != h
        {
            return false;
        }
        match inodes {
            Some(set) => set.contains(&s.inode),
            None => true,
        }
    }

    /// The socket inodes of [`Filter::pid`], or None when no pid is set.
    pub fn pid_inodes(&self) -> Result<Option<HashSet<u32>>, TcpWatchError> {
        let Some(pid) = self.pid else { return Ok(None) };
        let root = PathBuf::from("/proc");
        match procfs::socket_inodes(&root, pid) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(TcpWatchError::NoSuchPid(pid)),
            Err(source) => Err(TcpWatchError::Pid { pid, source }),
        }
    }
}

/// A sock_diag netlink socket that dumps TCP sockets.
pub struct Sampler {
    sock: socket2::Socket,
    seq: u32,
    buf: Vec<u8>,
    /// The largest dump so far, to size the next one's vector.
    expect: usize,
}

impl Sampler {
    /// Opens the netlink socket (no privilege needed).
    pub fn open() -> Result<Self, TcpWatchError> {
        let sock = socket2::Socket::new(
            socket2::Domain::from(libc::AF_NETLINK),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::from(NETLINK_SOCK_DIAG)),
        )
        .map_err(TcpWatchError::Open)?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(TcpWatchError::Open)?;
        Ok(Sampler {
            sock,
            seq: 0,
            buf: vec![0u8; 256 * 1024],
            expect: 0,
        })
    }

    /// Every live TCP socket of one family (not listening, not TIME-WAIT).
    pub fn dump(&mut self, family: Family) -> Result<Vec<DiagSocket>, TcpWatchError> {
        let name = match family {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        };
        let io_err = |source| TcpWatchError::Io {
            family: name,
            source,
        };
        self.seq = self.seq.wrapping_add(1);
        let req = diag::dump_request(family, LIVE_STATES, self.seq);
        // An unconnected netlink socket sends to the kernel (port id 0).
        self.sock.send(&req).map_err(io_err)?;
        let mut out = Vec::with_capacity(self.expect);
        loop {
            let n = (&self.sock).read(&mut self.buf).map_err(io_err)?;
            if n == 0 {
                return Err(io_err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "netlink socket closed before the dump ended",
                )));
            }
            let done = diag::parse_into(&self.buf[..n], &mut out).map_err(|source| {
                TcpWatchError::Parse {
                    family: name,
                    source,
                }
            })?;
            if done {
                self.expect = self.expect.max(out.len());
                return Ok(out);
            }
        }
    }

    /// Every live TCP socket, IPv4 then IPv6.
    pub fn dump_all(&mut self) -> Result<Vec<DiagSocket>, TcpWatchError> {
        let mut v = self.dump(Family::V4)?;
        v.extend(self.dump(Family::V6)?);
        Ok(v)
    }
}

/// Counter changes between two samples of one connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Delta {
    /// Time between the two samples.
    #[serde(with = "crate::units::ser::ns", rename = "elapsed_ns")]
    pub elapsed: Duration,
    /// Busy time added (None: the kernel lacks `tcpi_busy_time`).
    #[serde(with = "crate::units::ser::opt_ns", rename = "busy_ns")]
    pub busy: Option<Duration>,
    /// Receive-window-limited time added.
    #[serde(with = "crate::units::ser::opt_ns", rename = "rwnd_limited_ns")]
    pub rwnd_limited: Option<Duration>,
    /// Send-buffer-limited time added.
    #[serde(with = "crate::units::ser::opt_ns", rename = "sndbuf_limited_ns")]
    pub sndbuf_limited: Option<Duration>,
    /// Bytes the peer acknowledged.
    pub bytes_acked: Option<u64>,
    /// Bytes received.
    pub bytes_received: Option<u64>,
    /// Segments retransmitted.
    pub retransmitted: Option<u64>,
}

fn sub_d(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    Some(a?.saturating_sub(b?))
}

fn sub_u(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(a?.saturating_sub(b?))
}

impl Delta {
    /// The change from `old` to `new`, `elapsed` apart.
    pub fn between(old: &DiagSocket, new: &DiagSocket, elapsed: Duration) -> Delta {
        let (Some(o), Some(n)) = (&old.info, &new.info) else {
            return Delta {
                elapsed,
                ..Delta::default()
            };
        };
        Delta {
            elapsed,
            busy: sub_d(n.busy_time, o.busy_time),
            rwnd_limited: sub_d(n.rwnd_limited, o.rwnd_limited),
            sndbuf_limited: sub_d(n.sndbuf_limited, o.sndbuf_limited),
            bytes_acked: sub_u(n.bytes_acked, o.bytes_acked),
            bytes_received: sub_u(n.bytes_received, o.bytes_received),
            retransmitted: sub_u(
                n.total_retrans.map(u64::from),
                o.total_retrans.map(u64::from),
            ),
        }
    }
}

/// What limited a connection over an interval, from the kernel's counters; [`std::fmt::Display`] gives the
/// words with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The first sample of a connection: no interval to judge yet.
    FirstSample,
    /// The peer's receive window stopped sending for `percent` of the busy time.
    ReceiverWindowLimited {
        /// Share of the busy time, 0-100.
        percent: f64,
        /// The peer's advertised window (bytes) at the sample.
        snd_wnd: Option<u32>,
        /// Bytes in flight at the sample.
        in_flight: Option<u64>,
    },
    /// A full send buffer stopped sending for `percent` of the busy time.
    SendBufferLimited {
        /// Share of the busy time, 0-100.
        percent: f64,
        /// The send buffer size (bytes).
        sndbuf: Option<u32>,
    },
    /// Data was outstanding most of the interval, limited by neither window nor buffer: the congestion
    /// window (or the path) set the pace.
    CongestionWindowLimited {
        /// Busy share of the interval, 0-100.
        busy_percent: f64,
        /// Segments in flight at the sample.
        unacked: Option<u32>,
        /// Congestion window (segments) at the sample.
        cwnd: Option<u32>,
        /// Bytes in flight at the sample (segments x MSS).
        in_flight_bytes: Option<u64>,
        /// Congestion window in bytes (segments x MSS).
        cwnd_bytes: Option<u64>,
    },
    /// Segments were retransmitted in the interval.
    Retransmitting {
        /// Segments retransmitted in the interval.
        segments: u64,
        /// Segments the kernel believes lost at the sample.
        lost: Option<u32>,
    },
    /// Data moved but the connection was busy only part of the interval: the application had nothing to send.
    ApplicationLimited {
        /// Busy share of the interval, 0-100.
        busy_percent: f64,
        /// Bytes acknowledged in the interval.
        bytes_acked: u64,
        /// Segments in flight at the sample, when the verdict rests on them (busy, but far below the cwnd:
        /// request/response traffic).
        #[serde(skip_serializing_if = "Option::is_none")]
        unacked: Option<u32>,
        /// Congestion window (segments) at the sample, with `unacked`.
        #[serde(skip_serializing_if = "Option::is_none")]
        cwnd: Option<u32>,
    },
    /// Only receiving.
    Receiving {
        /// Bytes received in the interval.
        bytes: u64,
    },
    /// Nothing sent or received.
    Idle,
    /// The kernel lacks the counter the verdict needs.
    Missing {
        /// The counter (`tcpi_busy_time`, ...).
        counter: Cow<'static, str>,
    },
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = |v: Option<u64>| v.map_or("-".to_string(), crate::units::fmt_bytes);
        let n = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
        match self {
            Verdict::FirstSample => write!(f, "first sample"),
            Verdict::ReceiverWindowLimited {
                percent,
                snd_wnd,
                in_flight,
            } => write!(
                f,
                "receiver window limited {percent:.0}% of the busy time (peer window {}, in flight {})",
                b(snd_wnd.map(u64::from)),
                b(*in_flight)
            ),
            Verdict::SendBufferLimited { percent, sndbuf } => write!(
                f,
                "send buffer limited {percent:.0}% of the busy time (sndbuf {})",
                b(sndbuf.map(u64::from))
            ),
            Verdict::CongestionWindowLimited {
                busy_percent,
                unacked,
                cwnd,
                in_flight_bytes,
                cwnd_bytes,
            } => write!(
                f,
                "congestion window limited (in flight {} = {} segments of cwnd {} = {} segments, busy {busy_percent:.0}%)",
                b(*in_flight_bytes),
                n(*unacked),
                b(*cwnd_bytes),
                n(*cwnd)
            ),
            Verdict::Retransmitting { segments, lost } => write!(
                f,
                "retransmitting ({segments} segments this interval, {} lost)",
                n(*lost)
            ),
            Verdict::ApplicationLimited {
                busy_percent,
                bytes_acked,
                unacked: Some(u),
                cwnd: Some(c),
            } => write!(
                f,
                "application limited (in flight {u} of cwnd {c} segments: the window had room, the application \
                 sent no more; busy {busy_percent:.0}% of the time, {} acked)",
                crate::units::fmt_bytes(*bytes_acked)
            ),
            Verdict::ApplicationLimited {
                busy_percent,
                bytes_acked,
                ..
            } => write!(
                f,
                "application limited (nothing to send: busy {busy_percent:.0}% of the time, {} acked)",
                crate::units::fmt_bytes(*bytes_acked)
            ),
            Verdict::Receiving { bytes } => {
                write!(f, "receiving ({})", crate::units::fmt_bytes(*bytes))
            }
            Verdict::Idle => write!(f, "idle"),
            Verdict::Missing { counter } => {
                write!(f, "no verdict: this kernel lacks {counter}")
            }
        }
    }
}

/// Share of the congestion window that must be in flight for "congestion window limited".
pub const CWND_FULL: f64 = 0.8;

/// Share of the busy time at which a limit is named.
pub const LIMIT_SHARE: f64 = 0.2;

/// Judges an interval: `d` the counter changes, `now` the socket at the end of it.
pub fn judge(d: &Delta, now: &DiagSocket) -> Verdict {
    let info = now.info.as_ref();
    let acked = d.bytes_acked.unwrap_or(0);
    let received = d.bytes_received.unwrap_or(0);
    if let Some(r) = d.retransmitted
        && r > 0
    {
        // Retransmissions matter most unless a window explains the interval better (checked below).
        let busy_ok = d.busy.is_some_and(|b| !b.is_zero());
        let rwnd_share = share(d.rwnd_limited, d.busy);
        if !(busy_ok && rwnd_share >= LIMIT_SHARE) {
            return Verdict::Retransmitting {
                segments: r,
                lost: info.and_then(|i| i.lost),
            };
        }
    }
    let Some(busy) = d.busy else {
        return if acked == 0 && received == 0 {
            Verdict::Idle
        } else {
            Verdict::Missing {
                counter: Cow::Borrowed("tcpi_busy_time (Linux 4.10+)"),
            }
        };
    };
    if !busy.is_zero() {
        let Some(_) = d.rwnd_limited else {
            return Verdict::Missing {
                counter: Cow::Borrowed("tcpi_rwnd_limited (Linux 4.10+)"),
            };
        };
        let rwnd = share(d.rwnd_limited, d.busy);
        let sndbuf = share(d.sndbuf_limited, d.busy);
        if rwnd >= LIMIT_SHARE && rwnd >= sndbuf {
            return Verdict::ReceiverWindowLimited {
                percent: rwnd * 100.0,
                snd_wnd: info.and_then(|i| i.snd_wnd),
                in_flight: info.and_then(|i| i.in_flight_bytes()),
            };
        }
        if sndbuf >= LIMIT_SHARE {
            return Verdict::SendBufferLimited {
                percent: sndbuf * 100.0,
                sndbuf: now.mem.map(|m| m.sndbuf),
            };
        }
        let busy_share = busy.as_secs_f64() / d.elapsed.as_secs_f64().max(1e-9);
        let (unacked, cwnd) = (info.and_then(|i| i.unacked), info.and_then(|i| i.cwnd));
        // Busy means data was outstanding, not that the window was full: request/response traffic has one
        // small request in flight most of the time. The congestion window limits only when what is in flight
        // fills it (at least CWND_FULL of it at the sample).
        let full = match (unacked, cwnd) {
            (Some(u), Some(c)) => f64::from(u) >= CWND_FULL * f64::from(c),
            _ => true,
        };
        if busy_share >= 0.5 && full {
            return Verdict::CongestionWindowLimited {
                busy_percent: (busy_share * 100.0).min(100.0),
                unacked,
                cwnd,
                in_flight_bytes: info.and_then(|i| i.in_flight_bytes()),
                cwnd_bytes: info.and_then(|i| i.cwnd_bytes()),
            };
        }
        return Verdict::ApplicationLimited {
            busy_percent: (busy_share * 100.0).min(100.0),
            bytes_acked: acked,
            unacked: unacked.filter(|_| busy_share >= 0.5),
            cwnd: cwnd.filter(|_| busy_share >= 0.5),
        };
    }
    if acked > 0 {
        Verdict::ApplicationLimited {
            busy_percent: 0.0,
            bytes_acked: acked,
            unacked: None,
            cwnd: None,
        }
    } else if received > 0 {
        Verdict::Receiving { bytes: received }
    } else {
        Verdict::Idle
    }
}

fn share(part: Option<Duration>, whole: Option<Duration>) -> f64 {
    match (part, whole) {
        (Some(p), Some(w)) if !w.is_zero() => (p.as_secs_f64() / w.as_secs_f64()).min(1.0),
        _ => 0.0,
    }
}

/// The identity of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConnId {
    /// Local address.
    pub local: SocketAddr,
    /// Remote address.
    pub remote: SocketAddr,
    /// The kernel's socket cookie.
    pub cookie: u64,
}

impl ConnId {
    fn of(s: &DiagSocket) -> Self {
        ConnId {
            local: s.local,
            remote: s.remote,
            cookie: s.cookie,
        }
    }
}

/// One connection at one moment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    /// Which connection.
    pub conn: ConnId,
    /// Time since the watch started.
    #[serde(with = "crate::units::ser::ns", rename = "at_ns")]
    pub at: Duration,
    /// What the kernel said.
    pub socket: DiagSocket,
    /// Changes since this connection's previous sample (None for its first).
    pub delta: Option<Delta>,
    /// The verdict on that interval.
    pub verdict: Verdict,
}

/// A connection that went away (closed, or left the filter) since the previous tick.
#[derive(Debug, Clone, Serialize)]
pub struct Closed {
    /// Which connection.
    pub conn: ConnId,
    /// When it was first missing.
    #[serde(with = "crate::units::ser::ns", rename = "at_ns")]
    pub at: Duration,
    /// Its last sample.
    pub last: Sample,
}

/// One round of sampling.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    /// Time since the watch started.
    #[serde(with = "crate::units::ser::ns", rename = "at_ns")]
    pub at: Duration,
    /// Every matching connection.
    pub samples: Vec<Sample>,
    /// Connections gone since the previous tick.
    pub closed: Vec<Closed>,
}

/// One connection over the whole watch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnSummary {
    /// Which connection.
    pub conn: ConnId,
    /// Samples taken.
    pub samples: u64,
    /// True when it went away before the end.
    pub closed: bool,
    /// Lowest smoothed RTT seen.
    #[serde(with = "crate::units::ser::opt_ns", rename = "rtt_min_ns", default)]
    pub rtt_min: Option<Duration>,
    /// Mean smoothed RTT over the samples.
    #[serde(with = "crate::units::ser::opt_ns", rename = "rtt_mean_ns", default)]
    pub rtt_mean: Option<Duration>,
    /// Highest smoothed RTT seen.
    #[serde(with = "crate::units::ser::opt_ns", rename = "rtt_max_ns", default)]
    pub rtt_max: Option<Duration>,
    /// Highest congestion window seen (segments).
    pub cwnd_max: Option<u32>,
    /// Counter changes from the first to the last sample.
    pub delta: Option<Delta>,
    /// The verdict on the whole watch.
    pub verdict: Verdict,
    /// The verdict in words, with its numbers.
    pub verdict_words: String,
    /// The last sample.
    pub last: Sample,
}

struct Track {
    first: Sample,
    last: Sample,
    samples: u64,
    rtt_sum: Duration,
    rtt_n: u32,
    rtt_min: Option<Duration>,
    rtt_max: Option<Duration>,
    cwnd_max: Option<u32>,
    closed: bool,
}

impl Track {
    fn summary(&self) -> ConnSummary {
        let delta = (self.samples > 1).then(|| {
            Delta::between(
                &self.first.socket,
                &self.last.socket,
                self.last.at.saturating_sub(self.first.at),
            )
        });
        let verdict = match &delta {
            Some(d) => judge(d, &self.last.socket),
            None => Verdict::FirstSample,
        };
        ConnSummary {
            conn: self.last.conn,
            samples: self.samples,
            closed: self.closed,
            rtt_min: self.rtt_min,
            rtt_mean: (self.rtt_n > 0).then(|| self.rtt_sum / self.rtt_n),
            rtt_max: self.rtt_max,
            cwnd_max: self.cwnd_max,
            delta,
            verdict_words: verdict.to_string(),
            verdict,
            last: self.last.clone(),
        }
    }
}

/// Samples the matching connections round after round and remembers them for the summary.
pub struct Watcher {
    sampler: Sampler,
    filter: Filter,
    start: Instant,
    /// Every connection seen, in the order of first appearance.
    tracks: Vec<Track>,
    /// Cookie -> index in `tracks`.
    index: HashMap<u64, usize>,
    /// Which round each track was last seen in (parallel to `tracks`, kept small for the cache).
    seen_round: Vec<u64>,
    round: u64,
}

impl Watcher {
    /// Opens the netlink socket; with a pid filter, checks the process exists.
    pub fn new(filter: Filter) -> Result<Self, TcpWatchError> {
        filter.pid_inodes()?;
        Ok(Watcher {
            sampler: Sampler::open()?,
            filter,
            start: Instant::now(),
            tracks: Vec::new(),
            index: HashMap::new(),
            seen_round: Vec::new(),
            round: 0,
        })
    }

    /// The filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// Takes one sample of every matching connection. A `--pid` process that exited leaves every
    /// connection closed (not an error).
    pub fn poll(&mut self) -> Result<Tick, TcpWatchError> {
        let inodes = match self.filter.pid_inodes() {
            Ok(s) => s,
            Err(TcpWatchError::NoSuchPid(_)) => Some(HashSet::new()),
            Err(e) => return Err(e),
        };
        let sockets = self.sampler.dump_all()?;
        let at = self.start.elapsed();
        self.round += 1;
        let round = self.round;
        let mut samples = Vec::with_capacity(self.tracks.len());
        for s in sockets {
            if !self.filter.matches(&s, inodes.as_ref()) {
                continue;
            }
            let idx = self.index.get(&s.cookie).copied();
            if let Some(i) = idx
                && self.seen_round[i] == round
            {
                continue; // listed twice in one dump
            }
            let prev = idx.map(|i| &self.tracks[i]).filter(|t| !t.closed);
            let delta =
                prev.map(|t| Delta::between(&t.last.socket, &s, at.saturating_sub(t.last.at)));
            let verdict = match &delta {
                Some(d) => judge(d, &s),
                None => Verdict::FirstSample,
            };
            let sample = Sample {
                conn: ConnId::of(&s),
                at,
                socket: s,
                delta,
                verdict,
            };
            self.record(idx, &sample);
            samples.push(sample);
        }
        let mut closed = Vec::new();
        for (t, &seen) in self.tracks.iter_mut().zip(&self.seen_round) {
            if !t.closed && seen != round {
                t.closed = true;
                closed.push(Closed {
                    conn: t.last.conn,
                    at,
                    last: t.last.clone(),
                });
            }
        }
        Ok(Tick {
            at,
            samples,
            closed,
        })
    }

    fn record(&mut self, idx: Option<usize>, s: &Sample) {
        let rtt = s.socket.info.as_ref().and_then(|i| i.rtt);
        let cwnd = s.socket.info.as_ref().and_then(|i| i.cwnd);
        let i = match idx {
            Some(i) => {
                self.tracks[i].last.clone_from(s);
                i
            }
            None => {
                self.tracks.push(Track {
                    first: s.clone(),
                    last: s.clone(),
                    samples: 0,
                    rtt_sum: Duration::ZERO,
                    rtt_n: 0,
                    rtt_min: None,
                    rtt_max: None,
                    cwnd_max: None,
                    closed: false,
                });
                self.seen_round.push(0);
                self.index.insert(s.conn.cookie, self.tracks.len() - 1);
                self.tracks.len() - 1
            }
        };
        self.seen_round[i] = self.round;
        let t = &mut self.tracks[i];
        t.closed = false;
        t.samples += 1;
        if let Some(r) = rtt {
            t.rtt_sum += r;
            t.rtt_n += 1;
            t.rtt_min = Some(t.rtt_min.map_or(r, |m| m.min(r)));
            t.rtt_max = Some(t.rtt_max.map_or(r, |m| m.max(r)));
        }
        if let Some(c) = cwnd {
            t.cwnd_max = Some(t.cwnd_max.map_or(c, |m| m.max(c)));
        }
    }

    /// One summary per connection seen, in the order they first appeared.
    pub fn summaries(&self) -> Vec<ConnSummary> {
        self.tracks.iter().map(Track::summary).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn sock(info: info::TcpInfo) -> DiagSocket {
        DiagSocket::established("127.0.0.1:1", "127.0.0.1:2", 1, info)
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn verdicts() {
        let now = sock(info::TcpInfo {
            cwnd: Some(10),
            unacked: Some(10),
            ..Default::default()
        });
        let d = |busy: u64, rwnd: u64, sndbuf: u64, acked: u64, retr: u64| Delta {
            elapsed: ms(1000),
            busy: Some(ms(busy)),
            rwnd_limited: Some(ms(rwnd)),
            sndbuf_limited: Some(ms(sndbuf)),
            bytes_acked: Some(acked),
            bytes_received: Some(0),
            retransmitted: Some(retr),
        };
        assert!(matches!(
            judge(&d(1000, 800, 0, 1, 0), &now),
            Verdict::ReceiverWindowLimited { percent, .. } if (percent - 80.0).abs() < 1e-9
        ));
        assert!(matches!(
            judge(&d(1000, 0, 500, 1, 0), &now),
            Verdict::SendBufferLimited { .. }
        ));
        assert!(matches!(
            judge(&d(900, 0, 0, 1, 0), &now),
            Verdict::CongestionWindowLimited { .. }
        ));
        assert!(matches!(
            judge(&d(100, 0, 0, 1, 0), &now),
            Verdict::ApplicationLimited { .. }
        ));
        // Busy with one small request in flight of a cwnd of 18: the application, not the window.
        let pingpong = sock(info::TcpInfo {
            cwnd: Some(18),
            unacked: Some(0),
            snd_mss: Some(1448),
            ..Default::default()
        });
        let v = judge(&d(570, 0, 0, 64, 0), &pingpong);
        assert!(matches!(v, Verdict::ApplicationLimited { .. }), "{v}");
        assert!(
            v.to_string().contains("in flight 0 of cwnd 18 segments"),
            "{v}"
        );
        assert!(matches!(
            judge(&d(900, 0, 0, 1, 3), &now),
            Verdict::Retransmitting { segments: 3, .. }
        ));
        assert_eq!(judge(&d(0, 0, 0, 0, 0), &now), Verdict::Idle);
        let old = Delta {
            busy: None,
            rwnd_limited: None,
            sndbuf_limited: None,
            ..d(0, 0, 0, 5, 0)
        };
        let v = judge(&old, &now);
        assert!(v.to_string().contains("tcpi_busy_time"), "{v}");
    }

    #[test]
    fn sampler_sees_a_loopback_connection_and_its_close() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut a, _) = l.accept().unwrap();
        c.write_all(&[7u8; 10_000]).unwrap();
        let mut buf = [0u8; 10_000];
        a.read_exact(&mut buf).unwrap();
        let mut w = Watcher::new(Filter {
            port: Some(port),
            pid: Some(std::process::id()),
            ..Filter::default()
        })
        .unwrap();
        let t = w.poll().unwrap();
        assert_eq!(t.samples.len(), 2, "{t:?}");
        let sender = t
            .samples
            .iter()
            .find(|s| s.conn.remote.port() == port)
            .unwrap();
        let i = sender.socket.info.as_ref().unwrap();
        assert!(i.bytes_acked.unwrap() >= 10_000);
        drop(c);
        drop(a);
        let mut gone = 0;
        for _ in 0..50 {
            gone += w.poll().unwrap().closed.len();
            if gone == 2 {
                break;
            }
            std::thread::sleep(ms(20));
        }
        assert_eq!(gone, 2);
        assert_eq!(w.summaries().len(), 2);
        assert!(w.summaries().iter().all(|s| s.closed));
    }

    #[test]
    fn missing_pid_is_an_error() {
        let e = Watcher::new(Filter {
            pid: Some(u32::MAX - 1),
            ..Filter::default()
        })
        .err()
        .unwrap();
        assert!(matches!(e, TcpWatchError::NoSuchPid(_)), "{e}");
    }
}
