//! `roundtrip proxy`: put a far-away network between a client and its server.

use super::args;
use super::output::Exit;
use clap::{Args, ValueEnum};
use roundtrip::proxy::{self, Direction, GilbertElliott, Impairment, JitterDist, Trigger};
use roundtrip::units::{DurationOrSize, fmt_bytes, fmt_duration};
use std::net::SocketAddr;
use std::time::Duration;

mod bridge;
mod tcp;

/// Jitter distribution (see --help of --jitter-dist).
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Dist {
    Uniform,
    Normal,
    Pareto,
}

impl From<Dist> for JitterDist {
    fn from(d: Dist) -> JitterDist {
        match d {
            Dist::Uniform => JitterDist::Uniform,
            Dist::Normal => JitterDist::Normal,
            Dist::Pareto => JitterDist::Pareto,
        }
    }
}

impl ProxyArgs {
    /// The Gilbert-Elliott loss model of `--ge-p`/`--ge-r` (with the good and bad states' loss), when given.
    fn gilbert_elliott(&self) -> Option<GilbertElliott> {
        self.ge_p.zip(self.ge_r).map(|(p, r)| GilbertElliott {
            p,
            r,
            loss_good: self.ge_loss_good,
            loss_bad: self.ge_loss_bad,
        })
    }
}

/// Directions that get delay, jitter and bandwidth.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Dir {
    Both,
    Up,
    Down,
}

/// Arguments of `roundtrip proxy`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
Delay applies to both directions unless --direction says otherwise, so --delay 20ms adds 40 ms to every \
round trip; --rtt 40ms says the same thing. Data keeps its order: a chunk is never released before the one \
ahead of it. A terminating proxy acknowledges data at once, so bulk transfers would not feel the latency: \
--window W emulates TCP's window (at most W bytes unacknowledged per direction; a chunk counts as acknowledged \
one reverse delay after the far side got it), giving about W/RTT, as real TCP with that window.

With --control 127.0.0.1:9000 the impairment changes while the proxy runs: \
curl -X PATCH -d '{\"delay_ns\": 30000000}' http://127.0.0.1:9000/impairment")]
pub struct ProxyArgs {
    /// Address clients connect to (IP:PORT; port 0 picks one, printed at start).
    #[arg(long, value_parser = args::listen_addr, value_name = "IP:PORT", required_unless_present = "bridge")]
    listen: Option<SocketAddr>,
    /// The real server.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "bridge")]
    upstream: Option<String>,
    /// Bridge mode: forward every frame between two interfaces, impaired, terminating nothing (needs
    /// CAP_NET_RAW and CAP_NET_ADMIN); --delay is first->second, --delay-back second->first. See
    /// docs/proxy-bridge.md.
    #[arg(long, value_name = "IF_A,IF_B", conflicts_with_all = ["listen", "upstream", "udp"])]
    bridge: Option<String>,
    #[command(flatten)]
    bridge_args: bridge::BridgeArgs,
    /// One-way delay added to each direction.
    #[arg(long, value_parser = args::duration, conflicts_with = "rtt", value_name = "DURATION")]
    delay: Option<Duration>,
    /// Round-trip time to add, split evenly between the two directions (needs --direction both).
    #[arg(long, value_parser = args::duration, value_name = "DURATION")]
    rtt: Option<Duration>,
    /// Jitter around the delay (uniform: +-J; normal: J is the standard deviation; pareto: mean extra J).
    #[arg(long, value_parser = args::duration, default_value = "0", value_name = "DURATION")]
    jitter: Duration,
    /// Jitter distribution. Samples below zero delay are clipped to zero, and no chunk is released before the
    /// one ahead of it (order kept), which lengthens a short sample behind a long one.
    #[arg(long, value_enum, default_value = "uniform")]
    jitter_dist: Dist,
    /// Bandwidth per connection and direction, bit/s (e.g. 100Mbit/s, 100mbit, 100mbps or 100M).
    #[arg(long, alias = "rate", value_parser = args::bitrate, value_name = "BITRATE")]
    bandwidth: Option<u64>,
    /// Bandwidth for all connections together, per direction, bit/s.
    #[arg(long, alias = "rate-total", value_parser = args::bitrate, value_name = "BITRATE")]
    bandwidth_total: Option<u64>,
    /// Emulated TCP window: at most this many bytes unacknowledged per direction (TCP only; 1 byte to 1 GiB).
    #[arg(long, value_parser = args::window_size, value_name = "BYTES")]
    window: Option<u64>,
    /// Which directions get delay, jitter and bandwidth (up = client to server).
    #[arg(long, value_enum, default_value = "both")]
    direction: Dir,
    /// Fault: reset both sides (RST) after this time or this many bytes (both directions together).
    #[arg(long, value_parser = args::duration_or_size, value_name = "DURATION|BYTES")]
    reset_after: Option<DurationOrSize>,
    /// Fault: stop relaying (connection stays open) after this time or this many bytes.
    #[arg(long, value_parser = args::duration_or_size, value_name = "DURATION|BYTES")]
    stall_after: Option<DurationOrSize>,
    /// Fault: close both sides cleanly (FIN) after this many bytes.
    #[arg(long, value_parser = args::positive_size, value_name = "BYTES")]
    close_after: Option<u64>,
    /// Fault: hold every close (FIN) this long before passing it on.
    #[arg(long, value_parser = args::duration, default_value = "0", value_name = "DURATION")]
    slow_close: Duration,
    /// Relay UDP datagrams instead of TCP connections.
    #[arg(long)]
    udp: bool,
    /// UDP: random loss probability per datagram (0.01, 1e-4, 1%).
    #[arg(long, value_parser = args::probability, default_value = "0", value_name = "P")]
    loss: f64,
    /// UDP: Gilbert-Elliott bursty loss, probability good -> bad per datagram (with --ge-r).
    #[arg(long, value_parser = args::probability, requires = "ge_r", value_name = "P")]
    ge_p: Option<f64>,
    /// UDP: Gilbert-Elliott probability bad -> good (mean burst = 1/r datagrams).
    #[arg(long, value_parser = args::probability, requires = "ge_p", value_name = "P")]
    ge_r: Option<f64>,
    /// UDP: Gilbert-Elliott loss probability in the bad state.
    #[arg(long, value_parser = args::probability, default_value = "1", value_name = "P")]
    ge_loss_bad: f64,
    /// UDP: Gilbert-Elliott loss probability in the good state.
    #[arg(long, value_parser = args::probability, default_value = "0", value_name = "P")]
    ge_loss_good: f64,
    /// UDP: probability that a datagram is held back by --reorder-delay so later ones overtake it.
    /// With --bridge, a flag: jitter may reorder frames (each frame its own sample).
    #[arg(long, value_parser = args::probability, default_value = "0", value_name = "P", num_args = 0..=1, default_missing_value = "1")]
    reorder: f64,
    /// UDP: how long a reordered datagram is held back.
    #[arg(long, value_parser = args::positive_duration, default_value = "10ms", value_name = "DURATION")]
    reorder_delay: Duration,
    /// UDP: probability that a datagram is sent twice.
    #[arg(long, value_parser = args::probability, default_value = "0", value_name = "P")]
    duplicate: f64,
    /// Serve the control API here: GET, PUT (replace) and PATCH (merge) /impairment (JSON), GET /counters.
    /// A non-loopback address needs --control-token-file.
    #[arg(long, value_parser = args::listen_addr, value_name = "IP:PORT")]
    control: Option<SocketAddr>,
    /// File holding the control API's token (one line, at least 16 printable characters, e.g. from
    /// `openssl rand -hex 32`): every request must carry `Authorization: Bearer <token>`.
    #[arg(long, value_parser = args::input_file, value_name = "FILE", requires = "control")]
    control_token_file: Option<std::path::PathBuf>,
    /// Most clients relayed at once (TCP connections, or UDP client addresses); the one over it is closed at
    /// once (UDP: its datagrams are dropped), with a rate-limited log line.
    #[arg(long, value_parser = max_clients, default_value_t = proxy::DEFAULT_MAX_CLIENTS as u32, value_name = "N")]
    max_clients: u32,
    /// Close (reset) a TCP connection with no byte in either direction for this long; 0: never.
    #[arg(long, value_parser = args::duration, default_value = "300s", value_name = "DURATION")]
    idle_timeout: Duration,
    /// How long to wait for the upstream to accept a connection.
    #[arg(long, value_parser = args::positive_duration, default_value = "3s", value_name = "DURATION")]
    connect_timeout: Duration,
    /// Wake idle CPUs before delayed releases: for the last moments before it writes delayed data the proxy
    /// asks the kernel to keep idle CPUs polling (CPU-latency request 0 on /dev/cpu_dma_latency; root), so
    /// the receiving program wakes at once instead of paying the wake-up of a halted CPU (up to half a
    /// millisecond on virtual machines) on top of the delay. Off by default: it changes a machine-wide power
    /// setting while it is held, and a program talking to a really distant server pays that wake-up too.
    #[arg(long)]
    cpu_wake: bool,
    /// At exit (Ctrl-C), print the counters as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn trigger(v: Option<DurationOrSize>) -> Option<Trigger> {
    v.map(|v| match v {
        DurationOrSize::Duration(d) => Trigger::AfterNs(d.as_nanos() as u64),
        DurationOrSize::Bytes(b) => Trigger::Bytes(b),
    })
}

/// Builds the impairment from the arguments, refusing combinations that make no sense.
fn impairment(a: &ProxyArgs) -> anyhow::Result<Impairment> {
    let direction = match a.direction {
        Dir::Both => Direction::Both,
        Dir::Up => Direction::Up,
        Dir::Down => Direction::Down,
    };
    let delay = match (a.delay, a.rtt) {
        (Some(d), _) => d,
        (None, Some(r)) => {
            if direction != Direction::Both {
                return Err(super::output::refused(format!(
                    "--rtt splits the round trip over both directions; with --direction {} give --delay instead",
                    if direction == Direction::Up {
                        "up"
                    } else {
                        "down"
                    }
                )));
            }
            r / 2
        }
        (None, None) => Duration::ZERO,
    };
    if a.udp {
        if let Some(name) = tcp_only_given(a, false) {
            return Err(super::output::refused(format!(
                "{name} applies to TCP connections only; leave out --udp or {name}"
            )));
        }
    } else {
        let udp_only = [
            ("--loss", a.loss > 0.0),
            ("--ge-p", a.ge_p.is_some()),
            ("--reorder", a.reorder > 0.0),
            ("--duplicate", a.duplicate > 0.0),
        ];
        if let Some((name, _)) = udp_only.iter().find(|(_, set)| *set) {
            return Err(super::output::refused(format!(
                "{name} applies to UDP datagrams only (TCP never loses or reorders data); add --udp, or leave out {name}"
            )));
        }
    }
    Ok(Impairment {
        delay_ns: delay.as_nanos() as u64,
        jitter_ns: a.jitter.as_nanos() as u64,
        jitter_dist: a.jitter_dist.into(),
        direction,
        rate_bps: a.bandwidth,
        rate_total_bps: a.bandwidth_total,
        window_bytes: a.window,
        reset_after: trigger(a.reset_after),
        stall_after: trigger(a.stall_after),
        close_after_bytes: a.close_after,
        slow_close_ns: a.slow_close.as_nanos() as u64,
        loss: a.loss,
        gilbert_elliott: a.gilbert_elliott(),
        reorder: a.reorder,
        reorder_delay_ns: a.reorder_delay.as_nanos() as u64,
        duplicate: a.duplicate,
    })
}

/// One line describing an impairment.
pub fn describe(i: &Impairment) -> String {
    let mut parts = Vec::new();
    let d = Duration::from_nanos(i.delay_ns);
    match i.direction {
        Direction::Both => parts.push(format!(
            "delay {} each way (+{} RTT)",
            fmt_duration(d),
            fmt_duration(d * 2)
        )),
        Direction::Up => parts.push(format!("delay {} client->server only", fmt_duration(d))),
        Direction::Down => parts.push(format!("delay {} server->client only", fmt_duration(d))),
    }
    if i.jitter_ns > 0 {
        parts.push(format!(
            "jitter {} {}",
            fmt_duration(Duration::from_nanos(i.jitter_ns)),
            format!("{:?}", i.jitter_dist).to_lowercase()
        ));
    }
    if let Some(r) = i.rate_bps {
        parts.push(format!(
            "bandwidth {} Mbit/s per connection",
            r as f64 / 1e6
        ));
    }
    if let Some(r) = i.rate_total_bps {
        parts.push(format!("bandwidth {} Mbit/s total", r as f64 / 1e6));
    }
    if let Some(w) = i.window_bytes {
        parts.push(format!("window {}", fmt_bytes(w)));
    }
    if i.loss > 0.0 {
        parts.push(format!("loss {}%", i.loss * 100.0));
    }
    if let Some(g) = &i.gilbert_elliott {
        parts.push(format!("Gilbert-Elliott p={} r={}", g.p, g.r));
    }
    if i.reorder > 0.0 {
        parts.push(format!("reorder {}%", i.reorder * 100.0));
    }
    if i.duplicate > 0.0 {
        parts.push(format!("duplicate {}%", i.duplicate * 100.0));
    }
    for (name, t) in [("reset", i.reset_after), ("stall", i.stall_after)] {
        match t {
            Some(Trigger::AfterNs(ns)) => parts.push(format!(
                "{name} after {}",
                fmt_duration(Duration::from_nanos(ns))
            )),
            Some(Trigger::Bytes(b)) => parts.push(format!("{name} after {}", fmt_bytes(b))),
            None => {}
        }
    }
    if let Some(b) = i.close_after_bytes {
        parts.push(format!("close after {}", fmt_bytes(b)));
    }
    if i.slow_close_ns > 0 {
        parts.push(format!(
            "slow close {}",
            fmt_duration(Duration::from_nanos(i.slow_close_ns))
        ));
    }
    parts.join(", ")
}

/// Runs `roundtrip proxy` until Ctrl-C.
pub fn run(a: ProxyArgs) -> anyhow::Result<Exit> {
    if a.bridge.is_some() {
        bridge::run(a)
    } else {
        tcp::run(a)
    }
}

/// `--max-clients`: a count from 1 to 2^32-1.
fn max_clients(s: &str) -> Result<u32, String> {
    let n = args::count(s)?;
    u32::try_from(n).map_err(|_| format!("'{s}' is more than {} clients", u32::MAX))
}

/// The first option given that only a TCP proxy uses (`--bandwidth-total` counted when `total`: the UDP proxy
/// takes it, the bridge does not).
fn tcp_only_given(a: &ProxyArgs, total: bool) -> Option<&'static str> {
    [
        ("--window", a.window.is_some()),
        ("--bandwidth-total", total && a.bandwidth_total.is_some()),
        ("--reset-after", a.reset_after.is_some()),
        ("--stall-after", a.stall_after.is_some()),
        ("--close-after", a.close_after.is_some()),
        ("--slow-close", !a.slow_close.is_zero()),
    ]
    .into_iter()
    .find_map(|(name, set)| set.then_some(name))
}
