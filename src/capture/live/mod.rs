//! Live capture on a network interface: an AF_PACKET socket with a TPACKET_V3 memory-mapped receive ring, fed
//! to the same decode -> flows -> stats/rpc/timeline pipeline as a capture file (see [`super::Packets`]).
//!
//! # The ring
//! The kernel writes packets into a ring of `block_nr` blocks of `block_size` bytes shared with this process
//! (no system call per packet: one `poll` when the ring is empty). The kernel fills one block at a time and
//! hands it to user space when it is full, or when its retire timer fires ([`BLOCK_TIMEOUT_MS`]) while the
//! block holds at least one packet. Since Linux 6.18 that timer is periodic (an hrtimer): every
//! [`BLOCK_TIMEOUT_MS`] the block being filled is handed over however few packets it holds (older kernels:
//! after one to two timeouts). Sizes:
//! - `--buffer` (default [`DEFAULT_BUFFER`], 16 MiB) is the whole ring; blocks are [`MAX_BLOCK`] (128 KiB)
//!   when the buffer holds at least 8 of them, else the buffer / 8 rounded down to whole pages (at least one
//!   page), so a small buffer still has several blocks to rotate through;
//! - frames are nominal in TPACKET_V3 (packets of any size are packed into a block); [`FRAME_SIZE`] is the
//!   unit the kernel checks the sizes against;
//! - a packet larger than a block is cut to the block (its wire length is kept), as libpcap does (its blocks
//!   are 256 KiB); 128 KiB holds the 64 KiB segments of `lo` and of GSO/GRO.
//!
//! # What a stalled reader costs
//! While the reader does not run (descheduled on a loaded machine, stopped, busy printing), the kernel goes on
//! filling blocks, and every timer period retires the block being filled even when it holds one packet. So a stall
//! of `S` at `r` packets/s of `f` ring bytes each uses `S / T + S * r * f / B` blocks (`T` the timeout, `B` the
//! block size), and the ring starts dropping when that reaches the block count `N`: the stall it absorbs is `1 / (1
//! / (N * T) + r * f / (N * B))`, bounded both by the bytes (`N * B / (r * f)`) and by the timer (`N * T`). The old
//! geometry (16 blocks of 1 MiB, 50 ms) bounded every stall by 16 x 50 ms = 0.8 s however few bytes it brought: a
//! 1.7 s stop at 1,900 packets/s (300 KB, 2% of the ring's bytes) lost 1,381 of 2,900 packets, the ring full of
//! blocks holding ~100 packets each. Now 128 blocks of 128 KiB and 250 ms: `N * T` = 32 s, about as long as the 16
//! MiB hold at 2,000 packets/s of 150 B (36 s), so above that rate the bytes bind more than the timer (2 s at
//! 20,000 packets/s of 150 B, 9.3 MB in the ring, loses nothing); what the timer still costs is the unused tail of
//! one block per period (on average half a block, 64 KiB, every 250 ms of the stall). One more block is the
//! reader's own during a stall: the block holding the last packet it handed out (a [`LiveNext::Packet`] borrows it)
//! is given back only when the reader asks for the next one. libpcap (tcpdump) uses its read timeout, 1 s, and 256
//! KiB blocks: with tcpdump's 2 MiB buffer, 8 blocks, at most 8 s.
//!
//! # Late packets and the time a tick carries
//! Packets reach user space up to one timer period after the kernel stamped them, and later after a stall.
//! A tick ([`LiveNext::Tick`]) therefore carries the time up to which the ring has been read, not the wall
//! clock: at each tick the kernel's counters (`PACKET_STATISTICS`) give the packets it had put in the ring by
//! then; once that many have been read, every packet received before that moment has been seen. Intervals
//! closed on ticks thus get their late packets (by kernel timestamp) before their line is printed.
//! A packet can be stamped before a tick and reach the ring after it (it waited in the kernel's receive
//! backlog): the analyses close an interval a small grace (`LIVE_GRACE_NS`, 50 ms) after the ring was read past
//! its end, and a packet later still counts in the first interval not printed yet, so the interval lines
//! always add up to the summary. Ctrl-C and `--duration` drain the same way: the capture ends once the packets
//! the kernel had accepted [`DRAIN_GRACE`] after the stop came are read (at most [`MAX_DRAIN`]).
//!
//! When the ring is full the kernel drops packets and counts them: `PACKET_STATISTICS` is read at every tick
//! and at the end, and every interval line and summary shows the drops.
//!
//! # What the kernel filter does
//! On `lo` (and on `any`, for `lo`'s packets) the kernel hands a packet socket every packet twice, once
//! outgoing and once incoming; the classic BPF program attached to the socket starts with a test of the
//! packet type and drops the outgoing copy, so counts equal tcpdump's. A user's filter program (tcpdump
//! syntax, compiled elsewhere) follows that test in the same program.
//!
//! # `any`
//! As libpcap: a `SOCK_DGRAM` socket (no link-layer header: interfaces differ), and each packet gets a Linux
//! cooked v2 header (LINKTYPE_LINUX_SLL2) carrying its interface index, so the same segment seen on two
//! interfaces of a forwarding host is two packets of two interfaces, not a retransmission.
//!
//! # Threads
//! By default one thread reads the ring and runs the analysis. With `--threads N` ([`LiveCapture::open_fanout`])
//! N sockets, each with its own ring, join one `PACKET_FANOUT` group in `PACKET_FANOUT_HASH` mode with
//! `PACKET_FANOUT_FLAG_DEFRAG`: the kernel hands each packet to one of them by its flow hash, which is
//! symmetric (`__skb_get_hash_symmetric`, both directions of a connection give the same hash), and
//! fragments are reassembled before hashing, so every packet of a connection reaches the same thread. Each
//! thread runs its own analysis state; results are merged per interval and at the end. The group id is picked
//! by the kernel (`PACKET_FANOUT_FLAG_UNIQUEID`), so another capture on the host is never joined by mistake.
//! Kernel counters (packets, drops) of every ring are summed in one [`LiveCounters`].
//!
//! The unsafe code (the packet socket, the mapping, the block ownership word) is in [`ring`] alone (socket
//! options go through [`crate::sys`]); reading bytes out of a block is safe code in [`block`].
//!
//! # The filter
//! [`LiveCapture::open`] takes the parsed [`Filter`] (`--filter` and `--host/--port/--flow`), joins it into
//! one expression ([`kernel::kernel_expr`]), compiles it for the interface's link type and attaches it after
//! the drop of `lo`'s outgoing copies: callers never handle instructions.

pub mod block;
pub mod kernel;
pub mod ring;

use super::Filter;
use super::read::{LinkType, Packet};
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Default ring size (`--buffer`).
pub const DEFAULT_BUFFER: u64 = 16 << 20;
/// Largest block (see the module's "What a stalled reader costs").
pub const MAX_BLOCK: u32 = 128 << 10;
/// Nominal frame size.
pub const FRAME_SIZE: u32 = 2048;
/// The retire timer's period: a block that is not full is handed over at most this long after its first
/// packet (one period, two on kernels before 6.18). With the default ring, 128 blocks x 250 ms = 32 s.
pub const BLOCK_TIMEOUT_MS: u32 = 250;
/// Default snap length (tcpdump's).
pub const DEFAULT_SNAPLEN: u32 = 262_144;
/// Smallest `--buffer`.
pub const MIN_BUFFER: u64 = 16 << 10;
/// Longest the ring is read after Ctrl-C or `--duration` for the packets the kernel had accepted by then.
pub const MAX_DRAIN: Duration = Duration::from_secs(2);
/// A stop reads the packets the kernel had put in the ring this long after it came: a packet sent before the
/// stop may still wait in the kernel's receive backlog when it comes.
pub const DRAIN_GRACE: Duration = Duration::from_millis(50);
/// Block status: the kernel handed the block over on its retire timer, not full.
const TP_STATUS_BLK_TMO: u32 = 1 << 5;
/// Most ring-read marks kept while the reader is behind (one per tick).
const MAX_MARKS: usize = 1024;
/// How often the analyses get a tick (interval rows, drops) when packets do not bring the time forward.
pub const TICK: Duration = Duration::from_millis(100);

const PAGE: u32 = 4096;
/// About what the kernel charges a socket's option memory per classic BPF instruction of its filter: it keeps
/// the program translated to eBPF, about five 8-byte instructions for each classic one (measured on Linux 6.18
/// by the smallest `net.core.optmem_max` that takes a program: 40 to 49 bytes per instruction from 27 to 2,438
/// instructions; docs/capture-live.md).
pub const BYTES_PER_INSN: usize = 45;

/// `net.core.optmem_max` of this thread's network namespace, bytes.
pub fn optmem_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/net/core/optmem_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}
const PACKET_OUTGOING: u8 = 4;

/// Where to capture and what to keep.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Interface name, or `any`.
    pub interface: String,
    /// Bytes kept of each packet.
    pub snaplen: u32,
    /// Ring size in bytes.
    pub buffer: u64,
    /// Put the interface in promiscuous mode.
    pub promisc: bool,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop after this many packets (that passed the kernel filter).
    pub count: Option<u64>,
    /// The filter the kernel runs (`--filter` and `--host/--port/--flow`, see [`kernel::kernel_expr`]),
    /// compiled by [`LiveCapture::open`] for the interface's link type; it runs after the drop of `lo`'s
    /// outgoing copies.
    pub filter: Filter,
}

impl LiveConfig {
    /// Capture on `interface` with tcpdump's defaults.
    pub fn new(interface: &str) -> Self {
        LiveConfig {
            interface: interface.to_string(),
            snaplen: DEFAULT_SNAPLEN,
            buffer: DEFAULT_BUFFER,
            promisc: false,
            duration: None,
            count: None,
            filter: Filter::default(),
        }
    }
}

/// Live capture could not start.
#[derive(Debug, Error)]
pub enum LiveError {
    /// No such interface.
    #[error("no interface '{name}'; interfaces here: {}, or any (all of them) (`ip link` lists them)", .existing.join(", "))]
    NoInterface {
        /// What was asked for.
        name: String,
        /// What exists.
        existing: Vec<String>,
    },
    /// Not allowed to open a packet socket.
    #[error(
        "capturing on {interface} needs the CAP_NET_RAW capability: run as root, or allow it once with \
         `sudo setcap cap_net_raw,cap_net_admin+eip $(command -v roundtrip)`"
    )]
    Permission {
        /// The interface.
        interface: String,
    },
    /// The filter does not compile for the interface's link type.
    #[error("{source}")]
    Filter {
        /// The interface.
        interface: String,
        /// The expression and why.
        source: kernel::FilterError,
    },
    /// The kernel refused the filter program's memory (`SO_ATTACH_FILTER` ENOMEM): a socket's filter, as the
    /// kernel holds it once translated to eBPF, must fit in `net.core.optmem_max` (per network namespace).
    #[error(
        "live capture on {interface}: the kernel refused the filter program: its {instructions} classic \
         instructions need about {needed} bytes once the kernel has translated them (about {BYTES_PER_INSN} \
         bytes each), more than net.core.optmem_max ({}) of this network namespace allows: shorten the filter \
         (fewer terms), or raise the limit (sysctl -w net.core.optmem_max=N)",
        .optmem_max.map_or("unreadable".to_string(), |m| format!("{m} bytes"))
    )]
    FilterMemory {
        /// The interface.
        interface: String,
        /// Classic BPF instructions in the program attached (the drop of outgoing copies included).
        instructions: usize,
        /// About what the kernel charges for it: instructions x [`BYTES_PER_INSN`].
        needed: usize,
        /// `/proc/sys/net/core/optmem_max` now (None when it cannot be read).
        optmem_max: Option<u64>,
    },
    /// Another system call failed.
    #[error("live capture on {interface}: {what}: {source}")]
    Io {
        /// The interface.
        interface: String,
        /// The operation.
        what: &'static str,
        /// What the system said.
        source: io::Error,
    },
}

/// Why a live capture ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Ctrl-C or SIGTERM (the normal end).
    Interrupted,
    /// `--duration` elapsed.
    Duration,
    /// `--count` packets were captured.
    Count,
    /// The interface went down or disappeared.
    InterfaceDown(String),
    /// Reading failed.
    Error(String),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Interrupted => f.write_str("interrupted"),
            StopReason::Duration => f.write_str("--duration reached"),
            StopReason::Count => f.write_str("--count reached"),
            StopReason::InterfaceDown(e) => write!(f, "the interface went down ({e})"),
            StopReason::Error(e) => write!(f, "reading failed ({e})"),
        }
    }
}

/// What a live capture reports about itself (the `source` part of a capture document).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LiveInfo {
    /// The interface (`any` for all).
    pub interface: String,
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// Ring size, bytes.
    pub buffer_bytes: u64,
    /// Ring blocks and their size.
    pub ring_blocks: u32,
    /// Bytes per block.
    pub block_bytes: u32,
    /// Promiscuous mode asked for.
    pub promisc: bool,
    /// Packets the kernel passed to the socket (after its filter).
    pub kernel_packets: u64,
    /// Packets the kernel dropped because the ring was full.
    pub kernel_drops: u64,
    /// Packets larger than the snap length (cut).
    pub packets_cut: u64,
    /// Why the capture ended (None while it runs).
    pub stop_reason: Option<StopReason>,
    /// Wall-clock start, Unix ns.
    pub started_unix_ns: i64,
    /// Wall-clock end, Unix ns.
    pub ended_unix_ns: Option<i64>,
}

/// Counters read while the capture runs (for interval lines).
#[derive(Debug, Default)]
pub struct LiveCounters {
    drops: std::sync::atomic::AtomicU64,
    packets: std::sync::atomic::AtomicU64,
}

impl LiveCounters {
    /// Packets the kernel dropped so far.
    pub fn drops(&self) -> u64 {
        self.drops.load(Ordering::Relaxed)
    }
    /// Packets the kernel passed so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }
}

/// How the kernel handed the ring's blocks over so far ([`LiveCapture::ring_use`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingUse {
    /// Blocks read.
    pub blocks: u64,
    /// Of those, blocks handed over by the retire timer before they were full.
    pub blocks_by_timer: u64,
    /// Packets in the blocks read.
    pub packets: u64,
    /// Packets in the blocks the timer handed over.
    pub packets_in_timer_blocks: u64,
    /// Most packets one block held.
    pub max_block_packets: u32,
}

/// One step of a live capture.
#[derive(Debug)]
pub enum LiveNext<'a> {
    /// A packet.
    Packet(Packet<'a>),
    /// No packet for a while: every packet the kernel received before this time (Unix ns) has been read
    /// (the module's "Late packets"); the wall clock when the reader is not behind.
    Tick(i64),
    /// The capture ended (see [`LiveCapture::info`]).
    End,
}

/// The interfaces of this network namespace, by name.
pub fn interfaces() -> Vec<String> {
    crate::sys::interfaces()
        .into_iter()
        .map(|(_, n)| n)
        .collect()
}

/// The index of interface `name` (None when there is none).
pub fn ifindex(name: &str) -> Option<u32> {
    crate::sys::if_nametoindex(name)
}

/// The name of interface `index` (None when there is none).
pub fn ifname(index: u32) -> Option<String> {
    crate::sys::interfaces()
        .into_iter()
        .find(|(i, _)| *i == index)
        .map(|(_, n)| n)
}

/// Unix time now, ns.
pub fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Ring geometry for a buffer of `buffer` bytes: (block size, block count).
pub fn geometry(buffer: u64) -> (u32, u32) {
    let buffer = buffer.clamp(MIN_BUFFER, 1 << 32);
    let block = if buffer >= 8 * u64::from(MAX_BLOCK) {
        MAX_BLOCK
    } else {
        (((buffer / 8) as u32) / PAGE * PAGE).max(PAGE)
    };
    let nr = (buffer / u64::from(block)).max(2) as u32;
    (block, nr)
}

/// The kernel-side drop of `lo`'s outgoing copies, followed by `user` (or by "keep `snaplen` bytes").
/// `lo_index` > 0 with `any`: only outgoing packets of that interface are dropped.
pub fn kernel_program(
    drop_outgoing: bool,
    any_lo_index: Option<u32>,
    user: Option<&[libc::sock_filter]>,
    snaplen: u32,
) -> Vec<libc::sock_filter> {
    const LD_ABS_W: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const AD_PKTTYPE: u32 = 0xffff_f000 + 4;
    const AD_IFINDEX: u32 = 0xffff_f000 + 8;
    let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut p = Vec::new();
    if drop_outgoing {
        p.push(ins(LD_ABS_W, 0, 0, AD_PKTTYPE));
        match any_lo_index {
            Some(lo) => {
                p.push(ins(JEQ_K, 0, 3, u32::from(PACKET_OUTGOING)));
                p.push(ins(LD_ABS_W, 0, 0, AD_IFINDEX));
                p.push(ins(JEQ_K, 0, 1, lo));
                p.push(ins(RET_K, 0, 0, 0));
            }
            None => {
                p.push(ins(JEQ_K, 0, 1, u32::from(PACKET_OUTGOING)));
                p.push(ins(RET_K, 0, 0, 0));
            }
        }
    }
    match user {
        Some(u) => p.extend_from_slice(u),
        None => p.push(ins(RET_K, 0, 0, snaplen)),
    }
    p
}

/// The IPv4 netmask (host order) a live filter's `ip broadcast` uses on `iface`: that of its first IPv4
/// address, as libpcap's `pcap_lookupnet`; 0 without one (`any`), as tcpdump then uses. Compile with
/// [`bpf::Expr::compile_with_netmask`](crate::capture::bpf::Expr::compile_with_netmask).
pub fn netmask_of(iface: &str) -> u32 {
    crate::sys::ipv4_netmask(iface)
}

/// The link type packets of `iface` are captured with (`None`: cooked, for `any` and unusual interfaces).
pub fn link_of(iface: &str) -> Option<LinkType> {
    if iface == "any" {
        return None;
    }
    match crate::sys::interface_hwtype(iface)? {
        1 | 772 => Some(LinkType::ETHERNET),
        65534 => Some(LinkType::RAW),
        _ => None,
    }
}

/// A running live capture: the packet source of [`super::Packets::live`].
pub struct LiveCapture {
    sock: ring::PacketSocket,
    ring: ring::Ring,
    link: LinkType,
    cooked: bool,
    /// Block being read and (next packet offset, packets left) in it.
    cur: Option<(usize, usize, u32)>,
    next_block: usize,
    scratch: Vec<u8>,
    info: LiveInfo,
    counters: Arc<LiveCounters>,
    stop: Arc<AtomicBool>,
    started: Instant,
    last_tick: Instant,
    delivered: u64,
    /// `--count` (packets delivered before the capture stops), `u64::MAX` without it.
    count_limit: u64,
    config: LiveConfig,
    /// A stop is under way since this time: read until the packets the kernel had put in the ring
    /// [`DRAIN_GRACE`] later are taken from the ring (the count, once read), or [`MAX_DRAIN`].
    drain: Option<(Instant, Option<u64>)>,
    /// Packets in the blocks taken from the ring so far (read, or being read).
    taken: u64,
    /// (wall clock, packets the kernel had put in the ring by then) of the ticks not yet caught up with.
    marks: std::collections::VecDeque<(i64, u64)>,
    /// Every packet the kernel received before this time (Unix ns) has been read.
    read_to: i64,
    ring_use: RingUse,
}

impl std::fmt::Debug for LiveCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCapture")
            .field("interface", &self.info.interface)
            .field("link", &self.link)
            .finish()
    }
}

impl LiveCapture {
    /// Opens the socket, attaches the filter, maps the ring and binds to the interface. `stop` ends the capture
    /// when set (Ctrl-C).
    pub fn open(config: LiveConfig, stop: Arc<AtomicBool>) -> Result<Self, LiveError> {
        let name = config.interface.clone();
        let any = name == "any";
        let (ifindex, hatype) = if any {
            (0, 0)
        } else {
            match ifindex(&name) {
                Some(i) => (i, crate::sys::interface_hwtype(&name).unwrap_or(1)),
                _ => {
                    return Err(LiveError::NoInterface {
                        name,
                        existing: interfaces(),
                    });
                }
            }
        };
        // ARPHRD_ETHER (1) and ARPHRD_LOOPBACK (772) carry an Ethernet header; ARPHRD_NONE (65534: tun,
        // WireGuard) raw IP; anything else is captured cooked, as libpcap does.
        let (cooked, link) = match hatype {
            _ if any => (true, LinkType::LINUX_SLL2),
            1 | 772 => (false, LinkType::ETHERNET),
            65534 => (false, LinkType::RAW),
            _ => (true, LinkType::LINUX_SLL2),
        };
        // The filter first: a mistake in it is reported before any socket is opened.
        let user = match kernel::kernel_expr(&config.filter) {
            Some(e) => {
                let linked = (!cooked).then_some(link);
                let p = kernel::compile(&e, linked, config.snaplen, netmask_of(&config.interface))
                    .map_err(|source| LiveError::Filter {
                        interface: name.clone(),
                        source: kernel::FilterError {
                            expr: e.excerpt(),
                            source,
                        },
                    })?;
                Some(
                    p.insns()
                        .iter()
                        .map(|i| libc::sock_filter {
                            code: i.code,
                            jt: i.jt,
                            jf: i.jf,
                            k: i.k,
                        })
                        .collect::<Vec<_>>(),
                )
            }
            None => None,
        };
        let io_err = |what: &'static str| {
            let interface = name.clone();
            move |source: io::Error| LiveError::Io {
                interface,
                what,
                source,
            }
        };
        let sock = ring::PacketSocket::open(cooked).map_err(|e| {
            if e.raw_os_error() == Some(libc::EPERM) || e.raw_os_error() == Some(libc::EACCES) {
                LiveError::Permission {
                    interface: name.clone(),
                }
            } else {
                io_err("opening an AF_PACKET socket")(e)
            }
        })?;
        let lo_index = self::ifindex("lo").unwrap_or(1);
        let drop_out = any || hatype == 772;
        let prog = kernel_program(
            drop_out,
            any.then_some(lo_index),
            user.as_deref(),
            config.snaplen,
        );
        sock.attach_filter(&prog, true).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOMEM) {
                LiveError::FilterMemory {
                    interface: name.clone(),
                    instructions: prog.len(),
                    needed: prog.len() * BYTES_PER_INSN,
                    optmem_max: optmem_max(),
                }
            } else {
                io_err("attaching the filter program")(e)
            }
        })?;
        sock.set_v3().map_err(io_err("asking for TPACKET_V3"))?;
        let (block_size, block_nr) = geometry(config.buffer);
        let req = ring::TpacketReq3 {
            block_size,
            block_nr,
            frame_size: FRAME_SIZE,
            frame_nr: block_size / FRAME_SIZE * block_nr,
            retire_blk_tov: BLOCK_TIMEOUT_MS,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        let ring = ring::Ring::new(&sock, req).map_err(io_err("setting up the receive ring"))?;
        if config.promisc && !any {
            sock.promisc(ifindex as i32)
                .map_err(io_err("entering promiscuous mode"))?;
        }
        sock.bind(ifindex as i32)
            .map_err(io_err("binding to the interface"))?;
        // The socket was hooked to no protocol before the bind, so nothing of another interface is in the ring
        // or its counters; they start here.
        let _ = sock.stats();
        let now = Instant::now();
        let started_unix_ns = now_unix_ns();
        Ok(LiveCapture {
            info: LiveInfo {
                interface: name,
                snaplen: config.snaplen,
                buffer_bytes: u64::from(block_size) * u64::from(block_nr),
                ring_blocks: block_nr,
                block_bytes: block_size,
                promisc: config.promisc,
                kernel_packets: 0,
                kernel_drops: 0,
                packets_cut: 0,
                stop_reason: None,
                started_unix_ns,
                ended_unix_ns: None,
            },
            sock,
            ring,
            link,
            cooked,
            cur: None,
            next_block: 0,
            scratch: Vec::new(),
            counters: Arc::new(LiveCounters::default()),
            stop,
            started: now,
            last_tick: now,
            delivered: 0,
            count_limit: config.count.unwrap_or(u64::MAX),
            config,
            drain: None,
            taken: 0,
            marks: std::collections::VecDeque::new(),
            read_to: started_unix_ns,
            ring_use: RingUse::default(),
        })
    }

    /// The expression the kernel runs (`--filter` and `--host/--port/--flow` joined), None without a filter.
    pub fn kernel_filter(&self) -> Option<String> {
        kernel::kernel_expr(&self.config.filter).map(|e| e.text().to_string())
    }

    /// The link type of the packets delivered.
    pub fn link(&self) -> LinkType {
        self.link
    }

    /// Counters another part of the program can read while the capture runs.
    pub fn counters(&self) -> Arc<LiveCounters> {
        self.counters.clone()
    }

    /// What the capture reports (complete after [`LiveNext::End`]).
    pub fn info(&self) -> &LiveInfo {
        &self.info
    }

    /// How the kernel handed the blocks read so far over (full, or by the retire timer).
    pub fn ring_use(&self) -> RingUse {
        self.ring_use
    }

    /// Packets the kernel put in the ring so far (it counts drops among its packets).
    fn accepted(&self) -> u64 {
        self.info
            .kernel_packets
            .saturating_sub(self.info.kernel_drops)
    }

    /// Packets taken out of the ring so far: the blocks read, less what is left of the one being read.
    fn seen(&self) -> u64 {
        self.taken - self.cur.map_or(0, |(_, _, left)| u64::from(left))
    }

    /// The time every packet received before has been read (Unix ns): the kernel's counters read now give the
    /// packets it had put in the ring by now; once that many are taken from the ring, now is caught up with.
    fn read_mark(&mut self) -> i64 {
        let t = now_unix_ns();
        self.read_stats();
        if self.marks.len() >= MAX_MARKS {
            // Keep the oldest (the next to be caught up with) and the newest: the mark stays conservative.
            self.marks.remove(self.marks.len() - 1);
        }
        self.marks.push_back((t, self.accepted()));
        let seen = self.seen();
        while let Some(&(t, n)) = self.marks.front() {
            if n > seen {
                break;
            }
            self.read_to = self.read_to.max(t);
            self.marks.pop_front();
        }
        self.read_to
    }

    fn read_stats(&mut self) {
        if let Ok((p, d)) = self.sock.stats() {
            self.info.kernel_packets += p;
            self.info.kernel_drops += d;
            // Shared by every ring of a fanout group: deltas add up.
            self.counters.packets.fetch_add(p, Ordering::Relaxed);
            self.counters.drops.fetch_add(d, Ordering::Relaxed);
        }
    }

    /// `n` captures of one interface joined in a `PACKET_FANOUT` group (see the module's "Threads"): each has
    /// its own ring of `config.buffer` bytes, one start time (so intervals line up) and the same counters. `n`
    /// 1 is [`open`](Self::open). `--count` is per capture: callers stop the others themselves.
    pub fn open_fanout(
        config: LiveConfig,
        n: usize,
        stop: Arc<AtomicBool>,
    ) -> Result<Vec<Self>, LiveError> {
        let first = Self::open(config.clone(), stop.clone())?;
        if n <= 1 {
            return Ok(vec![first]);
        }
        let mode = ring::PACKET_FANOUT_HASH | ring::PACKET_FANOUT_FLAG_DEFRAG;
        let join = |c: &LiveCapture, id: u16, mode: u32| {
            c.sock
                .join_fanout(id, mode)
                .map_err(|source| LiveError::Io {
                    interface: config.interface.clone(),
                    what: "joining the PACKET_FANOUT group",
                    source,
                })
        };
        let id = join(&first, 0, mode | ring::PACKET_FANOUT_FLAG_UNIQUEID)?;
        let mut all = vec![first];
        for _ in 1..n {
            let mut c = Self::open(config.clone(), stop.clone())?;
            join(&c, id, mode)?;
            c.counters = all[0].counters.clone();
            c.info.started_unix_ns = all[0].info.started_unix_ns;
            c.read_to = c.info.started_unix_ns;
            c.started = all[0].started;
            all.push(c);
        }
        Ok(all)
    }

    /// Sums the kernel counters and ends of a fanout group's captures into one [`LiveInfo`].
    pub fn merge_info(infos: &[LiveInfo]) -> Option<LiveInfo> {
        let mut it = infos.iter();
        let mut m = it.next()?.clone();
        for i in it {
            m.kernel_packets += i.kernel_packets;
            m.kernel_drops += i.kernel_drops;
            m.packets_cut += i.packets_cut;
            m.buffer_bytes += i.buffer_bytes;
            m.ring_blocks += i.ring_blocks;
            m.ended_unix_ns = m.ended_unix_ns.max(i.ended_unix_ns);
            if matches!(
                m.stop_reason,
                None | Some(StopReason::Interrupted) | Some(StopReason::Duration)
            ) && matches!(
                i.stop_reason,
                Some(StopReason::InterfaceDown(_))
                    | Some(StopReason::Error(_))
                    | Some(StopReason::Count)
            ) {
                m.stop_reason = i.stop_reason.clone();
            }
        }
        Some(m)
    }

    fn end(&mut self, why: StopReason) {
        if self.info.stop_reason.is_none() {
            self.read_stats();
            self.info.stop_reason = Some(why);
            self.info.ended_unix_ns = Some(now_unix_ns());
        }
    }

    /// True once the capture has ended. Ctrl-C and `--duration` first drain the ring: the kernel's counters,
    /// read [`DRAIN_GRACE`] after the stop came, give the packets it had put in the ring by then, and the
    /// capture ends once that many are read (the last of them reach user space at most one retire period
    /// later, when the timer hands their block over), or at the latest [`MAX_DRAIN`] later; `--count` stops at
    /// once.
    #[inline(never)]
    fn stopping(&mut self) -> bool {
        if self.info.stop_reason.is_some() {
            return true;
        }
        let why = if self.delivered >= self.count_limit {
            self.end(StopReason::Count);
            return true;
        } else if self.stop.load(Ordering::Relaxed) {
            StopReason::Interrupted
        } else if self
            .config
            .duration
            .is_some_and(|d| self.started.elapsed() >= d)
        {
            StopReason::Duration
        } else {
            return false;
        };
        let now = Instant::now();
        let (since, target) = *self.drain.get_or_insert((now, None));
        let target = match target {
            Some(t) => t,
            None if now >= since + DRAIN_GRACE => {
                self.read_stats();
                let t = self.accepted();
                self.drain = Some((since, Some(t)));
                t
            }
            None => return false,
        };
        if self.seen() >= target || now >= since + MAX_DRAIN {
            self.end(why);
            return true;
        }
        false
    }

    /// No stop under way: the packets of the current block can be handed out without the full
    /// [`stopping`](Self::stopping) check (the clock, for `--duration`, is read between blocks only).
    #[inline(always)]
    fn quiet(&self) -> bool {
        self.info.stop_reason.is_none()
            && self.drain.is_none()
            && self.delivered < self.count_limit
            && !self.stop.load(Ordering::Relaxed)
    }

    /// Moves past the packet `h` at `at` of block `b` (`left` packets were left in it).
    #[inline(always)]
    fn advance(&mut self, b: usize, at: usize, left: u32, h: &block::FrameHdr) {
        let next = if h.next_offset == 0 { 0 } else { left - 1 };
        self.cur = Some((b, at + h.next_offset as usize, next));
        self.delivered += 1;
        if h.snaplen < h.len {
            self.info.packets_cut += 1;
        }
    }

    /// The next packet, a tick (when `ticks`; at least every [`TICK`] while packets flow or not), or the end.
    /// The common case, the next packet of the block being read while no stop is under way, is inlined into
    /// the caller's loop; everything else (the next block, waiting, ticks, the end, `any`'s cooked header) is
    /// [`next_slow`](Self::next_slow).
    #[inline(always)]
    pub fn next(&mut self, ticks: bool) -> LiveNext<'_> {
        if let Some((b, at, left)) = self.cur
            && left > 0
            && !self.cooked
            && self.quiet()
            && let Some(h) = block::frame(self.ring.user_block(b).unwrap_or(&[]), at)
        {
            self.advance(b, at, left, &h);
            // `frame` checked that the span lies inside the block.
            let span = h.data_at..h.data_at + h.snaplen as usize;
            return LiveNext::Packet(Packet {
                ts_ns: h.ts_ns,
                orig_len: h.len,
                data: self
                    .ring
                    .user_block(b)
                    .and_then(|x| x.get(span))
                    .unwrap_or(&[]),
                link: self.link,
                interface: h.ifindex.max(0) as u32,
                offset: 0,
            });
        }
        self.next_slow(ticks)
    }

    #[inline(never)]
    fn next_slow(&mut self, ticks: bool) -> LiveNext<'_> {
        loop {
            if let Some((b, at, left)) = self.cur {
                if left > 0 && (self.quiet() || !self.stopping()) {
                    let hdr = block::frame(self.ring.user_block(b).unwrap_or(&[]), at);
                    if let Some(h) = hdr {
                        self.advance(b, at, left, &h);
                        // `frame` checked that the span lies inside the block.
                        let span = h.data_at..h.data_at + h.snaplen as usize;
                        let (data, orig_len) = if self.cooked {
                            self.scratch.clear();
                            self.scratch.extend_from_slice(&block::sll2_header(&h));
                            let bytes = self.ring.user_block(b).and_then(|x| x.get(span));
                            self.scratch.extend_from_slice(bytes.unwrap_or(&[]));
                            (&self.scratch[..], h.len.saturating_add(20))
                        } else {
                            let bytes = self.ring.user_block(b).and_then(|x| x.get(span));
                            (bytes.unwrap_or(&[]), h.len)
                        };
                        return LiveNext::Packet(Packet {
                            ts_ns: h.ts_ns,
                            orig_len,
                            data,
                            link: self.link,
                            interface: h.ifindex.max(0) as u32,
                            offset: 0,
                        });
                    }
                }
                self.ring.release(b);
                self.cur = None;
                self.next_block = (b + 1) % self.ring.blocks();
            }
            if self.stopping() {
                return LiveNext::End;
            }
            if ticks && self.last_tick.elapsed() >= TICK {
                self.last_tick = Instant::now();
                return LiveNext::Tick(self.read_mark());
            }
            if let Some(blk) = self.ring.user_block(self.next_block) {
                let (n, first) = block::block_header(blk).unwrap_or((0, 0));
                let u = &mut self.ring_use;
                u.blocks += 1;
                u.packets += u64::from(n);
                u.max_block_packets = u.max_block_packets.max(n);
                if block::block_status(blk).unwrap_or(0) & TP_STATUS_BLK_TMO != 0 {
                    u.blocks_by_timer += 1;
                    u.packets_in_timer_blocks += u64::from(n);
                }
                self.taken += u64::from(n);
                self.cur = Some((self.next_block, first, n));
                continue;
            }
            let wait = if self.drain.is_some() {
                (TICK.as_millis() / 2) as i32
            } else {
                TICK.as_millis() as i32
            };
            match self.sock.poll(wait) {
                Ok((_, true)) => {
                    let e = self
                        .sock
                        .take_error()
                        .map_or("the socket reported an error".to_string(), |e| {
                            e.to_string()
                        });
                    // A block may still hold packets: only stop when the ring is empty.
                    if self.ring.user_block(self.next_block).is_none() {
                        self.end(StopReason::InterfaceDown(e));
                    }
                }
                Ok(_) => {}
                Err(e) => self.end(StopReason::Error(e.to_string())),
            }
            if !ticks && self.last_tick.elapsed() >= TICK {
                self.last_tick = Instant::now();
                self.read_stats();
            }
        }
    }

    /// Ends the capture now (reads the final kernel counters); `why` unless it already ended.
    pub fn close(&mut self, why: StopReason) -> LiveInfo {
        self.end(why);
        self.info.clone()
    }
}

/// True when the process may open packet sockets (root or CAP_NET_RAW), without opening one.
pub fn check_interface(name: &str) -> Result<(), LiveError> {
    if name == "any" || ifindex(name).is_some() {
        return Ok(());
    }
    Err(LiveError::NoInterface {
        name: name.to_string(),
        existing: interfaces(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_geometry() {
        // 128 blocks x 250 ms: the timer alone lets the default ring absorb a 32 s stall.
        assert_eq!(geometry(DEFAULT_BUFFER), (128 << 10, 128));
        assert_eq!(geometry(2 << 20), (128 << 10, 16));
        assert_eq!(geometry(64 << 10), (8192, 8));
        assert_eq!(geometry(1), (4096, 4));
        let (b, n) = geometry(5 << 20);
        assert_eq!(b % 4096, 0);
        assert!(n >= 8 && u64::from(b) * u64::from(n) <= 5 << 20);
    }

    #[test]
    fn outgoing_drop_program() {
        let p = kernel_program(true, None, None, 100);
        assert_eq!(p.len(), 4);
        assert_eq!((p[1].jt, p[1].jf), (0, 1));
        assert_eq!(p[3].k, 100);
        let p = kernel_program(true, Some(1), None, 100);
        assert_eq!(p.len(), 6);
        // Not outgoing: jump over the ifindex test and the drop, to the user program.
        assert_eq!(2 + p[1].jf as usize, 5);
        assert_eq!(kernel_program(false, None, None, 7).len(), 1);
    }
}
