//! Rate-limited log lines: at most one line per reason per second, with the count of those not printed.
//!
//! Servers report every event (a bad client, a refused connection); a flood of them must not become a flood of
//! log lines. [`RateLimiter::admit`] says whether a line for a reason may be printed now and how many of the
//! same reason were held back since the last one; [`RateLimiter::flush`] gives the counts still held back once
//! their second is over, so a burst that stopped is still summed up.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// One line per key per period, with counts of the rest.
#[derive(Debug)]
pub struct RateLimiter<K> {
    period: Duration,
    /// Per key: when its last line was printed, and how many were held back since.
    keys: HashMap<K, (Instant, u64)>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// A limiter printing at most one line per key per `period`.
    pub fn new(period: Duration) -> Self {
        RateLimiter {
            period,
            keys: HashMap::new(),
        }
    }

    /// One line per key per second.
    pub fn per_second() -> Self {
        Self::new(Duration::from_secs(1))
    }

    /// `Some(held_back)` when a line for `key` may be printed at `now` (`held_back` lines of that key were not
    /// printed since the previous one); `None` when it must be held back (and is counted).
    pub fn admit(&mut self, key: K, now: Instant) -> Option<u64> {
        match self.keys.get_mut(&key) {
            Some((last, held)) if now.duration_since(*last) < self.period => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                *last = now;
                Some(std::mem::take(held))
            }
            None => {
                self.keys.insert(key, (now, 0));
                Some(0)
            }
        }
    }

    /// Keys whose period is over with lines still held back, and how many: one summary line each. Their counts
    /// start again from zero.
    pub fn flush(&mut self, now: Instant) -> Vec<(K, u64)> {
        let mut out = Vec::new();
        for (k, (last, held)) in self.keys.iter_mut() {
            if *held > 0 && now.duration_since(*last) >= self.period {
                out.push((k.clone(), std::mem::take(held)));
                *last = now;
            }
        }
        // Forget keys quiet for a while, so a stream of distinct keys cannot grow the map without end.
        let period = self.period;
        self.keys
            .retain(|_, (last, held)| *held > 0 || now.duration_since(*last) < 60 * period);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_per_period_with_counts() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut r = RateLimiter::per_second();
        assert_eq!(r.admit("deadline", ms(0)), Some(0));
        for i in 1..=500 {
            assert_eq!(r.admit("deadline", ms(i)), None);
        }
        // Another reason is not held back by the first.
        assert_eq!(r.admit("refused", ms(10)), Some(0));
        assert!(r.flush(ms(900)).is_empty());
        assert_eq!(r.admit("deadline", ms(1000)), Some(500));
        assert_eq!(r.admit("deadline", ms(1001)), None);
        assert_eq!(r.admit("deadline", ms(1002)), None);
        // The burst stopped: flush sums it up once its second is over.
        assert_eq!(r.flush(ms(1500)), vec![]);
        assert_eq!(r.flush(ms(2000)), vec![("deadline", 2)]);
        assert!(r.flush(ms(3000)).is_empty());
        // Quiet keys are forgotten.
        r.flush(ms(200_000));
        assert!(r.keys.is_empty());
    }
}
