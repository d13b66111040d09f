//! The TCP time-sequence graph of one direction of one connection (Stevens' and tcptrace's picture, as
//! Wireshark draws it): data segments as sequence ranges over time, retransmissions apart, the receiver's
//! ACK line, its window edge (ACK + advertised window), its SACK blocks and its zero-window periods.
//!
//! [`SeqGraphBuilder`] takes each packet of the connection (as [`crate::capture::flows::FlowTracker`] saw it)
//! and keeps a compact record per packet; [`SeqGraphBuilder::finish`] reduces them to at most
//! [`SEQ_GRAPH_COLUMNS`] time columns for drawing without dropping what matters:
//! - new data: per column one range from the lowest sequence number to the highest segment end, each end
//!   taken from a real segment, with the times of the column's first and last segment (a column holding one
//!   segment is that segment exactly);
//! - retransmissions: every one, exactly, never merged;
//! - ACK and window edge: per column the real samples holding the first, lowest, highest and last value, in
//!   time order (a staircase through them passes through every extreme);
//! - SACK blocks: per column the union of the blocks, each range's ends taken from real blocks;
//! - zero-window periods: every one, from the receiver's first zero window to its next non-zero one, with
//!   periods closer than a column merged.
//!
//! Sequence numbers are relative to the sender's initial sequence number (the first one seen without a
//! handshake) and unwrapped past 4 GiB, so a long transfer keeps climbing.
#![forbid(unsafe_code)]

use super::decode::Decoded;
use super::flows::{Dir, FlowSummary, PacketInfo};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::net::SocketAddr;

/// Time columns of the downsampled graph (more than the pixel columns of a drawn chart).
pub const SEQ_GRAPH_COLUMNS: usize = 1200;

/// Unwraps 32-bit relative sequence numbers into a 64-bit count that keeps growing past 4 GiB.
#[derive(Debug, Clone, Copy, Default)]
struct Unwrap {
    hi: Option<u64>,
}

impl Unwrap {
    /// The 64-bit value nearest to the highest seen so far whose low 32 bits are `v`.
    fn at(&self, v: u32) -> u64 {
        let Some(hi) = self.hi else {
            return u64::from(v);
        };
        let d = v.wrapping_sub(hi as u32) as i32;
        (hi as i64 + i64::from(d)).max(0) as u64
    }

    fn see(&mut self, v: u32) -> u64 {
        let x = self.at(v);
        if self.hi.is_none_or(|h| x > h) {
            self.hi = Some(x);
        }
        x
    }
}

#[derive(Debug, Clone, Copy)]
struct Seg {
    t_ns: i64,
    seq: u64,
    end: u64,
    retrans: bool,
}

#[derive(Debug, Clone, Copy)]
struct AckRec {
    t_ns: i64,
    ack: u64,
    edge: u64,
}

#[derive(Debug, Clone, Copy)]
struct SackRec {
    t_ns: i64,
    left: u64,
    right: u64,
}

/// Collects one direction of one connection, packet by packet.
#[derive(Debug, Clone)]
pub struct SeqGraphBuilder {
    dir: Dir,
    first_ns: Option<i64>,
    last_ns: i64,
    seq: Unwrap,
    segs: Vec<Seg>,
    acks: Vec<AckRec>,
    sacks: Vec<SackRec>,
    sack_packets: u64,
    /// Zero-window periods as (start, end) ns; the last may still be open.
    zero: Vec<(i64, Option<i64>)>,
    zero_window_packets: u64,
    keep_alives: u64,
}

impl SeqGraphBuilder {
    /// A graph of the data sent in direction `dir` (and the other side's ACKs, windows and SACKs).
    pub fn new(dir: Dir) -> Self {
        SeqGraphBuilder {
            dir,
            first_ns: None,
            last_ns: 0,
            seq: Unwrap::default(),
            segs: Vec::new(),
            acks: Vec::new(),
            sacks: Vec::new(),
            sack_packets: 0,
            zero: Vec::new(),
            zero_window_packets: 0,
            keep_alives: 0,
        }
    }

    /// Takes one packet of the connection: its time, what the tracker made of it and its decoding.
    pub fn add(&mut self, ts_ns: i64, info: &PacketInfo, d: &Decoded<'_>) {
        self.first_ns.get_or_insert(ts_ns);
        self.last_ns = self.last_ns.max(ts_ns);
        let Some(tcp) = d.tcp() else { return };
        if info.dir == self.dir {
            if info.payload_len == 0 {
                return;
            }
            if info.keep_alive {
                self.keep_alives += 1;
                return;
            }
            let seq = self.seq.see(info.rel_seq);
            let end = self.seq.see(info.rel_seq.wrapping_add(info.payload_len));
            self.segs.push(Seg {
                t_ns: ts_ns,
                seq,
                end: end.max(seq),
                retrans: info.retransmission,
            });
            return;
        }
        // The receiver: ACK, window edge, SACK blocks, zero windows (only packets that carry an ACK; a SYN
        // without one announces no window for this data yet).
        let Some(rel_ack) = info.rel_ack else { return };
        let ack = self.seq.see(rel_ack);
        self.acks.push(AckRec {
            t_ns: ts_ns,
            ack,
            edge: ack + info.window,
        });
        // SACK edges are absolute: the sender's initial sequence number is the ACK minus its relative value.
        let base = tcp.ack.wrapping_sub(rel_ack);
        let n = usize::from(tcp.sack_count).min(tcp.sack.len());
        if n > 0 {
            self.sack_packets += 1;
        }
        for &(l, r) in &tcp.sack[..n] {
            let left = self.seq.at(l.wrapping_sub(base));
            let right = self.seq.at(r.wrapping_sub(base));
            if right > left {
                self.sacks.push(SackRec {
                    t_ns: ts_ns,
                    left,
                    right,
                });
            }
        }
        let rst = tcp.flags & super::decode::flags::RST != 0;
        if info.zero_window && !rst {
            self.zero_window_packets += 1;
            if !matches!(self.zero.last(), Some((_, None))) {
                self.zero.push((ts_ns, None));
            }
        } else if info.window > 0
            && let Some(last) = self.zero.last_mut()
            && last.1.is_none()
        {
            last.1 = Some(ts_ns);
        }
    }

    /// Reduces the records to the drawable graph. `flow` is the connection's summary (addresses and the
    /// window scale from its handshake).
    pub fn finish(self, flow: &FlowSummary, chosen: &'static str) -> SeqGraph {
        let t0 = self.first_ns.unwrap_or(flow.first_ts_ns);
        let span_ns = (self.last_ns - t0).max(1);
        let n = SEQ_GRAPH_COLUMNS;
        let col = |t: i64| ((((t - t0) as f64) / span_ns as f64 * n as f64) as usize).min(n - 1);
        let secs = |t: i64| (t - t0) as f64 / 1e9;
        let column_s = span_ns as f64 / 1e9 / n as f64;

        // New data: per column lowest start and highest end.
        let mut segments: Vec<SegColumn> = Vec::new();
        let mut cur: Option<(usize, SegColumn)> = None;
        let mut retransmissions = Vec::new();
        for s in &self.segs {
            if s.retrans {
                retransmissions.push(SegMark {
                    t_s: secs(s.t_ns),
                    seq: s.seq,
                    end: s.end,
                });
                continue;
            }
            let c = col(s.t_ns);
            match &mut cur {
                Some((ci, sc)) if *ci == c => {
                    sc.seq_lo = sc.seq_lo.min(s.seq);
                    sc.seq_hi = sc.seq_hi.max(s.end);
                    sc.last_s = secs(s.t_ns);
                    sc.segments += 1;
                }
                _ => {
                    if let Some((_, sc)) = cur.take() {
                        segments.push(sc);
                    }
                    cur = Some((
                        c,
                        SegColumn {
                            first_s: secs(s.t_ns),
                            last_s: secs(s.t_ns),
                            seq_lo: s.seq,
                            seq_hi: s.end,
                            segments: 1,
                        },
                    ));
                }
            }
        }
        if let Some((_, sc)) = cur {
            segments.push(sc);
        }

        let line = |vals: &mut dyn Iterator<Item = (i64, u64)>| -> Vec<LinePoint> {
            let mut out = Vec::new();
            let mut group: Vec<(i64, u64)> = Vec::new();
            let flush = |g: &mut Vec<(i64, u64)>, out: &mut Vec<LinePoint>| {
                if g.is_empty() {
                    return;
                }
                let first = 0;
                let last = g.len() - 1;
                let lo = (0..g.len()).min_by_key(|&i| (g[i].1, i)).unwrap_or(0);
                let hi = (0..g.len())
                    .max_by_key(|&i| (g[i].1, usize::MAX - i))
                    .unwrap_or(0);
                let mut keep = vec![first, lo, hi, last];
                keep.sort_unstable();
                keep.dedup();
                out.extend(keep.into_iter().map(|i| LinePoint {
                    t_s: secs(g[i].0),
                    value: g[i].1,
                }));
                g.clear();
            };
            let mut gc = usize::MAX;
            for (t, v) in vals {
                let c = col(t);
                if c != gc {
                    flush(&mut group, &mut out);
                    gc = c;
                }
                group.push((t, v));
            }
            flush(&mut group, &mut out);
            out
        };
        let ack = line(&mut self.acks.iter().map(|a| (a.t_ns, a.ack)));
        let window_edge = line(&mut self.acks.iter().map(|a| (a.t_ns, a.edge)));

        // SACK: per column, the union of the blocks.
        let mut sack: Vec<SackMark> = Vec::new();
        let mut i = 0;
        while i < self.sacks.len() {
            let c = col(self.sacks[i].t_ns);
            let mut j = i;
            while j < self.sacks.len() && col(self.sacks[j].t_ns) == c {
                j += 1;
            }
            let mut blocks: Vec<SackRec> = self.sacks[i..j].to_vec();
            blocks.sort_by_key(|b| (b.left, b.right));
            let mut merged: Vec<SackRec> = Vec::new();
            for b in blocks {
                match merged.last_mut() {
                    Some(m) if b.left <= m.right => {
                        m.right = m.right.max(b.right);
                        m.t_ns = m.t_ns.min(b.t_ns);
                    }
                    _ => merged.push(b),
                }
            }
            sack.extend(merged.into_iter().map(|b| SackMark {
                t_s: secs(b.t_ns),
                left: b.left,
                right: b.right,
            }));
            i = j;
        }

        let mut zero_windows: Vec<Span> = Vec::new();
        for &(a, b) in &self.zero {
            let end = b.unwrap_or(self.last_ns);
            match zero_windows.last_mut() {
                Some(z) if secs(a) - z.end_s < column_s => z.end_s = secs(end),
                _ => zero_windows.push(Span {
                    start_s: secs(a),
                    end_s: secs(end),
                }),
            }
        }

        let (sender, receiver, send_dir, recv_dir) = match self.dir {
            Dir::ClientToServer => (
                flow.client,
                flow.server,
                &flow.client_to_server,
                &flow.server_to_client,
            ),
            Dir::ServerToClient => (
                flow.server,
                flow.client,
                &flow.server_to_client,
                &flow.client_to_server,
            ),
        };
        let window_scale = match (send_dir.wscale, recv_dir.wscale) {
            (Some(_), Some(r)) => Some(r.min(14)),
            _ => None,
        };
        SeqGraph {
            flow_id: flow.id,
            sender,
            receiver,
            direction: self.dir,
            chosen: Cow::Borrowed(chosen),
            start_ns: t0,
            duration_s: span_ns as f64 / 1e9,
            column_s,
            window_scale,
            data_segments: self.segs.len() as u64,
            retransmitted_segments: retransmissions.len() as u64,
            keep_alives: self.keep_alives,
            acks: self.acks.len() as u64,
            sack_packets: self.sack_packets,
            zero_window_packets: self.zero_window_packets,
            highest_seq: self.segs.iter().map(|s| s.end).max().unwrap_or(0),
            segments,
            retransmissions,
            ack,
            window_edge,
            sack,
            zero_windows,
        }
    }
}

/// New (not retransmitted) data sent during one time column.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SegColumn {
    /// Time of the column's first segment, seconds since the connection's first packet.
    pub first_s: f64,
    /// Time of its last segment.
    pub last_s: f64,
    /// Lowest relative sequence number of its segments.
    pub seq_lo: u64,
    /// Highest segment end (sequence number + length).
    pub seq_hi: u64,
    /// Segments in the column.
    pub segments: u64,
}

/// One retransmitted segment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SegMark {
    /// Time, seconds since the connection's first packet.
    pub t_s: f64,
    /// Relative sequence number of its first byte.
    pub seq: u64,
    /// Sequence number + length.
    pub end: u64,
}

/// One real sample of a line (ACK or window edge).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinePoint {
    /// Time, seconds since the connection's first packet.
    pub t_s: f64,
    /// Relative sequence number.
    pub value: u64,
}

/// A range of sequence numbers the receiver SACKed during one column.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SackMark {
    /// Time of the first packet that carried (part of) it.
    pub t_s: f64,
    /// Left edge (first byte held).
    pub left: u64,
    /// Right edge (one past the last byte held).
    pub right: u64,
}

/// A period of time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Span {
    /// Start, seconds since the connection's first packet.
    pub start_s: f64,
    /// End.
    pub end_s: f64,
}

/// The time-sequence graph of one direction of one connection, ready to draw (see the module
/// documentation for what each series keeps).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeqGraph {
    /// Connection number.
    pub flow_id: u64,
    /// The end that sends the data drawn.
    pub sender: SocketAddr,
    /// The end that ACKs it.
    pub receiver: SocketAddr,
    /// The direction of the data.
    pub direction: Dir,
    /// Why this direction: "busier" (the one with more payload) or "asked" (--data-from).
    pub chosen: Cow<'static, str>,
    /// The connection's first packet, Unix ns: time 0 of the graph.
    pub start_ns: i64,
    /// Time from the first to the last packet of the connection.
    pub duration_s: f64,
    /// Width of one time column.
    pub column_s: f64,
    /// The receiver's window scale shift from the handshake (None: not negotiated or not captured, so the
    /// windows are drawn as sent).
    pub window_scale: Option<u8>,
    /// Data segments sent (retransmissions included, keep-alives not).
    pub data_segments: u64,
    /// Of which retransmissions.
    pub retransmitted_segments: u64,
    /// Keep-alives (not drawn).
    pub keep_alives: u64,
    /// Receiver packets carrying an ACK.
    pub acks: u64,
    /// Receiver packets carrying SACK blocks.
    pub sack_packets: u64,
    /// Receiver packets advertising a zero window.
    pub zero_window_packets: u64,
    /// Highest segment end.
    pub highest_seq: u64,
    /// New data per column.
    pub segments: Vec<SegColumn>,
    /// Every retransmitted segment.
    pub retransmissions: Vec<SegMark>,
    /// The ACK line.
    pub ack: Vec<LinePoint>,
    /// The window edge: ACK + advertised window (scaled).
    pub window_edge: Vec<LinePoint>,
    /// SACKed ranges.
    pub sack: Vec<SackMark>,
    /// Periods with a zero window.
    pub zero_windows: Vec<Span>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwraps_past_four_gib() {
        let mut u = Unwrap::default();
        assert_eq!(u.see(10), 10);
        // Just below 2^32 after 10 is before 0: clamped, never a jump of 4 GiB.
        assert_eq!(u.see(u32::MAX - 5), 0);
        // From near 4 GiB, a small value is past the wrap.
        let mut u = Unwrap::default();
        u.see(4_000_000_000);
        u.see(4_294_000_000);
        assert_eq!(u.see(1000), (1u64 << 32) + 1000);
        // An older value just before the wrap stays below it.
        assert_eq!(u.at(4_294_967_000), 4_294_967_000);
        // Never below zero.
        let u = Unwrap { hi: Some(5) };
        assert_eq!(u.at(u32::MAX), 0);
        assert_eq!(u.at(3), 3);
    }
}
