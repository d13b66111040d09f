//! `capture match`: the same requests seen in a capture taken near the client and one taken near the server.
//!
//! Requests are paired by what survives address translation: ONC-RPC and DNS by XID / message ID, the others
//! by the TCP sequence number of the request's first byte; the operation must agree too. Addresses and ports
//! are not compared (NAT may rewrite them). A TCP-terminating box between the capture points (a proxy, a load
//! balancer, a connection pooler) opens its own connections, so sequence numbers differ: what is left is then
//! paired by content, the hash of the request's leading bytes ([`Transaction::content`]: SQL text, Redis
//! command and key, sockperf sequence number, XID), within the connection pair that shares the most contents
//! (the n-th occurrence of a content with the n-th), and last by order (same operation at the same place in a
//! connection pair). The two clocks need not agree: latencies are intervals measured on one clock each, and the
//! offset between the clocks is estimated from the pairs (NTP's formula: the mean of the request's and the
//! response's apparent one-way delays, assuming a symmetric path), then used to reject pairs whose timing
//! cannot be the same request. Each pair says which method found it ([`Method`]).
#![forbid(unsafe_code)]

mod content;

pub use content::MAX_CANDIDATES;
use content::by_content;

use super::rpc::driver::ConnInfo;
use super::rpc::{Proto, Transaction};
use crate::stats::{LatencyHistogram, Summary};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
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
        // SMB2 message ids count from 0 in every connection: they do not tell connections apart.
        (Some(x), _) if c.proto != Proto::Smb2 => Some(Key::Id(c.proto, x, t.op.to_string())),
        (_, Some(s)) if c.proto == Proto::Smb2 => Some(Key::Seq(c.proto, s, t.op.to_string())),
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

/// How a pair was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Same ONC-RPC XID or DNS message ID.
    Xid,
    /// Same TCP sequence number of the request's first byte (the same TCP connection in both captures).
    TcpSeq,
    /// Same leading request bytes in a connection pair (n-th occurrence with n-th).
    Content,
    /// Same operation at the same place in the order of a connection pair.
    Order,
}

impl Method {
    /// Text for tables.
    pub fn text(self) -> &'static str {
        match self {
            Method::Xid => "xid",
            Method::TcpSeq => "tcp seq",
            Method::Content => "content",
            Method::Order => "order",
        }
    }
}

/// Pairs found by each method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PairedBy {
    /// By ONC-RPC XID / DNS ID.
    pub xid: u64,
    /// By TCP sequence number.
    pub tcp_seq: u64,
    /// By the hash of the request's leading bytes.
    pub content: u64,
    /// By order within a connection pair.
    pub order: u64,
}

/// One pair: the same request in both captures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairRow {
    /// How it was paired.
    pub method: Method,
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Connection number in the client capture.
    pub client_conn: u64,
    /// Connection number in the server capture.
    pub server_conn: u64,
    /// Time of the request's first byte in the client capture, Unix seconds.
    pub client_request_unix_s: f64,
    /// Time of the request's first byte in the server capture, Unix seconds (the server capture's clock).
    pub server_request_unix_s: f64,
    /// Time to the response's first byte at the client capture, nanoseconds.
    pub client_first_byte_ns: u64,
    /// Time to the response's last byte at the client capture, nanoseconds.
    pub client_last_byte_ns: u64,
    /// Time to the response's first byte at the server capture, nanoseconds.
    pub server_first_byte_ns: u64,
    /// Time to the response's last byte at the server capture, nanoseconds.
    pub server_last_byte_ns: u64,
}

/// Why a request was not matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpMatch {
    /// Protocol.
    pub proto: Proto,
    /// Operation.
    pub op: String,
    /// Requests in the client capture.
    #[serde(default)]
    pub client_count: u64,
    /// Requests in the server capture.
    #[serde(default)]
    pub server_count: u64,
    /// Pairs found.
    pub matched: u64,
    /// Time to the response's last byte at the server capture, matched requests.
    pub server: Summary,
    /// Time to the response's last byte at the client capture, matched requests.
    pub client: Summary,
    /// Time to the response's first byte at the server capture, matched requests.
    #[serde(default)]
    pub server_first_byte: Summary,
    /// Time to the response's first byte at the client capture, matched requests.
    #[serde(default)]
    pub client_first_byte: Summary,
    /// Mean of (client latency - server latency) to the last byte over the pairs: the network plus the stacks
    /// between the two capture points, and the transfer of the response over the slower part of the path.
    #[serde(default)]
    pub diff_mean_ns: f64,
    /// Median of the last-byte differences.
    #[serde(default)]
    pub diff_p50_ns: i64,
    /// Mean of (client - server) times to the first byte: the round trip between the two capture points.
    #[serde(default)]
    pub first_byte_diff_mean_ns: f64,
}

/// Count of unmatched requests for one reason.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnmatchedRow {
    /// Reason.
    pub reason: Unmatched,
    /// Explanation.
    pub text: Cow<'static, str>,
    /// How many.
    pub count: u64,
}

/// Everything `capture match` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatchReport {
    /// Requests in the client capture.
    #[serde(default)]
    pub client_requests: u64,
    /// Requests in the server capture.
    #[serde(default)]
    pub server_requests: u64,
    /// Pairs found.
    #[serde(default)]
    pub matched: u64,
    /// Pairs found by each method.
    #[serde(default)]
    pub paired_by: PairedBy,
    /// Every pair, in the client capture's order, with the method that found it.
    #[serde(default)]
    pub pairs: Vec<PairRow>,
    /// Per operation, most matched first.
    pub ops: Vec<OpMatch>,
    /// Unmatched requests by reason.
    #[serde(default)]
    pub unmatched: Vec<UnmatchedRow>,
    /// Estimated offset of the server capture's clock over the client's (server - client), nanoseconds.
    pub clock_offset_ns: Option<i64>,
    /// True when the two captures share no requests: they are not the same traffic.
    #[serde(default)]
    pub unrelated: bool,
}

/// The conclusion of a match, as facts: which case it is and the figures it rests on. The engine says no
/// words; `report::match_verdict` makes the one-line sentence from this.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// One capture (or both) holds no request.
    NothingToCompare {
        /// Requests in the client capture.
        client_requests: u64,
        /// Requests in the server capture.
        server_requests: u64,
    },
    /// The two captures share no requests (or a handful of coincidences): not the same traffic.
    Unrelated {
        /// Client requests that found a counterpart (XID, TCP sequence number or content at a consistent time).
        matched: u64,
        /// Requests in the client capture.
        client_requests: u64,
        /// Requests in the server capture.
        server_requests: u64,
    },
    /// Related captures, yet no operation holds a pair.
    NoneMatched {
        /// Set when pairs were found by content or order.
        through_box: Option<ThroughBox>,
    },
    /// The figures of the operation with the most pairs.
    Matched {
        /// The operation.
        op: String,
        /// Its pairs.
        op_matched: u64,
        /// Mean time to the response's last byte at the server capture, nanoseconds.
        server_mean_ns: f64,
        /// What the path between the capture points shows for it.
        path: PathTime,
        /// Offset of the server capture's clock over the client's (server - client), nanoseconds.
        clock_offset_ns: Option<i128>,
        /// Set when pairs were found by content or order.
        through_box: Option<ThroughBox>,
    },
}

/// The mean of (client - server) latency to the last byte over the top operation's pairs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PathTime {
    /// Zero or more: the time the path between the capture points adds, nanoseconds.
    Adds {
        /// Nanoseconds added.
        ns: f64,
    },
    /// Negative: the client capture saw this much less per request than the server capture (a path cannot
    /// take time away: the files may be swapped).
    ClientSawLess {
        /// Nanoseconds less (positive).
        ns: f64,
    },
}

/// Pairs found by content or order rather than by TCP sequence number or XID: a TCP-terminating box (proxy,
/// load balancer, pooler) sits between the capture points, and its time is in the path's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThroughBox {
    /// Pairs found by content or by order.
    pub by_content_or_order: u64,
    /// All pairs.
    pub matched: u64,
}

fn median_i128(v: &mut [i128]) -> Option<i128> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

/// Pairs the requests of a client-side and a server-side capture: the report and the verdict's facts.
pub fn match_captures(client: &[Record], server: &[Record]) -> (MatchReport, Verdict) {
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
    // Pass 2: pair by id, checking the timing against the offset.
    let mut used = vec![false; server.len()];
    let mut cused = vec![false; client.len()];
    let mut had_id = vec![false; client.len()];
    let mut pairs: Vec<(usize, usize, Method)> = Vec::new();
    for (i, k) in client_keys.iter().enumerate() {
        let Some(cands) = k.as_ref().and_then(|k| by_key.get(k)) else {
            continue;
        };
        had_id[i] = true;
        let Some(off) = offset else { continue };
        let c = &client[i].1;
        let best = cands
            .iter()
            .filter(|&&j| !used[j])
            .min_by_key(|&&j| (theta(c, &server[j].1) - off).abs());
        if let Some(&j) = best.filter(|&&j| consistent(c, &server[j].1, off)) {
            used[j] = true;
            cused[i] = true;
            let m = match k {
                Some(Key::Id(..)) => Method::Xid,
                _ => Method::TcpSeq,
            };
            pairs.push((i, j, m));
        }
    }
    // Passes 3 and 4: through a TCP-terminating box, by content then by order within connection pairs.
    let offset = by_content(client, server, &mut cused, &mut used, offset, &mut pairs);
    let mut reasons: BTreeMap<Unmatched, u64> = BTreeMap::new();
    for i in 0..client.len() {
        if !cused[i] {
            let r = if had_id[i] {
                Unmatched::InconsistentTiming
            } else {
                Unmatched::NotInServerCapture
            };
            *reasons.entry(r).or_insert(0) += 1;
        }
    }
    let server_only = used.iter().filter(|u| !**u).count() as u64;
    if server_only > 0 {
        reasons.insert(Unmatched::NotInClientCapture, server_only);
    }
    pairs.sort_by_key(|p| p.0);
    // Per operation.
    let mut accs: BTreeMap<(Proto, String), Acc> = BTreeMap::new();
    for (ci, t) in client {
        entry(&mut accs, ci.proto, &t.op).cn += 1;
    }
    for (si, t) in server {
        entry(&mut accs, si.proto, &t.op).sn += 1;
    }
    let mut thetas_final: Vec<i128> = Vec::with_capacity(pairs.len());
    let mut paired_by = PairedBy::default();
    let mut rows = Vec::with_capacity(pairs.len());
    for &(i, j, m) in &pairs {
        let (ci, c) = &client[i];
        let (si, s) = &server[j];
        *match m {
            Method::Xid => &mut paired_by.xid,
            Method::TcpSeq => &mut paired_by.tcp_seq,
            Method::Content => &mut paired_by.content,
            Method::Order => &mut paired_by.order,
        } += 1;
        let u = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        rows.push(PairRow {
            method: m,
            proto: ci.proto,
            op: c.op.to_string(),
            client_conn: ci.id,
            server_conn: si.id,
            client_request_unix_s: c.request_ts.as_secs_f64(),
            server_request_unix_s: s.request_ts.as_secs_f64(),
            client_first_byte_ns: u(c.first_byte()),
            client_last_byte_ns: u(c.last_byte()),
            server_first_byte_ns: u(s.first_byte()),
            server_last_byte_ns: u(s.last_byte()),
        });
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
    let through_box =
        (!unrelated && paired_by.content + paired_by.order > 0).then_some(ThroughBox {
            by_content_or_order: paired_by.content + paired_by.order,
            matched,
        });
    let verdict = verdict(
        &ops,
        matched,
        unrelated,
        client.len(),
        server.len(),
        offset,
        through_box,
    );
    let report = MatchReport {
        client_requests: client.len() as u64,
        server_requests: server.len() as u64,
        matched: if unrelated { 0 } else { matched },
        paired_by: if unrelated {
            PairedBy::default()
        } else {
            paired_by
        },
        pairs: if unrelated { Vec::new() } else { rows },
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
                text: Cow::Borrowed(reason.text()),
                count,
            })
            .collect(),
        clock_offset_ns: if unrelated {
            None
        } else {
            offset.map(|o| o as i64)
        },
        unrelated,
    };
    (report, verdict)
}

/// True when `s` can be the same request as `c`, the server clock being `off` ahead of the client's.
fn consistent(c: &Transaction, s: &Transaction, off: i128) -> bool {
    let tol = ns(MIN_TOLERANCE).max(ns(c.latency()) / 2);
    (theta(c, s) - off).abs() <= tol && ns(s.latency()) <= ns(c.latency()) + tol
}

/// True when `s`, on the client's clock (the server clock being `off` ahead), lies inside `c`: a box between
/// the capture points receives the whole request after the client sent it and answers before the client has
/// the answer. Unlike [`consistent`], this allows the box to delay one direction more than the other (a stall),
/// which the content and order passes can afford: they only compare requests of one connection pair, in order.
fn inside(c: &Transaction, s: &Transaction, off: i128) -> bool {
    let tol = ns(MIN_TOLERANCE);
    ns(s.request_end_ts) - off >= ns(c.request_end_ts) - tol
        && ns(s.response_end_ts) - off <= ns(c.response_end_ts) + tol
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

fn verdict(
    ops: &[OpMatch],
    matched: u64,
    unrelated: bool,
    nc: usize,
    ns_: usize,
    offset: Option<i128>,
    through_box: Option<ThroughBox>,
) -> Verdict {
    if nc == 0 || ns_ == 0 {
        return Verdict::NothingToCompare {
            client_requests: nc as u64,
            server_requests: ns_ as u64,
        };
    }
    if unrelated {
        return Verdict::Unrelated {
            matched,
            client_requests: nc as u64,
            server_requests: ns_ as u64,
        };
    }
    let Some(top) = ops.iter().find(|o| o.matched > 0) else {
        return Verdict::NoneMatched { through_box };
    };
    Verdict::Matched {
        op: top.op.clone(),
        op_matched: top.matched,
        server_mean_ns: top.server.mean_ns,
        path: if top.diff_mean_ns < 0.0 {
            PathTime::ClientSawLess {
                ns: -top.diff_mean_ns,
            }
        } else {
            PathTime::Adds {
                ns: top.diff_mean_ns,
            }
        },
        clock_offset_ns: offset,
        through_box,
    }
}

#[cfg(test)]
mod tests;
