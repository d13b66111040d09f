//! In-order delivery of each direction's payload to a [`StreamSink`]: retransmitted bytes removed,
//! out-of-order segments held back (bounded by [`TrackerConfig`]), holes reported as gaps.

use super::{Dir, Half, StreamSink, TrackerConfig};
use std::collections::BTreeMap;

/// What a direction holds back for in-order delivery.
#[derive(Debug, Default)]
pub(super) struct Reassembly {
    started: bool,
    expected: u32,
    offset: u64,
    held: BTreeMap<u64, (i64, Vec<u8>, u32)>,
    held_bytes: usize,
}

pub(super) fn flush_reassembly(h: &mut Half, id: u64, dir: Dir, sink: &mut dyn StreamSink) {
    if let Some(r) = h.reasm.as_mut() {
        let held = std::mem::take(&mut r.held);
        for (off, (ts, bytes, len)) in held {
            if off > r.offset {
                sink.gap(id, dir, r.offset, off - r.offset);
                r.offset = off;
            }
            if off + len as u64 > r.offset {
                let skip = (r.offset - off) as usize;
                if skip < bytes.len() {
                    sink.data(id, dir, ts, r.offset, &bytes[skip..]);
                }
                if (bytes.len() as u64) < len as u64 {
                    let from = off + bytes.len().max(skip) as u64;
                    sink.gap(id, dir, from, off + len as u64 - from);
                }
                r.offset = off + len as u64;
            }
        }
        r.held_bytes = 0;
    }
}

/// Hands `sink` what a segment at stream offset `off` (ending at `end`, of which `bytes` were captured) adds
/// past `delivered`: its new bytes, then a gap for those the capture lacks.
#[allow(clippy::too_many_arguments)]
fn deliver(
    sink: &mut dyn StreamSink,
    id: u64,
    dir: Dir,
    ts: i64,
    delivered: u64,
    off: u64,
    bytes: &[u8],
    end: u64,
) {
    let skip = (delivered - off) as usize;
    if skip < bytes.len() {
        sink.data(id, dir, ts, delivered, &bytes[skip..]);
    }
    let captured_end = off + bytes.len() as u64;
    if captured_end < end {
        let from = captured_end.max(delivered);
        sink.gap(id, dir, from, end - from);
    }
}

/// Delivers one segment's payload to the stream sink in order.
#[allow(clippy::too_many_arguments)]
pub(super) fn reassemble(
    h: &mut Half,
    cfg: &TrackerConfig,
    id: u64,
    dir: Dir,
    ts: i64,
    seq: u32,
    len: u32,
    bytes: &[u8],
    sink: &mut dyn StreamSink,
) {
    let first = if h.syn { h.base.wrapping_add(1) } else { seq };
    let r = h.reasm.get_or_insert_with(Box::default);
    if !r.started {
        r.started = true;
        r.expected = first;
    }
    let d = seq.wrapping_sub(r.expected) as i32 as i64;
    let seg_off = r.offset as i64 + d;
    if seg_off < 0 {
        return;
    }
    let seg_off = seg_off as u64;
    if seg_off > r.offset {
        // Ahead of what was delivered: hold it, or give up on the hole when too much is held.
        if r.held_bytes + bytes.len() <= cfg.max_reassembly_bytes {
            r.held_bytes += bytes.len();
            r.held
                .entry(seg_off)
                .or_insert_with(|| (ts, bytes.to_vec(), len));
            return;
        }
        flush_reassembly(h, id, dir, sink);
        let r = h.reasm.get_or_insert_with(Box::default);
        if seg_off > r.offset {
            sink.gap(id, dir, r.offset, seg_off - r.offset);
            r.offset = seg_off;
            r.expected = seq;
        }
    }
    let r = h.reasm.get_or_insert_with(Box::default);
    let end = seg_off + len as u64;
    if end <= r.offset {
        return; // entirely retransmitted
    }
    deliver(sink, id, dir, ts, r.offset, seg_off, bytes, end);
    r.offset = end;
    r.expected = seq.wrapping_add(len);
    // Drain held segments that are now in order.
    while let Some((&off, _)) = r.held.first_key_value() {
        if off > r.offset {
            break;
        }
        let Some((off, (ts, b, l))) = r.held.pop_first() else {
            break;
        };
        r.held_bytes -= b.len();
        let end = off + l as u64;
        if end <= r.offset {
            continue;
        }
        deliver(sink, id, dir, ts, r.offset, off, &b, end);
        r.expected = r.expected.wrapping_add((end - r.offset) as u32);
        r.offset = end;
    }
}
