//! JSON documents. Field names are stable; every duration carries its unit in its name (`_ns`, `_s`).
//!
//! Every document has `format` ([`FORMAT`]), `format_version`, `kind` (the command) and `environment`, so that
//! readers such as a report renderer can tell what they were given.

use crate::probe::ping::{IntervalRow, PeerKind, PingResult, Stop, Transport};
use crate::stats::{Bucket, PercentilePoint, Summary};
use serde::Serialize;
use std::time::{Duration, UNIX_EPOCH};

/// Value of the `format` field of every document.
pub const FORMAT: &str = "roundtrip";
/// Version of the document layout.
pub const FORMAT_VERSION: u32 = 1;

/// Where a result was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// roundtrip's version.
    pub roundtrip_version: &'static str,
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
            roundtrip_version: env!("CARGO_PKG_VERSION"),
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
        }
    }
}

/// Settings of a ping run, as recorded in its document.
#[derive(Debug, Clone, Serialize)]
pub struct PingSettings {
    /// Target as the user gave it.
    pub target: String,
    /// Resolved address.
    pub address: String,
    /// "tcp" or "udp".
    pub transport: Transport,
    /// Message size in bytes.
    pub size_bytes: usize,
    /// Stop condition.
    pub stop: Stop,
    /// Time between sends, when paced.
    pub interval_ns: Option<u64>,
    /// Warm-up length.
    pub warmup_ns: u64,
    /// Answer timeout.
    pub timeout_ns: u64,
}

/// Counts and RTT statistics of one ping run.
#[derive(Debug, Clone, Serialize)]
pub struct PingSummary {
    /// Measured messages sent.
    pub sent: u64,
    /// Distinct messages answered.
    pub received: u64,
    /// Messages never answered.
    pub lost: u64,
    /// Extra answers to an already answered message.
    pub duplicated: u64,
    /// Answers overtaken by the answer to a later message.
    pub out_of_order: u64,
    /// Answers that came after their timeout.
    pub late: u64,
    /// Length of the measured phase.
    pub elapsed_s: f64,
    /// Round-trip time statistics.
    pub rtt: Summary,
    /// Server turnaround statistics (roundtrip servers only).
    pub server_turnaround: Option<Summary>,
}

/// The document `roundtrip ping --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct PingDoc {
    /// Always [`FORMAT`].
    pub format: &'static str,
    /// Always [`FORMAT_VERSION`].
    pub format_version: u32,
    /// "ping".
    pub kind: &'static str,
    /// Where it ran.
    pub environment: Environment,
    /// Start of the measured phase, Unix seconds.
    pub started_unix_s: f64,
    /// Settings.
    pub settings: PingSettings,
    /// Who answered.
    pub peer: PeerKind,
    /// The summary.
    pub summary: PingSummary,
    /// Per-interval rows.
    pub intervals: Vec<IntervalRow>,
    /// RTT histogram, 20 buckets per decade.
    pub histogram: Vec<Bucket>,
    /// RTT percentile curve.
    pub percentiles: Vec<PercentilePoint>,
    /// Why the run ended early, if it did.
    pub error: Option<String>,
    /// True when interrupted (Ctrl-C).
    pub cancelled: bool,
    /// How far it got when interrupted (absent when it ran to its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

/// How far a run that Ctrl-C cut short got, against what it was asked to do: the figures of its document
/// cover that part only. Absent from a run that ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
    pub unit: Option<&'static str>,
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
            unit: Some(unit),
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
        let done = match (self.planned_s, self.done, self.planned, self.unit) {
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

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The summary part of a ping result.
pub fn ping_summary(r: &PingResult) -> PingSummary {
    PingSummary {
        sent: r.sent,
        received: r.received,
        lost: r.lost(),
        duplicated: r.duplicated,
        out_of_order: r.out_of_order,
        late: r.late,
        elapsed_s: r.elapsed.as_secs_f64(),
        rtt: r.rtt.summary(),
        server_turnaround: (!r.server.is_empty()).then(|| r.server.summary()),
    }
}

impl PingDoc {
    /// Builds the document for one ping result.
    pub fn new(
        target: &str,
        r: &PingResult,
        stop: Stop,
        interval: Option<Duration>,
        warmup: Duration,
        timeout: Duration,
    ) -> Self {
        PingDoc {
            format: FORMAT,
            format_version: FORMAT_VERSION,
            kind: "ping",
            environment: Environment::current(),
            started_unix_s: r
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            settings: PingSettings {
                target: target.to_string(),
                address: r.addr.to_string(),
                transport: r.transport,
                size_bytes: r.size,
                stop,
                interval_ns: interval.map(ns),
                warmup_ns: ns(warmup),
                timeout_ns: ns(timeout),
            },
            peer: r.peer,
            summary: ping_summary(r),
            intervals: r.intervals.clone(),
            histogram: r.rtt.buckets(20),
            percentiles: r.rtt.percentile_curve(),
            error: r.error.as_ref().map(|e| e.to_string()),
            cancelled: r.cancelled,
            interrupted: Interrupted::of_stop(r.cancelled, stop, r.elapsed, r.sent),
        }
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
