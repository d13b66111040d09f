//! UDP mode: every client address gets its own upstream socket (a "session"), and every datagram its own
//! fate: lost (random, and/or Gilbert-Elliott bursts), delayed (delay + jitter, order kept as for TCP),
//! rate limited, held back to be overtaken (reorder), or sent twice (duplicate). One releasing thread sends
//! every datagram at its time, sleeping precisely and spinning the last microseconds.
//!
//! Sessions idle for [`SESSION_IDLE`] are forgotten.

use super::delay::{self, DelayLine, Rng};
use super::impairment::{Impairment, Way};
use super::rate::Link;
use super::{ConnCounters, ProxyError, Shared};
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A client silent this long (both directions) loses its session.
pub const SESSION_IDLE: Duration = Duration::from_secs(120);

const POLL: Duration = Duration::from_millis(100);

struct Entry {
    at: Instant,
    seq: u64,
    sock: Arc<UdpSocket>,
    to: Option<SocketAddr>,
    data: Arc<[u8]>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at && self.seq == o.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and the earliest release must come out first.
    fn cmp(&self, o: &Self) -> CmpOrdering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Sched {
    heap: Mutex<BinaryHeap<Entry>>,
    cv: Condvar,
    seq: AtomicU64,
}

impl Sched {
    fn push(&self, at: Instant, sock: &Arc<UdpSocket>, to: Option<SocketAddr>, data: Arc<[u8]>) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.heap.lock().expect("udp queue").push(Entry {
            at,
            seq,
            sock: sock.clone(),
            to,
            data,
        });
        self.cv.notify_one();
    }

    fn run(&self, shared: &Shared) {
        delay::precise_timers_for_this_thread();
        delay::realtime_for_this_thread();
        delay::release_loop(
            &self.heap,
            &self.cv,
            POLL,
            || shared.stopping(),
            |h| h.peek().map(|e| e.at),
            |mut h, _| {
                let e = h.pop().expect("peeked");
                drop(h);
                let sent = match e.to {
                    Some(to) => e.sock.send_to(&e.data, to),
                    None => e.sock.send(&e.data),
                };
                if sent.is_ok() {
                    shared.totals.datagrams_out.fetch_add(1, Ordering::Relaxed);
                }
            },
        );
    }
}

/// Per-direction state of one session.
struct WayState {
    line: DelayLine,
    link: Link,
    rng: Rng,
    bad: bool,
}

impl WayState {
    fn new() -> Self {
        WayState {
            line: DelayLine::new(Rng::from_entropy()),
            link: Link::new(),
            rng: Rng::from_entropy(),
            bad: false,
        }
    }
}

struct Session {
    client: SocketAddr,
    sock: Arc<UdpSocket>,
    ways: [Mutex<WayState>; 2],
    counters: Arc<ConnCounters>,
    last_seen: Mutex<Instant>,
}

/// The fate of one datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Dropped.
    Lost,
    /// Sent at these times (two for a duplicate); `reordered` when held back.
    Send {
        /// Release times.
        at: Vec<Instant>,
        /// Held back by the reorder delay.
        reordered: bool,
    },
}

/// Decides what happens to a datagram of `len` bytes that arrived at `arrival` in direction `way`.
fn decide(
    imp: &Impairment,
    way: Way,
    st: &mut WayState,
    arrival: Instant,
    len: usize,
    total: &Mutex<Link>,
) -> Fate {
    if st.rng.lost(imp, &mut st.bad) {
        return Fate::Lost;
    }
    let (rate, rate_total) = imp.rates(way);
    let mut ready = arrival;
    if let Some(bps) = rate {
        ready = st.link.transmit(arrival, len as u64, bps);
    }
    if let Some(bps) = rate_total {
        ready = ready.max(
            total
                .lock()
                .expect("link")
                .transmit(arrival, len as u64, bps),
        );
    }
    let (d, j) = imp.one_way(way);
    let reordered = st.rng.chance(imp.reorder);
    let at = if reordered {
        // Held back outside the delay line, so the datagrams behind it keep their times and overtake it.
        let ns = st.rng.delay_sample_ns(d, j, imp.jitter_dist).max(0.0);
        ready + Duration::from_nanos(ns as u64) + imp.reorder_delay()
    } else {
        st.line.release(ready, d, j, imp.jitter_dist)
    };
    let mut times = vec![at];
    if st.rng.chance(imp.duplicate) {
        times.push(at);
    }
    Fate::Send {
        at: times,
        reordered,
    }
}

fn handle_datagram(
    shared: &Shared,
    sched: &Sched,
    s: &Session,
    way: Way,
    data: &[u8],
    front: &Arc<UdpSocket>,
) {
    let arrival = Instant::now();
    let t = &shared.totals;
    t.datagrams_in.fetch_add(1, Ordering::Relaxed);
    *s.last_seen.lock().expect("session") = arrival;
    let imp = shared.impairment();
    let fate = {
        let mut st = s.ways[match way {
            Way::Up => 0,
            Way::Down => 1,
        }]
        .lock()
        .expect("session");
        decide(
            &imp,
            way,
            &mut st,
            arrival,
            data.len(),
            shared.total_link(way),
        )
    };
    match fate {
        Fate::Lost => {
            t.datagrams_lost.fetch_add(1, Ordering::Relaxed);
        }
        Fate::Send { at, reordered } => {
            if reordered {
                t.datagrams_reordered.fetch_add(1, Ordering::Relaxed);
            }
            if at.len() > 1 {
                t.datagrams_duplicated.fetch_add(1, Ordering::Relaxed);
            }
            s.counters.add_bytes(t, way, data.len() as u64);
            let data: Arc<[u8]> = Arc::from(data);
            for a in at {
                match way {
                    Way::Up => sched.push(a, &s.sock, None, data.clone()),
                    Way::Down => sched.push(a, front, Some(s.client), data.clone()),
                }
            }
        }
    }
}

/// Binds the client-facing socket and starts the threads.
#[allow(clippy::type_complexity)]
pub(crate) fn start(
    listen: SocketAddr,
    shared: Arc<Shared>,
) -> Result<(SocketAddr, Box<dyn Fn() + Send>, JoinHandle<()>), ProxyError> {
    let bind_err = |source| ProxyError::Bind {
        what: "udp clients",
        addr: listen,
        source,
    };
    let front = UdpSocket::bind(listen).map_err(bind_err)?;
    front.set_read_timeout(Some(POLL)).map_err(bind_err)?;
    let addr = front.local_addr().map_err(bind_err)?;
    let front = Arc::new(front);
    let sched = Arc::new(Sched::default());
    let release = {
        let (sched, shared) = (sched.clone(), shared.clone());
        std::thread::Builder::new()
            .name("proxy-udp-release".into())
            .spawn(move || sched.run(&shared))
            .map_err(bind_err)?
    };
    let thread = std::thread::Builder::new()
        .name("proxy-udp".into())
        .spawn(move || {
            front_loop(&front, &shared, &sched);
            let _ = release.join();
        })
        .map_err(bind_err)?;
    Ok((addr, Box::new(|| {}), thread))
}

fn new_session(shared: &Arc<Shared>, client: SocketAddr) -> Option<Arc<Session>> {
    let up = *shared.upstream.first()?;
    let local: SocketAddr = match up {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(local).ok()?;
    sock.connect(up).ok()?;
    sock.set_read_timeout(Some(POLL)).ok()?;
    let counters = shared.register(client);
    *counters.upstream.lock().expect("upstream") = Some(up);
    Some(Arc::new(Session {
        client,
        sock: Arc::new(sock),
        ways: [Mutex::new(WayState::new()), Mutex::new(WayState::new())],
        counters,
        last_seen: Mutex::new(Instant::now()),
    }))
}

fn front_loop(front: &Arc<UdpSocket>, shared: &Arc<Shared>, sched: &Arc<Sched>) {
    let sessions: Arc<Mutex<HashMap<SocketAddr, Arc<Session>>>> = Arc::default();
    let mut buf = vec![0u8; 65536];
    let mut backs: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stopping() {
        let (n, from) = match front.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue, // timeout, or an ICMP error from an earlier send: keep serving
        };
        let known = sessions.lock().expect("sessions").get(&from).cloned();
        let s = match known {
            Some(s) => s,
            None => {
                if sessions.lock().expect("sessions").len() >= shared.max_clients {
                    // Over the limit: a new address gets no upstream socket and no thread.
                    shared.totals.refused.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let Some(s) = new_session(shared, from) else {
                    shared
                        .totals
                        .upstream_failures
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                sessions.lock().expect("sessions").insert(from, s.clone());
                let (s2, shared2, sched2, front2, sessions2) = (
                    s.clone(),
                    shared.clone(),
                    sched.clone(),
                    front.clone(),
                    sessions.clone(),
                );
                if let Ok(h) = std::thread::Builder::new()
                    .name("proxy-udp-back".into())
                    .spawn(move || back_loop(&s2, &shared2, &sched2, &front2, &sessions2))
                {
                    backs.push(h);
                }
                backs.retain(|h| !h.is_finished());
                s
            }
        };
        handle_datagram(shared, sched, &s, Way::Up, &buf[..n], front);
    }
    for h in backs {
        let _ = h.join();
    }
}

fn back_loop(
    s: &Arc<Session>,
    shared: &Shared,
    sched: &Sched,
    front: &Arc<UdpSocket>,
    sessions: &Mutex<HashMap<SocketAddr, Arc<Session>>>,
) {
    let mut buf = vec![0u8; 65536];
    while !shared.stopping() {
        match s.sock.recv(&mut buf) {
            Ok(n) => handle_datagram(shared, sched, s, Way::Down, &buf[..n], front),
            Err(_) => {
                if s.last_seen.lock().expect("session").elapsed() > SESSION_IDLE {
                    break;
                }
            }
        }
    }
    sessions.lock().expect("sessions").remove(&s.client);
    shared.unregister(s.counters.id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::GilbertElliott;

    #[test]
    fn gilbert_elliott_bursts_have_the_model_share() {
        let imp = Impairment {
            gilbert_elliott: Some(GilbertElliott {
                p: 0.01,
                r: 0.25,
                loss_good: 0.0,
                loss_bad: 1.0,
            }),
            ..Default::default()
        };
        let mut st = WayState::new();
        st.rng = Rng::new(3);
        let total = Mutex::new(Link::new());
        let n = 200_000;
        let now = Instant::now();
        let lost = (0..n)
            .filter(|_| decide(&imp, Way::Up, &mut st, now, 100, &total) == Fate::Lost)
            .count();
        // Long-run bad share p/(p+r) = 0.0385.
        let share = lost as f64 / n as f64;
        assert!((share - 0.01 / 0.26).abs() < 0.005, "share {share}");
    }
}
