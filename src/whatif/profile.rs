//! An application's structure as read from a capture: per TCP connection, its request/response turns (from
//! the rpc decoders when one recognises the protocol, else generic turns), what each request waited for, the
//! client's think time, the server's time and the bytes moved; plus the network as it was (baseline RTT,
//! receiver window, MSS). Both the prediction (`capture whatif`) and the replay (`roundtrip replay`) read this.

use std::net::SocketAddr;
use std::time::Duration;

/// The structure of every TCP connection of a capture.
#[derive(Debug, Clone, Default)]
pub struct AppProfile {
    /// Connections in the order they started.
    pub connections: Vec<ConnProfile>,
    /// First to last packet of the capture.
    pub duration: Duration,
    /// What could not be read and how it was worked around (no handshake, one direction, snaplen cut, ...).
    pub notes: Vec<String>,
    /// What reading the file found: format, packets, and `warning` when reading stopped early (a truncated
    /// or damaged file: the profile covers the packets before it).
    pub capture: crate::capture::CaptureInfo,
}

/// Which connection each one waits for: a connection that opened after another had sent its last request in
/// the capture (the application's next step) follows that one (the latest such), and starts the captured gap
/// after its end; `None`: it starts at its captured offset. The replay plays connections this way and the
/// what-if predicts them this way, so connections that did not overlap in the capture do not overlap in
/// either.
pub fn predecessors(conns: &[&ConnProfile]) -> Vec<Option<usize>> {
    let last_request =
        |c: &ConnProfile| c.start + c.turns.last().map_or(Duration::ZERO, |t| t.request_start);
    (0..conns.len())
        .map(|j| {
            (0..j)
                .filter(|&i| last_request(conns[i]) <= conns[j].start)
                .max_by_key(|&i| last_request(conns[i]))
        })
        .collect()
}

/// How the baseline round-trip time of a connection was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RttSource {
    /// SYN -> SYN-ACK -> ACK seen in the capture.
    Handshake,
    /// Data -> ACK timing (no handshake in the capture).
    AckTiming,
    /// Nothing to measure it from.
    Unknown,
}

/// One TCP connection's structure.
#[derive(Debug, Clone)]
pub struct ConnProfile {
    /// The side that opened the connection (or sent the first request).
    pub client: SocketAddr,
    /// The side that answered.
    pub server: SocketAddr,
    /// Protocol whose decoder read the turns ("smb2", "pgsql", ..., or "generic").
    pub protocol: String,
    /// Offset of the connection's first packet from the capture's first packet.
    pub start: Duration,
    /// First to last packet of this connection.
    pub duration: Duration,
    /// Round-trip time of the network in the capture, and how it was found.
    pub rtt: Duration,
    /// How [`ConnProfile::rtt`] was found.
    pub rtt_source: RttSource,
    /// Largest receiver window each side advertised (scaled), bytes: [client, server].
    pub max_window: [u64; 2],
    /// Maximum segment size seen (or announced), bytes.
    pub mss: u32,
    /// Request/response turns in request order.
    pub turns: Vec<Turn>,
    /// Client time after the last response until the connection's last packet (closing).
    pub tail: Duration,
}

/// One request and its response.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Operation name from the decoder ("READ", "SELECT", "turn").
    pub op: String,
    /// Request's first byte, as an offset from the connection's first packet.
    pub request_start: Duration,
    /// Request bytes (application payload).
    pub request_bytes: u64,
    /// Response bytes (application payload).
    pub response_bytes: u64,
    /// Index (in [`ConnProfile::turns`]) of the turn whose response this request waited for: the latest
    /// response that ended before this request started. None for the first turn or when nothing had ended.
    pub waits_for: Option<usize>,
    /// Client time between the end of the response it waited for (or the connection start) and this
    /// request's first byte.
    pub think: Duration,
    /// Server time: response's first byte - request's last byte - one network RTT (never negative).
    pub server: Duration,
    /// Requests outstanding when this one was sent (itself included).
    pub outstanding: u32,
    /// Request's first to last packet in the capture.
    pub request_transfer: Duration,
    /// Response's first to last packet in the capture.
    pub response_transfer: Duration,
}

use crate::capture::flows::{Dir as FlowDir, FlowSummary, FlowTracker, TrackerConfig};
use crate::capture::rpc::Sink;
use crate::capture::rpc::driver::{ConnInfo, ProtoChoice};
use crate::capture::rpc::{Anomaly, Carrier, Transaction, run};
use crate::capture::{CaptureError, Filter, Packets};
use std::collections::HashMap;
use std::path::Path;
use thiserror::Error;

/// Why a capture gave no profile.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// Nothing to predict from.
    #[error("{path}: {what}")]
    Empty {
        /// The capture file.
        path: String,
        /// What is missing and what to do.
        what: String,
    },
}

/// What [`AppProfile::from_capture`] reads.
#[derive(Debug, Clone, Default)]
pub struct ProfileOptions {
    /// Only these packets (`--host`, `--port`, `--flow`).
    pub filter: Filter,
    /// Protocol choice for the rpc decoders (auto: by port then content, generic turns otherwise).
    pub proto: ProtoChoice,
}

/// One data segment of a connection: time, direction (0 client to server, 1 back), payload bytes.
type Seg = (Duration, usize, u64);

#[derive(Default)]
struct Collect {
    /// (client, server) -> transactions, with the driver's view of the protocol.
    tx: HashMap<(SocketAddr, SocketAddr), (String, Vec<Transaction>)>,
}

impl Sink for Collect {
    fn transaction(&mut self, conn: &ConnInfo, t: Transaction) {
        if conn.carrier != Carrier::Tcp {
            return;
        }
        let e = self
            .tx
            .entry((conn.client, conn.server))
            .or_insert_with(|| (conn.proto.to_string(), Vec::new()));
        e.1.push(t);
    }
    fn anomaly(&mut self, _conn: &ConnInfo, _a: Anomaly) {}
}

impl AppProfile {
    /// Reads the structure of every TCP connection of the capture at `path`.
    ///
    /// Two passes over the file: the TCP tracker ([`crate::capture::flows`]) gives each connection's handshake
    /// RTT (or, without a handshake, the median data-to-ACK time), windows, MSS and data segments; the rpc
    /// driver ([`crate::capture::rpc`], protocol detection included, generic turns for unknown protocols) gives
    /// the request/response turns. Bytes are attributed to turns from the data segments: a segment belongs to
    /// the oldest turn whose request (response) window holds its timestamp. What could not be read is said in
    /// [`AppProfile::notes`]; a capture with no TCP payload at all is an error.
    pub fn from_capture(path: &Path, opts: &ProfileOptions) -> Result<AppProfile, ProfileError> {
        let file = path.display().to_string();
        let mut pk = Packets::open_filtered(path, &opts.filter)?;
        let mut tracker = FlowTracker::new(TrackerConfig::default());
        let mut segs: HashMap<u64, Vec<Seg>> = HashMap::new();
        let (mut first, mut last) = (None::<i64>, 0i64);
        let mut cut = 0u64;
        while let Some((p, d)) = pk.next_decoded() {
            let ts = p.ts_ns;
            let Some(d) = d else { continue };
            if !opts.filter.matches(Some(&d)) {
                continue;
            }
            if (d.payload.len() as u32) < d.payload_len {
                cut += 1;
            }
            let Some(info) = tracker.process(ts, p.orig_len, &d) else {
                continue;
            };
            first.get_or_insert(ts);
            last = last.max(ts);
            if info.payload_len > 0 && !info.retransmission && !info.keep_alive {
                let dir = match info.dir {
                    FlowDir::ClientToServer => 0,
                    FlowDir::ServerToClient => 1,
                };
                segs.entry(info.flow_id).or_default().push((
                    Duration::from_nanos(ts.max(0) as u64),
                    dir,
                    info.payload_len as u64,
                ));
            }
        }
        let info = pk.finish();
        let (flows, _) = tracker.finish_all(None);
        let Some(first) = first else {
            if let Some(w) = &info.warning {
                return Err(ProfileError::Empty {
                    path: file,
                    what: format!(
                        "{w}; no TCP packet before it ({} packets read; the file is damaged or was still being written)",
                        info.packets_read
                    ),
                });
            }
            return Err(ProfileError::Empty {
                path: file,
                what: format!(
                    "no TCP packet ({} packets read){}: capture the application's TCP traffic (or loosen --host/--port/--flow)",
                    info.packets_read,
                    if opts.filter.is_empty() {
                        ""
                    } else {
                        " passed the filter"
                    }
                ),
            });
        };
        let mut c = Collect::default();
        run::feed(path, &opts.filter, opts.proto, &mut c)?;

        let mut prof = AppProfile {
            duration: Duration::from_nanos((last - first).max(0) as u64),
            capture: info,
            ..Default::default()
        };
        if cut > 0 {
            prof.notes.push(format!(
                "{cut} packets cut by the snap length: their bytes are counted from the IP header, turns whose \
                 headers were cut may be missing (capture with -s 0 for a full picture)"
            ));
        }
        let t0 = Duration::from_nanos(first.max(0) as u64);
        for f in &flows {
            let s = segs.remove(&f.id).unwrap_or_default();
            let tx =
                c.tx.get(&(f.client, f.server))
                    .or_else(|| c.tx.get(&(f.server, f.client)));
            let conn = conn_profile(f, t0, &s, tx, &mut prof.notes);
            if let Some(conn) = conn {
                prof.connections.push(conn);
            }
        }
        if prof.connections.is_empty() {
            let one_way = flows
                .iter()
                .filter(|f| {
                    let (up, down) = (
                        f.client_to_server.payload_bytes,
                        f.server_to_client.payload_bytes,
                    );
                    (up == 0) != (down == 0)
                })
                .count();
            let both = flows
                .iter()
                .filter(|f| {
                    f.client_to_server.payload_bytes > 0 && f.server_to_client.payload_bytes > 0
                })
                .count();
            let what = if both == 0 {
                format!(
                    "no TCP connection carried data both ways ({} connection(s), {one_way} with data one way \
                     only): a what-if needs requests and their responses; capture both directions (e.g. on the \
                     client)",
                    flows.len()
                )
            } else {
                format!(
                    "no request/response turn could be read in {both} connection(s) with data both ways ({} in \
                     all, {one_way} one way only){}; if the protocol runs on an unusual port, name it with --proto",
                    flows.len(),
                    if flows.iter().any(|f| f.handshake.is_none()) {
                        ", and without a handshake the client is guessed as the side with the higher port: \
                         capture from before the connection opens"
                    } else {
                        ""
                    }
                )
            };
            let what = match &prof.capture.warning {
                // Damaged: the damage first, in the words every capture reader uses.
                Some(w) => format!(
                    "{w}; in the {} packets before it: {what}",
                    prof.capture.packets_read
                ),
                None => what,
            };
            return Err(ProfileError::Empty { path: file, what });
        }
        prof.connections.sort_by_key(|c| c.start);
        Ok(prof)
    }

    /// Application round trips of every connection (turns that waited for a response, plus the first).
    pub fn round_trips(&self) -> u64 {
        self.connections.iter().map(|c| c.round_trips()).sum()
    }
}

impl ConnProfile {
    /// Application round trips: turns that had to wait for an earlier response (the first turn included).
    pub fn round_trips(&self) -> u64 {
        self.turns
            .iter()
            .enumerate()
            .filter(|(i, t)| *i == 0 || t.waits_for.is_some())
            .count() as u64
    }

    /// Bytes each way: [requests, responses].
    pub fn bytes(&self) -> [u64; 2] {
        self.turns.iter().fold([0, 0], |a, t| {
            [a[0] + t.request_bytes, a[1] + t.response_bytes]
        })
    }
}

fn conn_profile(
    f: &FlowSummary,
    t0: Duration,
    segs: &[Seg],
    tx: Option<&(String, Vec<Transaction>)>,
    notes: &mut Vec<String>,
) -> Option<ConnProfile> {
    let start = Duration::from_nanos(f.first_ts_ns.max(0) as u64);
    let end = Duration::from_nanos(f.last_ts_ns.max(0) as u64);
    let name = format!("{} -> {}", f.client, f.server);
    let (up, down) = (
        f.client_to_server.payload_bytes,
        f.server_to_client.payload_bytes,
    );
    if up == 0 && down == 0 {
        return None;
    }
    if up == 0 || down == 0 {
        notes.push(format!(
            "connection {name}: data one way only ({}), no turns to read: left out (capture both directions)",
            if up == 0 { "server to client" } else { "client to server" }
        ));
        return None;
    }
    let (rtt, rtt_source) = match f.handshake {
        Some(h) => (Duration::from_nanos(h.rtt_ns), RttSource::Handshake),
        None => {
            let a = &f.server_to_client.rtt;
            let b = &f.client_to_server.rtt;
            let s = if a.count >= b.count { a } else { b };
            if s.count > 0 {
                notes.push(format!(
                    "connection {name}: no handshake captured: RTT {} from data-to-ACK timing (median of {}), \
                     and the connection's setup is not predicted",
                    crate::units::fmt_nanos(s.p50_ns as f64),
                    s.count
                ));
                (Duration::from_nanos(s.p50_ns), RttSource::AckTiming)
            } else {
                notes.push(format!(
                    "connection {name}: no handshake and no ACK timing: RTT taken as 0"
                ));
                (Duration::ZERO, RttSource::Unknown)
            }
        }
    };
    let (protocol, mut txs) = match tx {
        Some((p, v)) => (p.clone(), v.clone()),
        None => ("generic".to_string(), Vec::new()),
    };
    txs.retain(|t| t.request_ts >= start && t.request_ts <= end + Duration::from_secs(1));
    txs.sort_by_key(|t| t.request_ts);
    if txs.is_empty() {
        notes.push(format!(
            "connection {name}: no request/response turn could be read: left out"
        ));
        return None;
    }
    // Attribute data segments to turns: each to the oldest unfinished turn whose window holds it.
    let n = txs.len();
    let mut bytes = vec![[0u64; 2]; n];
    #[allow(clippy::needless_range_loop)] // dir also selects the window of each turn
    for dir in 0..2 {
        let mut order: Vec<usize> = (0..n).collect();
        let win = |t: &Transaction| {
            if dir == 0 {
                (t.request_ts, t.request_end_ts)
            } else {
                (t.response_ts, t.response_end_ts)
            }
        };
        order.sort_by_key(|&i| win(&txs[i]).1);
        let mut k = 0;
        for &(ts, _, len) in segs.iter().filter(|s| s.1 == dir) {
            while k < n && win(&txs[order[k]]).1 < ts {
                k += 1;
            }
            // Oldest turn (by end) still open at ts whose window started.
            if let Some(&i) = order[k..].iter().take(64).find(|&&i| win(&txs[i]).0 <= ts) {
                bytes[i][dir] += len;
            }
        }
    }
    let mut turns = Vec::with_capacity(n);
    for (i, t) in txs.iter().enumerate() {
        let waits_for = (0..i)
            .filter(|&j| txs[j].response_end_ts <= t.request_ts)
            .max_by_key(|&j| txs[j].response_end_ts);
        let since = match waits_for {
            Some(j) => txs[j].response_end_ts,
            None => {
                start
                    + if rtt_source == RttSource::Handshake {
                        rtt
                    } else {
                        Duration::ZERO
                    }
            }
        };
        let outstanding = txs
            .iter()
            .filter(|o| o.request_ts <= t.request_ts && o.response_end_ts > t.request_ts)
            .count()
            .max(1) as u32;
        let mut req = bytes[i][0];
        let mut resp = bytes[i][1];
        if let Some(b) = t.bytes {
            match t.op.as_ref() {
                "READ" => resp = resp.max(b),
                "WRITE" => req = req.max(b),
                _ => {}
            }
        }
        turns.push(Turn {
            op: t.op.to_string(),
            request_start: t.request_ts.saturating_sub(start),
            request_bytes: req,
            response_bytes: resp,
            waits_for,
            think: t.request_ts.saturating_sub(since),
            server: t
                .response_ts
                .saturating_sub(t.request_end_ts)
                .saturating_sub(rtt),
            outstanding,
            request_transfer: t.request_end_ts.saturating_sub(t.request_ts),
            response_transfer: t.response_end_ts.saturating_sub(t.response_ts),
        });
    }
    let mss = f
        .client_to_server
        .mss
        .into_iter()
        .chain(f.server_to_client.mss)
        .min()
        .map(u32::from)
        .unwrap_or(1460);
    Some(ConnProfile {
        client: f.client,
        server: f.server,
        protocol,
        start: start.saturating_sub(t0),
        duration: end.saturating_sub(start),
        rtt,
        rtt_source,
        max_window: [
            f.client_to_server.window_max_bytes,
            f.server_to_client.window_max_bytes,
        ],
        mss,
        tail: end.saturating_sub(txs.iter().map(|t| t.response_end_ts).max().unwrap_or(end)),
        turns,
    })
}
