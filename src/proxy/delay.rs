//! The delay line: when a chunk that arrived at `t` leaves the emulated path, and a precise sleep to that moment.
//!
//! Accuracy: a sleeping thread wakes late by the kernel's timer slack (50 us by default) plus scheduling
//! latency. Each releasing thread therefore sets its timer slack to 1 ns, sleeps with an absolute deadline
//! (`clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`, the clock [`Instant`] uses) until a margin before the
//! release time, and spins (yielding) for the rest. The margin adapts: it follows the recent oversleeps of
//! the kernel sleep plus a reserve, between [`SPIN`] and [`MAX_MARGIN`], so the release itself is on time to
//! a few microseconds even where waking a thread is slow.
//!
//! The receiving application must wake up too: on a virtual machine an idle CPU halts, and waking it costs
//! from tens of microseconds to half a millisecond, which is added to every delayed message that comes
//! after a quiet spell (as it would be behind a really distant network). When asked ([`set_cpu_wake`]),
//! while a release thread spins its margin the proxy holds a CPU-latency request of 0
//! (`/dev/cpu_dma_latency`, the Linux PM QoS interface): the kernel wakes idle CPUs then (off the critical
//! path) and lets them poll instead of halting until the data is written, so the receiver wakes at once.
//! Where that device cannot be opened (not root) it is skipped. Off by default: it is a machine-wide setting.
#![allow(unsafe_code)] // recvmsg and its SO_TIMESTAMPNS control message (read_stamped)

use super::impairment::JitterDist;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The smallest margin before a release time at which the sleeping thread wakes and spins.
pub const SPIN: Duration = Duration::from_micros(150);

/// A small, fast pseudo-random generator (SplitMix64); impairment needs speed and independence between
/// connections, not cryptographic strength.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Whether the next datagram is lost under `imp`: by the independent `loss`, or by the Gilbert-Elliott
    /// chain, whose state (`bad`) then takes its step.
    pub(crate) fn lost(&mut self, imp: &super::impairment::Impairment, bad: &mut bool) -> bool {
        let mut lost = self.chance(imp.loss);
        if let Some(ge) = &imp.gilbert_elliott {
            let p_loss = if *bad { ge.loss_bad } else { ge.loss_good };
            lost |= self.chance(p_loss);
            *bad = if *bad {
                !self.chance(ge.r)
            } else {
                self.chance(ge.p)
            };
        }
        lost
    }

    /// A generator seeded from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator seeded from the clock and a process-wide counter.
    pub fn from_entropy() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(t ^ COUNTER.fetch_add(0x6A09_E667_F3BC_C909, Ordering::Relaxed))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// One delay sample in nanoseconds (may be negative before clipping) for `delay` +- `jitter`.
    pub fn delay_sample_ns(&mut self, delay: Duration, jitter: Duration, dist: JitterDist) -> f64 {
        let d = delay.as_nanos() as f64;
        let j = jitter.as_nanos() as f64;
        if j == 0.0 {
            return d;
        }
        match dist {
            JitterDist::Uniform => d + j * (2.0 * self.next_f64() - 1.0),
            JitterDist::Normal => d + j * self.normal().clamp(-4.0, 4.0),
            JitterDist::Pareto => {
                const ALPHA: f64 = 3.0;
                let u = 1.0 - self.next_f64(); // (0, 1]
                // Pareto(x_m = 1, alpha) minus 1 has mean 1/(alpha-1); scale so the mean extra is j.
                let extra = (u.powf(-1.0 / ALPHA) - 1.0) * (ALPHA - 1.0) * j;
                d + extra.min(20.0 * j)
            }
        }
    }
}

/// Release times of one direction: order-keeping and never earlier than arrival.
#[derive(Debug, Clone)]
pub struct DelayLine {
    last: Option<Instant>,
    rng: Rng,
}

impl DelayLine {
    /// A delay line with its own random generator.
    pub fn new(rng: Rng) -> Self {
        DelayLine { last: None, rng }
    }

    /// The release time of a chunk that entered the path at `ready` (arrival, or the end of its serialisation
    /// when rate limited): `ready + max(0, delay + jitter sample)`, but never before the previous release.
    pub fn release(
        &mut self,
        ready: Instant,
        delay: Duration,
        jitter: Duration,
        dist: JitterDist,
    ) -> Instant {
        let ns = self.rng.delay_sample_ns(delay, jitter, dist).max(0.0);
        let mut t = ready + Duration::from_nanos(ns as u64);
        if let Some(last) = self.last {
            t = t.max(last);
        }
        self.last = Some(t);
        t
    }

    /// The latest release time handed out so far.
    pub fn last(&self) -> Option<Instant> {
        self.last
    }
}

/// Lowers this thread's timer slack to 1 ns (Linux), so sleeps end on time.
pub fn precise_timers_for_this_thread() {
    let _ = crate::sys::set_timer_slack(std::time::Duration::from_nanos(1));
}

/// Asks for real-time scheduling (SCHED_FIFO, lowest priority) for this thread, so that on a loaded machine it
/// still wakes at its release time; silently stays a normal thread when not permitted (not root, no
/// CAP_SYS_NICE, RLIMIT_RTPRIO 0). Returns whether it worked. The kernel's real-time throttling keeps such
/// threads from starving the machine.
pub fn realtime_for_this_thread() -> bool {
    crate::sys::set_thread_sched(crate::sys::Sched::Fifo(1)).is_ok()
}

/// Returns this thread to normal scheduling (after [`realtime_for_this_thread`]).
pub fn normal_for_this_thread() {
    let _ = crate::sys::set_thread_sched(crate::sys::Sched::Normal);
}

/// Asks the kernel to timestamp arriving data on `fd` (SO_TIMESTAMPNS), read with [`read_stamped`].
pub fn enable_rx_timestamps(fd: impl std::os::fd::AsFd) -> bool {
    crate::sys::setsockopt_on(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS).is_ok()
}

/// Reads like `read(2)` and returns when the data arrived: the kernel's receive timestamp (SO_TIMESTAMPNS, the
/// newest segment read) mapped onto [`Instant`], or now when the kernel gave none. Arrival then does not include
/// the time this thread took to wake up (on a virtual machine, waking an idle CPU costs tens of microseconds).
pub fn read_stamped(fd: std::os::fd::RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Instant)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 16]; // 128 bytes, 8-aligned: room for one timespec control message
    // SAFETY: msghdr is plain data; zeroed is a valid empty value that is filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: iov points into `buf` (valid for its length), control into `cbuf`; both outlive the call.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    let now = Instant::now();
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut arrival = now;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                let stamp =
                    std::time::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
                if let Ok(ago) = std::time::SystemTime::now().duration_since(stamp) {
                    // Only trust a plausible stamp (clock steps would make it nonsense).
                    if ago < Duration::from_millis(100) {
                        arrival = now.checked_sub(ago).unwrap_or(now);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, arrival))
}

/// The largest wake-up margin: a release thread never spins longer than this before a release.
pub const MAX_MARGIN: Duration = Duration::from_millis(1);

/// Reserve added to the worst recent oversleep to make the margin.
const RESERVE: Duration = Duration::from_micros(50);

/// The current wake-up margin in nanoseconds (process-wide: the oversleep is a property of the machine).
static MARGIN_NS: AtomicU64 = AtomicU64::new(SPIN.as_nanos() as u64);

/// Whether release threads may hold a CPU-latency request while they spin (see the module documentation).
static CPU_WAKE: AtomicBool = AtomicBool::new(false);

/// Allows or forbids waking idle CPUs (a CPU-latency request of 0) during the last margin before a release.
pub fn set_cpu_wake(on: bool) {
    CPU_WAKE.store(on, Ordering::Relaxed);
}

/// The current margin before a release time at which a release thread stops sleeping and spins.
pub fn wake_margin() -> Duration {
    Duration::from_nanos(MARGIN_NS.load(Ordering::Relaxed))
}

/// Learns from one kernel sleep that ended `late` after its deadline: the margin moves 1/8 of the way up to
/// cover it (plus the reserve), so a wake-up that is slow every time is covered after a few sleeps while a
/// single outlier (the host pausing the machine) does not make every later release spin long; it decays by
/// 1/64 of the difference per punctual sleep.
fn learn_oversleep(late: Duration) {
    let cur = MARGIN_NS.load(Ordering::Relaxed);
    MARGIN_NS.store(next_margin(cur, late), Ordering::Relaxed);
}

/// The margin (ns) after a sleep that ended `late`, from the margin `cur` (ns); see [`learn_oversleep`].
fn next_margin(cur: u64, late: Duration) -> u64 {
    let want = (late + RESERVE).clamp(SPIN, MAX_MARGIN).as_nanos() as u64;
    if want >= cur {
        cur + (want - cur).div_ceil(8)
    } else {
        cur - (cur - want) / 64
    }
}

/// Process-wide CPU-latency request: a count of holders and the open `/dev/cpu_dma_latency` (None when it
/// could not be opened: then nothing is done).
struct CpuLatency {
    holders: u32,
    file: Option<std::fs::File>,
    tried: bool,
}

static CPU_LATENCY: Mutex<CpuLatency> = Mutex::new(CpuLatency {
    holders: 0,
    file: None,
    tried: false,
});

/// The "no constraint" value of the CPU-latency request (the kernel's default), in microseconds.
const NO_LATENCY_LIMIT: i32 = 2_000_000_000;

fn cpu_latency_write(f: &mut std::fs::File, us: i32) {
    use std::io::Write;
    let _ = f.write_all(&us.to_ne_bytes());
}

/// While alive, idle CPUs poll instead of halting (CPU-latency request 0); see the module documentation.
#[derive(Debug)]
pub struct CpusAwake(bool);

impl CpusAwake {
    /// Wakes idle CPUs and keeps them polling until dropped (nothing when not permitted or turned off).
    pub fn hold() -> CpusAwake {
        if !CPU_WAKE.load(Ordering::Relaxed) {
            return CpusAwake(false);
        }
        let mut l = CPU_LATENCY.lock().unwrap_or_else(|e| e.into_inner());
        if !l.tried {
            l.tried = true;
            l.file = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/cpu_dma_latency")
                .ok();
            if let Some(f) = l.file.as_mut() {
                cpu_latency_write(f, NO_LATENCY_LIMIT);
            }
        }
        let first = l.holders == 0;
        let Some(f) = l.file.as_mut() else {
            return CpusAwake(false);
        };
        if first {
            cpu_latency_write(f, 0);
        }
        l.holders += 1;
        CpusAwake(true)
    }
}

impl Drop for CpusAwake {
    fn drop(&mut self) {
        if !self.0 {
            return;
        }
        let mut l = CPU_LATENCY.lock().unwrap_or_else(|e| e.into_inner());
        l.holders = l.holders.saturating_sub(1);
        if l.holders == 0
            && let Some(f) = l.file.as_mut()
        {
            cpu_latency_write(f, NO_LATENCY_LIMIT);
        }
    }
}

/// Kernel sleep until `t` on CLOCK_MONOTONIC with an absolute deadline (no drift from a relative sleep that
/// starts late); returns early on a signal, which the caller's loop handles.
fn sleep_abs(t: Instant) {
    crate::sys::sleep_until(t);
}

/// A kernel timer an event loop polls (timerfd, absolute CLOCK_MONOTONIC deadline, nanosecond resolution):
/// the event-loop form of the sleep in [`sleep_until`]. The loop arms it at the [`wake_margin`] before its
/// next release, and spins (polling its other sockets without waiting) for the rest.
#[derive(Debug)]
pub struct LoopTimer {
    fd: crate::sys::TimerFd,
    armed: Option<Instant>,
}

impl LoopTimer {
    /// A disarmed timer.
    pub fn new() -> std::io::Result<LoopTimer> {
        Ok(LoopTimer {
            fd: crate::sys::TimerFd::new()?,
            armed: None,
        })
    }

    /// The descriptor to poll (readable when the timer fired).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    /// Makes the timer fire at `t` (unless it is armed for that time already).
    pub fn arm(&mut self, t: Instant) {
        if self.armed == Some(t) {
            return;
        }
        let _ = self.fd.arm(t.max(Instant::now() + Duration::from_nanos(1)));
        self.armed = Some(t);
    }

    /// After the descriptor was reported readable: consumes the expiry and learns how late it woke (the
    /// oversleep moves the process-wide [`wake_margin`], as [`sleep_until`]'s sleeps do).
    pub fn fired(&mut self) {
        if self.fd.expirations().is_ok()
            && let Some(t) = self.armed.take()
        {
            learn_oversleep(Instant::now().saturating_duration_since(t));
        }
    }
}

/// The release loop of a queue of timed items behind `lock` (woken through `cv` when an earlier item arrives):
/// waits on `cv` until the [`wake_margin`] before the earliest release (`next`), spins the rest, and calls
/// `release` with the locked queue and the current time once the earliest item is due (it takes the due items,
/// drops the guard and sends them). When it had to wait, idle CPUs are kept awake ([`CpusAwake`]) from the end
/// of the wait until `release` returns. Returns when `stopping` says so (checked at least every `poll`).
/// The UDP proxy's and the bridge's release threads both run on it.
pub fn release_loop<T>(
    lock: &Mutex<T>,
    cv: &std::sync::Condvar,
    poll: Duration,
    stopping: impl Fn() -> bool,
    next: impl Fn(&T) -> Option<Instant>,
    mut release: impl FnMut(std::sync::MutexGuard<'_, T>, Instant),
) {
    let relock = || lock.lock().unwrap_or_else(|e| e.into_inner());
    let mut awake: Option<CpusAwake> = None;
    let mut waited = false;
    let mut h = relock();
    loop {
        if stopping() {
            return;
        }
        let now = Instant::now();
        match next(&h) {
            None => {
                h = cv
                    .wait_timeout(h, poll)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            Some(at) if at <= now => {
                release(h, now);
                drop(awake.take());
                h = relock();
            }
            Some(at) if at - now > wake_margin() => {
                h = cv
                    .wait_timeout(h, (at - now - wake_margin()).min(poll))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                waited = true;
            }
            Some(_) => {
                if waited && awake.is_none() {
                    awake = Some(CpusAwake::hold());
                }
                waited = false;
                drop(h);
                std::hint::spin_loop();
                h = relock();
            }
        }
    }
}

/// Sleeps until `t`: a kernel sleep until the [`wake_margin`] before it, then spinning. When it had to sleep,
/// idle CPUs are kept awake from the end of the sleep until the returned guard is dropped (drop it right
/// after the write that `t` was for).
pub fn sleep_until(t: Instant) -> Option<CpusAwake> {
    let mut awake = None;
    loop {
        let now = Instant::now();
        if now >= t {
            return awake;
        }
        let left = t - now;
        let margin = wake_margin();
        if left > margin {
            let wake = t - margin;
            sleep_abs(wake);
            learn_oversleep(Instant::now().saturating_duration_since(wake));
            if awake.is_none() {
                awake = Some(CpusAwake::hold());
            }
        } else if left > Duration::from_micros(20) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_never_goes_negative() {
        let mut line = DelayLine::new(Rng::new(7));
        let t0 = Instant::now();
        let mut prev = t0;
        for i in 0..10_000u64 {
            let arrival = t0 + Duration::from_micros(i * 10);
            let r = line.release(
                arrival,
                Duration::from_millis(1),
                Duration::from_millis(3),
                JitterDist::Uniform,
            );
            assert!(r >= arrival, "released before arrival");
            assert!(r >= prev, "reordered");
            prev = r;
        }
    }

    #[test]
    fn distributions_have_the_documented_means() {
        let mut rng = Rng::new(42);
        let n = 200_000;
        let d = Duration::from_millis(10);
        let j = Duration::from_millis(1);
        for (dist, want) in [
            (JitterDist::Uniform, 10e6),
            (JitterDist::Normal, 10e6),
            (JitterDist::Pareto, 11e6),
        ] {
            let mean = (0..n).map(|_| rng.delay_sample_ns(d, j, dist)).sum::<f64>() / n as f64;
            // Pareto is clipped at 20 x jitter, which takes a sliver off its mean.
            assert!((mean - want).abs() < 0.03e6, "{dist:?}: mean {mean}");
        }
        for _ in 0..10_000 {
            assert!(rng.delay_sample_ns(d, j, JitterDist::Pareto) >= 10e6);
        }
    }

    #[test]
    fn wake_margin_follows_slow_wakeups_but_not_one_outlier() {
        let us = |ns: u64| Duration::from_nanos(ns);
        let start = SPIN.as_nanos() as u64;
        let m = next_margin(start, Duration::from_millis(50)); // one outlier
        assert!(
            us(m) <= SPIN + MAX_MARGIN / 8 + Duration::from_micros(1),
            "{m}"
        );
        let mut m = start;
        for _ in 0..100 {
            m = next_margin(m, Duration::from_micros(600)); // slow every time
        }
        assert!(
            us(m) >= Duration::from_micros(600) && us(m) <= MAX_MARGIN,
            "{m}"
        );
        for _ in 0..2000 {
            m = next_margin(m, Duration::ZERO);
        }
        assert!(us(m) < Duration::from_micros(200), "{m}");
    }

    #[test]
    fn sleep_until_does_not_return_early() {
        precise_timers_for_this_thread();
        for _ in 0..5 {
            let t = Instant::now() + Duration::from_millis(2);
            sleep_until(t);
            assert!(Instant::now() >= t);
        }
    }
}
