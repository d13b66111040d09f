//! The event loop's timers: a hashed timing wheel of ~1 ms buckets over the next ~4.3 s and a heap for later
//! ones, woken on a grid of [`SLACK`] so that probes due together share one wake-up.

use super::SLACK;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerKind {
    /// The slot's next probe is due (tag: the slot's schedule tag).
    Due,
    /// An outstanding ping may be past its deadline (tag: the slot's epoch).
    Deadline,
    /// A TCP connect may be past its deadline (tag: the connection's generation).
    ConnectDeadline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Timer {
    pub(super) at: Instant,
    pub(super) slot: u32,
    pub(super) tag: u32,
    pub(super) kind: TimerKind,
}

/// Width of one wheel bucket: 2^20 ns (about 1 ms, the order of [`BATCH`]).
const TICK_SHIFT: u32 = 20;
/// Buckets in the wheel: 4,096 (about 4.3 s); later timers wait in an overflow heap.
const WHEEL: u64 = 4096;

/// The timers: a hashed timing wheel of ~1 ms buckets over the next ~4.3 s, and a heap for later ones.
/// A timer is packed into 16 bytes (nanoseconds since the loop's origin in the high 64 bits, then kind and
/// slot, then tag). Pushing is an append to its bucket (no sift through a heap of every target's timers,
/// whose cache misses were the loop's largest own cost at 5,000 targets/s); pops come in time order (the
/// earliest of the current bucket first).
pub(super) struct Timers {
    /// Bucket `tick % WHEEL` holds the timers of tick `tick` (ns >> TICK_SHIFT) for ticks in
    /// `[cursor, cursor + WHEEL)`; a timer already overdue when pushed goes into the cursor's bucket.
    wheel: Vec<Vec<u128>>,
    /// The earliest tick whose bucket may hold timers.
    cursor: u64,
    /// Timers in the wheel.
    len: usize,
    /// Timers at or beyond `cursor + WHEEL` when pushed.
    far: BinaryHeap<Reverse<u128>>,
    origin: Instant,
}

impl Timers {
    pub(super) fn new() -> Timers {
        Timers {
            wheel: (0..WHEEL).map(|_| Vec::new()).collect(),
            cursor: 0,
            len: 0,
            far: BinaryHeap::new(),
            origin: Instant::now(),
        }
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn push(&mut self, t: Timer) {
        debug_assert!(t.slot < 1 << 30);
        let ns = self.ns(t.at);
        let kind: u128 = match t.kind {
            TimerKind::Due => 0,
            TimerKind::Deadline => 1,
            TimerKind::ConnectDeadline => 2,
        };
        let slot = u128::from(t.slot & 0x3fff_ffff);
        self.insert(u128::from(ns) << 64 | kind << 62 | slot << 32 | u128::from(t.tag));
    }

    fn insert(&mut self, p: u128) {
        let tick = ((p >> 64) as u64 >> TICK_SHIFT).max(self.cursor);
        if tick - self.cursor < WHEEL {
            self.wheel[(tick % WHEEL) as usize].push(p);
            self.len += 1;
        } else {
            self.far.push(Reverse(p));
        }
    }

    /// Moves overflow timers that came within the wheel's span into it.
    fn migrate(&mut self) {
        while let Some(&Reverse(p)) = self.far.peek() {
            if ((p >> 64) as u64 >> TICK_SHIFT).saturating_sub(self.cursor) >= WHEEL {
                return;
            }
            self.far.pop();
            self.insert(p);
        }
    }

    /// The wake-up for a timer at `at`: the next multiple of [`SLACK`] since the origin, at or after `at`.
    pub(super) fn wake_at(&self, at: Instant) -> Instant {
        let slack = SLACK.as_nanos() as u64;
        let ns = self.ns(at);
        match ns.div_ceil(slack).checked_mul(slack) {
            Some(w) => self.origin + Duration::from_nanos(w),
            None => at,
        }
    }

    fn at(&self, packed: u128) -> Instant {
        self.origin + Duration::from_nanos((packed >> 64) as u64)
    }

    /// When the next timer fires.
    pub(super) fn next(&self) -> Option<Instant> {
        if self.len == 0 {
            return self.far.peek().map(|Reverse(p)| self.at(*p));
        }
        (self.cursor..self.cursor + WHEEL)
            .find_map(|tick| self.wheel[(tick % WHEEL) as usize].iter().min())
            .map(|p| self.at(*p))
    }

    /// The next timer if it fires at or before `horizon`.
    pub(super) fn pop_until(&mut self, horizon: Instant) -> Option<Timer> {
        let limit = self.ns(horizon);
        let last = limit >> TICK_SHIFT;
        loop {
            if self.len == 0 {
                // Nothing in the wheel: jump to the horizon or the first overflow timer.
                let far = self
                    .far
                    .peek()
                    .map_or(u64::MAX, |Reverse(p)| (p >> 64) as u64 >> TICK_SHIFT);
                self.cursor = self.cursor.max(last.min(far));
            }
            self.migrate();
            let bucket = &mut self.wheel[(self.cursor % WHEEL) as usize];
            if let Some((k, &p)) = bucket.iter().enumerate().min_by_key(|&(_, p)| *p)
                && (p >> 64) as u64 <= limit
            {
                bucket.swap_remove(k);
                self.len -= 1;
                return Some(Timer {
                    at: self.at(p),
                    slot: (p >> 32) as u32 & 0x3fff_ffff,
                    tag: p as u32,
                    kind: match (p >> 62) as u32 & 3 {
                        0 => TimerKind::Due,
                        1 => TimerKind::Deadline,
                        _ => TimerKind::ConnectDeadline,
                    },
                });
            }
            if self.cursor >= last || self.len == 0 && self.far.is_empty() {
                return None;
            }
            self.cursor += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_pop_in_time_order_and_keep_their_fields() {
        let mut t = Timers::new();
        let base = t.origin + Duration::from_secs(5);
        let kinds = [
            TimerKind::Due,
            TimerKind::Deadline,
            TimerKind::ConnectDeadline,
        ];
        for i in 0..30u32 {
            t.push(Timer {
                at: base + Duration::from_nanos(u64::from((i * 7919) % 30) * 1_000_001),
                slot: (1 << 30) - 1 - i,
                tag: u32::MAX - i,
                kind: kinds[i as usize % 3],
            });
        }
        assert_eq!(t.pop_until(base - Duration::from_nanos(1)), None);
        let mut last = None;
        let mut n = 0;
        while let Some(x) = t.pop_until(base + Duration::from_secs(1)) {
            let i = u32::MAX - x.tag;
            assert_eq!(x.slot, (1 << 30) - 1 - i);
            assert_eq!(x.kind, kinds[i as usize % 3]);
            assert_eq!(
                x.at,
                base + Duration::from_nanos(u64::from((i * 7919) % 30) * 1_000_001)
            );
            assert!(last.is_none_or(|l| l <= x.at));
            last = Some(x.at);
            n += 1;
        }
        assert_eq!(n, 30);
        assert_eq!(t.next(), None);
    }

    #[test]
    fn wake_ups_round_up_to_the_slack_grid() {
        let t = Timers::new();
        let o = t.origin;
        assert_eq!(t.wake_at(o), o);
        assert_eq!(t.wake_at(o - Duration::from_secs(1)), o);
        for k in [1u32, 2, 7, 1000] {
            let grid = o + SLACK * k;
            assert_eq!(t.wake_at(grid), grid);
            assert_eq!(t.wake_at(grid - Duration::from_nanos(1)), grid);
            assert_eq!(t.wake_at(grid - SLACK + Duration::from_nanos(1)), grid);
            assert_eq!(t.wake_at(grid + Duration::from_nanos(1)), grid + SLACK);
        }
        // A wake-up is never before its timer, and never a whole SLACK after it.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = o + Duration::from_nanos(x % 10_000_000_000);
            let w = t.wake_at(at);
            assert!(w >= at && w - at < SLACK, "{:?} -> {:?}", at - o, w - o);
        }
    }

    #[test]
    fn timers_near_far_and_overdue_pop_in_time_order() {
        let mut t = Timers::new();
        let o = t.origin;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut want = Vec::new();
        // Timers from now to 20 s (beyond the wheel's span), some at the same instant.
        for i in 0..3000u32 {
            let at = o + Duration::from_micros(rnd(20_000_000) / 10 * 10);
            want.push(at);
            t.push(Timer {
                at,
                slot: i,
                tag: i,
                kind: TimerKind::Due,
            });
        }
        want.sort();
        let mut got = Vec::new();
        let mut now = o;
        while now < o + Duration::from_secs(21) {
            now += Duration::from_micros(700 + rnd(3000));
            let first = t.next();
            while let Some(x) = t.pop_until(now) {
                assert!(x.at <= now);
                assert!(first.is_some_and(|f| f <= x.at));
                got.push(x.at);
            }
            assert!(t.next().is_none_or(|n| n > now));
            // An overdue timer pushed now fires at the next pop.
            if rnd(50) == 0 {
                let at = now - Duration::from_millis(rnd(5));
                t.push(Timer {
                    at,
                    slot: 1,
                    tag: 1,
                    kind: TimerKind::Deadline,
                });
                assert_eq!(t.next(), Some(at));
                assert_eq!(t.pop_until(now).map(|x| x.at), Some(at));
            }
        }
        assert_eq!(got, want);
        assert_eq!(t.next(), None);
    }
}
