//! Forwarding one direction: each frame's fate ([`decide`]: loss, rate, delay, jitter, duplication), the
//! timer queue, and the receiving and releasing threads.

use super::shared::BridgeShared;
use super::{BridgeImpairment, LATE_AFTER, POLL};
use crate::proxy::delay::{self, Rng};
use crate::proxy::impairment::Impairment;
use crate::proxy::packet::{self, PacketSocket, RecvBatch};
use crate::proxy::rate::Link;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

struct Entry {
    at: Instant,
    seq: u64,
    data: Vec<u8>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and the earliest release (then the earliest arrival) comes first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
pub(super) struct Queue {
    heap: Mutex<(BinaryHeap<Entry>, u64)>,
    cv: Condvar,
}

/// The decisions of one direction (owned by its receiving thread).
struct WayState {
    rng: Rng,
    bad: bool,
    link: Link,
    last: Option<Instant>,
}

/// Bytes a frame occupies on the wire (the frame after the virtio-net header; an offload aggregate counts
/// one link header per segment it will become).
pub fn wire_bytes(frame: &[u8]) -> u64 {
    let body = frame.len().saturating_sub(packet::VNET_HDR) as u64;
    if frame.len() < packet::VNET_HDR || frame[1] == 0 {
        return body;
    }
    let hdr_len = u16::from_le_bytes([frame[2], frame[3]]) as u64;
    let gso_size = u16::from_le_bytes([frame[4], frame[5]]) as u64;
    if gso_size == 0 || hdr_len >= body {
        return body;
    }
    let segs = (body - hdr_len).div_ceil(gso_size);
    body + segs.saturating_sub(1) * hdr_len
}

/// The fate of one frame: `None` lost, else its release times (two for a duplicate).
fn decide(
    imp: &BridgeImpairment,
    w: &Impairment,
    st: &mut WayState,
    arrival: Instant,
    wire: u64,
) -> Option<(Instant, bool)> {
    if st.rng.lost(w, &mut st.bad) {
        return None;
    }
    let ready = match w.rate_bps {
        Some(bps) => st.link.transmit(arrival, wire, bps),
        None => arrival,
    };
    let ns = if imp.delay_samples_ns.is_empty() {
        st.rng
            .delay_sample_ns(
                Duration::from_nanos(w.delay_ns),
                Duration::from_nanos(w.jitter_ns),
                w.jitter_dist,
            )
            .max(0.0) as u64
    } else {
        let i = (st.rng.next_u64() % imp.delay_samples_ns.len() as u64) as usize;
        imp.delay_samples_ns[i]
    };
    let mut at = ready + Duration::from_nanos(ns);
    if !imp.jitter_reorders
        && let Some(l) = st.last
    {
        at = at.max(l);
    }
    st.last = Some(at.max(st.last.unwrap_or(at)));
    Some((at, st.rng.chance(w.duplicate)))
}

fn needs_queue(imp: &BridgeImpairment, w: &Impairment) -> bool {
    w.delay_ns > 0 || w.jitter_ns > 0 || w.rate_bps.is_some() || !imp.delay_samples_ns.is_empty()
}

/// The receiving thread of direction `w`: reads frames from `rx`, forwards them to `tx` at once or queues them.
pub(super) fn receive(
    w: usize,
    name: &str,
    rx: &PacketSocket,
    tx: &PacketSocket,
    q: &Queue,
    shared: &BridgeShared,
) {
    // Real-time too: a frame read late is released late (the delay counts from the kernel's arrival stamp,
    // but the release cannot happen before the frame was read).
    delay::realtime_for_this_thread();
    let c = &shared.ways[w];
    let mut batch = RecvBatch::default();
    let mut st = WayState {
        rng: Rng::from_entropy(),
        bad: false,
        link: Link::new(),
        last: None,
    };
    let mut last_check = Instant::now();
    loop {
        if shared.stopping() {
            return;
        }
        let n = match rx.recv(&mut batch) {
            Ok(n) => n,
            Err(e) => {
                shared.end(format!("interface '{name}' failed or went away ({e})"));
                return;
            }
        };
        if last_check.elapsed() >= POLL {
            last_check = Instant::now();
            if packet::ifindex(name) != Some(rx.ifindex()) {
                shared.end(format!("interface '{name}' went away"));
                return;
            }
        }
        if n == 0 {
            continue;
        }
        let imp = shared.impairment();
        let wi = imp.way(w);
        let queued = {
            let h = q.heap.lock().expect("bridge queue");
            !h.0.is_empty()
        };
        let through = !needs_queue(&imp, wi) && !queued;
        let mut direct: Vec<&[u8]> = Vec::new();
        let mut pushed = false;
        for (frame, arrival) in batch.frames() {
            let wire = wire_bytes(frame);
            c.frames_in.fetch_add(1, Ordering::Relaxed);
            c.bytes_in.fetch_add(wire, Ordering::Relaxed);
            let Some((at, dup)) = decide(&imp, wi, &mut st, arrival, wire) else {
                c.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if dup {
                c.duplicated.fetch_add(1, Ordering::Relaxed);
            }
            let copies = if dup { 2 } else { 1 };
            if through {
                for _ in 0..copies {
                    direct.push(frame);
                }
                continue;
            }
            let mut h = q.heap.lock().expect("bridge queue");
            for _ in 0..copies {
                let len = frame.len() as u64 - packet::VNET_HDR as u64;
                if h.1 + len > imp.queue_limit_bytes {
                    c.queue_full.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                h.1 += len;
                let seq = c.frames_in.load(Ordering::Relaxed);
                let head = h.0.peek().is_none_or(|e| at < e.at);
                h.0.push(Entry {
                    at,
                    seq,
                    data: frame.to_vec(),
                });
                c.queued_frames.fetch_add(1, Ordering::Relaxed);
                c.queued_bytes.fetch_add(len, Ordering::Relaxed);
                pushed |= head;
            }
        }
        if pushed {
            q.cv.notify_one();
        }
        if !direct.is_empty() {
            let (sent, failed, _) = tx.send(direct.iter().copied());
            let bytes: u64 = direct[..sent].iter().map(|f| wire_bytes(f)).sum();
            c.frames_out.fetch_add(sent as u64, Ordering::Relaxed);
            c.bytes_out.fetch_add(bytes, Ordering::Relaxed);
            c.send_errors.fetch_add(failed as u64, Ordering::Relaxed);
        }
    }
}

/// The releasing thread of direction `w`: sends each queued frame out of `tx` at its release time.
pub(super) fn release(w: usize, tx: &PacketSocket, q: &Queue, shared: &BridgeShared) {
    delay::precise_timers_for_this_thread();
    delay::realtime_for_this_thread();
    let c = &shared.ways[w];
    let mut due: Vec<Entry> = Vec::with_capacity(packet::BATCH);
    // With --cpu-wake, idle CPUs are kept awake from the end of a wait to the send after it.
    delay::release_loop(
        &q.heap,
        &q.cv,
        POLL,
        || shared.stopping(),
        |h| h.0.peek().map(|e| e.at),
        |mut h, now| {
            while due.len() < packet::BATCH && h.0.peek().is_some_and(|e| e.at <= now) {
                let e = h.0.pop().expect("peeked");
                h.1 -= (e.data.len() - packet::VNET_HDR) as u64;
                due.push(e);
            }
            drop(h);
            let sending = Instant::now();
            let (sent, failed, _) = tx.send(due.iter().map(|e| &e.data[..]));
            let mut bytes = 0;
            let mut qbytes = 0;
            for e in &due {
                bytes += wire_bytes(&e.data);
                qbytes += (e.data.len() - packet::VNET_HDR) as u64;
                let late = sending.saturating_duration_since(e.at);
                if late > LATE_AFTER {
                    c.late.fetch_add(1, Ordering::Relaxed);
                }
                c.max_late_ns
                    .fetch_max(late.as_nanos() as u64, Ordering::Relaxed);
            }
            c.frames_out.fetch_add(sent as u64, Ordering::Relaxed);
            c.bytes_out.fetch_add(bytes, Ordering::Relaxed);
            c.send_errors.fetch_add(failed as u64, Ordering::Relaxed);
            c.queued_frames
                .fetch_sub(due.len() as u64, Ordering::Relaxed);
            c.queued_bytes.fetch_sub(qbytes, Ordering::Relaxed);
            due.clear();
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> WayState {
        WayState {
            rng: Rng::new(5),
            bad: false,
            link: Link::new(),
            last: None,
        }
    }

    /// The release times of 10,000 frames of 100 bytes arriving 10 us apart from `t0` (none lost).
    fn release_times(imp: &BridgeImpairment, t0: Instant) -> Vec<Instant> {
        let mut st = state();
        (0..10_000u64)
            .map(|i| {
                let arrival = t0 + Duration::from_micros(i * 10);
                decide(imp, &imp.a_to_b, &mut st, arrival, 100).unwrap().0
            })
            .collect()
    }

    #[test]
    fn jitter_keeps_order_unless_asked() {
        let mut imp = BridgeImpairment::default();
        imp.a_to_b.delay_ns = 10_000_000;
        imp.a_to_b.jitter_ns = 5_000_000;
        let t0 = Instant::now();
        let mut prev = t0;
        for (i, at) in release_times(&imp, t0).into_iter().enumerate() {
            assert!(at >= prev, "reordered at {i}");
            prev = at;
        }
        imp.jitter_reorders = true;
        let mut inversions = 0;
        let mut prev = t0;
        for at in release_times(&imp, t0) {
            inversions += (at < prev) as u32;
            prev = at;
        }
        assert!(inversions > 1000, "{inversions}");
    }

    #[test]
    fn rate_spaces_frames_by_their_serialisation() {
        let mut imp = BridgeImpairment::default();
        imp.a_to_b.rate_bps = Some(12_000_000); // 1500 bytes = 1 ms
        let t0 = Instant::now();
        let mut st = state();
        let times: Vec<_> = (0..10)
            .map(|_| decide(&imp, &imp.a_to_b, &mut st, t0, 1500).unwrap().0)
            .collect();
        for (i, t) in times.iter().enumerate() {
            assert_eq!(*t - t0, Duration::from_millis(i as u64 + 1));
        }
    }

    #[test]
    fn wire_bytes_counts_segments() {
        let mut f = vec![0u8; packet::VNET_HDR + 1514];
        assert_eq!(wire_bytes(&f), 1514);
        // A TSO aggregate: 66 bytes of headers, 3 x 1448 payload.
        f = vec![0u8; packet::VNET_HDR + 66 + 3 * 1448];
        f[1] = 1; // VIRTIO_NET_HDR_GSO_TCPV4
        f[2..4].copy_from_slice(&66u16.to_le_bytes());
        f[4..6].copy_from_slice(&1448u16.to_le_bytes());
        assert_eq!(wire_bytes(&f), 3 * (66 + 1448));
    }
}
