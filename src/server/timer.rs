//! A precise wake-up for the event loop: a `timerfd` armed to an absolute `CLOCK_MONOTONIC` deadline and
//! registered in the loop's poll (epoll's own timeout counts whole milliseconds; replay answers are delayed by
//! server times of tens of microseconds).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

/// A non-blocking timerfd on `CLOCK_MONOTONIC`, the clock [`Instant`] reads on Linux ([`crate::sys::TimerFd`]),
/// and the deadline it is armed for.
#[derive(Debug)]
pub(crate) struct TimerFd {
    fd: crate::sys::TimerFd,
    armed: Option<Instant>,
}

impl TimerFd {
    /// A disarmed timer.
    pub fn new() -> io::Result<Self> {
        Ok(TimerFd {
            fd: crate::sys::TimerFd::new()?,
            armed: None,
        })
    }

    /// When the timer fires next, if armed.
    pub fn armed(&self) -> Option<Instant> {
        self.armed
    }

    /// Fires at `at` (at once if it passed).
    pub fn arm(&mut self, at: Instant) -> io::Result<()> {
        if self.armed == Some(at) {
            return Ok(());
        }
        self.fd.arm(at)?;
        self.armed = Some(at);
        Ok(())
    }

    /// Clears a fired timer (reads its expiration count); it stays disarmed until armed again.
    pub fn clear(&mut self) {
        let _ = self.fd.expirations();
        self.armed = None;
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Asks the kernel for the tightest timer slack on this thread, so timed wake-ups are not deferred by the
/// default 50 us.
pub(crate) fn tight_timer_slack() {
    let _ = crate::sys::set_timer_slack(std::time::Duration::from_nanos(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_after_its_deadline() {
        let mut t = TimerFd::new().unwrap();
        let at = Instant::now() + std::time::Duration::from_millis(20);
        t.arm(at).unwrap();
        assert_eq!(t.armed(), Some(at));
        assert!(crate::sys::wait_readable(&t.fd, std::time::Duration::from_secs(5)).unwrap());
        assert!(Instant::now() >= at, "fired early");
        t.clear();
        assert_eq!(t.armed(), None);
    }
}
