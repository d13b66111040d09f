//! The pairing passes for what the ids and sequence numbers left, as seen through a TCP-terminating box: by
//! content within the connection pairs that share the most contents, then by order ([`by_content`]).

use super::{Method, Record, inside, median_i128, ns, theta};
use crate::capture::rpc::Proto;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

type ContentKey<'a> = (Proto, &'a str, u64);

fn content_key(r: &Record) -> Option<ContentKey<'_>> {
    r.1.content.map(|h| (r.0.proto, r.1.op.as_ref(), h))
}

/// Pairs what is left by content, then by order, within connection pairs; returns the clock offset (the one
/// given, or estimated here from the content pairs when there was none).
pub(super) fn by_content(
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
