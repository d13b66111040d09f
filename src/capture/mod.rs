//! Capture analysis: read tcpdump captures fast and show what TCP did.
//!
//! - [`read`]: streaming pcap / pcapng / gzip reader that hands out borrowed packets.
//! - [`decode`](mod@decode): link layer, IPv4/IPv6, TCP (with options), UDP.
//! - [`flows`]: TCP connection tracking (RTT, in flight, window, retransmissions, ...) and the in-order
//!   stream hook ([`flows::StreamSink`]).
//! - [`stats`]: tcpstat's per-interval view.
//! - [`seqgraph`]: the TCP time-sequence graph of one connection (`capture timeline --report`).
//! - [`rpc`]: per-request latency of application protocols (`capture rpc`); [`matching`]: the same requests
//!   in a client-side and a server-side capture (`capture match`).
//!
//! The drivers (module `runners`, re-exported here: [`stats`](fn@run_stats), [`run_flows`], [`run_timeline`])
//! read a file once, apply a [`Filter`] and return typed results; a file that cannot be read to its end still
//! gives its results, with the reason in `warning`. [`Filter`] lives in `filter`, [`Packets`] in `packets`.
//!
//! For other analyses (issue 7), read packets with [`Packets`]:
//! ```no_run
//! # use roundtrip::capture::{Packets, Filter};
//! let mut pk = Packets::open(std::path::Path::new("x.pcap")).unwrap();
//! while let Some((pkt, decoded)) = pk.next_decoded() {
//!     let _ = (pkt.ts_ns, decoded.map(|d| d.payload_len));
//! }
//! ```

pub mod bpf;
pub mod decode;
pub mod flows;
pub mod keep;
pub mod live;
pub mod matching;
pub mod read;
pub mod rpc;
pub mod seqgraph;
pub mod stats;
pub mod write;

mod filter;
mod packets;
mod runners;

pub use filter::{Filter, FilterError};
pub use packets::{Next, Packets, Step};
pub use runners::flows::{
    FLOW_SERIES_BUCKETS, FlowSeries, FlowsResult, LIVE_MAX_FINISHED, SeriesBucket, flow_series,
    run_flows, run_flows_fanout, run_flows_on,
};
pub use runners::stats::{LIVE_GRACE_NS, StatsResult, run_stats, run_stats_fanout, run_stats_on};
pub use runners::timeline::{
    DataFrom, OnRow, TimelineResult, TimelineRow, run_timeline, run_timeline_on,
};

use read::OpenError;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use thiserror::Error;

/// What reading the file found, besides the analysis.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CaptureInfo {
    /// The file as given.
    pub file: String,
    /// "pcap", "pcap-ns" or "pcapng".
    pub format: Cow<'static, str>,
    /// True when gzip-compressed.
    pub gzip: bool,
    /// Uncompressed bytes read.
    pub file_bytes: u64,
    /// Packets read.
    pub packets_read: u64,
    /// Packets that passed the filter.
    pub packets_matched: u64,
    /// Packets that could not be decoded down to IP (ARP, other link types, headers cut short).
    pub packets_not_ip: u64,
    /// The first undecodable packet's reason, for the note.
    pub not_ip_example: Option<String>,
    /// Link types seen (names).
    pub link_types: Vec<String>,
    /// Why reading stopped before the end of the file, with the byte offset.
    pub warning: Option<String>,
    /// Byte offset of the unreadable record, when reading stopped early.
    pub warning_offset: Option<u64>,
    /// The `--filter` expression, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Packets the `--filter` program rejected (in `packets_read`, not in `packets_matched`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets_filtered_out: Option<u64>,
    /// A live capture: the interface, snap length, kernel drops and why it stopped (absent for files, which
    /// `file` .. `warning` describe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<live::LiveInfo>,
}

impl CaptureInfo {
    /// True for a live capture.
    pub fn is_live(&self) -> bool {
        self.source.is_some()
    }

    /// Where the packets came from: a file (its name, the bytes read, why reading stopped early) or an
    /// interface (its name, snap length, kernel drops, why the capture stopped). The document keeps the file
    /// fields at the top of `capture` and the interface under `capture.source`, as format version 1 has them.
    pub fn origin(&self) -> Origin<'_> {
        match &self.source {
            Some(live) => Origin::Interface(live),
            None => Origin::File {
                file: &self.file,
                bytes: self.file_bytes,
                warning: self.warning.as_deref(),
            },
        }
    }
}

/// The source part of a capture document, as one type: a file or an interface ([`CaptureInfo::origin`]).
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// A pcap or pcapng file.
    File {
        /// The file as given.
        file: &'a str,
        /// Uncompressed bytes read.
        bytes: u64,
        /// Why reading stopped before the end of the file.
        warning: Option<&'a str>,
    },
    /// A live capture on an interface: name, snap length, kernel drops and the stop reason.
    Interface(&'a live::LiveInfo),
}

/// An error that prevents any analysis.
#[derive(Debug, Error)]
pub enum CaptureError {
    /// The file could not be opened or is not a capture.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The filter expression cannot be compiled for the file's link type (`ether host` on raw IP, `vlan` on
    /// a cooked capture), as tcpdump refuses it: found before any packet is read.
    #[error("--filter '{expr}' on {link} packets")]
    Filter {
        /// The expression.
        expr: String,
        /// The file's link type.
        link: crate::capture::read::LinkType,
        /// Why.
        #[source]
        source: crate::capture::bpf::CompileError,
    },
    /// `--report-interval` would make more rows than [`MAX_STATS_ROWS`] over the capture's span.
    #[error(
        "--report-interval {} makes more than {max} rows over this capture (it spans {}); give --report-interval {} or more",
        fmt_span(*interval_ns), fmt_span(*span_ns), fmt_span(*smallest_ns),
        max = MAX_STATS_ROWS
    )]
    TooManyRows {
        /// The interval asked for, ns.
        interval_ns: u64,
        /// The capture's span (first to last matching packet), ns.
        span_ns: u64,
        /// The smallest interval that fits the span read, ns.
        smallest_ns: u64,
    },
}

/// Most rows `capture stats` makes (empty intervals included, each direction counted): beyond this a
/// table is no longer readable and its memory grows with the span divided by the interval.
pub const MAX_STATS_ROWS: u64 = 100_000;

/// A duration for a message: the largest unit that keeps it at or above 1, rounded up to 3 significant
/// digits.
fn fmt_span(ns: u64) -> String {
    let (div, unit) = match ns {
        0..1_000 => (1.0, "ns"),
        1_000..1_000_000 => (1e3, "us"),
        1_000_000..1_000_000_000 => (1e6, "ms"),
        _ => (1e9, "s"),
    };
    let v = ns as f64 / div;
    let scale = 10f64.powi(2 - v.log10().floor().max(0.0) as i32);
    format!("{}{unit}", (v * scale).ceil() / scale)
}

/// One [`CaptureInfo`] of a fanout group's captures: counts add, the kernel counters of every ring add.
pub fn merge_infos(infos: Vec<CaptureInfo>) -> CaptureInfo {
    let sources: Vec<live::LiveInfo> = infos.iter().filter_map(|i| i.source.clone()).collect();
    let mut it = infos.into_iter();
    let mut m = it.next().unwrap_or_default();
    for i in it {
        m.file_bytes += i.file_bytes;
        m.packets_read += i.packets_read;
        m.packets_matched += i.packets_matched;
        m.packets_not_ip += i.packets_not_ip;
        if m.not_ip_example.is_none() {
            m.not_ip_example = i.not_ip_example;
        }
        for l in i.link_types {
            if !m.link_types.contains(&l) {
                m.link_types.push(l);
            }
        }
        if m.warning.is_none() {
            m.warning = i.warning;
        }
    }
    m.source = live::LiveCapture::merge_info(&sources);
    m
}

#[cfg(test)]
mod tests;
