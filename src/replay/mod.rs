//! `roundtrip replay`: play an application's structure, read from a capture ([`AppProfile`]), against a
//! `roundtrip server --allow-replay`, so the application's run time on any path (through
//! `roundtrip proxy --rtt 40ms`, to another site) is measured without the application.
//!
//! Per captured TCP connection the replay opens one TCP connection at the captured start offset, runs the
//! extension hello asking for [`Feature::REPLAY`] (and the key exchange with a pre-shared key), then plays the
//! connection's turns: a request of the captured size is sent when the response it waited for in the capture
//! has arrived and the captured think time has passed; the server answers it after the captured server time
//! with the captured number of bytes ([`ReplayRequest`]). Requests that did not wait for anything go out at
//! their captured offset from the connection's start, so pipelining and requests outstanding at once are
//! played as captured. A reader thread per connection collects the answers, in order.
//!
//! Sizes on the wire: a request is at least [`REPLAY_MIN_LEN`] bytes (header and replay fields) and is split
//! into messages of at most [`MAX_MESSAGE_LEN`], the last one asking for the answer; an answer is at least
//! [`HEADER_LEN`] bytes and at most [`MAX_REPLAY_ANSWER`] per request, a larger captured response is asked for
//! with several requests. Server times longer than [`MAX_REPLAY_DELAY`] are capped. The result says how many of
//! each happened.
//!
//! The hello costs one round trip the application did not pay; it is timed and left out of the replayed
//! duration (the TCP handshake is kept: the application paid it too).

pub mod capture;

use crate::probe::hello::{self, HandshakeError, Link};
use crate::probe::ping::PeerKind;
use crate::whatif::profile::{AppProfile, ConnProfile};
use crate::wire::auth::Psk;
use crate::wire::sockperf::{
    Feature, Flags, HEADER_LEN, Header, MAX_MESSAGE_LEN, MAX_REPLAY_ANSWER, MAX_REPLAY_DELAY,
    REPLAY_MIN_LEN, ReplayRequest,
};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Default cap on the connections one replay opens.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// How a replay runs.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// The `roundtrip server --allow-replay` to play against.
    pub to: SocketAddr,
    /// Pre-shared key, when the server has one.
    pub psk: Option<Psk>,
    /// Longest wait for the connection, the hello and each answer (on top of the answer's server time).
    pub timeout: Duration,
    /// Refuse profiles with more connections than this.
    pub max_connections: usize,
    /// Set (by Ctrl-C) to stop: no new turn or connection starts, the turns played are the result.
    pub cancel: Arc<AtomicBool>,
}

impl ReplayConfig {
    /// A configuration with a 10 s timeout and the default connection cap.
    pub fn new(to: SocketAddr) -> Self {
        ReplayConfig {
            to,
            psk: None,
            timeout: Duration::from_secs(10),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// A replay could not run.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The profile has no turn to play.
    #[error(
        "the capture has no request/response turn to replay (no TCP connection with data both ways)"
    )]
    Empty,
    /// More connections than allowed.
    #[error(
        "the capture has {0} connections, more than --max-connections {1}: select some with --connection or raise it"
    )]
    TooManyConnections(usize, usize),
    /// The TCP connection could not be made.
    #[error(
        "connecting to {addr} failed: {source} (start `roundtrip server --allow-replay` there, or check the address)"
    )]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// The system's error.
        source: io::Error,
    },
    /// The hello failed (key, protocol, silence).
    #[error("{addr} {source}")]
    Handshake {
        /// The server.
        addr: SocketAddr,
        /// What went wrong.
        source: HandshakeError,
    },
    /// The peer is not a roundtrip server.
    #[error(
        "{addr} is not a roundtrip server ({what}): replay needs `roundtrip server --allow-replay` there"
    )]
    NotRoundtrip {
        /// The peer.
        addr: SocketAddr,
        /// What it did instead.
        what: &'static str,
    },
    /// A roundtrip server that does not grant replay.
    #[error(
        "{0} refuses replay requests: start it with `roundtrip server --allow-replay` (it answers pings only)"
    )]
    Refused(SocketAddr),
    /// Sending or receiving failed during the replay.
    #[error("{op} {addr} failed during connection {conn}'s turn {turn}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The server.
        addr: SocketAddr,
        /// Connection number (from 1, in the capture's order).
        conn: usize,
        /// Turn number (from 1).
        turn: usize,
        /// The system's error.
        source: io::Error,
    },
    /// A connection did not start because one it waited for failed (never returned by [`replay`]).
    #[error("the replay stopped: a connection it waited for failed")]
    Aborted,
    /// The server answered something that is not the answer asked for.
    #[error("{addr} answered connection {conn}'s turn {turn} with {what}")]
    BadAnswer {
        /// The server.
        addr: SocketAddr,
        /// Connection number (from 1).
        conn: usize,
        /// Turn number (from 1).
        turn: usize,
        /// What was wrong.
        what: String,
    },
}

/// A [`ReplayError::Io`] doing `op` to `addr` in connection `conn`'s turn `turn`, for `map_err`.
fn io_error(
    op: &'static str,
    addr: SocketAddr,
    conn: usize,
    turn: usize,
) -> impl FnOnce(io::Error) -> ReplayError {
    move |source| ReplayError::Io {
        op,
        addr,
        conn,
        turn,
        source,
    }
}

/// What one replayed connection did.
#[derive(Debug, Clone)]
pub struct ConnReplay {
    /// The captured connection's client and server.
    pub captured: (SocketAddr, SocketAddr),
    /// Protocol the capture's turns were read with.
    pub protocol: String,
    /// The connection's duration in the capture.
    pub captured_duration: Duration,
    /// Replayed: TCP connect, then every turn from the first request to the last answer (hello excluded).
    pub duration: Duration,
    /// The TCP handshake to the server.
    pub connect: Duration,
    /// The extension hello (one round trip, not counted in [`ConnReplay::duration`]).
    pub hello: Duration,
    /// Turns played (fewer than [`ConnReplay::turns_planned`] when the replay was cancelled).
    pub turns: usize,
    /// The connection's turns in the profile.
    pub turns_planned: usize,
    /// Request bytes the capture had / sent (messages are at least [`REPLAY_MIN_LEN`]).
    pub request_bytes: (u64, u64),
    /// Response bytes the capture had / received (answers are at least [`HEADER_LEN`]).
    pub response_bytes: (u64, u64),
    /// Bytes added to reach the wire minimums: requests padded to [`REPLAY_MIN_LEN`] (and the extra requests
    /// asking for answers beyond [`MAX_REPLAY_ANSWER`]), answers padded to [`HEADER_LEN`]. Sent minus this is
    /// the captured byte count.
    pub padding: (u64, u64),
    /// Per turn: time from the request's first byte sent to its answer's last byte received.
    pub turn_times: Vec<Duration>,
    /// Server times longer than [`MAX_REPLAY_DELAY`], capped.
    pub capped_delays: usize,
}

/// What a whole replay did.
#[derive(Debug, Clone)]
pub struct ReplayResult {
    /// The server played against.
    pub to: SocketAddr,
    /// First connect to last answer, across connections (hellos excluded from each connection's part).
    pub duration: Duration,
    /// The captured duration of the replayed connections: first packet of the first to last of the last.
    pub captured_duration: Duration,
    /// Per connection, in the capture's order (a cancelled replay leaves out those it did not start).
    pub connections: Vec<ConnReplay>,
    /// Turns in the profile's connections (all of them, played or not).
    pub turns_planned: usize,
    /// True when [`ReplayConfig::cancel`] stopped the replay before its last turn.
    pub cancelled: bool,
}

/// Checks that `to` is a roundtrip server granting replay, without replaying anything; returns the hello's
/// round trip.
pub fn probe_server(config: &ReplayConfig) -> Result<Duration, ReplayError> {
    let (mut s, _) = connect(config)?;
    hello_replay(&mut s, config)
}

/// Measures the path's round-trip time with `count` sockperf pings (64 bytes) on one hello'd connection and
/// returns the smallest (the path's RTT without queueing).
pub fn measure_rtt(config: &ReplayConfig, count: usize) -> Result<Duration, ReplayError> {
    let (mut s, _) = connect(config)?;
    hello_replay(&mut s, config)?;
    let addr = config.to;
    let io = |op| io_error(op, addr, 0, 0);
    let mut best = Duration::MAX;
    let mut msg = [0u8; 64];
    let mut answer = [0u8; 64];
    for seq in 0..count.max(1) as u64 {
        Header {
            seq,
            flags: Flags::CLIENT.with(Flags::PONG_REQUEST),
            len: 64,
        }
        .write(&mut msg);
        let t0 = Instant::now();
        s.write_all(&msg).map_err(io("sending a ping to"))?;
        s.read_exact(&mut answer)
            .map_err(io("reading a ping's answer from"))?;
        best = best.min(t0.elapsed());
    }
    Ok(best)
}

/// Replays every connection of `profile` against `config.to` and waits for all of them.
pub fn replay(profile: &AppProfile, config: &ReplayConfig) -> Result<ReplayResult, ReplayError> {
    let conns: Vec<&ConnProfile> = profile
        .connections
        .iter()
        .filter(|c| !c.turns.is_empty())
        .collect();
    if conns.is_empty() {
        return Err(ReplayError::Empty);
    }
    if conns.len() > config.max_connections {
        return Err(ReplayError::TooManyConnections(
            conns.len(),
            config.max_connections,
        ));
    }
    // Check the server once before starting anything, so a wrong target fails with one clear line.
    probe_server(config)?;
    let first_start = conns.iter().map(|c| c.start).min().unwrap_or_default();
    let captured_end = conns
        .iter()
        .map(|c| c.start + c.duration)
        .max()
        .unwrap_or_default();
    // A connection that opened after another had sent its last request in the capture (the application's
    // next step) waits for that one's replay to end, plus the captured gap from its last packet; the others
    // start at their captured offsets.
    let pred = crate::whatif::profile::predecessors(&conns);
    let ends = Done {
        at: Mutex::new(vec![None; conns.len()]),
        cv: Condvar::new(),
    };
    let failed = Mutex::new(false);
    let t0 = Instant::now();
    let results: Vec<Result<(ConnReplay, Instant, Instant), ReplayError>> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = conns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (ends, failed, pred, conns) = (&ends, &failed, pred[i], &conns);
                    scope.spawn(move || {
                        let at = match pred {
                            Some(p) => match ends.wait(p, failed, &config.cancel) {
                                Some(end) => {
                                    end + c.start.saturating_sub(conns[p].start + conns[p].duration)
                                }
                                None => return Err(ReplayError::Aborted),
                            },
                            None => t0 + c.start.saturating_sub(first_start),
                        };
                        if !sleep_until(at, &config.cancel) {
                            // Cancelled before it started: not played, not a failure.
                            return Err(ReplayError::Aborted);
                        }
                        let r = play_connection(c, i + 1, config);
                        match &r {
                            Ok((_, _, end)) => {
                                ends.at.lock().expect("replay state lock")[i] = Some(*end);
                            }
                            Err(_) => *failed.lock().expect("replay state lock") = true,
                        }
                        ends.cv.notify_all();
                        r
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a replay connection thread panicked"))
                .collect()
        });
    let mut connections = Vec::with_capacity(results.len());
    let mut began = None::<Instant>;
    let mut ended = None::<Instant>;
    // Hellos along each chain of connections are left out of the total: the application paid none.
    let mut chain_hello = vec![Duration::ZERO; results.len()];
    let mut first_err = None;
    for (j, r) in results.into_iter().enumerate() {
        match r {
            Ok((c, b, e)) => {
                chain_hello[j] = c.hello + pred[j].map_or(Duration::ZERO, |p| chain_hello[p]);
                let e = e.checked_sub(chain_hello[j]).unwrap_or(e);
                began = Some(began.map_or(b, |x| x.min(b)));
                ended = Some(ended.map_or(e, |x| x.max(e)));
                connections.push(c);
            }
            // The first real failure, not a connection that stopped because another failed.
            Err(ReplayError::Aborted) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let duration = match (began, ended) {
        (Some(b), Some(e)) => e.saturating_duration_since(b),
        _ => Duration::ZERO,
    };
    let turns_planned = conns.iter().map(|c| c.turns.len()).sum();
    let played: usize = connections.iter().map(|c| c.turns).sum();
    Ok(ReplayResult {
        to: config.to,
        duration,
        captured_duration: captured_end.saturating_sub(first_start),
        connections,
        turns_planned,
        cancelled: played < turns_planned && config.cancel.load(Ordering::SeqCst),
    })
}

fn connect(config: &ReplayConfig) -> Result<(TcpStream, Duration), ReplayError> {
    let t = Instant::now();
    let s = TcpStream::connect_timeout(&config.to, config.timeout).map_err(|source| {
        ReplayError::Connect {
            addr: config.to,
            source,
        }
    })?;
    let took = t.elapsed();
    let _ = s.set_nodelay(true);
    Ok((s, took))
}

/// Runs the hello asking for replay; returns its round trip.
fn hello_replay(s: &mut TcpStream, config: &ReplayConfig) -> Result<Duration, ReplayError> {
    let addr = config.to;
    // Short read timeouts let the handshake check its deadline.
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let t = Instant::now();
    let negotiated = hello::handshake(
        &mut Link::Tcp(s),
        Feature::REPLAY,
        config.psk.as_ref(),
        config.timeout,
    )
    .map_err(|source| match source {
        HandshakeError::Silent(..) => ReplayError::NotRoundtrip {
            addr,
            what: "no answer to the roundtrip hello",
        },
        HandshakeError::Protocol(_) => ReplayError::NotRoundtrip {
            addr,
            what: "it answered the hello with something that is not sockperf's format",
        },
        HandshakeError::Closed(_) => ReplayError::NotRoundtrip {
            addr,
            what: "it closed the connection on the hello",
        },
        source => ReplayError::Handshake { addr, source },
    })?;
    let took = t.elapsed();
    let _ = s.set_read_timeout(None);
    match negotiated.peer {
        PeerKind::Sockperf => Err(ReplayError::NotRoundtrip {
            addr,
            what: "a sockperf server: it echoed the hello",
        }),
        PeerKind::Unknown => Err(ReplayError::NotRoundtrip {
            addr,
            what: "no answer to the roundtrip hello",
        }),
        PeerKind::Roundtrip if !negotiated.features.contains(Feature::REPLAY) => {
            Err(ReplayError::Refused(addr))
        }
        PeerKind::Roundtrip => Ok(took),
    }
}

/// Sleeps until `at`, in steps that notice `cancel`; false when cancelled.
fn sleep_until(at: Instant, cancel: &AtomicBool) -> bool {
    loop {
        if cancel.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if at <= now {
            return true;
        }
        std::thread::sleep((at - now).min(Duration::from_millis(50)));
    }
}

/// One request on the wire: its messages' sizes and the answers asked for.
struct Planned {
    /// Sizes of the messages carrying the request (the last asks for the first answer).
    messages: Vec<usize>,
    /// Answers asked for, in order (the first by the request's last message, the others by extra
    /// [`REPLAY_MIN_LEN`]-byte requests).
    answers: Vec<u64>,
    delay: Duration,
}

fn plan(request_bytes: u64, response_bytes: u64, server: Duration) -> Planned {
    let mut left = request_bytes.max(REPLAY_MIN_LEN as u64);
    let mut messages = Vec::new();
    while left > 0 {
        let n = left.min(MAX_MESSAGE_LEN as u64);
        // Never leave a last piece shorter than a replay request.
        let n = if left - n > 0 && left - n < REPLAY_MIN_LEN as u64 {
            n - REPLAY_MIN_LEN as u64
        } else {
            n
        };
        messages.push(n as usize);
        left -= n;
    }
    let mut answers = Vec::new();
    let mut left = response_bytes.max(HEADER_LEN as u64);
    while left > 0 {
        let n = left.min(MAX_REPLAY_ANSWER);
        let n = if left - n > 0 && left - n < HEADER_LEN as u64 {
            n - HEADER_LEN as u64
        } else {
            n
        };
        answers.push(n);
        left -= n;
    }
    Planned {
        messages,
        answers,
        delay: server.min(MAX_REPLAY_DELAY),
    }
}

/// When each turn's answer was complete, shared between a connection's writer and reader.
struct Done {
    at: Mutex<Vec<Option<Instant>>>,
    cv: Condvar,
}

impl Done {
    /// When `turn` was done; None when something failed or the replay was cancelled first.
    fn wait(&self, turn: usize, failed: &Mutex<bool>, cancel: &AtomicBool) -> Option<Instant> {
        let mut at = self.at.lock().expect("replay state lock");
        loop {
            if let Some(t) = at[turn] {
                return Some(t);
            }
            if *failed.lock().expect("replay state lock") || cancel.load(Ordering::Relaxed) {
                return None;
            }
            at = self
                .cv
                .wait_timeout(at, Duration::from_millis(50))
                .expect("replay state lock")
                .0;
        }
    }
}

fn play_connection(
    c: &ConnProfile,
    n: usize,
    config: &ReplayConfig,
) -> Result<(ConnReplay, Instant, Instant), ReplayError> {
    let addr = config.to;
    let began = Instant::now();
    let (mut s, connect_time) = connect(config)?;
    let hello = hello_replay(&mut s, config)?;
    // The connection's clock: what the application had done by now is its handshake; the hello is extra.
    let ready = Instant::now();
    let plans: Vec<Planned> = c
        .turns
        .iter()
        .map(|t| plan(t.request_bytes, t.response_bytes, t.server))
        .collect();
    let expected: Vec<Vec<u64>> = plans.iter().map(|p| p.answers.clone()).collect();
    let done = Arc::new(Done {
        at: Mutex::new(vec![None; c.turns.len()]),
        cv: Condvar::new(),
    });
    let failed = Arc::new(Mutex::new(false));
    let mut reader = s.try_clone().map_err(|source| ReplayError::Io {
        op: "cloning the socket to",
        addr,
        conn: n,
        turn: 0,
        source,
    })?;
    let timeout = config.timeout;
    let (tx, rx) = mpsc::channel::<Instant>();
    let result = std::thread::scope(|scope| {
        let done_r = Arc::clone(&done);
        let failed_r = Arc::clone(&failed);
        let reader_thread = scope.spawn(move || {
            let r = read_answers(&mut reader, &expected, &done_r, addr, n, timeout);
            if r.is_err() {
                *failed_r.lock().expect("replay state lock") = true;
                done_r.cv.notify_all();
            }
            r
        });
        let w = write_requests(
            c,
            &plans,
            &mut s,
            &done,
            &failed,
            ready,
            addr,
            n,
            &tx,
            &config.cancel,
        );
        if matches!(w, Ok(false)) {
            // Cancelled: stop the reader (a blocked read returns end of file); the turns answered stay.
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if w.is_err() {
            *failed.lock().expect("replay state lock") = true;
            // Unblock the reader.
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let r = reader_thread.join().expect("replay reader panicked");
        match (w, r) {
            (Err(e), _) => Err(e),
            (Ok(false), Err(_)) => Ok(None),
            (Ok(_), Err(e)) => Err(e),
            (Ok(_), Ok(bytes)) => Ok(Some(bytes)),
        }
    });
    let received = result?;
    drop(tx);
    let sent_at: Vec<Instant> = rx.iter().collect();
    let at = done.at.lock().expect("replay state lock");
    // Turns answered (all of them unless cancelled; answers complete in order).
    let played = at.iter().take_while(|t| t.is_some()).count();
    let received =
        received.unwrap_or_else(|| plans[..played].iter().flat_map(|p| &p.answers).sum::<u64>());
    let (plans, turns) = (&plans[..played], &c.turns[..played]);
    let capped = turns.iter().filter(|t| t.server > MAX_REPLAY_DELAY).count();
    let sent_request: u64 = plans
        .iter()
        .map(|p| {
            p.messages.iter().map(|&m| m as u64).sum::<u64>()
                + (p.answers.len() as u64 - 1) * REPLAY_MIN_LEN as u64
        })
        .sum();
    let asked: u64 = plans.iter().flat_map(|p| &p.answers).sum();
    let captured_req: u64 = turns.iter().map(|t| t.request_bytes).sum();
    let captured_resp: u64 = turns.iter().map(|t| t.response_bytes).sum();
    let ended = at.iter().flatten().max().copied().unwrap_or(ready);
    let turn_times = sent_at
        .iter()
        .zip(at[..played].iter())
        .map(|(s, e)| e.map_or(Duration::ZERO, |e| e.saturating_duration_since(*s)))
        .collect();
    let duration = connect_time + ended.saturating_duration_since(ready);
    Ok((
        ConnReplay {
            captured: (c.client, c.server),
            protocol: c.protocol.clone(),
            captured_duration: c.duration,
            duration,
            connect: connect_time,
            hello,
            turns: played,
            turns_planned: c.turns.len(),
            request_bytes: (captured_req, sent_request),
            response_bytes: (captured_resp, received),
            padding: (
                sent_request.saturating_sub(captured_req),
                asked.saturating_sub(captured_resp),
            ),
            turn_times,
            capped_delays: capped,
        },
        // The connection's replayed span: from its connect to its last answer (hello included; the total
        // leaves it out).
        began,
        ended,
    ))
}

#[allow(clippy::too_many_arguments)]
fn write_requests(
    c: &ConnProfile,
    plans: &[Planned],
    s: &mut TcpStream,
    done: &Done,
    failed: &Mutex<bool>,
    ready: Instant,
    addr: SocketAddr,
    n: usize,
    sent: &mpsc::Sender<Instant>,
    cancel: &AtomicBool,
) -> Result<bool, ReplayError> {
    let first_offset = c.turns.first().map(|t| t.request_start).unwrap_or_default();
    let mut buf = Vec::new();
    for (seq, (i, (turn, p))) in (1u64..).zip(c.turns.iter().zip(plans).enumerate()) {
        let due = match turn.waits_for.filter(|&j| j < i) {
            Some(j) => match done.wait(j, failed, cancel) {
                Some(t) => t + turn.think,
                // The reader failed (its error is the one reported) or Ctrl-C.
                None => return Ok(!cancel.load(Ordering::Relaxed)),
            },
            // Nothing answered yet in the capture when this request left: its offset from the first request.
            None => ready + turn.request_start.saturating_sub(first_offset),
        };
        if !sleep_until(due, cancel) {
            return Ok(false);
        }
        let _ = sent.send(Instant::now());
        let io = |op| io_error(op, addr, n, i + 1);
        let last = p.messages.len() - 1;
        for (k, &len) in p.messages.iter().enumerate() {
            buf.clear();
            buf.resize(len, 0);
            let flags = if k == last {
                Flags::CLIENT.with(Flags::PONG_REQUEST).with(Flags::REPLAY)
            } else {
                Flags::CLIENT
            };
            Header {
                seq,
                flags,
                len: len as u32,
            }
            .write(&mut buf);
            if k == last {
                ReplayRequest {
                    answer_len: p.answers[0],
                    delay: p.delay,
                }
                .write(&mut buf);
            }
            s.write_all(&buf).map_err(io("sending a request to"))?;
        }
        for &answer in &p.answers[1..] {
            buf.clear();
            buf.resize(REPLAY_MIN_LEN, 0);
            Header {
                seq,
                flags: Flags::CLIENT.with(Flags::PONG_REQUEST).with(Flags::REPLAY),
                len: REPLAY_MIN_LEN as u32,
            }
            .write(&mut buf);
            ReplayRequest {
                answer_len: answer,
                delay: Duration::ZERO,
            }
            .write(&mut buf);
            s.write_all(&buf).map_err(io("sending a request to"))?;
        }
    }
    Ok(true)
}

/// Reads every answer in order, marking each turn done when its last answer is complete; returns the bytes.
fn read_answers(
    s: &mut TcpStream,
    expected: &[Vec<u64>],
    done: &Done,
    addr: SocketAddr,
    n: usize,
    timeout: Duration,
) -> Result<u64, ReplayError> {
    // A generous bound: the server's answer may wait up to MAX_REPLAY_DELAY on top of the network.
    let _ = s.set_read_timeout(Some(timeout + MAX_REPLAY_DELAY));
    let mut total = 0u64;
    let mut sink = vec![0u8; 256 * 1024];
    for (i, answers) in expected.iter().enumerate() {
        let io = |op| io_error(op, addr, n, i + 1);
        for &want in answers {
            let mut head = [0u8; HEADER_LEN];
            s.read_exact(&mut head)
                .map_err(io("reading an answer from"))?;
            let h = Header::parse(&head, MAX_REPLAY_ANSWER as usize).map_err(|e| {
                ReplayError::BadAnswer {
                    addr,
                    conn: n,
                    turn: i + 1,
                    what: e.to_string(),
                }
            })?;
            if u64::from(h.len) != want || h.flags.contains(Flags::CLIENT) {
                return Err(ReplayError::BadAnswer {
                    addr,
                    conn: n,
                    turn: i + 1,
                    what: format!("a message of {} bytes where {want} were asked for", h.len),
                });
            }
            let mut left = h.len as usize - HEADER_LEN;
            while left > 0 {
                let k = left.min(sink.len());
                s.read_exact(&mut sink[..k])
                    .map_err(io("reading an answer from"))?;
                left -= k;
            }
            total += u64::from(h.len);
        }
        let mut at = done.at.lock().expect("replay state lock");
        at[i] = Some(Instant::now());
        done.cv.notify_all();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_are_split_within_the_wire_limits() {
        let p = plan(10, 5, Duration::from_secs(30));
        assert_eq!(p.messages, vec![REPLAY_MIN_LEN]);
        assert_eq!(p.answers, vec![HEADER_LEN as u64]);
        assert_eq!(p.delay, MAX_REPLAY_DELAY);

        let big = MAX_MESSAGE_LEN as u64 * 2 + 10;
        let p = plan(big, MAX_REPLAY_ANSWER * 2 + 5, Duration::ZERO);
        assert_eq!(p.messages.iter().map(|&m| m as u64).sum::<u64>(), big);
        assert!(
            p.messages
                .iter()
                .all(|&m| (REPLAY_MIN_LEN..=MAX_MESSAGE_LEN).contains(&m))
        );
        assert_eq!(p.answers.iter().sum::<u64>(), MAX_REPLAY_ANSWER * 2 + 5);
        assert!(
            p.answers
                .iter()
                .all(|&a| (HEADER_LEN as u64..=MAX_REPLAY_ANSWER).contains(&a))
        );
    }
}
