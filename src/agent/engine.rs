//! The scheduler and the probers. (Interface fixed; implementation by the engine work.)

use super::{Snapshot, TargetSpec};
use crate::wire::auth::Psk;
use std::io;
use std::time::Duration;

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The pre-shared key proven to every tcp/udp peer before any measurement traffic.
    pub psk: Option<Psk>,
    /// The span of the recent window behind [`super::WindowStats`] (default 60 s).
    pub window: Duration,
    /// Threads for connect, ICMP and database probes (default 4).
    pub workers: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            psk: None,
            window: Duration::from_secs(60),
            workers: 4,
        }
    }
}

/// A running engine: probes its targets until [`Engine::shutdown`] (or drop).
pub struct Engine {
    _private: (),
}

impl Engine {
    /// Starts the scheduler thread(s) with no targets.
    pub fn start(config: EngineConfig) -> io::Result<Engine> {
        let _ = config;
        unimplemented!("engine")
    }

    /// Replaces the target set. Targets whose [`TargetSpec::key`] is unchanged keep their counters, histogram
    /// and schedule (their interval/timeout/address are updated); new ones start at a random phase within
    /// their interval; removed ones stop and disappear from snapshots.
    pub fn set_targets(&self, targets: Vec<TargetSpec>) {
        let _ = targets;
        unimplemented!("engine")
    }

    /// Counts a failed name resolution against every current target whose `target` label is `target` (reason
    /// `dns`), so a DNS failure shows in the metrics while the last good addresses keep being probed.
    pub fn count_dns_error(&self, target: &str) {
        let _ = target;
        unimplemented!("engine")
    }

    /// The current state of every target and the schedule lag.
    pub fn snapshot(&self) -> Snapshot {
        unimplemented!("engine")
    }

    /// Stops probing, closes every connection and joins the threads.
    pub fn shutdown(self) {}
}
