//! Window emulation. A proxy that terminates TCP on both sides acknowledges data at once, so without care a
//! bulk transfer through it is never slowed by the emulated latency. Here each direction keeps at most `limit`
//! bytes unacknowledged in the emulated path; a chunk counts as acknowledged one reverse delay after it was
//! released at the far side (the time its ACK would take to come back), so a bulk stream gets about
//! window / RTT, as real TCP with that window does.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    in_flight: u64,
    acks: VecDeque<(Instant, u64)>,
    closed: bool,
}

impl State {
    /// Counts the bytes acknowledged by `now` as no longer in flight, then reserves up to `want` bytes if fewer
    /// than `limit` are unacknowledged: how many (None: the window is full).
    fn take(&mut self, now: Instant, want: usize, limit: u64) -> Option<usize> {
        while let Some(&(t, n)) = self.acks.front() {
            if t > now {
                break;
            }
            self.acks.pop_front();
            self.in_flight = self.in_flight.saturating_sub(n);
        }
        if self.in_flight < limit {
            let n = (want as u64).min(limit - self.in_flight);
            self.in_flight += n;
            return Some(n as usize);
        }
        None
    }
}

/// The unacknowledged-bytes budget of one direction.
#[derive(Debug, Default)]
pub struct Window {
    state: Mutex<State>,
    cv: Condvar,
}

impl Window {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits until fewer than `limit` bytes are unacknowledged and reserves up to `want` bytes; returns how many
    /// were reserved, 0 when the window was closed. Give back what was not used with [`Window::unreserve`].
    pub fn reserve(&self, want: usize, limit: u64) -> usize {
        let mut s = self.state.lock().expect("window lock");
        loop {
            if s.closed {
                return 0;
            }
            let now = Instant::now();
            if let Some(n) = s.take(now, want, limit) {
                return n;
            }
            s = match s.acks.front() {
                Some(&(t, _)) => {
                    let wait = t
                        .saturating_duration_since(now)
                        .max(Duration::from_micros(1));
                    self.cv.wait_timeout(s, wait).expect("window lock").0
                }
                None => self.cv.wait(s).expect("window lock"),
            };
        }
    }

    /// Like [`Window::reserve`] without waiting: `Ok(n)` reserved (0: the window was closed), or `Err(when)`
    /// while `limit` bytes are unacknowledged, with the time the next acknowledgement is due (`None`: none is
    /// pending yet; one is recorded when data is released).
    pub fn try_reserve(&self, want: usize, limit: u64) -> Result<usize, Option<Instant>> {
        let mut s = self.state.lock().expect("window lock");
        if s.closed {
            return Ok(0);
        }
        if let Some(n) = s.take(Instant::now(), want, limit) {
            return Ok(n);
        }
        Err(s.acks.front().map(|&(t, _)| t))
    }

    /// Counts `n` bytes as unacknowledged without waiting (data read before the window applied).
    pub fn charge(&self, n: usize) {
        self.state.lock().expect("window lock").in_flight += n as u64;
    }

    /// Gives back reserved bytes that were not sent.
    pub fn unreserve(&self, n: usize) {
        let mut s = self.state.lock().expect("window lock");
        s.in_flight = s.in_flight.saturating_sub(n as u64);
        self.cv.notify_all();
    }

    /// Records that `n` bytes will be acknowledged at `at`. Acknowledgement times must not go backwards;
    /// a time earlier than the last one is raised to it.
    pub fn ack_at(&self, at: Instant, n: u64) {
        let mut s = self.state.lock().expect("window lock");
        let at = s.acks.back().map_or(at, |&(last, _)| at.max(last));
        s.acks.push_back((at, n));
        self.cv.notify_all();
    }

    /// Bytes currently unacknowledged (acknowledgements due by now are applied first).
    pub fn in_flight(&self) -> u64 {
        let mut s = self.state.lock().expect("window lock");
        let now = Instant::now();
        while let Some(&(t, n)) = s.acks.front() {
            if t > now {
                break;
            }
            s.acks.pop_front();
            s.in_flight = s.in_flight.saturating_sub(n);
        }
        s.in_flight
    }

    /// Wakes every waiter for good (connection ending).
    pub fn close(&self) {
        self.state.lock().expect("window lock").closed = true;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn blocks_until_acknowledged() {
        let w = Arc::new(Window::new());
        assert_eq!(w.reserve(100, 150), 100);
        assert_eq!(w.reserve(100, 150), 50);
        let t = Instant::now() + Duration::from_millis(30);
        w.ack_at(t, 100);
        let got = w.reserve(10, 150);
        assert_eq!(got, 10);
        assert!(
            Instant::now() >= t,
            "reserved before the acknowledgement was due"
        );
        w.unreserve(10);
        assert_eq!(w.in_flight(), 50);
        let w2 = w.clone();
        let h = std::thread::spawn(move || w2.reserve(1000, 50));
        std::thread::sleep(Duration::from_millis(20));
        w.close();
        assert_eq!(h.join().unwrap(), 0);
    }
}
