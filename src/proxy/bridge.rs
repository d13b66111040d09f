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
//!
//! Here: the settings, the errors and starting and stopping. Each direction's forwarding is in `forward`,
//! the state shared with the control API in `shared`, `--delay-from` samples in `samples`.
#![forbid(unsafe_code)]

mod forward;
mod samples;
mod shared;

use super::control;
use super::impairment::{Impairment, ImpairmentError, JitterDist};
use super::packet::{self, OpenError, PacketSocket};
use super::{ControlToken, ProxyError};
pub use forward::wire_bytes;
use forward::{Queue, receive, release};
pub use samples::{delay_samples, one_way_delays};
use serde::{Deserialize, Serialize};
pub use shared::{BridgeCounters, BridgeShared, WayDoc};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;
use thiserror::Error;

/// A frame released later than planned by more than this counts as a late release.
pub const LATE_AFTER: Duration = Duration::from_micros(250);

/// Default bound of the frames waiting in one direction, in bytes (frame bytes, virtio-net header excluded).
pub const DEFAULT_QUEUE_LIMIT: u64 = 8 << 20;

/// Largest bound of the frames waiting in one direction, in bytes: the memory the queues may take, 2 GiB for
/// both directions.
pub const MAX_QUEUE_LIMIT: u64 = 1 << 30;

/// The range of `--queue-limit` and of `queue_limit_bytes` over the control API (one definition for both):
/// from one largest frame to [`MAX_QUEUE_LIMIT`].
pub const QUEUE_LIMIT_BYTES: std::ops::RangeInclusive<u64> =
    packet::FRAME_ROOM as u64..=MAX_QUEUE_LIMIT;

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
        super::impairment::check_bytes(
            "queue_limit_bytes",
            self.queue_limit_bytes,
            &QUEUE_LIMIT_BYTES,
        )
        .map_err(ImpairmentError)?;
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
    #[error("no interface '{name}' in this network namespace; the interfaces here are: {} (`ip link` lists them)", known.join(", "))]
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

/// A running bridge; dropping it (or [`Bridge::shutdown`]) stops it.
pub struct Bridge {
    shared: Arc<BridgeShared>,
    control_addr: Option<SocketAddr>,
    control_waker: Option<control::AcceptWaker>,
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
        if let Some(w) = &self.control_waker {
            w.wake();
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

/// Checks the two interface names without touching either: they differ and both exist in this network
/// namespace (what [`start`] checks first; a command line refuses them before any I/O with it).
pub fn check_interfaces(a: &str, b: &str) -> Result<(), BridgeError> {
    if a == b {
        return Err(BridgeError::SameInterface(a.to_string()));
    }
    for n in [a, b] {
        if packet::ifindex(n).is_none() {
            return Err(BridgeError::NoSuchInterface {
                name: n.to_string(),
                known: packet::interfaces(),
            });
        }
    }
    Ok(())
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
    check_interfaces(&config.a, &config.b)?;
    let socks = [Arc::new(open(&config.a)?), Arc::new(open(&config.b)?)];
    let names = [config.a.clone(), config.b.clone()];
    let shared = Arc::new(BridgeShared::new(
        config.impairment.clone(),
        config.control_token.clone(),
    ));
    let mut bridge = Bridge {
        shared: shared.clone(),
        control_addr: None,
        control_waker: None,
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
        let (addr, waker, thread) = control::start_api(c, shared.clone())?;
        bridge.control_addr = Some(addr);
        bridge.control_waker = Some(waker);
        bridge.threads.push(thread);
    }
    Ok(bridge)
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
}
