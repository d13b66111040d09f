//! Reading a capture file into the matchers: issue 6's reader and decoder feed the [`Driver`].
#![forbid(unsafe_code)]

use super::driver::{ConnInfo, DriverCounts, L4, ProtoChoice, Segment};
use super::stats::{Collect, RpcReport, RpcStats, StatsConfig};
use super::tlskeys::KeyLog;
use super::{Driver, Proto, Sink};
use crate::capture::decode::Transport;
use crate::capture::{CaptureError, CaptureInfo, Filter, Packets, Step};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Feeds every TCP/UDP packet of `path` that passes `filter` to a driver, then closes what is still open.
pub fn feed(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    sink: &mut dyn Sink,
) -> Result<(CaptureInfo, DriverCounts), CaptureError> {
    feed_with(path, filter, Driver::new(choice), sink)
}

/// [`feed`], decrypting TLS with the session keys of `keylog`.
pub fn feed_keylog(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    keylog: Option<Arc<KeyLog>>,
    sink: &mut dyn Sink,
) -> Result<(CaptureInfo, DriverCounts), CaptureError> {
    let mut driver = Driver::new(choice);
    driver.set_keylog(keylog);
    feed_with(path, filter, driver, sink)
}

/// [`feed`] through a driver set up by the caller (e.g. [`Driver::with_content`], [`Driver::set_keylog`]).
pub fn feed_with(
    path: &Path,
    filter: &Filter,
    driver: Driver,
    sink: &mut dyn Sink,
) -> Result<(CaptureInfo, DriverCounts), CaptureError> {
    Ok(feed_on(
        Packets::open_filtered(path, filter)?,
        filter,
        driver,
        sink,
    ))
}

/// [`feed_with`] on any packet source (a file, or a live interface: then the sink also gets every packet that
/// passed the filter ([`Sink::packet`]) and the time as it goes on ([`Sink::tick`])).
pub fn feed_on(
    mut pk: Packets,
    filter: &Filter,
    mut driver: Driver,
    sink: &mut dyn Sink,
) -> (CaptureInfo, DriverCounts) {
    let mut matched = 0u64;
    // Request/response matching reads no TCP option.
    pk.set_tcp_options(crate::capture::decode::TcpOptions::Skip);
    let live = pk.is_live();
    let by_if = pk.keys_by_interface();
    // No --host/--port/--flow (the usual case): no per-packet call.
    let check = !filter.fields_empty();
    loop {
        // The decoding is written into this slot and read in place: moving it out of an event copied its
        // 136 bytes twice per packet.
        let mut slot = None;
        let step = pk.next_into(true, &mut slot);
        let (p, d) = match (&step, &slot) {
            (None, _) => break,
            (Some(Step::Packet(p)), Some(d)) => (p, d),
            (Some(Step::Packet(_)), None) => continue,
            (Some(Step::Tick(now)), _) => {
                sink.tick(Duration::from_nanos((*now).max(0) as u64));
                continue;
            }
        };
        if check && !filter.matches(Some(d)) {
            continue;
        }
        let (src_port, dst_port, l4) = match d.transport {
            Transport::Tcp(t) => (
                t.src_port,
                t.dst_port,
                L4::Tcp {
                    seq: t.seq,
                    ack: t.ack,
                    flags: t.flags,
                },
            ),
            Transport::Udp(u) => (u.src_port, u.dst_port, L4::Udp),
            Transport::Other(_) => continue,
        };
        matched += 1;
        let seg = Segment {
            ts_ns: p.ts_ns.max(0) as u64,
            src_ip: d.src,
            dst_ip: d.dst,
            src_port,
            dst_port,
            l4,
            payload: d.payload,
            wire_len: d.payload_len.max(d.payload.len() as u32),
        };
        if live {
            sink.packet(p, &seg);
        }
        if by_if {
            driver.set_interface(p.interface);
        }
        driver.segment(&seg, sink);
    }
    driver.finish(sink);
    let counts = driver.counts();
    let mut info = pk.finish();
    info.packets_matched = matched;
    (info, counts)
}

/// Result of `capture rpc`.
#[derive(Debug, Clone, Serialize)]
pub struct RpcResult {
    /// The file and how it was read.
    pub capture: CaptureInfo,
    /// Protocol forced on the command line, if any.
    pub forced_proto: Option<Proto>,
    /// What the driver saw.
    pub counts: DriverCounts,
    /// Per-operation statistics, slowest requests, anomalies.
    pub report: RpcReport,
}

impl RpcResult {
    fn new(
        capture: CaptureInfo,
        choice: ProtoChoice,
        counts: DriverCounts,
        report: RpcReport,
    ) -> Self {
        RpcResult {
            capture,
            forced_proto: match choice {
                ProtoChoice::Force(p) => Some(p),
                ProtoChoice::Auto => None,
            },
            counts,
            report,
        }
    }
}

/// `capture rpc`: per-operation request/response latency of one capture.
pub fn run_rpc(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    config: StatsConfig,
) -> Result<RpcResult, CaptureError> {
    run_rpc_keylog(path, filter, choice, config, None)
}

/// [`run_rpc`], decrypting TLS with the session keys of `keylog`.
pub fn run_rpc_keylog(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
    config: StatsConfig,
    keylog: Option<Arc<KeyLog>>,
) -> Result<RpcResult, CaptureError> {
    let mut stats = RpcStats::new(config);
    let (capture, counts) = feed_keylog(path, filter, choice, keylog, &mut stats)?;
    Ok(RpcResult::new(capture, choice, counts, stats.finish()))
}

/// A sink that keeps nothing (when only the statistics are wanted).
#[derive(Debug, Default)]
pub struct NoSink;

impl Sink for NoSink {
    fn transaction(&mut self, _: &super::driver::ConnInfo, _: super::Transaction) {}
    fn anomaly(&mut self, _: &super::driver::ConnInfo, _: super::Anomaly) {}
    fn wants_transactions(&self) -> bool {
        false
    }
}

/// Passes everything to both sinks.
struct Tee<'a> {
    stats: &'a mut RpcStats,
    also: &'a mut dyn Sink,
    /// `also` wants the transactions (else they are not moved to it).
    also_wants: bool,
}

impl<'a> Tee<'a> {
    fn new(stats: &'a mut RpcStats, also: &'a mut dyn Sink) -> Self {
        let also_wants = also.wants_transactions();
        Tee {
            stats,
            also,
            also_wants,
        }
    }
}

impl Sink for Tee<'_> {
    fn transaction(&mut self, conn: &super::driver::ConnInfo, t: super::Transaction) {
        self.stats.add(conn, &t);
        if self.stats.has_live_rows() {
            self.pass_live_rows();
        }
        if self.also_wants {
            self.also.transaction(conn, t);
        }
    }
    fn transactions(&mut self, conn: &super::driver::ConnInfo, ts: &mut Vec<super::Transaction>) {
        if self.also_wants {
            for t in ts.drain(..) {
                self.transaction(conn, t);
            }
            return;
        }
        // Nothing kept: the statistics read each transaction in place (no copy of it).
        for t in ts.iter() {
            self.stats.add(conn, t);
            if self.stats.has_live_rows() {
                self.pass_live_rows();
            }
        }
        ts.clear();
    }
    fn anomaly(&mut self, conn: &super::driver::ConnInfo, a: super::Anomaly) {
        self.stats.add_anomaly(conn, &a);
        self.also.anomaly(conn, a);
    }
    fn packet(&mut self, p: &crate::capture::read::Packet<'_>, seg: &Segment<'_>) {
        self.also.packet(p, seg);
    }
    fn tick(&mut self, now: Duration) {
        // `now` is the time the ring has been read up to (live's "Late packets"); the intervals close a
        // small grace later, for packets still in the kernel's backlog then.
        let grace = Duration::from_nanos(crate::capture::LIVE_GRACE_NS as u64);
        let rows = self.stats.live_close_before(now.saturating_sub(grace));
        if !rows.is_empty() {
            self.also.live_rows(rows);
        }
        self.also.tick(now);
    }
}

impl Tee<'_> {
    /// The live interval rows the last transaction ended go to `also` (out of line: once a second).
    #[cold]
    #[inline(never)]
    fn pass_live_rows(&mut self) {
        self.also.live_rows(self.stats.take_live_rows());
    }

    /// The end of the capture: the rows of the live interval still open go to `also`.
    fn close_live(&mut self) {
        let rows = self.stats.live_close_all();
        if !rows.is_empty() {
            self.also.live_rows(rows);
        }
    }
}

/// [`run_rpc_keylog`] on any packet source; `also` sees every transaction, anomaly, packet and tick as well
/// (live output, the flight recorder), and at most `max_connections` are tracked at once.
pub fn run_rpc_on(
    pk: Packets,
    filter: &Filter,
    choice: ProtoChoice,
    config: StatsConfig,
    keylog: Option<Arc<KeyLog>>,
    max_connections: Option<usize>,
    also: &mut dyn Sink,
) -> RpcResult {
    let mut stats = RpcStats::new(config);
    let mut driver = Driver::new(choice);
    driver.set_keylog(keylog);
    if let Some(n) = max_connections {
        driver.set_max_connections(n);
    }
    let mut tee = Tee::new(&mut stats, also);
    let (capture, counts) = feed_on(pk, filter, driver, &mut tee);
    tee.close_live();
    RpcResult::new(capture, choice, counts, stats.finish())
}

/// A fanout group's shared half of [`run_rpc_fanout`]: the one aggregation every thread's transactions go
/// to, in the order of their responses' ends, once every thread has read past them.
struct Merge<'a> {
    stats: RpcStats,
    also: &'a mut (dyn Sink + Send),
    /// Transactions handed over by the threads, not yet passed on (a thread may still hand over earlier ones).
    pending: Vec<(ConnInfo, super::Transaction)>,
    /// Each thread's last tick (wall clock); zero before its first, `Duration::MAX` once it ended.
    marks: Vec<Duration>,
}

impl Merge<'_> {
    /// Thread `i` read up to `mark` (`Duration::MAX`: it ended) and hands over what it found since its last
    /// call. The transactions whose response ended before every thread's mark (less the grace for packets still in
    /// the kernel's backlog) go on, oldest response first, to the statistics and to `also`; then `also` gets the
    /// earliest mark as a tick, so the intervals every thread has passed close.
    fn sync(
        &mut self,
        i: usize,
        mark: Duration,
        txs: &mut Vec<(ConnInfo, super::Transaction)>,
        anomalies: &mut Vec<(ConnInfo, super::Anomaly)>,
    ) {
        for (c, a) in anomalies.drain(..) {
            self.stats.add_anomaly(&c, &a);
            self.also.anomaly(&c, a);
        }
        self.pending.append(txs);
        self.marks[i] = mark;
        let low = self.marks.iter().copied().min().unwrap_or(mark);
        if low == Duration::ZERO {
            return;
        }
        let grace = Duration::from_nanos(crate::capture::LIVE_GRACE_NS as u64);
        self.release(low.saturating_sub(grace));
        if low != Duration::MAX {
            Tee::new(&mut self.stats, &mut *self.also).tick(low);
        }
    }

    /// Passes on the pending transactions whose response ended before `cut`, in that order.
    fn release(&mut self, cut: Duration) {
        self.pending.sort_by_key(|(_, t)| t.response_end_ts);
        let k = self
            .pending
            .partition_point(|(_, t)| t.response_end_ts < cut);
        let mut tee = Tee::new(&mut self.stats, &mut *self.also);
        for (c, t) in self.pending.drain(..k) {
            tee.transaction(&c, t);
        }
    }
}

/// One thread's sink in [`run_rpc_fanout`]: keeps what its driver finds and hands it to the [`Merge`] at each
/// tick (every [`crate::capture::live::TICK`]) and at the end.
struct Relay<'a, 'b> {
    i: usize,
    merge: &'a std::sync::Mutex<Merge<'b>>,
    txs: Vec<(ConnInfo, super::Transaction)>,
    anomalies: Vec<(ConnInfo, super::Anomaly)>,
}

impl Relay<'_, '_> {
    fn sync(&mut self, mark: Duration) {
        let mut m = self.merge.lock().unwrap_or_else(|e| e.into_inner());
        m.sync(self.i, mark, &mut self.txs, &mut self.anomalies);
    }
}

impl Sink for Relay<'_, '_> {
    fn transaction(&mut self, conn: &ConnInfo, t: super::Transaction) {
        self.txs.push((conn.clone(), t));
    }
    fn anomaly(&mut self, conn: &ConnInfo, a: super::Anomaly) {
        self.anomalies.push((conn.clone(), a));
    }
    fn tick(&mut self, now: Duration) {
        self.sync(now.max(Duration::from_nanos(1)));
    }
}

/// [`run_rpc_on`] on the captures of one `PACKET_FANOUT` group (`--threads N`, see [`crate::capture::live`]):
/// one thread per capture, each running [`feed_on`] with its own [`Driver`] (the kernel hands every packet of
/// a connection to the same capture, so each connection is reassembled and paired whole by one thread;
/// connections are numbered from one shared counter). The transactions go to one [`RpcStats`] and to `also`
/// in the order of their responses' ends, once every thread has read past them (at each tick and at the end),
/// so the report and the interval rows are those of one thread reading every packet; `also` gets
/// transactions, anomalies and ticks, not packets. Driver counts add; the captures' counts and kernel counters
/// are summed ([`crate::capture::merge_infos`]). `max_connections` is per thread.
#[allow(clippy::too_many_arguments)]
pub fn run_rpc_fanout(
    group: Vec<Packets>,
    filter: &Filter,
    choice: ProtoChoice,
    config: StatsConfig,
    keylog: Option<Arc<KeyLog>>,
    max_connections: Option<usize>,
    also: &mut (dyn Sink + Send),
) -> RpcResult {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;
    let n = group.len();
    let ids = Arc::new(AtomicU64::new(0));
    let merge = Mutex::new(Merge {
        stats: RpcStats::new(config),
        also,
        pending: Vec::new(),
        marks: vec![Duration::ZERO; n],
    });
    let results: Vec<(CaptureInfo, DriverCounts)> = std::thread::scope(|sc| {
        let handles: Vec<_> = group
            .into_iter()
            .enumerate()
            .map(|(i, pk)| {
                let (merge, keylog, ids) = (&merge, keylog.clone(), ids.clone());
                sc.spawn(move || {
                    let mut driver = Driver::new(choice);
                    driver.set_keylog(keylog);
                    driver.share_ids(ids);
                    if let Some(m) = max_connections {
                        driver.set_max_connections(m);
                    }
                    let mut relay = Relay {
                        i,
                        merge,
                        txs: Vec::new(),
                        anomalies: Vec::new(),
                    };
                    let r = feed_on(pk, filter, driver, &mut relay);
                    relay.sync(Duration::MAX);
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut m = merge.into_inner().unwrap_or_else(|e| e.into_inner());
    m.release(Duration::MAX);
    Tee::new(&mut m.stats, &mut *m.also).close_live();
    let mut counts = DriverCounts::default();
    let mut infos = Vec::new();
    for (info, c) in results {
        counts.add(&c);
        infos.push(info);
    }
    RpcResult::new(
        crate::capture::merge_infos(infos),
        choice,
        counts,
        m.stats.finish(),
    )
}

/// Every transaction of one capture with its connection and the hash of its request's leading bytes (for
/// `capture match`).
pub fn collect(
    path: &Path,
    filter: &Filter,
    choice: ProtoChoice,
) -> Result<(CaptureInfo, Collect), CaptureError> {
    let mut c = Collect::default();
    let (info, _) = feed_with(path, filter, Driver::new(choice).with_content(), &mut c)?;
    Ok((info, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not a check: `capture rpc`'s statistics on a capture for callgrind (the per-request cost of
    /// `Tee::transaction`, live intervals included with `RT_STATS_LIVE=1`):
    /// `RT_STATS_PCAP=/work/wt/pgS.pcap valgrind --tool=callgrind TESTBIN --ignored --exact
    /// capture::rpc::run::tests::stats_cost_harness`.
    #[test]
    #[ignore]
    fn stats_cost_harness() {
        let Some(path) = std::env::var_os("RT_STATS_PCAP") else {
            return;
        };
        let live = std::env::var_os("RT_STATS_LIVE").is_some();
        let config = StatsConfig {
            live_interval: live.then_some(Duration::from_secs(1)),
            ..StatsConfig::default()
        };
        let pk = crate::capture::Packets::open(std::path::Path::new(&path)).unwrap();
        let r = run_rpc_on(
            pk,
            &crate::capture::Filter::default(),
            ProtoChoice::Force(Proto::Pgsql),
            config,
            None,
            None,
            &mut NoSink,
        );
        eprintln!("{} transactions", r.report.transactions);
    }
}
