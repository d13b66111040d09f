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

type ContentKey<'a> = (Proto, &'a str, u64);

fn content_key(r: &Record) -> Option<ContentKey<'_>> {
    r.1.content.map(|h| (r.0.proto, r.1.op.as_ref(), h))
}

/// Pairs what is left by content, then by order, within connection pairs; returns the clock offset (the one
/// given, or estimated here from the content pairs when there was none).
fn by_content(
    client: &[Record],
    server: &[Record],
    cused: &mut [bool],
    sused: &mut [bool],
    offset: Option<i128>,
    pairs: &mut Vec<(usize, usize, Method)>,
) -> Option<i128> {
    // Server requests left, by content; and which server connections hold each content.
    let mut skeys: HashMap<ContentKey<'_>, Vec<usize>> = HashMap::new();
    let mut sconns_of: HashMap<ContentKey<'_>, Vec<u64>> = HashMap::new();
    for (j, r) in server.iter().enumerate() {
        if sused[j] {
            continue;
        }
        if let Some(k) = content_key(r) {
            skeys.entry(k).or_default().push(j);
            let v = sconns_of.entry(k).or_default();
            if !v.contains(&r.0.id) {
                v.push(r.0.id);
            }
        }
    }
    if skeys.is_empty() {
        return offset;
    }
    // Each client connection goes with the server connection that shares the most contents (a content
    // found in k server connections weighs 1/k); ties (identical traffic on many connections, as a benchmark
    // sends) go by the order in which the connections started. One to one first, then what is left of the
    // client connections (a pooler multiplexes several onto one) to their best server connection.
    let mut votes: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
    for (i, r) in client.iter().enumerate() {
        if cused[i] {
            continue;
        }
        if let Some(conns) = content_key(r).and_then(|k| sconns_of.get(&k)) {
            let v = votes.entry(r.0.id).or_default();
            let w = 1_000_000 / conns.len().max(1) as u64;
            for &sc in conns {
                *v.entry(sc).or_insert(0) += w;
            }
        }
    }
    let (cfirst, sfirst) = (first_requests(client), first_requests(server));
    let (crank, srank) = (ranks(&cfirst), ranks(&sfirst));
    let partner = assign(&votes, |cc, sc| {
        let rc = crank.get(&cc).copied().unwrap_or(0);
        rc.abs_diff(srank.get(&sc).copied().unwrap_or(0)) as u128
    });
    let occ = occurrences(client, server, cused, sused, &partner);
    // The clock offset, when the ids gave none: contents seen once on each side first.
    let offset = offset.or_else(|| {
        let mut th: Vec<i128> = occ
            .values()
            .filter(|o| o.0.len() == 1 && o.1.len() == 1)
            .map(|o| theta(&client[o.0[0]].1, &server[o.1[0]].1))
            .collect();
        if th.is_empty() {
            th = occ
                .values()
                .flat_map(|o| o.0.iter().zip(&o.1))
                .map(|(&i, &j)| theta(&client[i].1, &server[j].1))
                .collect();
        }
        median_i128(&mut th)
    });
    let off = offset?;
    // With the offset known, each client connection's likely server connections (at least half its best
    // votes, the closest start first, at most MAX_CANDIDATES) are tried: the one where the most requests line
    // up (same content, in order, inside the client's request) wins. Identical traffic on many connections
    // started at once, as a benchmark sends, has no other tell.
    let closeness = |cc: u64, sc: u64| match (cfirst.get(&cc), sfirst.get(&sc)) {
        (Some(&c), Some(&s)) => (ns(s) - off - ns(c)).unsigned_abs(),
        _ => u128::MAX,
    };
    let mut cby: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, r) in client.iter().enumerate() {
        if !cused[i] && r.1.content.is_some() {
            cby.entry(r.0.id).or_default().push(i);
        }
    }
    let mut sby: HashMap<u64, Vec<usize>> = HashMap::new();
    for (j, r) in server.iter().enumerate() {
        if !sused[j] && r.1.content.is_some() {
            sby.entry(r.0.id).or_default().push(j);
        }
    }
    for v in cby.values_mut() {
        v.sort_by_key(|&i| client[i].1.request_ts);
    }
    for v in sby.values_mut() {
        v.sort_by_key(|&j| server[j].1.request_ts);
    }
    let mut scored: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
    for (&cc, v) in &votes {
        let best = v.values().copied().max().unwrap_or(0);
        let mut c: Vec<(u128, u64)> = v
            .iter()
            .filter(|&(_, &n)| n * 2 >= best)
            .map(|(&sc, _)| (closeness(cc, sc), sc))
            .collect();
        c.sort_unstable();
        c.truncate(MAX_CANDIDATES);
        let cs = cby.get(&cc).map_or(&[][..], Vec::as_slice);
        let e = scored.entry(cc).or_default();
        for (_, sc) in c {
            let ss = sby.get(&sc).map_or(&[][..], Vec::as_slice);
            e.insert(sc, dry_align(client, server, cs, ss, off));
        }
    }
    let partner = assign(&scored, closeness);
    let occ = occurrences(client, server, cused, sused, &partner);
    let clients_of = reverse(&partner);
    let mut st = Align {
        client,
        server,
        cused,
        sused,
        off,
        pairs,
    };
    for o in occ.values() {
        st.align(&o.0, &o.1, Method::Content, false);
    }
    // Order: what is left in each connection pair, same operation at the same place.
    let mut left: BTreeMap<(u64, u64), Occ> = BTreeMap::new();
    for (i, r) in client.iter().enumerate() {
        if !st.cused[i]
            && let Some(&sc) = partner.get(&r.0.id)
        {
            left.entry((r.0.id, sc)).or_default().0.push(i);
        }
    }
    for (j, r) in server.iter().enumerate() {
        if st.sused[j] {
            continue;
        }
        for &cc in clients_of.get(&r.0.id).into_iter().flatten() {
            if let Some(o) = left.get_mut(&(cc, r.0.id)) {
                o.1.push(j);
            }
        }
    }
    for o in left.values_mut() {
        o.0.sort_by_key(|&i| client[i].1.request_ts);
        o.1.sort_by_key(|&j| server[j].1.request_ts);
        st.align(&o.0, &o.1, Method::Order, true);
    }
    Some(off)
}

/// Server connections tried for one client connection when the contents do not tell them apart.
pub const MAX_CANDIDATES: usize = 64;

/// How many requests of `cs` (client) and `ss` (server), both in request order, line up: same content, in
/// order, the server's inside the client's.
fn dry_align(client: &[Record], server: &[Record], cs: &[usize], ss: &[usize], off: i128) -> u64 {
    let (mut a, mut b, mut n) = (0, 0, 0);
    while a < cs.len() && b < ss.len() {
        let (c, s) = (&client[cs[a]], &server[ss[b]]);
        if content_key(c) == content_key(s) && inside(&c.1, &s.1, off) {
            n += 1;
            a += 1;
            b += 1;
        } else if ns(s.1.request_end_ts) - off < ns(c.1.request_end_ts) {
            b += 1;
        } else {
            a += 1;
        }
    }
    n
}

/// Client and server request indices of one content (or of one connection pair).
type Occ = (Vec<usize>, Vec<usize>);

/// Time of each connection's first request.
fn first_requests(recs: &[Record]) -> HashMap<u64, Duration> {
    let mut first: HashMap<u64, Duration> = HashMap::new();
    for (c, t) in recs {
        let e = first.entry(c.id).or_insert(t.request_ts);
        *e = (*e).min(t.request_ts);
    }
    first
}

/// Each connection's place in the order of first requests.
fn ranks(first: &HashMap<u64, Duration>) -> HashMap<u64, usize> {
    let mut v: Vec<(Duration, u64)> = first.iter().map(|(&id, &t)| (t, id)).collect();
    v.sort_unstable();
    v.into_iter()
        .enumerate()
        .map(|(r, (_, id))| (id, r))
        .collect()
}

/// Server connection of each client connection: most votes first, then `tie` (smaller is better); one to
/// one first, then the client connections left to their best server connection.
fn assign(
    votes: &HashMap<u64, HashMap<u64, u64>>,
    tie: impl Fn(u64, u64) -> u128,
) -> HashMap<u64, u64> {
    let mut cands: Vec<(u64, u128, u64, u64)> = votes
        .iter()
        .flat_map(|(&cc, v)| v.iter().map(move |(&sc, &n)| (cc, sc, n)))
        .map(|(cc, sc, n)| (u64::MAX - n, tie(cc, sc), cc, sc))
        .collect();
    cands.sort_unstable();
    let mut partner: HashMap<u64, u64> = HashMap::new();
    let mut taken: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for &(_, _, cc, sc) in &cands {
        if !partner.contains_key(&cc) && !taken.contains(&sc) {
            partner.insert(cc, sc);
            taken.insert(sc);
        }
    }
    for &(_, _, cc, sc) in &cands {
        partner.entry(cc).or_insert(sc);
    }
    partner
}

/// Client connections of each server connection.
fn reverse(partner: &HashMap<u64, u64>) -> HashMap<u64, Vec<u64>> {
    let mut r: HashMap<u64, Vec<u64>> = HashMap::new();
    for (&cc, &sc) in partner {
        r.entry(sc).or_default().push(cc);
    }
    r
}

/// Occurrences of each content per connection pair, in request order, of the requests not paired yet.
fn occurrences(
    client: &[Record],
    server: &[Record],
    cused: &[bool],
    sused: &[bool],
    partner: &HashMap<u64, u64>,
) -> BTreeMap<(u64, u64, Proto, String, u64), Occ> {
    let mut occ: BTreeMap<(u64, u64, Proto, String, u64), Occ> = BTreeMap::new();
    for (i, r) in client.iter().enumerate() {
        if cused[i] {
            continue;
        }
        let (Some(k), Some(&sc)) = (content_key(r), partner.get(&r.0.id)) else {
            continue;
        };
        occ.entry((r.0.id, sc, k.0, k.1.to_string(), k.2))
            .or_default()
            .0
            .push(i);
    }
    let clients_of = reverse(partner);
    for (j, r) in server.iter().enumerate() {
        if sused[j] {
            continue;
        }
        let Some(k) = content_key(r) else { continue };
        for &cc in clients_of.get(&r.0.id).into_iter().flatten() {
            if let Some(o) = occ.get_mut(&(cc, r.0.id, k.0, k.1.to_string(), k.2)) {
                o.1.push(j);
            }
        }
    }
    for o in occ.values_mut() {
        o.0.sort_by_key(|&i| client[i].1.request_ts);
        o.1.sort_by_key(|&j| server[j].1.request_ts);
    }
    occ
}

/// State of the content and order passes.
struct Align<'a> {
    client: &'a [Record],
    server: &'a [Record],
    cused: &'a mut [bool],
    sused: &'a mut [bool],
    off: i128,
    pairs: &'a mut Vec<(usize, usize, Method)>,
}

impl Align<'_> {
    /// n-th with n-th, skipping occurrences that only one capture holds (by time on the common clock).
    fn align(&mut self, cs: &[usize], ss: &[usize], method: Method, same_op: bool) {
        let (mut a, mut b) = (0, 0);
        while a < cs.len() && b < ss.len() {
            let (i, j) = (cs[a], ss[b]);
            if self.cused[i] {
                a += 1;
                continue;
            }
            if self.sused[j] {
                b += 1;
                continue;
            }
            let (c, s) = (&self.client[i], &self.server[j]);
            if (!same_op || (c.0.proto == s.0.proto && c.1.op == s.1.op))
                && inside(&c.1, &s.1, self.off)
            {
                self.cused[i] = true;
                self.sused[j] = true;
                self.pairs.push((i, j, method));
                a += 1;
                b += 1;
            } else if ns(s.1.request_end_ts) - self.off < ns(c.1.request_end_ts) {
                b += 1;
            } else {
                a += 1;
            }
        }
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
mod tests {
    use super::*;
    use crate::capture::rpc::Carrier;
    use crate::capture::rpc::Status;

    fn rec(
        conn: u64,
        op: &'static str,
        req_ms: u64,
        lat_ms: u64,
        seq: u32,
        content: u64,
    ) -> Record {
        let ms = Duration::from_millis;
        (
            ConnInfo {
                id: conn,
                client: "10.0.0.1:40000".parse().unwrap(),
                server: "10.0.0.2:5432".parse().unwrap(),
                proto: Proto::Pgsql,
                carrier: Carrier::Tcp,
            },
            Transaction {
                conn,
                op: op.into(),
                request_ts: ms(req_ms),
                request_end_ts: ms(req_ms),
                response_ts: ms(req_ms + lat_ms),
                response_end_ts: ms(req_ms + lat_ms),
                request_seq: Some(seq),
                xid: None,
                content: Some(content),
                bytes: None,
                error: None,
                status: Status::Ok,
            },
        )
    }

    /// A benchmark through a proxy: the same request on 5 connections started together, each connection
    /// with its own pace; every request is paired with its own connection's, not a neighbour's.
    #[test]
    fn identical_traffic_on_many_connections() {
        let mut client = Vec::new();
        let mut server = Vec::new();
        for c in 0..5u64 {
            let step = 30 + c * 7;
            for k in 0..40u64 {
                let t = 1000 + c + k * step;
                client.push(rec(c, "SET", t, 4 + c, k as u32, 42));
                server.push(rec(20 - c, "SET", t + 1, 2 + c, 5000 + k as u32, 42));
            }
        }
        let (r, _) = match_captures(&client, &server);
        assert_eq!(r.matched, 200);
        assert!(r.pairs.iter().all(|p| p.server_conn == 20 - p.client_conn));
        assert!(
            r.pairs
                .iter()
                .all(|p| p.client_last_byte_ns - p.server_last_byte_ns == 2_000_000)
        );
    }

    /// Through a proxy: other sequence numbers, a server clock 1 s ahead, 10 ms each way between the capture
    /// points; one request whose bytes the box rewrote is paired by order.
    #[test]
    fn content_then_order_through_a_box() {
        let mut client = Vec::new();
        let mut server = Vec::new();
        for k in 0..20u64 {
            let t = 1000 + k * 100;
            let content = if k == 7 { 999 } else { k };
            client.push(rec(3, "SELECT", t, 25, 100 + k as u32 * 50, content));
            let sc = if k == 7 { 555 } else { k };
            server.push(rec(
                8,
                "SELECT",
                t + 1000 + 10,
                5,
                90_000 + k as u32 * 50,
                sc,
            ));
        }
        // a request of another connection only the server capture holds
        server.push(rec(9, "INSERT", 1500, 1, 7, 12345));
        let (r, v) = match_captures(&client, &server);
        assert_eq!(r.matched, 20);
        assert_eq!(r.paired_by.content, 19);
        assert_eq!(r.paired_by.order, 1);
        assert_eq!(r.paired_by.tcp_seq + r.paired_by.xid, 0);
        assert_eq!(r.pairs[7].method, Method::Order);
        assert_eq!(r.clock_offset_ns, Some(1_000_000_000));
        let sel = r.ops.iter().find(|o| o.op == "SELECT").unwrap();
        assert!((sel.diff_mean_ns - 20e6).abs() < 1.0);
        let Verdict::Matched {
            op,
            op_matched,
            path: PathTime::Adds { ns },
            clock_offset_ns,
            through_box,
            ..
        } = &v
        else {
            panic!("{v:?}")
        };
        assert_eq!((op.as_str(), *op_matched), ("SELECT", 20));
        assert!((ns - 20e6).abs() < 1.0, "{v:?}");
        assert_eq!(*clock_offset_ns, Some(1_000_000_000));
        assert_eq!(
            *through_box,
            Some(ThroughBox {
                by_content_or_order: 20,
                matched: 20
            })
        );
        assert_eq!(
            r.unmatched
                .iter()
                .map(|u| (u.reason, u.count))
                .collect::<Vec<_>>(),
            vec![(Unmatched::NotInClientCapture, 1)]
        );
    }

    /// The files given the wrong way round (the "client" capture saw shorter times): the verdict says what the
    /// figures show, never that the path "adds" a clamped 0.
    #[test]
    fn a_negative_path_time_is_not_said_as_adding_zero() {
        let mut client = Vec::new();
        let mut server = Vec::new();
        for k in 0..20u64 {
            let t = 1000 + k * 100;
            client.push(rec(3, "SELECT", t, 10, 100 + k as u32 * 50, k));
            server.push(rec(3, "SELECT", t, 11, 100 + k as u32 * 50, k));
        }
        let (r, v) = match_captures(&client, &server);
        let sel = r.ops.iter().find(|o| o.op == "SELECT").unwrap();
        assert!(sel.diff_mean_ns < 0.0, "{v:?}");
        let Verdict::Matched {
            path: PathTime::ClientSawLess { ns },
            through_box: None,
            ..
        } = v
        else {
            panic!("{v:?}")
        };
        assert!((ns - 1e6).abs() < 1.0, "{v:?}");
    }

    /// One capture empty: nothing to compare, whatever the other holds.
    #[test]
    fn an_empty_capture_is_nothing_to_compare() {
        let client = vec![rec(3, "SELECT", 1000, 10, 100, 1)];
        let (r, v) = match_captures(&client, &[]);
        assert!(r.unrelated);
        assert_eq!(
            v,
            Verdict::NothingToCompare {
                client_requests: 1,
                server_requests: 0
            }
        );
    }
}
