//! The bridge: a bump in the wire between two interfaces (`roundtrip proxy --bridge A,B`). Every frame that
//! arrives on A leaves by B after the A->B impairment, and every frame from B leaves by A after the B->A one.
//! Nothing is terminated: the endpoints' own TCP stacks see the emulated path (handshake RTT, window growth,
//! loss and retransmission), which the terminating proxy ([`super::tcp`]) cannot give.
//!
//! Per direction, one receiving thread reads batches of frames ([`super::packet`]) and decides each frame's
//! fate: lost (independent loss and/or Gilbert-Elliott bursts), serialised on a link of the configured rate
//! ([`super::rate::Link`], one frame at a time, so the rate never bursts above), delayed by the delay plus a
//! jitter sample ([`super::delay::Rng`]), and duplicated. Without `jitter_reorders`, a frame is never released
//! before the frame ahead of it (release = max(previous release, ready + delay + jitter)), as on a real path.
//! The frame then waits in a timer queue (a binary heap on release time) bounded to `queue_limit_bytes`; a
//! frame over the bound is dropped and counted. A releasing thread per direction sleeps to the earliest
//! release minus [`super::delay::wake_margin`], spins the rest, and sends every due frame in one batch.
//! A direction without delay, jitter or rate forwards from the receiving thread directly (no queue).
//!
//! Frames whose release came more than [`LATE_AFTER`] after the time planned are counted as late.
#![forbid(unsafe_code)]

use super::control::{self, Change, Request, change_with};
use super::delay::{self, Rng};
use super::impairment::{Impairment, ImpairmentError, JitterDist};
use super::packet::{self, OpenError, PacketSocket, RecvBatch};
use super::rate::Link;
use super::{ControlToken, ProxyError};
use serde::{Deserialize, Serialize};
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// A frame released later than planned by more than this counts as a late release.
pub const LATE_AFTER: Duration = Duration::from_micros(250);

/// Default bound of the frames waiting in one direction, in bytes (frame bytes, virtio-net header excluded).
pub const DEFAULT_QUEUE_LIMIT: u64 = 8 << 20;

const POLL: Duration = Duration::from_millis(100);

/// What the bridge does to the frames, per direction. In JSON (control API) durations carry `_ns`, rates
/// `_bps`; missing fields take their default (nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BridgeImpairment {
    /// Frames arriving on the first interface, leaving by the second. Of [`Impairment`], the bridge uses
    /// `delay_ns`, `jitter_ns`, `jitter_dist`, `rate_bps`, `loss`, `gilbert_elliott` and `duplicate`.
    pub a_to_b: Impairment,
    /// Frames arriving on the second interface, leaving by the first.
    pub b_to_a: Impairment,
    /// Let jitter reorder frames (each frame's release is its own sample, as netem does). Off: a frame is
    /// never released before the one ahead of it.
    pub jitter_reorders: bool,
    /// Most frame bytes waiting per direction; a frame over it is dropped and counted in `queue_full`.
    pub queue_limit_bytes: u64,
    /// One-way delays replayed instead of `delay_ns` + jitter in both directions (`--delay-from`): each
    /// frame takes one sample at random. Empty: not used.
    pub delay_samples_ns: Vec<u64>,
}

impl Default for BridgeImpairment {
    fn default() -> Self {
        BridgeImpairment {
            a_to_b: Impairment::default(),
            b_to_a: Impairment::default(),
            jitter_reorders: false,
            queue_limit_bytes: DEFAULT_QUEUE_LIMIT,
            delay_samples_ns: Vec::new(),
        }
    }
}

/// Most samples `delay_samples_ns` may hold.
pub const MAX_SAMPLES: usize = 100_000;

impl BridgeImpairment {
    /// Checks both directions and refuses settings the bridge does not apply; returns a note when jitter
    /// gets clipped at zero delay.
    pub fn validate(&self) -> Result<Option<String>, ImpairmentError> {
        let mut note = None;
        for (name, i) in [("a_to_b", &self.a_to_b), ("b_to_a", &self.b_to_a)] {
            if let Some(n) = i.validate()? {
                note = Some(n);
            }
            let unused = [
                ("rate_total_bps", i.rate_total_bps.is_some()),
                ("window_bytes", i.window_bytes.is_some()),
                ("reset_after", i.reset_after.is_some()),
                ("stall_after", i.stall_after.is_some()),
                ("close_after_bytes", i.close_after_bytes.is_some()),
                ("slow_close_ns", i.slow_close_ns > 0),
                ("reorder", i.reorder > 0.0),
                (
                    "direction",
                    i.direction != super::impairment::Direction::Both,
                ),
            ];
            if let Some((field, _)) = unused.iter().find(|(_, set)| *set) {
                return Err(ImpairmentError(format!(
                    "{name}.{field} does not apply to the bridge (it forwards frames, not connections; \
                     each direction has its own settings, and jitter_reorders lets jitter reorder)"
                )));
            }
        }
        if self.queue_limit_bytes < packet::FRAME_ROOM as u64 {
            return Err(ImpairmentError(format!(
                "queue_limit_bytes {} is below one largest frame ({} bytes)",
                self.queue_limit_bytes,
                packet::FRAME_ROOM
            )));
        }
        if self.delay_samples_ns.len() > MAX_SAMPLES {
            return Err(ImpairmentError(format!(
                "delay_samples_ns holds {} samples; at most {MAX_SAMPLES}",
                self.delay_samples_ns.len()
            )));
        }
        let max = super::impairment::MAX_DELAY.as_nanos() as u64;
        if self.delay_samples_ns.iter().any(|&s| s > max) {
            return Err(ImpairmentError("delay samples must be at most 1h".into()));
        }
        Ok(note)
    }

    fn way(&self, w: usize) -> &Impairment {
        if w == 0 { &self.a_to_b } else { &self.b_to_a }
    }
}

/// Why the bridge could not start.
#[derive(Debug, Error)]
pub enum BridgeError {
    /// Not permitted to open packet sockets or make interfaces promiscuous.
    #[error(
        "the bridge needs CAP_NET_RAW (packet sockets) and CAP_NET_ADMIN (promiscuous mode): run it as root, \
         or give the binary those capabilities (setcap cap_net_raw,cap_net_admin+ep roundtrip)"
    )]
    NotPermitted,
    /// An interface name that does not exist here.
    #[error("no interface '{name}' in this network namespace; the interfaces here are: {}", known.join(", "))]
    NoSuchInterface {
        /// The name given.
        name: String,
        /// The interfaces that exist.
        known: Vec<String>,
    },
    /// The same interface twice.
    #[error("the bridge needs two different interfaces, got '{0}' twice")]
    SameInterface(String),
    /// Another failure opening an interface.
    #[error("{what} on interface '{name}': {source}")]
    Io {
        /// The step.
        what: &'static str,
        /// The interface.
        name: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A bad impairment or control setting.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
}

/// Counters of one direction.
#[derive(Debug, Default)]
struct WayCounters {
    frames_in: AtomicU64,
    bytes_in: AtomicU64,
    frames_out: AtomicU64,
    bytes_out: AtomicU64,
    lost: AtomicU64,
    queue_full: AtomicU64,
    duplicated: AtomicU64,
    queued_frames: AtomicU64,
    queued_bytes: AtomicU64,
    late: AtomicU64,
    max_late_ns: AtomicU64,
    send_errors: AtomicU64,
}

/// A snapshot of one direction's counters (bytes are frame bytes: Ethernet header and payload).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WayDoc {
    /// Frames received.
    pub frames_in: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Frames sent out of the other interface (duplicates included).
    pub frames_out: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Frames dropped by loss emulation (independent or Gilbert-Elliott).
    pub lost: u64,
    /// Frames dropped because the queue held `queue_limit_bytes` already.
    pub queue_full: u64,
    /// Frames sent twice.
    pub duplicated: u64,
    /// Frames waiting now.
    pub queued_frames: u64,
    /// Bytes waiting now.
    pub queued_bytes: u64,
    /// Frames released more than [`LATE_AFTER`] after their planned time.
    pub late: u64,
    /// The latest release so far, after its planned time, in nanoseconds.
    pub max_late_ns: u64,
    /// Frames the driver refused (or could not take).
    pub send_errors: u64,
}

/// The counters document (control API `GET /counters`, and `--json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeCounters {
    /// Frames from the first interface to the second.
    pub a_to_b: WayDoc,
    /// Frames from the second interface to the first.
    pub b_to_a: WayDoc,
    /// Control API requests refused (token, or too many at once).
    pub control_refused: u64,
}

/// State shared by the bridge's threads and its control API.
#[derive(Debug)]
pub struct BridgeShared {
    imp: RwLock<Arc<BridgeImpairment>>,
    ways: [WayCounters; 2],
    stop: AtomicBool,
    ended: Mutex<Option<String>>,
    token: Option<ControlToken>,
    control_refused: AtomicU64,
}

impl BridgeShared {
    /// The impairment in force.
    pub fn impairment(&self) -> Arc<BridgeImpairment> {
        self.imp.read().expect("impairment lock").clone()
    }

    /// Replaces the impairment; frames already queued keep their release time, later frames follow the new
    /// settings (and still never overtake queued ones unless jitter may reorder).
    pub fn set_impairment(&self, i: BridgeImpairment) -> Result<Option<String>, ImpairmentError> {
        let note = i.validate()?;
        *self.imp.write().expect("impairment lock") = Arc::new(i);
        Ok(note)
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> BridgeCounters {
        let doc = |w: &WayCounters| {
            let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
            WayDoc {
                frames_in: l(&w.frames_in),
                bytes_in: l(&w.bytes_in),
                frames_out: l(&w.frames_out),
                bytes_out: l(&w.bytes_out),
                lost: l(&w.lost),
                queue_full: l(&w.queue_full),
                duplicated: l(&w.duplicated),
                queued_frames: l(&w.queued_frames),
                queued_bytes: l(&w.queued_bytes),
                late: l(&w.late),
                max_late_ns: l(&w.max_late_ns),
                send_errors: l(&w.send_errors),
            }
        };
        BridgeCounters {
            a_to_b: doc(&self.ways[0]),
            b_to_a: doc(&self.ways[1]),
            control_refused: self.control_refused.load(Ordering::Relaxed),
        }
    }

    /// Why the bridge ended by itself (an interface went away), once it did.
    pub fn ended(&self) -> Option<String> {
        self.ended.lock().expect("ended").clone()
    }

    fn end(&self, why: String) {
        let mut e = self.ended.lock().expect("ended");
        if e.is_none() {
            *e = Some(why);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

fn error_json(msg: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&serde_json::json!({ "error": msg })).expect("json");
    v.push(b'\n');
    v
}

impl control::Api for BridgeShared {
    fn respond(&self, req: &Request) -> (u16, Vec<u8>) {
        if let Some(token) = &self.token {
            let presented = req
                .authorization
                .as_deref()
                .and_then(|a| a.strip_prefix("Bearer "))
                .map(str::trim);
            if !presented.is_some_and(|p| token.matches(p.as_bytes())) {
                self.refused();
                return (
                    401,
                    error_json("this control api needs the header 'Authorization: Bearer <token>'"),
                );
            }
        }
        let ok = |v: Vec<u8>| (200, v);
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/impairment") => ok(crate::doc::to_bytes(&*self.impairment())),
            ("PUT", "/impairment") | ("PATCH", "/impairment") => {
                let how = if req.method == "PUT" {
                    Change::Replace
                } else {
                    Change::Merge
                };
                match change_with(
                    || self.impairment(),
                    |i: BridgeImpairment| {
                        self.set_impairment(i)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    },
                    &req.body,
                    how,
                ) {
                    Ok(i) => ok(crate::doc::to_bytes(&*i)),
                    Err(e) => (400, error_json(&e)),
                }
            }
            ("GET", "/counters") => ok(crate::doc::to_bytes(&self.counters())),
            (_, "/impairment") | (_, "/counters") => {
                (405, error_json("use GET (or PUT / PATCH for /impairment)"))
            }
            _ => (
                404,
                error_json("unknown path: try /impairment or /counters"),
            ),
        }
    }

    fn stopping(&self) -> bool {
        BridgeShared::stopping(self)
    }

    fn refused(&self) {
        self.control_refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// Settings of a bridge.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The first interface.
    pub a: String,
    /// The second interface.
    pub b: String,
    /// The impairment at start.
    pub impairment: BridgeImpairment,
    /// Serve the control API here.
    pub control: Option<SocketAddr>,
    /// The control API's bearer token (required for a non-loopback control address).
    pub control_token: Option<ControlToken>,
}

struct Entry {
    at: Instant,
    seq: u64,
    data: Vec<u8>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and the earliest release (then the earliest arrival) comes first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: Mutex<(BinaryHeap<Entry>, u64)>,
    cv: Condvar,
}

/// The decisions of one direction (owned by its receiving thread).
struct WayState {
    rng: Rng,
    bad: bool,
    link: Link,
    last: Option<Instant>,
}

/// Bytes a frame occupies on the wire (the frame after the virtio-net header; an offload aggregate counts
/// one link header per segment it will become).
pub fn wire_bytes(frame: &[u8]) -> u64 {
    let body = frame.len().saturating_sub(packet::VNET_HDR) as u64;
    if frame.len() < packet::VNET_HDR || frame[1] == 0 {
        return body;
    }
    let hdr_len = u16::from_le_bytes([frame[2], frame[3]]) as u64;
    let gso_size = u16::from_le_bytes([frame[4], frame[5]]) as u64;
    if gso_size == 0 || hdr_len >= body {
        return body;
    }
    let segs = (body - hdr_len).div_ceil(gso_size);
    body + segs.saturating_sub(1) * hdr_len
}

/// The fate of one frame: `None` lost, else its release times (two for a duplicate).
fn decide(
    imp: &BridgeImpairment,
    w: &Impairment,
    st: &mut WayState,
    arrival: Instant,
    wire: u64,
) -> Option<(Instant, bool)> {
    let mut lost = st.rng.chance(w.loss);
    if let Some(ge) = &w.gilbert_elliott {
        let p_loss = if st.bad { ge.loss_bad } else { ge.loss_good };
        lost |= st.rng.chance(p_loss);
        st.bad = if st.bad {
            !st.rng.chance(ge.r)
        } else {
            st.rng.chance(ge.p)
        };
    }
    if lost {
        return None;
    }
    let ready = match w.rate_bps {
        Some(bps) => st.link.transmit(arrival, wire, bps),
        None => arrival,
    };
    let ns = if imp.delay_samples_ns.is_empty() {
        st.rng
            .delay_sample_ns(
                Duration::from_nanos(w.delay_ns),
                Duration::from_nanos(w.jitter_ns),
                w.jitter_dist,
            )
            .max(0.0) as u64
    } else {
        let i = (st.rng.next_u64() % imp.delay_samples_ns.len() as u64) as usize;
        imp.delay_samples_ns[i]
    };
    let mut at = ready + Duration::from_nanos(ns);
    if !imp.jitter_reorders
        && let Some(l) = st.last
    {
        at = at.max(l);
    }
    st.last = Some(at.max(st.last.unwrap_or(at)));
    Some((at, st.rng.chance(w.duplicate)))
}

fn needs_queue(imp: &BridgeImpairment, w: &Impairment) -> bool {
    w.delay_ns > 0 || w.jitter_ns > 0 || w.rate_bps.is_some() || !imp.delay_samples_ns.is_empty()
}

/// A running bridge; dropping it (or [`Bridge::shutdown`]) stops it.
pub struct Bridge {
    shared: Arc<BridgeShared>,
    control_addr: Option<SocketAddr>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("control_addr", &self.control_addr)
            .finish()
    }
}

impl Bridge {
    /// The shared state (impairment, counters).
    pub fn shared(&self) -> &Arc<BridgeShared> {
        &self.shared
    }
    /// The control API's address, when enabled.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control_addr
    }
    /// Stops forwarding, waits for the threads, and returns the final counters.
    pub fn shutdown(mut self) -> BridgeCounters {
        self.stop_now();
        self.shared.counters()
    }
    fn stop_now(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(c) = self.control_addr {
            let _ = std::net::TcpStream::connect_timeout(
                &super::wake_addr(c),
                Duration::from_millis(200),
            );
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn open(name: &str) -> Result<PacketSocket, BridgeError> {
    PacketSocket::open(name).map_err(|e| match e {
        OpenError::NotPermitted => BridgeError::NotPermitted,
        OpenError::NoSuchInterface(known) => BridgeError::NoSuchInterface {
            name: name.to_string(),
            known,
        },
        OpenError::Io(what, source) => BridgeError::Io {
            what,
            name: name.to_string(),
            source,
        },
    })
}

/// Starts the bridge: opens both interfaces (the only ones touched), then the threads and the control API.
pub fn start(config: &BridgeConfig) -> Result<Bridge, BridgeError> {
    if config.a == config.b {
        return Err(BridgeError::SameInterface(config.a.clone()));
    }
    config
        .impairment
        .validate()
        .map_err(|e| BridgeError::Proxy(e.into()))?;
    if let Some(c) = config.control
        && config.control_token.is_none()
        && !c.ip().is_loopback()
    {
        return Err(ProxyError::ControlExposed { addr: c }.into());
    }
    // Both names are checked before either interface is changed.
    for n in [&config.a, &config.b] {
        if packet::ifindex(n).is_none() {
            return Err(BridgeError::NoSuchInterface {
                name: n.clone(),
                known: packet::interfaces(),
            });
        }
    }
    let socks = [Arc::new(open(&config.a)?), Arc::new(open(&config.b)?)];
    let names = [config.a.clone(), config.b.clone()];
    let shared = Arc::new(BridgeShared {
        imp: RwLock::new(Arc::new(config.impairment.clone())),
        ways: Default::default(),
        stop: AtomicBool::new(false),
        ended: Mutex::new(None),
        token: config.control_token.clone(),
        control_refused: AtomicU64::new(0),
    });
    let mut bridge = Bridge {
        shared: shared.clone(),
        control_addr: None,
        threads: Vec::new(),
    };
    for w in 0..2 {
        let q = Arc::new(Queue::default());
        let (rx, tx) = (socks[w].clone(), socks[1 - w].clone());
        let (s, q2, tx2) = (shared.clone(), q.clone(), tx.clone());
        let name = names[w].clone();
        let io = |e| BridgeError::Io {
            what: "starting a thread",
            name: names[w].clone(),
            source: e,
        };
        bridge.threads.push(
            std::thread::Builder::new()
                .name(format!("bridge-rx{w}"))
                .spawn(move || receive(w, &name, &rx, &tx, &q, &s))
                .map_err(io)?,
        );
        let s = shared.clone();
        bridge.threads.push(
            std::thread::Builder::new()
                .name(format!("bridge-tx{w}"))
                .spawn(move || release(w, &tx2, &q2, &s))
                .map_err(io)?,
        );
    }
    if let Some(c) = config.control {
        let (addr, thread) = control::start_api(c, shared.clone())?;
        bridge.control_addr = Some(addr);
        bridge.threads.push(thread);
    }
    Ok(bridge)
}

/// The receiving thread of direction `w`: reads frames from `rx`, forwards them to `tx` at once or queues them.
fn receive(
    w: usize,
    name: &str,
    rx: &PacketSocket,
    tx: &PacketSocket,
    q: &Queue,
    shared: &BridgeShared,
) {
    // Real-time too: a frame read late is released late (the delay counts from the kernel's arrival stamp,
    // but the release cannot happen before the frame was read).
    delay::realtime_for_this_thread();
    let c = &shared.ways[w];
    let mut batch = RecvBatch::default();
    let mut st = WayState {
        rng: Rng::from_entropy(),
        bad: false,
        link: Link::new(),
        last: None,
    };
    let mut last_check = Instant::now();
    loop {
        if shared.stopping() {
            return;
        }
        let n = match rx.recv(&mut batch) {
            Ok(n) => n,
            Err(e) => {
                shared.end(format!("interface '{name}' failed or went away ({e})"));
                return;
            }
        };
        if last_check.elapsed() >= POLL {
            last_check = Instant::now();
            if packet::ifindex(name) != Some(rx.ifindex()) {
                shared.end(format!("interface '{name}' went away"));
                return;
            }
        }
        if n == 0 {
            continue;
        }
        let imp = shared.impairment();
        let wi = imp.way(w);
        let queued = {
            let h = q.heap.lock().expect("bridge queue");
            !h.0.is_empty()
        };
        let through = !needs_queue(&imp, wi) && !queued;
        let mut direct: Vec<&[u8]> = Vec::new();
        let mut pushed = false;
        for (frame, arrival) in batch.frames() {
            let wire = wire_bytes(frame);
            c.frames_in.fetch_add(1, Ordering::Relaxed);
            c.bytes_in.fetch_add(wire, Ordering::Relaxed);
            let Some((at, dup)) = decide(&imp, wi, &mut st, arrival, wire) else {
                c.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if dup {
                c.duplicated.fetch_add(1, Ordering::Relaxed);
            }
            let copies = if dup { 2 } else { 1 };
            if through {
                for _ in 0..copies {
                    direct.push(frame);
                }
                continue;
            }
            let mut h = q.heap.lock().expect("bridge queue");
            for _ in 0..copies {
                let len = frame.len() as u64 - packet::VNET_HDR as u64;
                if h.1 + len > imp.queue_limit_bytes {
                    c.queue_full.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                h.1 += len;
                let seq = c.frames_in.load(Ordering::Relaxed);
                let head = h.0.peek().is_none_or(|e| at < e.at);
                h.0.push(Entry {
                    at,
                    seq,
                    data: frame.to_vec(),
                });
                c.queued_frames.fetch_add(1, Ordering::Relaxed);
                c.queued_bytes.fetch_add(len, Ordering::Relaxed);
                pushed |= head;
            }
        }
        if pushed {
            q.cv.notify_one();
        }
        if !direct.is_empty() {
            let (sent, failed, _) = tx.send(direct.iter().copied());
            let bytes: u64 = direct[..sent].iter().map(|f| wire_bytes(f)).sum();
            c.frames_out.fetch_add(sent as u64, Ordering::Relaxed);
            c.bytes_out.fetch_add(bytes, Ordering::Relaxed);
            c.send_errors.fetch_add(failed as u64, Ordering::Relaxed);
        }
    }
}

/// The releasing thread of direction `w`: sends each queued frame out of `tx` at its release time.
fn release(w: usize, tx: &PacketSocket, q: &Queue, shared: &BridgeShared) {
    delay::precise_timers_for_this_thread();
    delay::realtime_for_this_thread();
    let c = &shared.ways[w];
    let mut due: Vec<Entry> = Vec::with_capacity(packet::BATCH);
    // With --cpu-wake, idle CPUs are kept awake from the end of a wait to the send after it.
    delay::release_loop(
        &q.heap,
        &q.cv,
        POLL,
        || shared.stopping(),
        |h| h.0.peek().map(|e| e.at),
        |mut h, now| {
            while due.len() < packet::BATCH && h.0.peek().is_some_and(|e| e.at <= now) {
                let e = h.0.pop().expect("peeked");
                h.1 -= (e.data.len() - packet::VNET_HDR) as u64;
                due.push(e);
            }
            drop(h);
            let sending = Instant::now();
            let (sent, failed, _) = tx.send(due.iter().map(|e| &e.data[..]));
            let mut bytes = 0;
            let mut qbytes = 0;
            for e in &due {
                bytes += wire_bytes(&e.data);
                qbytes += (e.data.len() - packet::VNET_HDR) as u64;
                let late = sending.saturating_duration_since(e.at);
                if late > LATE_AFTER {
                    c.late.fetch_add(1, Ordering::Relaxed);
                }
                c.max_late_ns
                    .fetch_max(late.as_nanos() as u64, Ordering::Relaxed);
            }
            c.frames_out.fetch_add(sent as u64, Ordering::Relaxed);
            c.bytes_out.fetch_add(bytes, Ordering::Relaxed);
            c.send_errors.fetch_add(failed as u64, Ordering::Relaxed);
            c.queued_frames
                .fetch_sub(due.len() as u64, Ordering::Relaxed);
            c.queued_bytes.fetch_sub(qbytes, Ordering::Relaxed);
            due.clear();
        },
    );
}

/// Reads one-way delay samples for `--delay-from`: from a roundtrip `--json` result (every `rtt_ns` /
/// `*_rtt_ns` number, or the `samples_ns` array, found anywhere in it), from a CSV whose header has an `rtt_ns`
/// column (`roundtrip ping --full-log`), or from a text file of round-trip times, one per line, with a unit (`12.5ms`, `800us`) or in milliseconds without one. Each round trip
/// becomes a one-way delay of half of it.
pub fn delay_samples(text: &str) -> Result<Vec<u64>, String> {
    let mut rtts: Vec<u64> = Vec::new();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        fn walk(v: &serde_json::Value, out: &mut Vec<u64>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        if (k == "rtt_ns" || k.ends_with("_rtt_ns")) && x.is_u64() {
                            out.push(x.as_u64().unwrap_or(0));
                        } else if k == "samples_ns" || k == "rtts_ns" {
                            if let Some(a) = x.as_array() {
                                out.extend(a.iter().filter_map(|s| s.as_u64()));
                            }
                        } else {
                            walk(x, out);
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        walk(&v, &mut rtts);
    } else if let Some(col) = text
        .lines()
        .next()
        .and_then(|h| h.split(',').position(|c| c.trim() == "rtt_ns"))
    {
        // A CSV with an rtt_ns column (`roundtrip ping --full-log`).
        for (i, line) in text.lines().enumerate().skip(1) {
            let Some(v) = line.split(',').nth(col).map(str::trim) else {
                continue;
            };
            if v.is_empty() {
                continue;
            }
            rtts.push(v.parse::<u64>().map_err(|_| {
                format!(
                    "line {}: rtt_ns '{v}' is not a whole number of nanoseconds",
                    i + 1
                )
            })?);
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let ns = match l.parse::<f64>() {
                Ok(ms) if ms >= 0.0 && ms.is_finite() => (ms * 1e6) as u64,
                _ => crate::units::parse_duration(l)
                    .map_err(|e| format!("line {}: '{l}' is not a round-trip time ({e})", i + 1))?
                    .as_nanos() as u64,
            };
            rtts.push(ns);
        }
    }
    one_way_delays(rtts).ok_or_else(|| {
        "no round-trip times in it (expected a roundtrip --json result or one RTT per line)".into()
    })
}

/// One-way delays (half of each round trip, zeros dropped, evenly thinned to [`MAX_SAMPLES`]) from round-trip
/// times in nanoseconds; `None` when none is left.
pub fn one_way_delays(mut rtts: Vec<u64>) -> Option<Vec<u64>> {
    rtts.retain(|&r| r > 0);
    if rtts.is_empty() {
        return None;
    }
    if rtts.len() > MAX_SAMPLES {
        // An even thinning keeps the distribution.
        let step = rtts.len().div_ceil(MAX_SAMPLES);
        rtts = rtts.into_iter().step_by(step).collect();
    }
    Some(rtts.into_iter().map(|r| r / 2).collect())
}

/// The jitter distributions, for callers that print them.
pub fn dist_name(d: JitterDist) -> &'static str {
    match d {
        JitterDist::Uniform => "uniform",
        JitterDist::Normal => "normal",
        JitterDist::Pareto => "pareto",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> WayState {
        WayState {
            rng: Rng::new(5),
            bad: false,
            link: Link::new(),
            last: None,
        }
    }

    #[test]
    fn jitter_keeps_order_unless_asked() {
        let mut imp = BridgeImpairment::default();
        imp.a_to_b.delay_ns = 10_000_000;
        imp.a_to_b.jitter_ns = 5_000_000;
        let t0 = Instant::now();
        let mut st = state();
        let mut prev = t0;
        for i in 0..10_000u64 {
            let (at, _) = decide(
                &imp,
                &imp.a_to_b,
                &mut st,
                t0 + Duration::from_micros(i * 10),
                100,
            )
            .unwrap();
            assert!(at >= prev, "reordered at {i}");
            prev = at;
        }
        imp.jitter_reorders = true;
        let mut st = state();
        let mut inversions = 0;
        let mut prev = t0;
        for i in 0..10_000u64 {
            let (at, _) = decide(
                &imp,
                &imp.a_to_b,
                &mut st,
                t0 + Duration::from_micros(i * 10),
                100,
            )
            .unwrap();
            inversions += (at < prev) as u32;
            prev = at;
        }
        assert!(inversions > 1000, "{inversions}");
    }

    #[test]
    fn rate_spaces_frames_by_their_serialisation() {
        let mut imp = BridgeImpairment::default();
        imp.a_to_b.rate_bps = Some(12_000_000); // 1500 bytes = 1 ms
        let t0 = Instant::now();
        let mut st = state();
        let times: Vec<_> = (0..10)
            .map(|_| decide(&imp, &imp.a_to_b, &mut st, t0, 1500).unwrap().0)
            .collect();
        for (i, t) in times.iter().enumerate() {
            assert_eq!(*t - t0, Duration::from_millis(i as u64 + 1));
        }
    }

    #[test]
    fn wire_bytes_counts_segments() {
        let mut f = vec![0u8; packet::VNET_HDR + 1514];
        assert_eq!(wire_bytes(&f), 1514);
        // A TSO aggregate: 66 bytes of headers, 3 x 1448 payload.
        f = vec![0u8; packet::VNET_HDR + 66 + 3 * 1448];
        f[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        f[2..4].copy_from_slice(&66u16.to_le_bytes());
        f[4..6].copy_from_slice(&1448u16.to_le_bytes());
        assert_eq!(wire_bytes(&f), 3 * (66 + 1448));
    }

    #[test]
    fn validation_refuses_what_the_bridge_does_not_do() {
        let mut imp = BridgeImpairment::default();
        assert_eq!(imp.validate(), Ok(None));
        imp.b_to_a.window_bytes = Some(1000);
        assert!(
            imp.validate()
                .unwrap_err()
                .0
                .contains("b_to_a.window_bytes")
        );
        let imp = BridgeImpairment {
            queue_limit_bytes: 10,
            ..Default::default()
        };
        assert!(imp.validate().is_err());
    }

    #[test]
    fn delay_samples_from_json_and_text() {
        let j =
            r#"{"rounds": [{"rtt_ns": 2000000}, {"rtt_ns": 4000000}], "summary": {"p50_ns": 1}}"#;
        assert_eq!(delay_samples(j).unwrap(), vec![1_000_000, 2_000_000]);
        assert_eq!(
            delay_samples("# rtts\n10\n800us\n").unwrap(),
            vec![5_000_000, 400_000]
        );
        assert_eq!(
            delay_samples(
                "seq,send_ns,recv_ns,rtt_ns,server_ns\n1,0,10,4000000,5\n2,5,9,6000000,5\n"
            )
            .unwrap(),
            vec![2_000_000, 3_000_000]
        );
        assert!(delay_samples("seq,rtt_ns\n1,x\n").is_err());
        assert!(delay_samples("nonsense").is_err());
        assert!(delay_samples("{}").is_err());
    }
}
