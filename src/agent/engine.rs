//! The scheduler and the probers.
//!
//! **Schedule.** Every target has its own open-loop schedule: when it is added it gets a random phase in
//! `[0, interval)`, and probe n is due at `added + phase + n x interval` (never "answer + interval"), so
//! thousands of agents do not fire together and a slow answer never shifts the next probe. A target kept by
//! [`Engine::set_targets`] keeps its schedule (a new interval applies from its next due probe). When the loop
//! was late by more than one interval (the machine was suspended, say) the missed slots are skipped, not sent
//! in a burst, and not counted. The loop wakes for its timers with slack: at the earliest timer rounded up
//! to the next multiple of [`SLACK`] (~2.1 ms; the kernel may add [`KERNEL_SLACK`]), and everything due
//! within [`BATCH`] of that wake-up is sent in it (up to 1 ms early: its lag counts as 0), so a probe is
//! sent at most ~3 ms late on an idle machine. The schedule lag (send instant - due instant) goes into
//! [`Snapshot::schedule_lag`].
//!
//! **TCP and UDP pings** (`tcp`, `udp`): over persistent connections. The loop starts a TCP connect
//! without blocking (a dead host costs no thread) and bounds it by the target's timeout; a worker thread then
//! runs the hello / pre-shared key handshake ([`crate::probe::hello`]) within the timeout (for UDP a worker
//! does both). The socket then goes non-blocking into one `mio` event loop that sends every due ping (a
//! sockperf message of the target's size) and reads every echo into one shared buffer (a connection keeps
//! only an incomplete message). The loop never blocks on a peer: a slow or dead peer only fails its own
//! probes. A ping not answered within the target's timeout counts as `timeout`; over TCP the connection is
//! then dropped (with every ping still outstanding on it, counted under the same reason) and a new one is
//! made at the next due time; over UDP the socket is kept, except with a key, where a timeout or refusal
//! means a new handshake (a restarted server forgot us). A due probe that finds its connection still being
//! made is skipped (not counted; the connection attempt's own outcome counts once). The ping sent right
//! after a new connection is ready answers the probe that asked for it; its lag is when the connection
//! attempt started (the set-up time is not the scheduler's). At most [`MAX_INFLIGHT`] pings are outstanding per
//! target (only reached when the timeout exceeds 4 intervals): one more counts the oldest as `timeout`.
//! A deadline may be noticed up to [`BATCH`] early.
//!
//! **Connect, ICMP and database probes** run single-shot on a pool of [`EngineConfig::workers`] threads
//! (a database probe reuses a kept session: one trivial query per probe, a new session after an error). The
//! loop hands due probes to the pool and never waits for them; their lag is measured when a worker starts
//! them. When a target's previous probe is still running at its next due time, that due probe is skipped
//! and not counted (the running one ends within the target's timeout and counts itself).
//!
//! **Reasons.** refused (RST, ICMP port unreachable), reset (closed or reset by the peer), unreachable (no
//! route), protocol (garbage, a wrong echo, not a sockperf-compatible server, a database error), auth (the
//! key exchange failed: the peer wants a key, holds another, holds none while we have one, or proved it
//! wrongly), timeout, dns ([`Engine::count_dns_error`], counted as a probe without changing `up`), other.
//!
//! **Memory per target**, with a 60 s window and a 1 s interval: about 1 KiB in the engine (the entry and
//! its statistics, see [`super::stats`]: ~400 bytes fixed plus 16 bytes per outcome in the window, at most
//! [`super::stats::RECENT_CAP`] outcomes = 16 KiB), ~300 bytes of loop state (the slot, up to
//! [`MAX_INFLIGHT`] outstanding pings, the timer entries), one socket, and an incomplete message while one
//! is arriving. Measured (release build, loopback, 5,000 TCP targets at 1 ping/s, 60 s window): 21 MB
//! resident for the whole process, about 6-7% of one core, schedule lag p99 under 2 ms.

mod messages;
mod pool;
mod stream;
mod timers;

use super::stats::TargetStats;
use super::{ErrorReason, Histogram, ProbeKind, Snapshot, TargetKey, TargetSpec};
use crate::wire::auth::Psk;
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Probes due within this long after a wake-up are sent in that wake-up.
pub const BATCH: Duration = Duration::from_millis(1);
/// The loop's timer slack: it wakes for its timers only at multiples of this span (2^21 ns, about 2.1 ms)
/// and handles every timer due by then, so timers due close together share one wake-up.
pub const SLACK: Duration = Duration::from_nanos(1 << 21);
/// The loop thread's kernel timer slack (`PR_SET_TIMERSLACK`): how late the kernel may end its wait, to
/// fire it together with other timers.
pub const KERNEL_SLACK: Duration = Duration::from_micros(500);
/// Most pings outstanding per target.
pub const MAX_INFLIGHT: usize = 4;

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The pre-shared key proven to every tcp/udp peer before any measurement traffic.
    pub psk: Option<Psk>,
    /// The span of the recent window behind [`super::WindowStats`] (default 60 s).
    pub window: Duration,
    /// Threads for connect, ICMP and database probes (default 4); as many again run the hello / key
    /// handshakes of new TCP and UDP connections.
    pub workers: usize,
    /// The resolution of the targets' RTT histograms (default [`super::buckets::Buckets::DEFAULT`]).
    pub buckets: super::buckets::Buckets,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            psk: None,
            window: Duration::from_secs(60),
            workers: 4,
            buckets: super::buckets::Buckets::DEFAULT,
        }
    }
}

/// Locks a mutex, taking the data of a poisoned one (a panicking prober must not stop the others).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the engine keeps per target, shared by the loop, the workers and snapshots.
struct Entry {
    /// Unique for the engine's life.
    id: u64,
    state: Mutex<EntryState>,
    /// A pool probe of this target is queued or running.
    busy: AtomicBool,
    /// The kept database session of a `db` target.
    db: Mutex<Option<pool::DbSession>>,
    /// The kept link session of a `db-link` target.
    link: Mutex<Option<crate::db::link::LinkSession>>,
    /// Statements of this target's link sessions still running in the local database (a link open given
    /// up on after the timeout stays counted until the server ends it): no new link open while above 0.
    link_inflight: Arc<std::sync::atomic::AtomicUsize>,
}

struct EntryState {
    spec: Arc<TargetSpec>,
    stats: TargetStats,
}

impl Entry {
    fn record_ok(&self, at: Instant, rtt: Duration) {
        lock(&self.state).stats.answered(at, rtt);
    }

    fn record_err(&self, at: Instant, f: &Failure) {
        lock(&self.state)
            .stats
            .failed(at, f.reason, format_args!("{}", f.detail));
    }
}

/// Why a probe failed, with the words for `last_error`.
#[derive(Debug, Clone)]
struct Failure {
    reason: super::ErrorReason,
    detail: String,
}

impl Failure {
    fn new(reason: super::ErrorReason, detail: impl Into<String>) -> Failure {
        Failure {
            reason,
            detail: detail.into(),
        }
    }
}

/// The reason an I/O error stands for.
fn io_reason(e: &io::Error) -> ErrorReason {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => ErrorReason::Refused,
        Some(libc::ECONNRESET) | Some(libc::EPIPE) | Some(libc::ECONNABORTED) => ErrorReason::Reset,
        Some(libc::EHOSTUNREACH)
        | Some(libc::ENETUNREACH)
        | Some(libc::EHOSTDOWN)
        | Some(libc::ENETDOWN)
        | Some(libc::EADDRNOTAVAIL)
        | Some(libc::EACCES)
        | Some(libc::EPERM) => ErrorReason::Unreachable,
        Some(libc::ETIMEDOUT) => ErrorReason::Timeout,
        _ => match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ErrorReason::Timeout,
            io::ErrorKind::UnexpectedEof => ErrorReason::Reset,
            _ => ErrorReason::Other,
        },
    }
}

/// A failure from an I/O error while doing `what`.
fn io_failure(what: &str, e: &io::Error) -> Failure {
    Failure::new(
        io_reason(e),
        format!("{what}: {}", crate::probe::connect::os_words(e)),
    )
}

/// State shared by the engine's threads.
struct Shared {
    registry: Mutex<BTreeMap<TargetKey, Arc<Entry>>>,
    lag: Mutex<Histogram>,
    /// Set when the engine stops; a `db-link` statement in flight gives up on it within 50 ms.
    stop: Arc<AtomicBool>,
}

impl Shared {
    fn record_lag(&self, lag: Duration) {
        lock(&self.lag).record_seconds(lag.as_secs_f64());
    }

    fn merge_lag(&self, h: &Histogram) {
        let mut lag = lock(&self.lag);
        for (a, b) in lag.counts.iter_mut().zip(h.counts.iter()) {
            *a += b;
        }
        lag.sum_s += h.sum_s;
        lag.count += h.count;
    }
}

/// A running engine: probes its targets until [`Engine::shutdown`] (or drop).
pub struct Engine {
    shared: Arc<Shared>,
    window: Duration,
    buckets: super::buckets::Buckets,
    to_loop: mpsc::Sender<messages::Msg>,
    waker: Arc<mio::Waker>,
    threads: Vec<JoinHandle<()>>,
    next_id: AtomicU64,
    rng: Mutex<u64>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("targets", &lock(&self.shared.registry).len())
            .finish()
    }
}

impl Engine {
    /// Starts the scheduler thread(s) with no targets.
    pub fn start(config: EngineConfig) -> io::Result<Engine> {
        let _ = crate::server::raise_fd_limit();
        let shared = Arc::new(Shared {
            registry: Mutex::new(BTreeMap::new()),
            lag: Mutex::new(Histogram::zero()),
            stop: Arc::new(AtomicBool::new(false)),
        });
        let workers = config.workers.max(1);
        let (to_loop, from_engine) = mpsc::channel();
        let poll = mio::Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), stream::WAKER)?);
        let mut threads = Vec::new();
        let keyed = config.psk.is_some();
        let psk = Arc::new(config.psk.clone());
        let handshakes = pool::spawn(
            "rt-agent-conn",
            workers,
            shared.clone(),
            psk,
            Some((to_loop.clone(), waker.clone())),
            &mut threads,
        )?;
        let probes = pool::spawn(
            "rt-agent-probe",
            workers,
            shared.clone(),
            Arc::new(None),
            None,
            &mut threads,
        )?;
        let lp = stream::Loop::new(poll, from_engine, handshakes, probes, shared.clone(), keyed)?;
        threads.push(
            std::thread::Builder::new()
                .name("rt-agent-loop".into())
                .spawn(move || lp.run())?,
        );
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Ok(Engine {
            shared,
            window: config.window,
            buckets: config.buckets,
            to_loop,
            waker,
            threads,
            next_id: AtomicU64::new(1),
            rng: Mutex::new(u64::from_le_bytes(seed) | 1),
        })
    }

    /// A random phase in `[0, interval)`.
    fn phase(&self, interval: Duration) -> Duration {
        let ns = interval.as_nanos().min(u128::from(u64::MAX)) as u64;
        if ns == 0 {
            return Duration::ZERO;
        }
        let mut x = lock(&self.rng);
        // xorshift64*
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        Duration::from_nanos(r % ns)
    }

    /// Replaces the target set. Targets whose [`TargetSpec::key`] is unchanged keep their counters, histogram
    /// and schedule (their interval/timeout/address are updated); new ones start at a random phase within
    /// their interval; removed ones stop and disappear from snapshots.
    pub fn set_targets(&self, targets: Vec<TargetSpec>) {
        let now = Instant::now();
        let mut msgs = Vec::new();
        {
            let mut reg = lock(&self.shared.registry);
            let mut old = std::mem::take(&mut *reg);
            for spec in targets {
                let key = spec.key();
                if reg.contains_key(&key) {
                    // A duplicate key: the first spec wins.
                    continue;
                }
                let spec = Arc::new(spec);
                let entry = match old.remove(&key) {
                    Some(entry) => {
                        let mut st = lock(&entry.state);
                        if *st.spec != *spec {
                            st.spec = spec.clone();
                            msgs.push(messages::Msg::Update {
                                id: entry.id,
                                spec: spec.clone(),
                            });
                        }
                        drop(st);
                        entry
                    }
                    None => {
                        let entry = Arc::new(Entry {
                            id: self.next_id.fetch_add(1, Ordering::Relaxed),
                            state: Mutex::new(EntryState {
                                spec: spec.clone(),
                                stats: TargetStats::new(now, self.window, self.buckets),
                            }),
                            busy: AtomicBool::new(false),
                            db: Mutex::new(None),
                            link: Mutex::new(None),
                            link_inflight: Arc::default(),
                        });
                        msgs.push(messages::Msg::Add {
                            entry: entry.clone(),
                            spec: spec.clone(),
                            first: now + self.phase(spec.interval),
                        });
                        entry
                    }
                };
                reg.insert(key, entry);
            }
            for (_, entry) in old {
                msgs.push(messages::Msg::Remove { id: entry.id });
                if matches!(lock(&entry.state).spec.probe, ProbeKind::Db { .. }) {
                    lock(&entry.db).take();
                }
                if let Some(l) = lock(&entry.link).take() {
                    l.close();
                }
            }
            // Sent under the registry lock, so concurrent calls reach the loop in registry order.
            for m in msgs {
                let _ = self.to_loop.send(m);
            }
        }
        let _ = self.waker.wake();
    }

    /// Counts a failed name resolution against every current target whose `target` label is `target` (reason
    /// `dns`), so a DNS failure shows in the metrics while the last good addresses keep being probed.
    pub fn count_dns_error(&self, target: &str) {
        let reg = lock(&self.shared.registry);
        for (key, entry) in reg.iter() {
            if key.target == target {
                lock(&entry.state)
                    .stats
                    .dns_failed(format_args!("{target} did not resolve"));
            }
        }
    }

    /// The current state of every target and the schedule lag.
    pub fn snapshot(&self) -> Snapshot {
        let entries: Vec<Arc<Entry>> = lock(&self.shared.registry).values().cloned().collect();
        let at = SystemTime::now();
        let now = Instant::now();
        let mut scratch = Vec::with_capacity(1024);
        let targets = entries
            .iter()
            .map(|e| {
                let st = lock(&e.state);
                st.stats.snapshot(st.spec.clone(), now, &mut scratch)
            })
            .collect();
        Snapshot {
            at,
            targets,
            schedule_lag: lock(&self.shared.lag).clone(),
        }
    }

    /// Stops probing, closes every connection and joins the threads (a worker still in the middle of a
    /// probe or handshake after one second is left to end on its own, within that target's timeout).
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.to_loop.send(messages::Msg::Stop);
        let _ = self.waker.wake();
        // The loop stops at once; it drops the pools' queues, and a worker ends after the probe it is running
        // (at most a target's timeout). Workers still busy after 1 s are left to end on their own (a process
        // that exits does not wait for them), so a stop never takes much more than a second.
        let deadline = Instant::now() + Duration::from_secs(1);
        for t in self.threads.drain(..) {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        for e in lock(&self.shared.registry).values() {
            lock(&e.db).take();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop_now();
    }
}

#[cfg(test)]
mod tests;
