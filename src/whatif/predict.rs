//! The prediction: replays an [`AppProfile`]'s dependency structure on another network.
//!
//! Model, per connection (each connection is simulated alone; one that opened after another had sent its last
//! request in the capture follows that one's predicted end by the captured gap, the others keep their start
//! offsets: [`super::profile::predecessors`], the replay's rule):
//! - Setup: a connection whose handshake was captured pays one new RTT before its first request.
//! - A request is sent when the response it waited for in the capture has arrived plus the client's think
//!   time; requests keep their capture order, so requests that were outstanding together (pipelining, SMB2
//!   credits) overlap again.
//! - The request travels (its transfer, then half an RTT), the server spends the server time it spent in the
//!   capture, and the response travels back (transfer, half an RTT).
//! - Transfers follow TCP per direction and per connection: a congestion window starting at 10 MSS, growing by
//!   the bytes acknowledged each RTT (slow start), capped by the largest receiver window the other side
//!   advertised in the capture; the window persists across turns, and after an idle longer than the RTO
//!   (200 ms + RTT) it restarts from 10 MSS when `slow_start_after_idle` is set (Linux's default,
//!   net.ipv4.tcp_slow_start_after_idle=1). The sending rate is capped by `--bandwidth`, by default by the
//!   fastest transfer seen on the connection in the capture (the path's capacity as far as the capture shows).
//! - With [`PathKind::Relay`] (the delay added by a TCP-terminating relay such as `roundtrip proxy --rtt`
//!   without `--window`) the windows are not limits: each TCP leg sees a short RTT and the relay buffers.
//! - Loss: with `--loss p` the rate is also capped by Mathis et al.: MSS / RTT * 1.22 / sqrt(p).
//! - What the connection did after its last response (closing) is kept as client time.
//!
//! The breakdown follows the critical path (the chain of turns each waiting for the previous one, back from
//! the last response): think, server, round trips (one RTT per turn and the setup) and transfer (the rest:
//! window and bandwidth time, and queueing behind earlier requests).

use super::profile::{AppProfile, ConnProfile, RttSource};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Duration;

/// Initial congestion window, segments (RFC 6928, Linux's default).
pub const INITIAL_WINDOW_SEGMENTS: u64 = 10;
/// Linux's minimum retransmission timeout: an idle longer than this (plus an RTT) restarts slow start.
pub const RTO_MIN: Duration = Duration::from_millis(200);

/// The network to predict for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    /// Round-trip time.
    pub rtt: Duration,
    /// Path capacity, bit/s (None: the fastest transfer seen in the capture, per connection).
    pub bandwidth_bps: Option<u64>,
    /// Packet loss probability (0 for none).
    pub loss: f64,
    /// Restart slow start after an idle longer than the RTO (Linux tcp_slow_start_after_idle).
    pub slow_start_after_idle: bool,
    /// How the added RTT reaches TCP's window.
    pub path: PathKind,
}

/// What kind of path the added RTT is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    /// A real network path: the end hosts' TCP sees the RTT (slow start, receiver window per RTT).
    #[default]
    Tcp,
    /// A TCP-terminating relay that adds the delay (`roundtrip proxy --rtt` without `--window`): each TCP leg
    /// sees a short RTT and the relay buffers, so transfers are not window-bound; only the capacity counts.
    Relay,
}

/// Where the time goes (critical path).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Breakdown {
    /// Client think time, seconds.
    pub think_s: f64,
    /// Server time, seconds.
    pub server_s: f64,
    /// Round trips (one RTT per turn on the critical path and the setup), seconds.
    pub round_trips_s: f64,
    /// Transfer time (window growth, bandwidth, queueing behind outstanding requests), seconds.
    pub transfer_s: f64,
}

impl Breakdown {
    fn add(&mut self, o: &Breakdown) {
        self.think_s += o.think_s;
        self.server_s += o.server_s;
        self.round_trips_s += o.round_trips_s;
        self.transfer_s += o.transfer_s;
    }
    /// Sum of the parts, seconds.
    pub fn total_s(&self) -> f64 {
        self.think_s + self.server_s + self.round_trips_s + self.transfer_s
    }
}

/// One connection's prediction.
#[derive(Debug, Clone, Serialize)]
pub struct ConnPrediction {
    /// Client end.
    pub client: SocketAddr,
    /// Server end.
    pub server: SocketAddr,
    /// Protocol of the turns.
    pub protocol: String,
    /// Duration in the capture, seconds.
    pub today_s: f64,
    /// Predicted duration, seconds.
    pub predicted_s: f64,
    /// Critical-path breakdown of the predicted duration.
    pub breakdown: Breakdown,
    /// Application round trips (turns that waited for a response).
    pub round_trips: u64,
    /// Turns.
    pub turns: usize,
}

/// The whole capture's prediction at one network.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// RTT predicted for, seconds.
    pub rtt_s: f64,
    /// Capture duration, seconds.
    pub today_s: f64,
    /// Predicted duration (the last connection's predicted end), seconds.
    pub predicted_s: f64,
    /// Breakdown of the critical path (the connection that ends last and those it followed, the time between
    /// them as think time): its parts add up to `predicted_s`.
    pub breakdown: Breakdown,
    /// Application round trips, all connections.
    pub round_trips: u64,
    /// Added seconds per added millisecond of RTT at this RTT.
    pub sensitivity_s_per_ms: f64,
    /// Per connection.
    pub connections: Vec<ConnPrediction>,
}

/// Predicts the capture at `net`.
pub fn predict(p: &AppProfile, net: &Network) -> Prediction {
    let mut out = predict_once(p, net);
    let plus = Network {
        rtt: net.rtt + Duration::from_millis(1),
        ..*net
    };
    out.sensitivity_s_per_ms = predict_once(p, &plus).predicted_s - out.predicted_s;
    out
}

fn predict_once(p: &AppProfile, net: &Network) -> Prediction {
    let all: Vec<&ConnProfile> = p.connections.iter().collect();
    // Connections that followed one another in the capture follow one another in the prediction (the same
    // rule as the replay); the others keep their captured start offsets.
    let pred = crate::whatif::profile::predecessors(&all);
    let mut conns: Vec<ConnPrediction> = Vec::new();
    // Per connection: predicted start, and the time before it that the application spent outside it (its
    // captured offset, or the captured gap after the one it follows).
    let mut starts: Vec<(f64, f64)> = Vec::new();
    for (i, c) in p.connections.iter().enumerate() {
        let cp = predict_conn(c, net);
        let (start, gap) = match pred[i] {
            Some(j) => {
                let gap = c
                    .start
                    .saturating_sub(all[j].start + all[j].duration)
                    .as_secs_f64();
                (starts[j].0 + conns[j].predicted_s + gap, gap)
            }
            None => (c.start.as_secs_f64(), c.start.as_secs_f64()),
        };
        starts.push((start, gap));
        conns.push(cp);
    }
    // The run ends with the connection that ends last; its chain of predecessors is the critical path, and
    // its breakdown (with the time between connections as think time) is the prediction's.
    let last = (0..conns.len()).max_by(|&a, &b| {
        (starts[a].0 + conns[a].predicted_s).total_cmp(&(starts[b].0 + conns[b].predicted_s))
    });
    let mut total = Breakdown::default();
    let mut end = 0f64;
    if let Some(last) = last {
        end = starts[last].0 + conns[last].predicted_s;
        let mut at = Some(last);
        while let Some(i) = at {
            total.add(&conns[i].breakdown);
            total.think_s += starts[i].1;
            at = pred[i];
        }
    }
    // Time of the capture after every connection stays.
    let covered = p
        .connections
        .iter()
        .map(|c| c.start + c.duration)
        .max()
        .unwrap_or_default();
    let after = p.duration.saturating_sub(covered).as_secs_f64();
    end += after;
    total.think_s += after;
    Prediction {
        rtt_s: net.rtt.as_secs_f64(),
        today_s: p.duration.as_secs_f64(),
        predicted_s: end,
        breakdown: total,
        round_trips: p.round_trips(),
        sensitivity_s_per_ms: 0.0,
        connections: conns,
    }
}

/// One direction's TCP sender.
struct Sender {
    cwnd: f64,
    cap: f64,
    iw: f64,
    rate: Option<f64>,
    rtt: f64,
    round_start: f64,
    round_used: f64,
    last_active: Option<f64>,
    restart: bool,
}

impl Sender {
    fn new(mss: f64, rwnd: u64, rate_bps: Option<f64>, net: &Network) -> Self {
        let relay = net.path == PathKind::Relay;
        let iw = if relay {
            f64::INFINITY
        } else {
            INITIAL_WINDOW_SEGMENTS as f64 * mss
        };
        Sender {
            cwnd: iw,
            cap: if relay {
                f64::INFINITY
            } else {
                (rwnd as f64).max(iw)
            },
            iw,
            rate: rate_bps.map(|r| r / 8.0),
            rtt: net.rtt.as_secs_f64(),
            round_start: f64::NEG_INFINITY,
            round_used: 0.0,
            last_active: None,
            restart: net.slow_start_after_idle,
        }
    }

    fn new_round(&mut self, t: f64) {
        self.cwnd = (self.cwnd + self.round_used).min(self.cap);
        self.round_start = t;
        self.round_used = 0.0;
    }

    /// Sends `bytes` from time `t`; returns when the last byte has left.
    fn send(&mut self, t: f64, bytes: u64) -> f64 {
        let mut t = t;
        if bytes == 0 {
            return t;
        }
        if let Some(l) = self.last_active
            && self.restart
            && t - l > RTO_MIN.as_secs_f64() + self.rtt
        {
            self.cwnd = self.cwnd.min(self.iw);
            self.round_used = 0.0;
            self.round_start = f64::NEG_INFINITY;
        }
        if t >= self.round_start + self.rtt {
            self.new_round(t);
        }
        let mut left = bytes as f64;
        while left > 0.0 {
            let avail = self.cwnd.min(self.cap) - self.round_used;
            if avail <= 0.5 {
                t = t.max(self.round_start + self.rtt);
                self.new_round(t);
                continue;
            }
            let chunk = left.min(avail);
            if let Some(r) = self.rate {
                t += chunk / r;
            }
            self.round_used += chunk;
            left -= chunk;
            if left > 0.0 && t >= self.round_start + self.rtt {
                self.new_round(t);
            }
        }
        self.last_active = Some(t);
        t
    }
}

/// The fastest transfer of at least 4 segments on the connection, bit/s.
fn capacity_bps(c: &ConnProfile) -> Option<f64> {
    let min = 4 * c.mss as u64;
    c.turns
        .iter()
        .flat_map(|t| {
            [
                (t.request_bytes, t.request_transfer),
                (t.response_bytes, t.response_transfer),
            ]
        })
        .filter(|(b, d)| *b >= min && !d.is_zero())
        .map(|(b, d)| b as f64 * 8.0 / d.as_secs_f64())
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
}

/// Predicts one connection at `net`.
pub fn predict_conn(c: &ConnProfile, net: &Network) -> ConnPrediction {
    let rtt = net.rtt.as_secs_f64();
    let mss = c.mss.max(536) as f64;
    let mut rate = net
        .bandwidth_bps
        .map(|b| b as f64)
        .or_else(|| capacity_bps(c));
    if net.loss > 0.0 && rtt > 0.0 {
        let mathis = mss * 8.0 / rtt * 1.22 / net.loss.sqrt();
        rate = Some(rate.map_or(mathis, |r| r.min(mathis)));
    }
    // Client sends limited by the server's window and back.
    let mut up = Sender::new(mss, c.max_window[1], rate, net);
    let mut down = Sender::new(mss, c.max_window[0], rate, net);
    let setup = if c.rtt_source == RttSource::Handshake {
        rtt
    } else {
        0.0
    };
    let n = c.turns.len();
    let mut send = vec![0f64; n];
    let mut end = vec![0f64; n];
    let mut prev_send = 0f64;
    for (i, t) in c.turns.iter().enumerate() {
        let base = t.waits_for.map_or(setup, |j| end[j]);
        let s = (base + t.think.as_secs_f64()).max(prev_send);
        prev_send = s;
        send[i] = s;
        let at_server = up.send(s, t.request_bytes) + rtt / 2.0;
        let ready = at_server + t.server.as_secs_f64();
        end[i] = down.send(ready, t.response_bytes) + rtt / 2.0;
    }
    let last = (0..n).max_by(|&a, &b| end[a].total_cmp(&end[b]));
    let tail = c.tail.as_secs_f64();
    let predicted = last.map_or(setup, |i| end[i]) + tail;
    // Critical path back from the last response.
    let mut b = Breakdown {
        think_s: tail,
        round_trips_s: setup,
        ..Default::default()
    };
    let mut cur = last;
    while let Some(i) = cur {
        let t = &c.turns[i];
        let base = t.waits_for.map_or(setup, |j| end[j]);
        let think = t.think.as_secs_f64();
        let server = t.server.as_secs_f64();
        b.think_s += think;
        b.server_s += server;
        b.round_trips_s += rtt;
        b.transfer_s += (end[i] - base - think - server - rtt).max(0.0);
        cur = t.waits_for;
    }
    // Anything left (the first turn's start before the setup ended) goes to think time.
    let rest = predicted - b.total_s();
    if rest > 0.0 {
        b.think_s += rest;
    }
    ConnPrediction {
        client: c.client,
        server: c.server,
        protocol: c.protocol.clone(),
        today_s: c.duration.as_secs_f64(),
        predicted_s: predicted,
        breakdown: b,
        round_trips: c.round_trips(),
        turns: n,
    }
}

/// Reads Linux's net.ipv4.tcp_slow_start_after_idle (true when it cannot be read: the kernel default).
pub fn host_slow_start_after_idle() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_slow_start_after_idle")
        .map(|s| s.trim() != "0")
        .unwrap_or(true)
}
