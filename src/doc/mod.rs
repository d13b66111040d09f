//! The result documents every command writes with `--json` and `roundtrip report` reads back: the envelope
//! (`format`, `format_version`, `kind`, `environment`) and the kind names; durations get their unit in the field
//! name through [`crate::units::ser`]. One type writes and reads each part, so the writer and the reader
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

/// Version the first document layout carried. A document without `format_version` is read as this version:
/// the field has been written since the first layout, so a document lacking it is not of a later one.
pub const FIRST_FORMAT_VERSION: u32 = 1;

/// The envelope every document starts with: `format`, `format_version`, `kind` and `environment`, in that
/// order. Every document type flattens one (`#[serde(flatten)] header: Header`) as its first field, so the
/// four fields are written first and read with one rule.
///
/// The rule for a field missing on read (what [`Default`] gives):
/// - `format` reads as [`FORMAT`]: a document of another program would not have this layout to begin with,
///   and [`crate::report::load::parse`] checks the field on the raw document before a type reads it;
/// - `format_version` reads as [`FIRST_FORMAT_VERSION`], the layout documents had before the field could be
///   missing, never the current [`FORMAT_VERSION`] (a later layout cannot be guessed from its absence);
/// - `kind` reads as empty: a header does not know which type holds it, and a kind made up from the type would
///   hide that the document never said what wrote it (readers dispatching on the kind refuse it instead);
/// - `environment` reads as [`Environment::default`] (every part empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] when written.
    pub format_version: u32,
    /// The command that made the document (one of [`kind`]).
    pub kind: String,
    /// Where it ran.
    pub environment: Environment,
}

impl Default for Header {
    /// The header of a document missing every envelope field (see [`Header`] for the rule).
    fn default() -> Self {
        Header {
            format: FORMAT.to_string(),
            format_version: FIRST_FORMAT_VERSION,
            kind: String::new(),
            environment: Environment::default(),
        }
    }
}

impl Header {
    /// The header of a document of `kind` written now, on this machine.
    pub fn new(kind: &str) -> Self {
        Header {
            format: FORMAT.to_string(),
            format_version: FORMAT_VERSION,
            kind: kind.to_string(),
            environment: Environment::current(),
        }
    }
}

/// A document whose result type has no envelope of its own: the [`Header`], then the result's fields
/// flattened beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Envelope<T: Serialize> {
    /// `format`, `format_version`, `kind`, `environment`.
    #[serde(flatten)]
    pub header: Header,
    /// The result itself.
    #[serde(flatten)]
    pub result: T,
}

impl<T: Serialize> Envelope<T> {
    /// Wraps `result` in the envelope of this machine.
    pub fn new(kind: &'static str, result: T) -> Self {
        Envelope {
            header: Header::new(kind),
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

/// Takes the median RTT (`summary.rtt.p50_ns`) from a roundtrip result document (ping, and any document with
/// the same summary layout such as compare or db), for the latency model (`roundtrip model --from`).
pub fn rtt_from_result(path: &str, text: &[u8]) -> Result<Duration, crate::model::ModelError> {
    let err = |why: String| crate::model::ModelError::FromResult {
        path: path.to_string(),
        why,
    };
    let v: serde_json::Value = serde_json::from_slice(text)
        .map_err(|e| err(format!("not JSON ({e}); give a file written by --json")))?;
    if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(err(
            "not a roundtrip result (no \"format\": \"roundtrip\")".into()
        ));
    }
    let kind = v
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("?")
        .to_string();
    let p50 = v
        .pointer("/summary/rtt/p50_ns")
        .and_then(|x| x.as_u64())
        .ok_or_else(|| err(format!("this '{kind}' document has no summary.rtt.p50_ns")))?;
    let count = v
        .pointer("/summary/rtt/count")
        .and_then(|x| x.as_u64())
        .unwrap_or(1);
    if count == 0 || p50 == 0 {
        return Err(err(format!(
            "this '{kind}' document measured no round trip"
        )));
    }
    Ok(Duration::from_nanos(p50))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::Value;

    /// Golden documents of three kinds that read a missing envelope field three ways before [`Header`]:
    /// `capture stats` as the current format, version and its own kind; `load` as empty and 0; `ping` not at
    /// all.
    const STATS: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/golden/capture-stats.json"
    ));
    const LOAD: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/golden/load.json"
    ));
    const PING: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/golden/ping.json"
    ));

    /// Removes each envelope field of `text` in turn, then all four, reads the rest as `T` and checks that
    /// the missing field reads with the one rule, that the others read as written, and that the whole
    /// document writes back as before with only the missing field's default in its place.
    fn missing_envelope_fields_read_with_one_rule<T: DeserializeOwned + Serialize>(
        text: &str,
        kind: &str,
        header: fn(&T) -> &Header,
    ) {
        let full: Value = serde_json::from_str(text).unwrap();
        let written: T = serde_json::from_value(full.clone()).unwrap();
        let written = header(&written).clone();
        assert_eq!(written.format, FORMAT);
        assert_eq!(written.format_version, FORMAT_VERSION);
        assert_eq!(written.kind, kind);
        assert!(!written.environment.roundtrip_version.is_empty());
        let rule = Header::default();
        assert_eq!(
            (
                rule.format.as_str(),
                rule.format_version,
                rule.kind.as_str()
            ),
            (FORMAT, FIRST_FORMAT_VERSION, "")
        );
        assert_eq!(rule.environment, Environment::default());
        let cases: [(&[&str], Header); 5] = [
            (
                &["format"],
                Header {
                    format: rule.format.clone(),
                    ..written.clone()
                },
            ),
            (
                &["format_version"],
                Header {
                    format_version: rule.format_version,
                    ..written.clone()
                },
            ),
            (
                &["kind"],
                Header {
                    kind: rule.kind.clone(),
                    ..written.clone()
                },
            ),
            (
                &["environment"],
                Header {
                    environment: rule.environment.clone(),
                    ..written.clone()
                },
            ),
            (
                &["format", "format_version", "kind", "environment"],
                rule.clone(),
            ),
        ];
        for (fields, want) in cases {
            let mut v = full.clone();
            for f in fields {
                assert!(v.as_object_mut().unwrap().remove(*f).is_some(), "{f}");
            }
            let doc: T = serde_json::from_value(v)
                .unwrap_or_else(|e| panic!("{kind} without {fields:?}: {e}"));
            assert_eq!(header(&doc), &want, "{kind} without {fields:?}");
            let mut expect = full.clone();
            let defaults = serde_json::to_value(&want).unwrap();
            for f in fields {
                expect[*f] = defaults[*f].clone();
            }
            assert_eq!(
                serde_json::to_value(&doc).unwrap(),
                expect,
                "{kind} without {fields:?}"
            );
        }
    }

    #[test]
    fn a_capture_stats_document_missing_envelope_fields_reads_with_the_one_rule() {
        missing_envelope_fields_read_with_one_rule::<capture_stats::StatsDoc>(
            STATS,
            kind::CAPTURE_STATS,
            |d| &d.header,
        );
    }

    #[test]
    fn a_load_document_missing_envelope_fields_reads_with_the_one_rule() {
        missing_envelope_fields_read_with_one_rule::<load::LoadDoc>(LOAD, kind::LOAD, |d| {
            &d.header
        });
    }

    #[test]
    fn a_ping_document_missing_envelope_fields_reads_with_the_one_rule() {
        missing_envelope_fields_read_with_one_rule::<ping::PingDoc>(PING, kind::PING, |d| {
            &d.header
        });
    }

    #[test]
    fn the_header_is_written_first_in_its_order() {
        let bytes = envelope_bytes(kind::MESH, serde_json::json!({"a": 1}));
        let text = String::from_utf8(bytes).unwrap();
        let keys: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("  \""))
            .map(|l| l.trim().split('"').nth(1).unwrap())
            .collect();
        assert_eq!(
            keys,
            ["format", "format_version", "kind", "environment", "a"]
        );
        assert!(
            text.contains(&format!("\"format_version\": {FORMAT_VERSION},\n")),
            "{text}"
        );
    }

    #[test]
    fn rtt_from_documents() {
        let doc =
            br#"{"format":"roundtrip","kind":"ping","summary":{"rtt":{"count":5,"p50_ns":41000}}}"#;
        assert_eq!(
            rtt_from_result("a.json", doc).unwrap(),
            Duration::from_nanos(41_000)
        );
        assert!(rtt_from_result("a.json", b"{").is_err());
        assert!(rtt_from_result("a.json", br#"{"format":"other"}"#).is_err());
        assert!(rtt_from_result("a.json", br#"{"format":"roundtrip","kind":"x"}"#).is_err());
    }
}
