//! `compare`: one host, four ways to measure its round trip, side by side (seed 000: "ping, hping -S and my
//! application disagree").
//!
//! One after another, against the same address: ICMP echo ([`crate::probe::icmp`]), the TCP handshake
//! ([`crate::probe::connect`]), application ping-pong with a header-only 14-byte message and with a realistic
//! payload ([`crate::probe::ping`]), and the kernel's own smoothed RTT of that last ping connection
//! (`TCP_INFO`, [`crate::probe::tcpinfo`]). Every row keeps its error instead of stopping the comparison, so a
//! host that blocks ICMP still gets its TCP rows. With no address, an embedded server on loopback answers.

use crate::probe::connect::{self, ConnectConfig, ConnectMode, NoConnectObserver};
use crate::probe::icmp::{self, IcmpConfig, IcmpMode, NoIcmpObserver};
use crate::probe::ping::{self, NoObserver, PingConfig, Stop, Transport};
use crate::probe::tcpinfo::TcpRtt;
use crate::server::{self, ServerConfig, ServerError};
use crate::stats::Summary;
use crate::units::fmt_nanos;
use crate::wire::sockperf::HEADER_LEN;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use thiserror::Error;

/// A row stops after this many unanswered attempts in a row when nothing answered at all, so a host that
/// drops ICMP or SYNs costs three timeouts, not `count`.
pub const GIVE_UP_AFTER: u64 = 3;

/// Default realistic payload: seed 000's average SQL*Net packet.
pub const DEFAULT_SIZE: usize = 250;

/// Settings of a comparison. Build with [`CompareConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// The host and the port of a roundtrip or sockperf server; `None` starts an embedded server on loopback.
    pub target: Option<SocketAddr>,
    /// With no target: use `::1` instead of `127.0.0.1`.
    pub loopback_v6: bool,
    /// Measurements per row.
    pub count: u64,
    /// Time between measurements, the same for every row so that none is flattered by back-to-back traffic.
    pub interval: Duration,
    /// How long to wait for any one answer.
    pub timeout: Duration,
    /// Whole message size of the realistic ping row (header included).
    pub size: usize,
    /// ICMP socket choice.
    pub icmp_mode: IcmpMode,
    /// How the handshake row sends its SYN; `None`: a raw SYN answered by RST (as hping3 -S) where raw
    /// sockets are allowed, else `connect()`.
    pub connect_mode: Option<ConnectMode>,
    /// Set from outside (Ctrl-C) to end early; rows so far are kept.
    pub cancel: Arc<AtomicBool>,
}

impl CompareConfig {
    /// Defaults: 50 measurements per row, 20 ms apart, 1 s timeout, 250-byte payload.
    pub fn new(target: Option<SocketAddr>) -> Self {
        CompareConfig {
            target,
            loopback_v6: false,
            count: 50,
            interval: Duration::from_millis(20),
            timeout: Duration::from_secs(1),
            size: DEFAULT_SIZE,
            icmp_mode: IcmpMode::Auto,
            connect_mode: None,
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Checks the settings before any I/O.
    pub fn validate(&self) -> Result<(), CompareError> {
        if self.count == 0 {
            return Err(CompareError::Invalid("count must be at least 1".into()));
        }
        if self.timeout.is_zero() {
            return Err(CompareError::Invalid("timeout must be more than 0".into()));
        }
        let mut p = PingConfig::new(SocketAddr::from(([127, 0, 0, 1], 1)));
        p.size = self.size;
        p.validate()
            .map_err(|e| CompareError::Invalid(format!("--size: {e}")))?;
        Ok(())
    }
}

/// A comparison could not run.
#[derive(Debug, Error)]
pub enum CompareError {
    /// Settings are out of range.
    #[error("{0}")]
    Invalid(String),
    /// The embedded server did not start.
    #[error("cannot start the embedded server on loopback: {0}")]
    Server(#[from] ServerError),
}

/// Which measurement a row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// ICMP echo.
    Icmp,
    /// TCP SYN -> SYN-ACK.
    TcpHandshake,
    /// Application ping-pong with a header-only message.
    PingHeader,
    /// Application ping-pong with the realistic payload.
    PingPayload,
    /// The kernel's smoothed RTT of the payload ping connection.
    KernelSrtt,
}

/// One row of the comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// What was measured.
    pub kind: RowKind,
    /// A short label for tables.
    pub label: String,
    /// Bytes per message where it applies (ICMP payload, whole ping message).
    #[serde(default)]
    pub size_bytes: Option<usize>,
    /// Measurements attempted.
    pub attempts: u64,
    /// Statistics of the measurements that succeeded (`count` of them).
    pub summary: Summary,
    /// Why the row has fewer measurements than attempts, or none.
    #[serde(default)]
    pub error: Option<String>,
    /// One line saying what this row measures and how to read it.
    #[serde(default)]
    pub interpretation: String,
}

/// The result of a comparison.
#[derive(Debug, Clone)]
pub struct CompareResult {
    /// The address measured.
    pub addr: SocketAddr,
    /// True when an embedded loopback server answered.
    pub embedded_server: bool,
    /// Wall-clock start.
    pub started: SystemTime,
    /// The rows, in the order they ran.
    pub rows: Vec<Row>,
    /// The last `TCP_INFO` reading of the payload ping connection.
    pub tcp_info: Option<TcpRtt>,
    /// True when cancelled from outside (Ctrl-C).
    pub cancelled: bool,
}

impl CompareResult {
    /// True when at least one row measured something.
    pub fn measured_anything(&self) -> bool {
        self.rows.iter().any(|r| r.summary.count > 0)
    }

    fn p50(&self, kind: RowKind) -> Option<u64> {
        self.rows
            .iter()
            .find(|r| r.kind == kind && r.summary.count > 0)
            .map(|r| r.summary.p50_ns)
    }

    /// One sentence comparing what the application pays with what ICMP and the handshake suggest.
    pub fn conclusion(&self) -> Option<String> {
        let app = self
            .p50(RowKind::PingPayload)
            .or(self.p50(RowKind::PingHeader))?;
        let mut parts = vec![format!(
            "the application pays {} at the median",
            fmt_nanos(app as f64)
        )];
        for (kind, name) in [
            (RowKind::Icmp, "ICMP ping"),
            (RowKind::TcpHandshake, "hping -S"),
        ] {
            if let Some(v) = self.p50(kind) {
                let ratio = app as f64 / v.max(1) as f64;
                parts.push(format!(
                    "{:.1}x what {name} shows ({})",
                    ratio,
                    fmt_nanos(v as f64)
                ));
            }
        }
        Some(parts.join(", "))
    }
}

fn delta(a: u64, b: u64) -> String {
    if a >= b {
        format!("+{}", fmt_nanos((a - b) as f64))
    } else {
        format!("-{}", fmt_nanos((b - a) as f64))
    }
}

/// The payload row's words: it says the payload added time only when its median is above the header-only
/// one; a median at or below it is said as what it is (the cost is below the run's noise).
fn payload_interpretation(size: usize, p50s: Option<(u64, u64)>) -> String {
    match p50s {
        Some((payload, header)) if payload > header => format!(
            "the same with a realistic {size} B message: adds copying and serialising the payload both ways; p50 {} vs {HEADER_LEN} B",
            delta(payload, header)
        ),
        Some((payload, header)) => format!(
            "the same with a realistic {size} B message: p50 {} vs {HEADER_LEN} B, so copying and serialising the payload cost less than this run's noise",
            delta(payload, header)
        ),
        None => format!(
            "the same with a realistic {size} B message: adds copying and serialising the payload both ways"
        ),
    }
}

/// Runs the four measurements one after another.
pub fn run(config: &CompareConfig) -> Result<CompareResult, CompareError> {
    config.validate()?;
    let (addr, embedded) = match config.target {
        Some(a) => (a, None),
        None => {
            let ip = if config.loopback_v6 {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            };
            let srv = server::start(
                &ServerConfig {
                    bind: Some(ip),
                    port: 0,
                    tcp: true,
                    udp: false,
                    ..Default::default()
                },
                |_| {},
            )?;
            let a = srv.tcp_addr().ok_or_else(|| {
                CompareError::Invalid("the embedded server has no TCP address".into())
            })?;
            (a, Some(srv))
        }
    };
    let mut result = CompareResult {
        addr,
        embedded_server: embedded.is_some(),
        started: SystemTime::now(),
        rows: Vec::new(),
        tcp_info: None,
        cancelled: false,
    };
    let cancelled = || config.cancel.load(Ordering::Relaxed);

    // 1. ICMP echo.
    let mut ic = IcmpConfig::new(addr.ip());
    ic.count = config.count;
    ic.interval = config.interval;
    ic.timeout = config.timeout;
    ic.mode = config.icmp_mode;
    ic.cancel = config.cancel.clone();
    ic.give_up_after = Some(GIVE_UP_AFTER);
    let icmp_payload = icmp::DEFAULT_PAYLOAD;
    ic.size = icmp_payload;
    let row = match icmp::run(&ic, &mut NoIcmpObserver) {
        Ok(r) => {
            let err = r.error.as_ref().map(|e| e.to_string()).or_else(|| {
                (r.received < r.sent).then(|| match &r.last_error {
                    Some(d) => format!("{} of {} unanswered; last error: {d}", r.lost(), r.sent),
                    None => format!("{} of {} unanswered (ICMP dropped or rate-limited?)", r.lost(), r.sent),
                })
            });
            Row {
                kind: RowKind::Icmp,
                label: "ICMP echo".into(),
                size_bytes: Some(icmp_payload),
                attempts: r.sent,
                summary: r.rtt.summary(),
                error: err,
                interpretation: format!(
                    "echo answered by the host's kernel ({}): no TCP, no application; routers and hosts may deprioritise, rate-limit or block ICMP",
                    r.socket
                ),
            }
        }
        Err(e) => Row {
            kind: RowKind::Icmp,
            label: "ICMP echo".into(),
            size_bytes: Some(icmp_payload),
            attempts: 0,
            summary: Summary::default(),
            error: Some(e.to_string()),
            interpretation: "echo answered by the host's kernel: no TCP, no application (the TCP rows do not need it)".into(),
        },
    };
    result.rows.push(row);

    // 2. TCP handshake.
    if !cancelled() {
        let mut cc = ConnectConfig::new(addr);
        cc.count = config.count;
        cc.interval = config.interval;
        cc.timeout = config.timeout;
        cc.mode = config.connect_mode.unwrap_or(ConnectMode::Raw);
        cc.cancel = config.cancel.clone();
        cc.give_up_after = Some(GIVE_UP_AFTER);
        let mut run = connect::run(&cc, &mut NoConnectObserver);
        if config.connect_mode.is_none()
            && matches!(run, Err(connect::ConnectError::RawNotPermitted { .. }))
        {
            cc.mode = ConnectMode::Kernel;
            run = connect::run(&cc, &mut NoConnectObserver);
        }
        let row = match run {
            Ok(r) => {
                let open = r.count(connect::PortState::Open);
                let attempts = r.attempts.len() as u64;
                let err = r.error.as_ref().map(|e| e.to_string()).or_else(|| {
                    (open < attempts).then(|| {
                        let worst = r.attempts.iter().find(|a| a.state != connect::PortState::Open);
                        format!(
                            "{} of {attempts} attempts not open: {}{}",
                            attempts - open,
                            worst.map_or("?".to_string(), |a| a.state.to_string()),
                            worst
                                .and_then(|a| a.detail.as_ref())
                                .map_or(String::new(), |d| format!(" ({d})"))
                        )
                    })
                });
                Row {
                    kind: RowKind::TcpHandshake,
                    label: "TCP handshake".into(),
                    size_bytes: None,
                    attempts,
                    summary: r.handshake.summary(),
                    error: err,
                    interpretation: format!(
                        "SYN -> SYN-ACK ({}), answered by the host's kernel from the listen queue, not by the application: what hping3 -S shows",
                        r.mode
                    ),
                }
            }
            Err(e) => Row {
                kind: RowKind::TcpHandshake,
                label: "TCP handshake".into(),
                size_bytes: None,
                attempts: 0,
                summary: Summary::default(),
                error: Some(e.to_string()),
                interpretation: "SYN -> SYN-ACK, answered by the host's kernel, not by the application: what hping3 -S shows".into(),
            },
        };
        result.rows.push(row);
    }

    // 3 and 4. Application ping-pong, header only and with the payload; the kernel's view of the latter.
    for (kind, size) in [
        (RowKind::PingHeader, HEADER_LEN),
        (RowKind::PingPayload, config.size),
    ] {
        if cancelled() {
            break;
        }
        let mut pc = PingConfig::new(addr);
        pc.link.transport = Transport::Tcp;
        pc.size = size;
        pc.stop = Stop::Count(config.count);
        pc.interval = Some(config.interval);
        pc.warmup = Duration::from_millis(100).max(config.interval * 3);
        pc.link.timeout = config.timeout;
        pc.cancel = config.cancel.clone();
        pc.tcp_info = kind == RowKind::PingPayload;
        let label = format!("roundtrip ping {size} B");
        match ping::run(&pc, &mut NoObserver) {
            Ok(r) => {
                let s = r.rtt.summary();
                let err = r.error.as_ref().map(|e| e.to_string());
                let interpretation = match kind {
                    RowKind::PingHeader => {
                        let mut t = "application to application with a header-only message: both user-space stacks, system calls and wake-ups".to_string();
                        if let (Some(h), true) = (result.p50(RowKind::TcpHandshake), s.count > 0) {
                            t.push_str(&format!("; p50 {} vs the handshake", delta(s.p50_ns, h)));
                        }
                        t
                    }
                    _ => payload_interpretation(
                        size,
                        result
                            .p50(RowKind::PingHeader)
                            .filter(|_| s.count > 0)
                            .map(|h| (s.p50_ns, h)),
                    ),
                };
                result.rows.push(Row {
                    kind,
                    label,
                    size_bytes: Some(size),
                    attempts: r.sent,
                    summary: s,
                    error: err,
                    interpretation,
                });
                if kind == RowKind::PingPayload {
                    result.tcp_info = r.tcp_info;
                    let k = r.kernel_srtt.summary();
                    result.rows.push(Row {
                        kind: RowKind::KernelSrtt,
                        label: "kernel srtt (TCP_INFO)".into(),
                        size_bytes: Some(size),
                        attempts: r.received,
                        summary: k,
                        error: (k.count == 0 && r.received > 0)
                            .then(|| "TCP_INFO could not be read on this system".to_string()),
                        interpretation: match r.tcp_info {
                            Some(i) => format!(
                                "the kernel's smoothed RTT of the {size} B connection (last {} +- rttvar {}), from ACK timing, microsecond resolution: the answer carries the ACK, so it includes the server application's turnaround but not this side's wake-up and system calls",
                                fmt_nanos(i.srtt.as_nanos() as f64),
                                fmt_nanos(i.rttvar.as_nanos() as f64)
                            ),
                            None => "the kernel's smoothed RTT (tcpi_rtt) of the ping connection: not available".into(),
                        },
                    });
                }
            }
            Err(e) => result.rows.push(Row {
                kind,
                label,
                size_bytes: Some(size),
                attempts: 0,
                summary: Summary::default(),
                error: Some(e.to_string()),
                interpretation: format!(
                    "application ping-pong with {size} B messages: needs `roundtrip server` (or sockperf server) on {addr}"
                ),
            }),
        }
    }
    result.cancelled = cancelled();
    if let Some(srv) = embedded {
        srv.shutdown();
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_row_says_it_added_time_only_when_its_median_is_higher() {
        let up = payload_interpretation(250, Some((16_500, 16_300)));
        assert!(up.contains("adds copying") && up.contains("+200ns"), "{up}");
        let down = payload_interpretation(250, Some((16_300, 16_500)));
        assert!(!down.contains("adds"), "{down}");
        assert!(down.contains("-200ns") && down.contains("noise"), "{down}");
    }
}
