//! Generic turns read from a capture file, for `roundtrip replay` when no richer profile is at hand: per TCP
//! connection, a turn is a run of client payload (the request) followed by a run of server payload (the
//! response); the next client byte after server bytes starts the next turn, which waited for the previous
//! response. Retransmitted bytes are counted once; bytes cut by the snap length count with their length on the
//! wire. The client is the side that sent the SYN (without one, the side that sent the first payload).
//!
//! This reads the application as strictly request/response: pipelined requests (several outstanding) become
//! turns that each wait for the previous response. The RTT comes from the handshake (SYN -> SYN-ACK) when the
//! capture has one, and is zero otherwise (said in the notes): a server time is the gap between request and
//! response minus this RTT.
#![forbid(unsafe_code)]

use crate::capture::decode::{Transport, flags};
use crate::capture::{CaptureError, Filter, Packets};
use crate::whatif::profile::{AppProfile, ConnProfile, RttSource, Turn};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

#[derive(Default)]
struct Conn {
    first: Duration,
    last: Duration,
    /// Sender of a SYN without ACK.
    syn_from: Option<SocketAddr>,
    syn_at: Option<Duration>,
    synack_at: Option<Duration>,
    /// Highest sequence end seen per sender, for dropping retransmissions.
    seq_end: HashMap<SocketAddr, u32>,
    /// Payload in capture order: time, sender, bytes on the wire.
    data: Vec<(Duration, SocketAddr, u64)>,
    window: HashMap<SocketAddr, u64>,
    mss: u32,
    order: usize,
}

/// Reads the generic request/response profile of every TCP connection of `path` that passes `filter`.
/// Connections with payload one way only are left out with a note; a profile without connections is returned
/// as such (the replay refuses it with its own message).
pub fn generic_profile(path: &Path, filter: &Filter) -> Result<AppProfile, CaptureError> {
    let mut pk = Packets::open_filtered(path, filter)?;
    let mut conns: HashMap<(SocketAddr, SocketAddr), Conn> = HashMap::new();
    let mut first_ts: Option<Duration> = None;
    let mut last_ts = Duration::ZERO;
    let mut cut = 0u64;
    let mut missing = 0u64;
    while let Some((p, d)) = pk.next_decoded() {
        let Some(d) = d else { continue };
        if !filter.matches(Some(&d)) {
            continue;
        }
        let Transport::Tcp(t) = d.transport else {
            continue;
        };
        let ts = Duration::from_nanos(p.ts_ns.max(0) as u64);
        first_ts.get_or_insert(ts);
        last_ts = last_ts.max(ts);
        let src = SocketAddr::new(d.src, t.src_port);
        let dst = SocketAddr::new(d.dst, t.dst_port);
        let key = if src <= dst { (src, dst) } else { (dst, src) };
        let n = conns.len();
        let c = conns.entry(key).or_insert_with(|| Conn {
            first: ts,
            order: n,
            ..Conn::default()
        });
        c.last = c.last.max(ts);
        if t.flags & flags::SYN != 0 {
            if t.flags & flags::ACK == 0 {
                c.syn_from.get_or_insert(src);
                c.syn_at.get_or_insert(ts);
            } else {
                c.synack_at.get_or_insert(ts);
            }
            if let Some(m) = t.mss {
                c.mss = c.mss.max(u32::from(m));
            }
        }
        let w = c.window.entry(src).or_default();
        *w = (*w).max(u64::from(t.window));
        let len = d.payload_len.max(d.payload.len() as u32);
        if len == 0 {
            continue;
        }
        if (d.payload.len() as u32) < len {
            cut += 1;
        }
        let end = t.seq.wrapping_add(len);
        match c.seq_end.get_mut(&src) {
            // Nothing new: a retransmission.
            Some(e) if (end.wrapping_sub(*e) as i32) <= 0 => continue,
            Some(e) => {
                // The bytes beyond what was seen (less than `len` for a partial retransmission; more when
                // packets before this one were not captured: the sequence numbers say they were sent).
                let new = end.wrapping_sub(*e);
                missing += u64::from(new.saturating_sub(len));
                *e = end;
                c.data.push((ts, src, u64::from(new)));
            }
            None => {
                c.seq_end.insert(src, end);
                c.data.push((ts, src, u64::from(len)));
            }
        }
    }
    let first_ts = first_ts.unwrap_or_default();
    let mut notes = Vec::new();
    if cut > 0 {
        notes.push(format!(
            "{cut} packets were cut by the snap length: their bytes are counted from the IP length"
        ));
    }
    if missing > 0 {
        notes.push(format!(
            "{missing} bytes were not captured (dropped by the capture): counted from the sequence numbers"
        ));
    }
    let mut list: Vec<Conn> = conns.into_values().collect();
    list.sort_by_key(|c| c.order);
    let mut connections = Vec::new();
    let mut no_handshake = 0;
    for c in list {
        let Some(&(_, first_sender, _)) = c.data.first() else {
            continue;
        };
        let client = c.syn_from.unwrap_or(first_sender);
        let server = c
            .data
            .iter()
            .map(|d| d.1)
            .find(|&a| a != client)
            .unwrap_or_else(|| {
                c.seq_end
                    .keys()
                    .copied()
                    .find(|&a| a != client)
                    .unwrap_or(client)
            });
        let (rtt, rtt_source) = match (c.syn_at, c.synack_at) {
            (Some(s), Some(a)) if a >= s => (a - s, RttSource::Handshake),
            _ => {
                no_handshake += 1;
                (Duration::ZERO, RttSource::Unknown)
            }
        };
        let sent = |who: SocketAddr| -> u64 {
            c.data
                .iter()
                .filter(|d| d.1 == who)
                .map(|d| d.2)
                .sum::<u64>()
        };
        let (up, down) = (sent(client), sent(server));
        if up == 0 || down == 0 || server == client {
            notes.push(format!(
                "{client} > {server}: payload one way only ({up} bytes up, {down} down): not replayed"
            ));
            continue;
        }
        let turns = turns(&c.data, client, c.first, rtt);
        let last_data = c.data.last().map_or(c.first, |d| d.0);
        connections.push(ConnProfile {
            client,
            server,
            protocol: "generic".into(),
            start: c.first.saturating_sub(first_ts),
            duration: c.last.saturating_sub(c.first),
            rtt,
            rtt_source,
            max_window: [
                c.window.get(&client).copied().unwrap_or(0),
                c.window.get(&server).copied().unwrap_or(0),
            ],
            mss: c.mss,
            turns,
            tail: c.last.saturating_sub(last_data),
        });
    }
    if no_handshake > 0 {
        notes.push(format!(
            "{no_handshake} connections have no handshake in the capture: their server times include the network's round trip"
        ));
    }
    Ok(AppProfile {
        connections,
        duration: last_ts.saturating_sub(first_ts),
        notes,
    })
}

/// Alternating runs of client and server payload as turns.
fn turns(
    data: &[(Duration, SocketAddr, u64)],
    client: SocketAddr,
    start: Duration,
    rtt: Duration,
) -> Vec<Turn> {
    struct Open {
        req_start: Duration,
        req_end: Duration,
        req: u64,
        resp_start: Option<Duration>,
        resp_end: Duration,
        resp: u64,
    }
    let mut open: Vec<Open> = Vec::new();
    for &(ts, who, n) in data {
        let from_client = who == client;
        match open.last_mut() {
            Some(o) if from_client && o.resp == 0 => {
                o.req += n;
                o.req_end = ts;
            }
            Some(o) if !from_client => {
                o.resp_start.get_or_insert(ts);
                o.resp += n;
                o.resp_end = ts;
            }
            _ => open.push(Open {
                req_start: ts,
                req_end: ts,
                req: if from_client { n } else { 0 },
                resp_start: (!from_client).then_some(ts),
                resp_end: ts,
                resp: if from_client { 0 } else { n },
            }),
        }
    }
    let mut out: Vec<Turn> = Vec::with_capacity(open.len());
    for (i, o) in open.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| &open[j]);
        let server = o
            .resp_start
            .map(|r| r.saturating_sub(o.req_end).saturating_sub(rtt))
            .unwrap_or_default();
        out.push(Turn {
            op: "turn".into(),
            request_start: o.req_start.saturating_sub(start),
            request_bytes: o.req,
            response_bytes: o.resp,
            waits_for: prev.map(|_| i - 1),
            think: o
                .req_start
                .saturating_sub(prev.map_or(start, |p| p.resp_end)),
            server,
            outstanding: 1,
            request_transfer: o.req_end.saturating_sub(o.req_start),
            response_transfer: o
                .resp_start
                .map_or(Duration::ZERO, |r| o.resp_end.saturating_sub(r)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternating_runs_become_turns_that_wait_for_the_previous_answer() {
        let c: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let s: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let ms = Duration::from_millis;
        let data = [
            (ms(0), s, 20),  // a greeting: a turn without request
            (ms(5), c, 100), // request 1 in two packets
            (ms(6), c, 50),
            (ms(9), s, 1000),
            (ms(10), s, 1000),
            (ms(20), c, 30), // request 2
            (ms(22), s, 10),
        ];
        let t = turns(&data, c, ms(0), ms(1));
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].request_bytes, t[0].response_bytes), (0, 20));
        assert_eq!((t[1].request_bytes, t[1].response_bytes), (150, 2000));
        assert_eq!(t[1].waits_for, Some(0));
        assert_eq!(t[1].think, ms(5));
        // Response starts 3 ms after the request's last packet, minus the 1 ms RTT.
        assert_eq!(t[1].server, ms(2));
        assert_eq!(t[2].think, ms(10));
        assert_eq!(t[2].request_start, ms(20));
    }
}
