//! The result documents every command writes with `--json` and `roundtrip report` reads back: the envelope
//! (`format`, `format_version`, `kind`, `environment`), the kind names, and the serde helpers that give
//! durations their unit in the field name. One type writes and reads each part, so the writer and the reader
//! cannot drift.

pub mod capture_flows;
pub mod capture_match;
pub mod capture_stats;
pub mod capture_timeline;
pub mod compare;
pub mod connect;
pub mod db;
pub mod icmp;
pub mod kind;
pub mod load;
pub mod ping;
pub mod rpc;
pub mod ser;
pub mod sweep;
pub mod tcp;
pub mod tcp_trace;
pub mod throughput;

use crate::probe::ping::Stop;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Value of the `format` field of every document.
pub const FORMAT: &str = "roundtrip";
/// Version of the document layout.
pub const FORMAT_VERSION: u32 = 1;

/// Where a result was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Environment {
    /// roundtrip's version.
    pub roundtrip_version: String,
    /// Host name of the measuring machine.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
}

impl Environment {
    /// Reads the environment of this machine.
    pub fn current() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Environment {
            roundtrip_version: env!("CARGO_PKG_VERSION").to_string(),
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
        }
    }
}

/// How far a run that Ctrl-C cut short got, against what it was asked to do: the figures of its document
/// cover that part only. Absent from a run that ended by itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupted {
    /// Measuring time done when it was cut, seconds.
    pub after_s: f64,
    /// Measuring time asked for, seconds (a run given a duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_s: Option<f64>,
    /// Units done (a run given a count): round trips, attempts, cells, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done: Option<u64>,
    /// Units asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned: Option<u64>,
    /// What the units are ("round trips", "attempts", "cells").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

impl Interrupted {
    /// A run given a duration, cut after `after` of `planned`.
    pub fn duration(after: Duration, planned: Duration) -> Self {
        Interrupted {
            after_s: after.as_secs_f64(),
            planned_s: Some(planned.as_secs_f64()),
            done: None,
            planned: None,
            unit: None,
        }
    }

    /// A run given a count, cut after `done` of `planned` `unit` (and `after` of measuring time).
    pub fn count(after: Duration, done: u64, planned: u64, unit: &'static str) -> Self {
        Interrupted {
            after_s: after.as_secs_f64(),
            planned_s: None,
            done: Some(done),
            planned: Some(planned),
            unit: Some(unit.to_string()),
        }
    }

    /// A ping-pong run's stop rule, when it was cancelled.
    pub fn of_stop(cancelled: bool, stop: Stop, elapsed: Duration, done: u64) -> Option<Self> {
        cancelled.then(|| match stop {
            Stop::Duration(d) => Interrupted::duration(elapsed, d),
            Stop::Count(n) => Interrupted::count(elapsed, done, n, "round trips"),
        })
    }

    /// The line printed under the results: `interrupted (Ctrl-C) after 2.00s of 10.0s: ...`.
    pub fn line(&self) -> String {
        let done = match (self.planned_s, self.done, self.planned, &self.unit) {
            (Some(p), _, _, _) => format!(
                "{} of {}",
                crate::units::fmt_nanos(self.after_s * 1e9),
                crate::units::fmt_nanos(p * 1e9)
            ),
            (None, Some(d), Some(p), Some(u)) => format!(
                "{d} of {p} {u} ({})",
                crate::units::fmt_nanos(self.after_s * 1e9)
            ),
            _ => crate::units::fmt_nanos(self.after_s * 1e9),
        };
        format!("interrupted (Ctrl-C) after {done}: the figures above cover that part only\n")
    }
}

/// The envelope of a document whose result type has no envelope fields of its own: `format`,
/// `format_version`, `kind` and `environment`, then the result's fields flattened beside them.
#[derive(Debug, Clone, Serialize)]
pub struct Envelope<T: Serialize> {
    /// Always [`FORMAT`].
    pub format: &'static str,
    /// Always [`FORMAT_VERSION`].
    pub format_version: u32,
    /// The command that made the document.
    pub kind: &'static str,
    /// Where it ran.
    pub environment: Environment,
    /// The result itself.
    #[serde(flatten)]
    pub result: T,
}

impl<T: Serialize> Envelope<T> {
    /// Wraps `result` in the envelope of this machine.
    pub fn new(kind: &'static str, result: T) -> Self {
        Envelope {
            format: FORMAT,
            format_version: FORMAT_VERSION,
            kind,
            environment: Environment::current(),
            result,
        }
    }
}

/// Wraps `result` in an [`Envelope`] of this machine and serialises it with [`to_bytes`].
pub fn envelope_bytes<T: Serialize>(kind: &'static str, result: T) -> Vec<u8> {
    to_bytes(&Envelope::new(kind, result))
}

/// Serialises any document as pretty JSON followed by a newline.
pub fn to_bytes<T: Serialize>(doc: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(doc).expect("documents always serialise");
    out.push(b'\n');
    out
}
