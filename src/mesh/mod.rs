//! `roundtrip mesh`: the all-pairs source x target matrix of a fleet of agents, read from a Prometheus server
//! that scrapes them ([`prometheus`], through its HTTP API) or from the agents themselves ([`agents`], their
//! `/api/results`). Both give a [`report::heatmap::Matrix`](crate::report::heatmap::Matrix); this module never
//! prints. [`http`] is the small HTTP/1.1 client both use (`http://` only).
#![forbid(unsafe_code)]

pub mod agents;
pub mod http;
pub mod matrix;
pub mod prometheus;

use matrix::Matrix;
use std::net::IpAddr;
use thiserror::Error;

/// Which series make the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The `probe` label: `tcp`, `udp`, `connect`, `icmp` or `db`.
    pub probe: String,
    /// The `size` label in bytes; None: every size (Prometheus sums them, agents show the most probed).
    pub size: Option<u32>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            probe: "tcp".into(),
            size: None,
        }
    }
}

/// The probe kinds an agent exports (values of the `probe` label).
pub const PROBES: [&str; 5] = ["tcp", "udp", "connect", "icmp", "db"];

/// A matrix and what the reader should know about it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mesh {
    /// The matrix.
    pub matrix: Matrix,
    /// Remarks (windows that differ, sizes combined, ...), one line each.
    pub notes: Vec<String>,
    /// Sources that could not be read while others could (agents that did not answer): the matrix lacks
    /// their rows.
    pub failed: Vec<MeshError>,
}

/// Why no matrix (or not all of it) could be read. Every message names the URL.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MeshError {
    /// The URL cannot be used (https, bad port, ...).
    #[error("{0}")]
    BadUrl(String),
    /// Nothing answered: refused, timed out, name not resolved, or the answer was cut short.
    #[error("cannot reach {url}: {why}")]
    Unreachable {
        /// The URL.
        url: String,
        /// What happened.
        why: String,
    },
    /// Something answered, but not the expected API.
    #[error("{url} does not look like {what}: {why}")]
    NotService {
        /// The URL.
        url: String,
        /// `a Prometheus server` or `a roundtrip agent`.
        what: &'static str,
        /// What it answered.
        why: String,
    },
    /// Prometheus answered with an error status.
    #[error("{url}: Prometheus refused the query ({kind}): {message}")]
    Prometheus {
        /// The URL.
        url: String,
        /// Its `errorType`.
        kind: String,
        /// Its `error`.
        message: String,
    },
    /// The server answered, but has no roundtrip series matching the filter.
    #[error("{url}: {why}")]
    NoData {
        /// The URL.
        url: String,
        /// What is missing and what there is.
        why: String,
    },
}

/// Orders the matrix's names: sources in natural order (IP addresses numerically, then names), targets that
/// are also sources in the same order (so the diagonal is the diagonal), then the other targets.
pub fn order_names(matrix: &mut Matrix) {
    matrix.sources.sort_by_cached_key(|a| natural(a));
    matrix.sources.dedup();
    matrix.targets.sort_by_cached_key(|a| natural(a));
    matrix.targets.dedup();
    let mut targets: Vec<String> = matrix
        .sources
        .iter()
        .filter(|s| matrix.targets.contains(s))
        .cloned()
        .collect();
    targets.extend(
        matrix
            .targets
            .iter()
            .filter(|t| !matrix.sources.contains(t))
            .cloned(),
    );
    matrix.targets = targets;
}

/// Addresses first (by address and port), then names split into (text, number) runs.
type NaturalKey = (u8, Option<(IpAddr, u16)>, Vec<(String, u64)>);

/// Sort key: addresses (with or without a port) by number, then other names by text with digit runs
/// compared as numbers (`node2` before `node10`).
fn natural(name: &str) -> NaturalKey {
    let (host, port) = match name.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.starts_with('[') => (
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse().ok(),
        ),
        _ => (name, Some(0)),
    };
    if let (Ok(ip), Some(port)) = (host.parse::<IpAddr>(), port) {
        return (0, Some((ip, port)), Vec::new());
    }
    if let Ok(ip) = name.parse::<IpAddr>() {
        return (0, Some((ip, 0)), Vec::new());
    }
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut digits = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                parts.push((
                    std::mem::take(&mut text),
                    digits.parse().unwrap_or(u64::MAX),
                ));
                digits.clear();
            }
            text.push(c);
        }
    }
    parts.push((text, digits.parse().unwrap_or(0)));
    (1, None, parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_natural_order_with_an_aligned_diagonal() {
        let mut m = Matrix {
            sources: ["10.0.0.10", "10.0.0.9", "10.0.0.2"]
                .map(String::from)
                .to_vec(),
            targets: ["db1:5432", "10.0.0.9", "10.0.0.10", "10.0.0.2", "10.0.0.2"]
                .map(String::from)
                .to_vec(),
            ..Matrix::default()
        };
        order_names(&mut m);
        assert_eq!(m.sources, ["10.0.0.2", "10.0.0.9", "10.0.0.10"]);
        assert_eq!(m.targets, ["10.0.0.2", "10.0.0.9", "10.0.0.10", "db1:5432"]);
        let mut m = Matrix {
            sources: ["node10", "node2", "app", "[::1]:9", "::1"]
                .map(String::from)
                .to_vec(),
            targets: vec![],
            ..Matrix::default()
        };
        order_names(&mut m);
        assert_eq!(m.sources, ["::1", "[::1]:9", "app", "node2", "node10"]);
    }
}
