//! Worker threads: connection set-up (connect + hello / key handshake) for the loop's TCP and UDP targets,
//! and single-shot connect, ICMP and database probes.

use super::messages::{Connection, Job, Msg, Pending};
use super::{Entry, Failure, Shared, io_failure, io_reason, lock};
use crate::agent::{ErrorReason, ProbeKind, TargetSpec};
use crate::db::{self, DbError, DbUrl, Scheme, SslMode};
use crate::probe::connect::{self, ConnectConfig, NoConnectObserver, PortState};
use crate::probe::hello::{self, HandshakeError, Link};
use crate::probe::icmp::{self, IcmpConfig, IcmpObserver, ProbeOutcome};
use crate::wire::auth::Psk;
use crate::wire::sockperf::Feature;
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A kept database session.
pub(super) type DbSession = Box<dyn db::Session + Send>;

/// Starts `n` threads taking jobs from one queue; returns the queue. Connection results go to `back`.
pub(super) fn spawn(
    name: &str,
    n: usize,
    shared: Arc<Shared>,
    psk: Arc<Option<Psk>>,
    back: Option<(mpsc::Sender<Msg>, Arc<mio::Waker>)>,
    threads: &mut Vec<JoinHandle<()>>,
) -> io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..n {
        let rx = rx.clone();
        let shared = shared.clone();
        let psk = psk.clone();
        let back = back.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    loop {
                        let job = lock(&rx).recv();
                        let Ok(job) = job else { return };
                        if shared.stop.load(Ordering::Relaxed) {
                            return;
                        }
                        match job {
                            Job::Connect {
                                slot,
                                cgen,
                                link,
                                deadline,
                            } => {
                                let timeout = deadline
                                    .saturating_duration_since(Instant::now())
                                    .max(Duration::from_millis(1));
                                let result = match link {
                                    Pending::Udp(addr) => {
                                        connect_udp(addr, timeout, psk.as_ref().as_ref())
                                            .map(Connection::Udp)
                                    }
                                    Pending::Tcp(s) => {
                                        handshake_tcp(s, timeout, psk.as_ref().as_ref())
                                            .map(Connection::Tcp)
                                    }
                                };
                                if let Some((tx, waker)) = &back {
                                    let _ = tx.send(Msg::Connected { slot, cgen, result });
                                    let _ = waker.wake();
                                }
                            }
                            Job::Probe { entry, spec, due } => {
                                let start = Instant::now();
                                shared.record_lag(start.saturating_duration_since(due));
                                let outcome = probe_once(&entry, &spec, &shared.stop);
                                let at = Instant::now();
                                match outcome {
                                    Ok(rtt) => entry.record_ok(at, rtt),
                                    Err(f) => entry.record_err(at, &f),
                                }
                                entry.busy.store(false, Ordering::Release);
                            }
                        }
                    }
                })?,
        );
    }
    Ok(tx)
}

fn handshake_failure(e: HandshakeError) -> Failure {
    let reason = match &e {
        HandshakeError::Io { source, .. } => io_reason(source),
        HandshakeError::Closed(_) => ErrorReason::Reset,
        HandshakeError::Silent(..) => ErrorReason::Timeout,
        HandshakeError::Protocol(_) => ErrorReason::Protocol,
        HandshakeError::KeyRequired
        | HandshakeError::KeyRefused
        | HandshakeError::ServerHasNoKey(_)
        | HandshakeError::BadServerProof => ErrorReason::Auth,
    };
    Failure::new(reason, format!("hello: {e}"))
}

fn handshake_tcp(
    mut s: TcpStream,
    timeout: Duration,
    psk: Option<&Psk>,
) -> Result<TcpStream, Failure> {
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))
    };
    setup(&s).map_err(|e| io_failure("socket options", &e))?;
    hello::handshake(&mut Link::Tcp(&mut s), Feature::default(), psk, timeout)
        .map_err(handshake_failure)?;
    s.set_read_timeout(None)
        .and_then(|()| s.set_write_timeout(None))
        .and_then(|()| s.set_nonblocking(true))
        .map_err(|e| io_failure("socket options", &e))?;
    Ok(s)
}

fn connect_udp(
    addr: SocketAddr,
    timeout: Duration,
    psk: Option<&Psk>,
) -> Result<UdpSocket, Failure> {
    let local: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("an address")
    } else {
        "0.0.0.0:0".parse().expect("an address")
    };
    let s = UdpSocket::bind(local).map_err(|e| io_failure("UDP socket", &e))?;
    s.connect(addr).map_err(|e| io_failure("connect", &e))?;
    // The handshake tries three times over UDP, each try waiting a third of the timeout: the whole set-up
    // stays within the target's timeout.
    let per_try = (timeout / 3).max(Duration::from_millis(1));
    hello::handshake(&mut Link::Udp(&s), Feature::default(), psk, per_try)
        .map_err(handshake_failure)?;
    s.set_read_timeout(None)
        .and_then(|()| s.set_nonblocking(true))
        .map_err(|e| io_failure("socket options", &e))?;
    Ok(s)
}

/// One probe of a pool target: the RTT, or why it failed.
fn probe_once(
    entry: &Entry,
    spec: &TargetSpec,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Duration, Failure> {
    match &spec.probe {
        ProbeKind::Connect => connect_probe(spec),
        ProbeKind::Icmp { size } => icmp_probe(spec, *size),
        ProbeKind::Db { url } => db_probe(entry, spec, url),
        ProbeKind::DbLink { url, link } => db_link_probe(entry, spec, url, link, stop),
        ProbeKind::Tcp { .. } | ProbeKind::Udp { .. } => Err(Failure::new(
            ErrorReason::Other,
            "a ping target reached the probe pool",
        )),
    }
}

fn connect_probe(spec: &TargetSpec) -> Result<Duration, Failure> {
    let mut c = ConnectConfig::new(spec.addr);
    c.count = 1;
    c.timeout = spec.timeout;
    let r = connect::run(&c, &mut NoConnectObserver)
        .map_err(|e| Failure::new(ErrorReason::Other, e.to_string()))?;
    if let Some(e) = &r.error {
        return Err(Failure::new(ErrorReason::Other, e.to_string()));
    }
    let Some(a) = r.attempts.first() else {
        return Err(Failure::new(ErrorReason::Other, "no attempt was made"));
    };
    let detail = || a.detail.clone().unwrap_or_default();
    match (a.state, a.time) {
        (PortState::Open, Some(t)) => Ok(t),
        (PortState::Open, None) => Err(Failure::new(ErrorReason::Other, "no handshake time")),
        (PortState::Closed, _) => Err(Failure::new(ErrorReason::Refused, detail())),
        (PortState::Filtered, _) => Err(Failure::new(ErrorReason::Timeout, detail())),
        (PortState::Unreachable, _) => Err(Failure::new(ErrorReason::Unreachable, detail())),
    }
}

#[derive(Default)]
struct OneIcmp(Option<ProbeOutcome>);

impl IcmpObserver for OneIcmp {
    fn probe(&mut self, probe: &icmp::Probe) {
        self.0 = Some(probe.outcome.clone());
    }
}

fn icmp_probe(spec: &TargetSpec, size: u32) -> Result<Duration, Failure> {
    let mut c = IcmpConfig::new(spec.addr.ip());
    c.count = 1;
    c.timeout = spec.timeout;
    c.size = size as usize;
    let mut obs = OneIcmp::default();
    let r = icmp::run(&c, &mut obs).map_err(|e| {
        let reason = match e {
            icmp::IcmpError::NoRoute { .. } => ErrorReason::Unreachable,
            _ => ErrorReason::Other,
        };
        Failure::new(reason, e.to_string())
    })?;
    match obs.0 {
        Some(ProbeOutcome::Reply { rtt_ns, .. }) => Ok(Duration::from_nanos(rtt_ns)),
        Some(ProbeOutcome::Timeout) => Err(Failure::new(
            ErrorReason::Timeout,
            format!("no echo reply within {:?}", spec.timeout),
        )),
        Some(ProbeOutcome::Error { detail }) => {
            let reason = if detail.contains("ECONNREFUSED") {
                ErrorReason::Refused
            } else {
                ErrorReason::Unreachable
            };
            Err(Failure::new(reason, detail))
        }
        None => Err(Failure::new(
            ErrorReason::Other,
            r.error
                .map_or_else(|| "no echo request was sent".into(), |e| e.to_string()),
        )),
    }
}

fn db_reason(e: &DbError) -> ErrorReason {
    match e {
        DbError::Connect { detail, .. } => {
            let d = detail.to_ascii_lowercase();
            if d.contains("refused") {
                ErrorReason::Refused
            } else if d.contains("unreachable") || d.contains("no route") {
                ErrorReason::Unreachable
            } else if d.contains("reset") {
                ErrorReason::Reset
            } else {
                ErrorReason::Other
            }
        }
        DbError::Timeout { .. } => ErrorReason::Timeout,
        DbError::Closed { .. } => ErrorReason::Reset,
        DbError::Auth { .. } | DbError::NoPassword { .. } => ErrorReason::Auth,
        DbError::Target(_) => ErrorReason::Dns,
        DbError::Url { .. } | DbError::Config(_) => ErrorReason::Other,
        DbError::UnknownDatabase { .. }
        | DbError::Server { .. }
        | DbError::TlsNotOffered { .. }
        | DbError::Tls { .. }
        | DbError::TlsRequired { .. }
        | DbError::RsaKey { .. }
        | DbError::Protocol { .. }
        | DbError::Unsupported { .. }
        | DbError::Link { .. } => ErrorReason::Protocol,
    }
}

fn db_failure(e: &DbError) -> Failure {
    Failure::new(db_reason(e), e.to_string())
}

/// One call through the target's database link, timed inside the local database (the kept link session is
/// opened first when there is none; its first call opens the link and is not counted).
fn db_link_probe(
    entry: &Entry,
    spec: &TargetSpec,
    url: &DbUrl,
    link: &db::link::LinkTarget,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<Duration, Failure> {
    let fail = |e: DbError| db_failure(&link.scrub_error(e));
    let addr = SocketAddr::new(spec.addr.ip(), url.port());
    let kept = lock(&entry.link).take();
    let mut ls = match kept {
        Some(s) => s,
        None => {
            // One link open per target at a time: a statement given up on (the timeout) may still hold a
            // backend of the local database inside a link open (FEDERATEDX until net_read_timeout); no
            // other starts until it has ended.
            let open = entry.link_inflight.load(Ordering::SeqCst);
            if open > 0 {
                return Err(Failure::new(
                    ErrorReason::Timeout,
                    format!(
                        "the previous link open to {} is still running in the local database (given up on after the timeout; the local server ends it): not starting another",
                        link.redacted()
                    ),
                ));
            }
            // The server version tells MariaDB (FEDERATEDX, INSTALL SONAME) from MySQL in a refusal.
            let (session, version) = open_db_versioned(url, addr, spec.timeout).map_err(fail)?;
            let mut ls = db::link::LinkSession::prepare(
                session,
                url.scheme,
                version.as_deref(),
                url,
                link,
                addr,
                0,
                1,
                false,
                spec.timeout,
                stop.clone(),
                entry.link_inflight.clone(),
            )
            .map_err(fail)?;
            if let Err(e) = ls.open_link() {
                ls.close();
                return Err(fail(e));
            }
            ls
        }
    };
    match ls.call() {
        Ok(c) => {
            *lock(&entry.link) = Some(ls);
            Ok(c.round_trip())
        }
        Err(e) => {
            ls.close();
            Err(fail(e))
        }
    }
}

fn open_db(url: &DbUrl, addr: SocketAddr, timeout: Duration) -> Result<DbSession, DbError> {
    open_db_versioned(url, addr, timeout).map(|(s, _)| s)
}

/// [`open_db`] with the server version the protocol announced (None when it does not tell).
fn open_db_versioned(
    url: &DbUrl,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(DbSession, Option<String>), DbError> {
    let scheme = url.scheme;
    let ssl = url.ssl_mode.unwrap_or(match scheme {
        Scheme::Postgres | Scheme::Mysql => SslMode::Prefer,
        _ => SslMode::Disable,
    });
    let (conn, _) = db::tcp_connect(addr, scheme.name(), timeout)?;
    Ok(match scheme {
        Scheme::Postgres => {
            let (s, setup) = db::postgres::connect(conn, url, ssl)?;
            (Box::new(s), setup.server_version)
        }
        Scheme::Mysql => {
            let (s, setup) = db::mysql::connect(conn, url, ssl)?;
            (Box::new(s), setup.server_version)
        }
        Scheme::Redis => {
            let (s, setup) = db::redis::connect(conn, url, ssl)?;
            (Box::new(s), setup.server_version)
        }
        Scheme::Oracle => {
            return Err(DbError::Config(
                "an Oracle listener ping opens no database session".into(),
            ));
        }
    })
}

/// One trivial query on the target's kept session (opened first when there is none); an Oracle listener
/// gets a TNS ping on a fresh connection, as `roundtrip db` does.
fn db_probe(entry: &Entry, spec: &TargetSpec, url: &DbUrl) -> Result<Duration, Failure> {
    let addr = SocketAddr::new(spec.addr.ip(), url.port());
    if url.scheme == Scheme::Oracle {
        let mut c = db::DbConfig::new(url.clone());
        c.connects = 1;
        c.count = 1;
        c.rows = 0;
        c.timeout = spec.timeout;
        let r = db::run(&c, &mut db::NoObserver).map_err(|e| db_failure(&e))?;
        if let Some(e) = &r.error {
            return Err(db_failure(e));
        }
        if r.ping.is_empty() {
            return Err(Failure::new(ErrorReason::Other, "no TNS ping was made"));
        }
        return Ok(Duration::from_nanos(r.ping.percentile_ns(50.0)));
    }
    let kept = lock(&entry.db).take();
    let mut session = match kept {
        Some(s) => s,
        None => open_db(url, addr, spec.timeout).map_err(|e| db_failure(&e))?,
    };
    let t0 = Instant::now();
    match session.query(db::default_query(url.scheme)) {
        Ok(_) => {
            let rtt = t0.elapsed();
            *lock(&entry.db) = Some(session);
            Ok(rtt)
        }
        Err(e) => Err(db_failure(&e)),
    }
}
