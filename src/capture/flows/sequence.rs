//! Sequence tracking of one direction (Wireshark's rules): keep-alives, retransmissions, out-of-order
//! segments, duplicate ACKs, zero windows, and the highest sequence sent.

use super::Half;
use crate::capture::decode::{Tcp, flags};

/// A first-sent segment waiting for its ACK (kept here, read by the RTT in `rtt.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub end: u32,
    pub ts_ns: i64,
    pub retransmitted: bool,
}

#[inline]
pub(super) fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
/// `a` is after `b` in sequence space (wrapping).
#[inline]
pub(crate) fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}
/// `a` is at or before `b` in sequence space (wrapping).
#[inline]
pub(crate) fn seq_le(a: u32, b: u32) -> bool {
    !seq_gt(a, b)
}

/// What one segment is, by Wireshark's rules.
#[derive(Debug, Clone, Copy)]
pub(super) struct Marks {
    pub keep_alive: bool,
    pub retransmission: bool,
    pub out_of_order: bool,
    pub dup_ack: bool,
    pub zero_window: bool,
}

/// Classifies a segment of `h`'s side (`oh` is the other side) and counts it. `seglen` counts the SYN and
/// FIN; `end` is the sequence after it; `irtt` is the handshake's RTT (3 ms when not seen).
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn classify(
    h: &mut Half,
    oh: &Half,
    t: &Tcp,
    plen: u32,
    seglen: u32,
    end: u32,
    ts: i64,
    irtt: i64,
) -> Marks {
    let fl = t.flags;
    let syn = fl & flags::SYN != 0;
    let fin = fl & flags::FIN != 0;
    let rst = fl & flags::RST != 0;
    let ackf = fl & flags::ACK != 0;
    // Keep-alive, retransmission, out-of-order (Wireshark's rules).
    let keep_alive =
        h.has_next && seglen <= 1 && !syn && !fin && !rst && t.seq == h.next_seq.wrapping_sub(1);
    let mut retransmission = false;
    let mut out_of_order = false;
    if seglen > 0 && !keep_alive {
        // Wireshark's order: spurious (data the receiver already ACKed), fast retransmission,
        // out-of-order, then any other segment below the highest sequence sent. A segment starting one
        // below it that carries more than one byte is new data after a zero-window probe.
        let not_advanced = h.has_next
            && seq_lt(t.seq, h.next_seq)
            && !(plen > 1 && t.seq == h.next_seq.wrapping_sub(1));
        let spurious = plen > 0 && oh.acked && seq_le(t.seq.wrapping_add(plen), oh.last_ack);
        let since = ts.saturating_sub(h.last_data_ts);
        let fast = not_advanced
            && oh.dup_ack_run >= 2
            && oh.last_ack == t.seq
            && ts.saturating_sub(oh.last_ack_ts) < 20_000_000;
        if !spurious && !fast && not_advanced && since < irtt && h.next_seq != end {
            out_of_order = true;
            h.out_of_order += 1;
        } else if spurious || not_advanced {
            retransmission = true;
            h.retransmissions += 1;
            h.retransmitted_bytes += plen as u64;
            for p in h.pending.iter_mut() {
                if seq_gt(p.end, t.seq) {
                    p.retransmitted = true;
                }
            }
        }
    }

    // Duplicate ACK / zero window (Wireshark's rules: same ack, same window, no data).
    let dup_ack = seglen == 0
        && !rst
        && ackf
        && h.acked
        && t.window != 0
        && h.has_win
        && t.window == h.last_win
        && h.has_next
        && t.seq == h.next_seq
        && t.ack == h.last_ack;
    if dup_ack {
        h.dup_acks += 1;
        h.dup_ack_run += 1;
    } else if ackf && (!h.acked || t.ack != h.last_ack) {
        h.dup_ack_run = 0;
    }
    let zero_window = t.window == 0 && fl & (flags::RST | flags::FIN | flags::SYN) == 0;
    if zero_window {
        h.zero_windows += 1;
    }
    Marks {
        keep_alive,
        retransmission,
        out_of_order,
        dup_ack,
        zero_window,
    }
}

impl Half {
    /// Moves the highest sequence sent past a segment of `seglen` bytes (SYN and FIN counted) ending at
    /// `end`, and keeps a first-sent segment for the RTT (at most `max_pending` held).
    #[inline]
    pub(super) fn advance(
        &mut self,
        seq: u32,
        seglen: u32,
        end: u32,
        ts: i64,
        resent: bool,
        max_pending: usize,
    ) {
        let h = self;
        if seglen > 0 {
            if !h.has_next || seq_gt(end, h.next_seq) {
                if !h.has_next {
                    h.first_seq = seq;
                }
                h.next_seq = end;
                h.has_next = true;
                h.last_data_ts = ts;
                if !resent && h.pending.len() < max_pending {
                    h.pending.push_back(Pending {
                        end,
                        ts_ns: ts,
                        retransmitted: false,
                    });
                }
            }
        } else if !h.has_next {
            h.next_seq = seq;
            h.has_next = true;
        }
    }
}
