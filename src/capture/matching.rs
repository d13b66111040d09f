//! `capture match`: the same requests seen in a capture taken near the client and one taken near the server.
//!
//! Requests are paired by what survives address translation: ONC-RPC and DNS by XID / message ID, the others
//! by the TCP sequence number of the request's first byte; the operation must agree too. Addresses and ports
//! are not compared (NAT may rewrite them). The two clocks need not agree: latencies are intervals measured on
//! one clock each, and the offset between the clocks is estimated from the pairs (NTP's formula: the mean of
//! the request's and the response's apparent one-way delays, assuming a symmetric path), then used to reject
//! pairs whose timing cannot be the same request.
#![forbid(unsafe_code)]

use super::rpc::driver::ConnInfo;
use super::rpc::{Proto, Transaction};
use crate::stats::{LatencyHistogram, Summary};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Smallest timing tolerance when checking that two records are the same request.
pub const MIN_TOLERANCE: Duration = Duration::from_millis(2);

/// A request seen in one capture.
pub type Record = (ConnInfo, Transaction);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Id(Proto, u32, String),
    Seq(Proto, u32, String),
}

fn key(r: &Record) -> Option<Key> {
    let (c, t) = r;
    match (t.xid, t.request_seq) {
        (Some(x), _) => Some(Key::Id(c.proto, x, t.op.to_string())),
        (None, Some(s)) => Some(Key::Seq(c.proto, s, t.op.to_string())),
        _ => None,
    }
}

fn ns(d: Duration) -> i128 {
    d.as_nanos() as i128
}

/// Apparent offset of the server clock over the client clock for one pair (NTP's theta).
fn theta(c: &Transaction, s: &Transaction) -> i128 {
    ((ns(s.request_end_ts) - ns(c.request_end_ts))
        + (ns(s.response_end_ts) - ns(c.response_end_ts)))
        / 2
}

/// Why a request was not matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unmatched {
    /// Seen in the client capture only.
    NotInServerCapture,
    /// Seen in the server capture only.
    NotInClientCapture,
    /// The same key exists in the other capture, but at a time that cannot be the same request.
    InconsistentTiming,
}

impl Unmatched {
    /// Text for tables.
    pub fn text(self) -> &'static str {
        match self {
            Unmatched::NotInServerCapture => "only in the client capture",
            Unmatched::NotInClientCapture => "only in the server capture",
            Unmatched::InconsistentTiming => "same id, timing cannot be the same request",
        }
    }
}

/// Per-operation comparison.
#[derive(Debug, Clone, Serialize)]
pub struct OpMatch {
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Requests in the client capture.
    pub client_count: u64,
    /// Requests in the server capture.
    pub server_count: u64,
    /// Pairs found.
    pub matched: u64,
    /// Time to the response's last byte at the server capture, matched requests.
    pub server: Summary,
    /// Time to the response's last byte at the client capture, matched requests.
    pub client: Summary,
    /// Time to the response's first byte at the server capture, matched requests.
    pub server_first_byte: Summary,
    /// Time to the response's first byte at the client capture, matched requests.
    pub client_first_byte: Summary,
    /// Mean of (client latency - server latency) to the last byte over the pairs: the network plus the stacks
    /// between the two capture points, and the transfer of the response over the slower part of the path.
    pub diff_mean_ns: f64,
    /// Median of the last-byte differences.
    pub diff_p50_ns: i64,
    /// Mean of (client - server) times to the first byte: the round trip between the two capture points.
    pub first_byte_diff_mean_ns: f64,
}

/// Count of unmatched requests for one reason.
#[derive(Debug, Clone, Serialize)]
pub struct UnmatchedRow {
    /// Reason.
    pub reason: Unmatched,
    /// Explanation.
    pub text: &'static str,
    /// How many.
    pub count: u64,
}

/// Everything `capture match` reports.
#[derive(Debug, Clone, Serialize)]
pub struct MatchReport {
    /// Requests in the client capture.
    pub client_requests: u64,
    /// Requests in the server capture.
    pub server_requests: u64,
    /// Pairs found.
    pub matched: u64,
    /// Per operation, most matched first.
    pub ops: Vec<OpMatch>,
    /// Unmatched requests by reason.
    pub unmatched: Vec<UnmatchedRow>,
    /// Estimated offset of the server capture's clock over the client's (server - client), nanoseconds.
    pub clock_offset_ns: Option<i64>,
    /// True when the two captures share no requests: they are not the same traffic.
    pub unrelated: bool,
    /// One-line conclusion.
    pub verdict: String,
}

fn median_i128(v: &mut [i128]) -> Option<i128> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

/// Pairs the requests of a client-side and a server-side capture.
pub fn match_captures(client: &[Record], server: &[Record]) -> MatchReport {
    let mut by_key: HashMap<Key, Vec<usize>> = HashMap::new();
    for (i, r) in server.iter().enumerate() {
        if let Some(k) = key(r) {
            by_key.entry(k).or_default().push(i);
        }
    }
    let client_keys: Vec<Option<Key>> = client.iter().map(key).collect();
    let mut client_key_count: HashMap<&Key, u32> = HashMap::new();
    for k in client_keys.iter().flatten() {
        *client_key_count.entry(k).or_insert(0) += 1;
    }
    // Pass 1: unique keys give the clock offset.
    let mut thetas: Vec<i128> = Vec::new();
    for (i, k) in client_keys.iter().enumerate() {
        let Some(k) = k else { continue };
        if let Some(c) = by_key.get(k)
            && c.len() == 1
            && client_key_count.get(k) == Some(&1)
        {
            thetas.push(theta(&client[i].1, &server[c[0]].1));
        }
    }
    if thetas.is_empty() {
        for (i, k) in client_keys.iter().enumerate() {
            if let Some(c) = k.as_ref().and_then(|k| by_key.get(k)) {
                thetas.extend(c.iter().map(|&j| theta(&client[i].1, &server[j].1)));
            }
        }
    }
    let offset = median_i128(&mut thetas);
    // Pass 2: pair, checking the timing against the offset.
    let mut used = vec![false; server.len()];
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let mut reasons: BTreeMap<Unmatched, u64> = BTreeMap::new();
    for (i, k) in client_keys.iter().enumerate() {
        let cands = k.as_ref().and_then(|k| by_key.get(k));
        let Some(cands) = cands else {
            *reasons.entry(Unmatched::NotInServerCapture).or_insert(0) += 1;
            continue;
        };
        let Some(off) = offset else {
            *reasons.entry(Unmatched::InconsistentTiming).or_insert(0) += 1;
            continue;
        };
        let c = &client[i].1;
        let best = cands
            .iter()
            .filter(|&&j| !used[j])
            .min_by_key(|&&j| (theta(c, &server[j].1) - off).abs());
        let ok = best.filter(|&&j| {
            let s = &server[j].1;
            let tol = ns(MIN_TOLERANCE).max(ns(c.latency()) / 2);
            (theta(c, s) - off).abs() <= tol && ns(s.latency()) <= ns(c.latency()) + tol
        });
        match ok {
            Some(&j) => {
                used[j] = true;
                pairs.push((i, j));
            }
            None => *reasons.entry(Unmatched::InconsistentTiming).or_insert(0) += 1,
        }
    }
    let server_only = used.iter().filter(|u| !**u).count() as u64;
    if server_only > 0 {
        reasons.insert(Unmatched::NotInClientCapture, server_only);
    }
    // Per operation.
    let mut accs: BTreeMap<(Proto, String), Acc> = BTreeMap::new();
    for (ci, t) in client {
        entry(&mut accs, ci.proto, &t.op).cn += 1;
    }
    for (si, t) in server {
        entry(&mut accs, si.proto, &t.op).sn += 1;
    }
    let mut thetas_final: Vec<i128> = Vec::with_capacity(pairs.len());
    for &(i, j) in &pairs {
        let (ci, c) = &client[i];
        let s = &server[j].1;
        let a = entry(&mut accs, ci.proto, &c.op);
        a.c.record(c.last_byte());
        a.s.record(s.last_byte());
        a.cf.record(c.first_byte());
        a.sf.record(s.first_byte());
        a.diffs.push(ns(c.last_byte()) - ns(s.last_byte()));
        a.first_diff_sum += (ns(c.first_byte()) - ns(s.first_byte())) as f64;
        thetas_final.push(theta(c, s));
    }
    let offset = median_i128(&mut thetas_final).or(offset);
    let mut ops: Vec<OpMatch> = accs
        .into_values()
        .map(|mut a| {
            let n = a.diffs.len();
            let (mean, first_mean) = if n > 0 {
                (
                    a.diffs.iter().map(|&d| d as f64).sum::<f64>() / n as f64,
                    a.first_diff_sum / n as f64,
                )
            } else {
                (0.0, 0.0)
            };
            OpMatch {
                proto: a.proto,
                op: a.op,
                client_count: a.cn,
                server_count: a.sn,
                matched: n as u64,
                server: a.s.summary(),
                client: a.c.summary(),
                server_first_byte: a.sf.summary(),
                client_first_byte: a.cf.summary(),
                diff_mean_ns: mean,
                diff_p50_ns: median_i128(&mut a.diffs).unwrap_or(0) as i64,
                first_byte_diff_mean_ns: first_mean,
            }
        })
        .collect();
    ops.sort_by(|a, b| {
        b.matched
            .cmp(&a.matched)
            .then(b.client_count.cmp(&a.client_count))
    });
    let matched = pairs.len() as u64;
    let smaller = (client.len().min(server.len())) as u64;
    // Related traffic shares most requests; a handful of coincidences among thousands is not a match.
    let unrelated = matched == 0 || (matched < 3 && smaller > 20) || (matched * 100 < smaller);
    let verdict = verdict(&ops, matched, unrelated, client.len(), server.len(), offset);
    MatchReport {
        client_requests: client.len() as u64,
        server_requests: server.len() as u64,
        matched: if unrelated { 0 } else { matched },
        ops: if unrelated {
            ops.into_iter()
                .map(|mut o| {
                    o.matched = 0;
                    o.server = Summary::default();
                    o.client = Summary::default();
                    o.server_first_byte = Summary::default();
                    o.client_first_byte = Summary::default();
                    o.first_byte_diff_mean_ns = 0.0;
                    o.diff_mean_ns = 0.0;
                    o.diff_p50_ns = 0;
                    o
                })
                .collect()
        } else {
            ops
        },
        unmatched: reasons
            .into_iter()
            .map(|(reason, count)| UnmatchedRow {
                reason,
                text: reason.text(),
                count,
            })
            .collect(),
        clock_offset_ns: if unrelated {
            None
        } else {
            offset.map(|o| o as i64)
        },
        unrelated,
        verdict,
    }
}

struct Acc {
    proto: Proto,
    op: String,
    cn: u64,
    sn: u64,
    s: LatencyHistogram,
    c: LatencyHistogram,
    sf: LatencyHistogram,
    cf: LatencyHistogram,
    diffs: Vec<i128>,
    first_diff_sum: f64,
}

fn entry<'a>(accs: &'a mut BTreeMap<(Proto, String), Acc>, p: Proto, op: &str) -> &'a mut Acc {
    accs.entry((p, op.to_string())).or_insert_with(|| Acc {
        proto: p,
        op: op.to_string(),
        cn: 0,
        sn: 0,
        s: LatencyHistogram::new(),
        c: LatencyHistogram::new(),
        sf: LatencyHistogram::new(),
        cf: LatencyHistogram::new(),
        diffs: Vec::new(),
        first_diff_sum: 0.0,
    })
}

fn fmt_ns(v: f64) -> String {
    crate::units::fmt_nanos(v)
}

fn verdict(
    ops: &[OpMatch],
    matched: u64,
    unrelated: bool,
    nc: usize,
    ns_: usize,
    offset: Option<i128>,
) -> String {
    if nc == 0 || ns_ == 0 {
        return format!(
            "nothing to compare: {nc} requests in the client capture, {ns_} in the server capture"
        );
    }
    if unrelated {
        return format!(
            "the two captures do not show the same traffic: {matched} of {nc} client requests have a counterpart \
             (same XID or TCP sequence number at a consistent time) among {ns_} server requests"
        );
    }
    let Some(top) = ops.iter().find(|o| o.matched > 0) else {
        return "no request matched".into();
    };
    let mut s = format!(
        "server adds {} per {} (mean, {} matched); the path between the captures adds {}",
        fmt_ns(top.server.mean_ns),
        top.op,
        top.matched,
        fmt_ns(top.diff_mean_ns.max(0.0)),
    );
    if top.diff_mean_ns < 0.0 {
        s.push_str(" (the client capture saw shorter times: are the files swapped?)");
    }
    if let Some(o) = offset {
        let sign = if o < 0 { "behind" } else { "ahead of" };
        s.push_str(&format!(
            "; server clock {} {} the client's",
            fmt_ns(o.unsigned_abs() as f64),
            sign
        ));
    }
    s
}
