//! Chart builders chosen by what a result holds, and the one place that decides which `kind` of result can be
//! drawn.
//!
//! # Adding a kind
//!
//! Each command's `--json` document has a `kind`; each kind's builder is one file here (`ping.rs`,
//! `connect.rs`, `rpc.rs`, ...), and the drawing primitives they share are in `draw.rs`. To draw a new kind:
//! 1. write, in a new file, a `fn my_kind(runs: &[Run], opts: &Options) -> Result<Section, LoadError>` that reads its own typed
//!    input with [`Loaded::typed`] (a `#[derive(Deserialize)]` struct of just the fields it draws, so a missing
//!    field becomes a one-line error naming it) and returns the section's tables and figures, built with the
//!    shared builders of `draw.rs` ([`latency_over_time`], [`distribution`], [`percentile_curve`], [`grouped_bars`])
//!    or directly with [`crate::report::svg`];
//! 2. add its `mod` line and one line to [`KINDS`].
//!
//! The kind files use `draw.rs` and nothing else here, so nothing imports back into this file.
//!
//! Several results of the same kind are given to one call, so every builder overlays them for comparison.
#![forbid(unsafe_code)]

pub mod compare;
pub mod connect;
pub mod db;
mod draw;
pub mod flows;
pub mod icmp;
pub mod load;
pub mod matching;
pub mod ping;
pub mod rpc;
pub mod stats;
pub mod sweep;
pub mod tcp;
pub mod throughput;
pub mod timeline;

pub use draw::{
    Options, Run, TimeRow, TimeSource, distribution, grouped_bars, grouped_hbars,
    latency_over_time, percentile_curve, percentile_points,
};

use crate::doc::kind;
use crate::report::html::{Page, Section};
use crate::report::load::{LoadError, Loaded};

/// Builds the section for every result of one kind.
pub type Builder = fn(&[Run], &Options) -> Result<Section, LoadError>;

/// A kind of result that can be drawn.
#[derive(Debug, Clone, Copy)]
pub struct KindReport {
    /// The document's `kind`.
    pub kind: &'static str,
    /// Its builder.
    pub build: Builder,
}

/// Every kind that can be drawn: the extension point (see the module documentation).
pub const KINDS: &[KindReport] = &[
    KindReport {
        kind: kind::PING,
        build: ping::ping,
    },
    KindReport {
        kind: kind::SWEEP,
        build: sweep::sweep,
    },
    KindReport {
        kind: kind::CONNECT,
        build: connect::connect,
    },
    KindReport {
        kind: kind::ICMP,
        build: icmp::icmp,
    },
    KindReport {
        kind: kind::LOAD,
        build: load::load,
    },
    KindReport {
        kind: kind::THROUGHPUT,
        build: throughput::throughput,
    },
    KindReport {
        kind: kind::COMPARE,
        build: compare::compare,
    },
    KindReport {
        kind: kind::DB,
        build: db::db,
    },
    KindReport {
        kind: kind::CAPTURE_STATS,
        build: stats::capture_stats,
    },
    KindReport {
        kind: kind::CAPTURE_FLOWS,
        build: flows::capture_flows,
    },
    KindReport {
        kind: kind::CAPTURE_TIMELINE,
        build: timeline::capture_timeline,
    },
    KindReport {
        kind: kind::CAPTURE_RPC,
        build: rpc::capture_rpc,
    },
    KindReport {
        kind: kind::CAPTURE_MATCH,
        build: matching::capture_match,
    },
    KindReport {
        kind: kind::TCP,
        build: tcp::tcp,
    },
];

/// Fails with a clear message when no builder draws this document's kind.
pub fn check_kind(doc: &Loaded) -> Result<(), LoadError> {
    if KINDS.iter().any(|k| k.kind == doc.kind) {
        Ok(())
    } else {
        Err(LoadError::UnknownKind {
            path: doc.path.clone(),
            kind: doc.kind.clone(),
            known: KINDS.iter().map(|k| k.kind).collect::<Vec<_>>().join(", "),
        })
    }
}

/// Builds the sections for all runs: one per kind, in the order the kinds first appear.
pub fn build(runs: &[Run], opts: &Options) -> Result<Vec<Section>, LoadError> {
    let mut out = Vec::new();
    let mut kinds: Vec<&str> = Vec::new();
    for r in runs {
        check_kind(&r.doc)?;
        if !kinds.contains(&r.doc.kind.as_str()) {
            kinds.push(&r.doc.kind);
        }
    }
    for kind in kinds {
        let group: Vec<Run> = runs
            .iter()
            .filter(|r| r.doc.kind == kind)
            .cloned()
            .collect();
        let k = KINDS.iter().find(|k| k.kind == kind).expect("checked");
        out.push((k.build)(&group, opts)?);
    }
    Ok(out)
}

/// The whole page for these runs: environment and settings of each, then one section per kind.
pub fn page(title: &str, runs: &[Run], opts: &Options) -> Result<Page, LoadError> {
    let sections = build(runs, opts)?;
    Ok(Page {
        title: title.to_string(),
        generated_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        runs: runs.iter().map(Run::info).collect(),
        sections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::PercentilePoint;

    #[test]
    fn unknown_kinds_are_named() {
        let doc = crate::report::load::parse(
            "s.json",
            br#"{"format":"roundtrip","format_version":1,"kind":"model-tps"}"#,
        )
        .unwrap();
        let e = check_kind(&doc).unwrap_err().to_string();
        assert!(
            e.contains("\"model-tps\" result, which has no report yet (reports exist for: ping, sweep, connect,"),
            "{e}"
        );
    }

    #[test]
    fn percentile_points_put_max_last() {
        let c = [
            PercentilePoint {
                percentile: 0.0,
                value_ns: 10,
            },
            PercentilePoint {
                percentile: 50.0,
                value_ns: 20,
            },
            PercentilePoint {
                percentile: 99.0,
                value_ns: 90,
            },
            PercentilePoint {
                percentile: 100.0,
                value_ns: 500,
            },
        ];
        let p = percentile_points(&c);
        assert_eq!(p[0], (1.0, 10.0));
        assert_eq!(p[1], (2.0, 20.0));
        assert!((p[2].0 - 100.0).abs() < 1e-9);
        assert!((p[3].0 - 200.0).abs() < 1e-9 && p[3].1 == 500.0);
    }
}
