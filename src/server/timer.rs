//! A precise wake-up for the event loop: a `timerfd` armed to an absolute `CLOCK_MONOTONIC` deadline and
//! registered in the loop's poll (epoll's own timeout counts whole milliseconds; replay answers are delayed by
//! server times of tens of microseconds).
#![allow(unsafe_code)] // the server loop's timerfd (create, arm, read) and its poll

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

/// A non-blocking timerfd on `CLOCK_MONOTONIC`, the clock [`Instant`] reads on Linux.
#[derive(Debug)]
pub(crate) struct TimerFd {
    fd: OwnedFd,
    armed: Option<Instant>,
}

impl TimerFd {
    /// A disarmed timer.
    pub fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create takes no pointers; a negative result is an error, anything else a new fd we own.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a valid descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(TimerFd { fd, armed: None })
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
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid timespec to write into.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let left = at.saturating_duration_since(Instant::now());
        let mut ns = now.tv_nsec as u64 + u64::from(left.subsec_nanos());
        let mut secs = now.tv_sec as u64 + left.as_secs() + ns / 1_000_000_000;
        ns %= 1_000_000_000;
        if secs == 0 && ns == 0 {
            // An all-zero value would disarm the timer.
            ns = 1;
            secs = 0;
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: secs as libc::time_t,
                tv_nsec: ns as libc::c_long,
            },
        };
        // SAFETY: the fd is ours and `spec` a valid itimerspec; the old value is not asked for.
        let r = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed = Some(at);
        Ok(())
    }

    /// Clears a fired timer (reads its expiration count); it stays disarmed until armed again.
    pub fn clear(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading at most 8 bytes into an 8-byte buffer from our own non-blocking fd.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
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
        let mut pfd = libc::pollfd {
            fd: t.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 5000) };
        assert_eq!(n, 1);
        assert!(Instant::now() >= at, "fired early");
        t.clear();
        assert_eq!(t.armed(), None);
    }
}
