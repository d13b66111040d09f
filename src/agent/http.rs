//! A small HTTP/1.1 server for the agent: `GET /metrics` (Prometheus text or OpenMetrics by `Accept`),
//! `GET /api/results` (JSON) and `GET /` (the HTML matrix). Other paths answer 404, other methods 405. One
//! request per connection.
//!
//! Every connection lives on one `mio` event loop ([`HttpServer::serve`]): an idle or slow client holds a
//! descriptor and a few bytes, never a thread, so it cannot make a scrape wait. Complete requests go to a few
//! rendering threads and their answers come back to the loop to be written without blocking. Limits: request
//! heads of at most [`MAX_HEAD`], complete within [`READ_TIMEOUT`]; answers read within [`WRITE_TIMEOUT`];
//! at most [`MAX_CONNECTIONS`] connections (past it the one that has waited longest for its request head is
//! closed to make room) and [`MAX_RENDERING`] answers rendering at once (past it: 503).

use super::metrics::{self, AgentInfo, Format};
use super::{ErrorReason, Snapshot};
use crate::report::heatmap::{self, Cell, Matrix};
use mio::{Events, Interest, Poll, Token, Waker};
use serde_json::{Value, json};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// The largest request head (request line and headers) accepted; a longer one is answered 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request head (counted from its connection).
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections held at once, at most.
pub const MAX_CONNECTIONS: usize = 4096;
/// Answers being rendered (or waiting for a rendering thread) at once, at most; past it a request is
/// answered 503.
pub const MAX_RENDERING: usize = 64;

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`, ...
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The `Accept` header, when given.
    pub accept: Option<String>,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{body}\n").into_bytes(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Parses a request head (the bytes before the blank line). None when it is not HTTP/1.x.
pub fn parse_head(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut parts = lines.next()?.split(' ');
    let method = parts.next()?.to_string();
    let target = parts.next()?;
    let version = parts.next()?;
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || method.is_empty() {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or("").to_string();
    let mut accept = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':')
            && k.trim().eq_ignore_ascii_case("accept")
        {
            accept = Some(v.trim().to_string());
        }
    }
    Some(Request {
        method,
        path,
        accept,
    })
}

/// What serves the requests.
pub type Handler = dyn Fn(&Request) -> Response + Send + Sync;

/// Token of the listening socket.
const LISTENER: Token = Token(usize::MAX - 1);
/// Token of the loop's waker.
const WAKER: Token = Token(usize::MAX);
/// How often deadlines are checked (and a paused accept retried).
const TICK: Duration = Duration::from_millis(100);
/// How long a connection whose answer was sent may take to close its side (its bytes are read and dropped
/// meanwhile, so the answer is not cut by a reset).
const LINGER: Duration = Duration::from_secs(2);
/// Bytes read per `read` call.
const CHUNK: usize = 4096;

/// Where a connection is.
enum Phase {
    /// Reading the request head (until its deadline).
    Head,
    /// A worker renders the answer.
    Rendering,
    /// Writing the answer, `out[pos..]` left.
    Writing { out: Vec<u8>, pos: usize },
    /// Answer sent, our side shut: reading until the peer closes (or the deadline).
    Closing,
}

/// One client connection on the loop.
struct Conn {
    stream: mio::net::TcpStream,
    /// Generation: tokens and rendered answers carry it, so a reused slot is never confused.
    generation: u32,
    phase: Phase,
    /// The request head so far.
    head: Vec<u8>,
    /// When the current phase must be over (not checked while rendering).
    until: Instant,
}

/// A request handed to a worker.
struct Job {
    slot: u32,
    generation: u32,
    req: Request,
}

/// A rendered answer, back to the loop.
struct Done {
    slot: u32,
    generation: u32,
    out: Vec<u8>,
}

/// The answer's bytes: status line, headers and (unless `head_only`) the body.
fn encode(resp: &Response, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        resp.status,
        reason(resp.status),
        resp.content_type,
        resp.body.len()
    );
    if resp.status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(&resp.body);
    }
    out
}

/// A running server.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    event_loop: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Binds `addr` (port 0: a free port) and serves with `workers` rendering threads (at least 1).
    pub fn start(
        addr: SocketAddr,
        workers: usize,
        handler: Arc<Handler>,
    ) -> io::Result<HttpServer> {
        HttpServer::serve(TcpListener::bind(addr)?, workers, handler)
    }

    /// Serves on a listener bound earlier (so that a port in use is found before anything else starts): one
    /// event-loop thread holds every connection (an idle one costs a descriptor and a few bytes, no thread)
    /// and `workers` threads render the answers.
    pub fn serve(
        listener: TcpListener,
        workers: usize,
        handler: Arc<Handler>,
    ) -> io::Result<HttpServer> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel::<Done>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        for i in 0..workers.max(1) {
            let job_rx = job_rx.clone();
            let handler = handler.clone();
            let done_tx = done_tx.clone();
            let waker = waker.clone();
            std::thread::Builder::new()
                .name(format!("agent-http-{i}"))
                .spawn(move || {
                    loop {
                        let next = match job_rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        let Ok(job) = next else { return };
                        let head_only = job.req.method == "HEAD";
                        let resp = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            handler(&job.req)
                        }))
                        .unwrap_or_else(|_| Response::text(500, "internal error"));
                        let out = encode(&resp, head_only);
                        let d = Done {
                            slot: job.slot,
                            generation: job.generation,
                            out,
                        };
                        if done_tx.send(d).is_err() {
                            return;
                        }
                        let _ = waker.wake();
                    }
                })?;
        }
        let mut lp = Loop {
            poll,
            listener,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            next_generation: 0,
            jobs,
            done,
            rendering: 0,
            accept_paused: false,
            chunk: vec![0u8; CHUNK],
            stop: stop.clone(),
        };
        let event_loop = std::thread::Builder::new()
            .name("agent-http".into())
            .spawn(move || lp.run())?;
        Ok(HttpServer {
            addr,
            stop,
            waker,
            event_loop: Some(event_loop),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops: the listener and every connection are closed (an answer being rendered is dropped).
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        if let Some(t) = self.event_loop.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if self.event_loop.is_some() {
            self.stop_now();
        }
    }
}

/// The event loop's state.
struct Loop {
    poll: Poll,
    listener: mio::net::TcpListener,
    conns: Vec<Option<Conn>>,
    free: Vec<u32>,
    /// Connections held.
    open: usize,
    next_generation: u32,
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Done>,
    /// Requests handed to the workers and not yet back.
    rendering: usize,
    /// Accepting failed for want of descriptors: retried every [`TICK`].
    accept_paused: bool,
    chunk: Vec<u8>,
    stop: Arc<AtomicBool>,
}

fn token(slot: u32, generation: u32) -> Token {
    Token(slot as usize | (generation as usize) << 32)
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_tick = Instant::now() + TICK;
        while !self.stop.load(Ordering::SeqCst) {
            // With no connection there is no deadline to check: sleep until one comes.
            let timeout = (self.open > 0 || self.accept_paused)
                .then(|| next_tick.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != io::ErrorKind::Interrupted
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(t) => self.ready(t as u32, (t >> 32) as u32),
                }
            }
            while let Ok(d) = self.done.try_recv() {
                self.rendering -= 1;
                self.rendered(d);
            }
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                self.expire(now);
                if self.accept_paused {
                    self.accept();
                }
            }
        }
    }

    fn accept(&mut self) {
        self.accept_paused = false;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(_) => {
                    // Out of descriptors or the like: the pending connections wait in the backlog.
                    self.accept_paused = true;
                    return;
                }
            }
        }
    }

    /// Takes a new connection; at [`MAX_CONNECTIONS`] the one that has waited longest for its request head
    /// makes room (an idle client never keeps a scrape out).
    fn admit(&mut self, mut stream: mio::net::TcpStream) {
        if self.open >= MAX_CONNECTIONS {
            let oldest = self
                .conns
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
                .filter(|(_, c)| matches!(c.phase, Phase::Head))
                .min_by_key(|(_, c)| c.until)
                .map(|(i, _)| i as u32);
            match oldest {
                Some(i) => self.close(i),
                None => return, // every slot is answering: this one is dropped
            }
        }
        self.next_generation = self.next_generation.wrapping_add(1);
        let generation = self.next_generation;
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                (self.conns.len() - 1) as u32
            }
        };
        if self
            .poll
            .registry()
            .register(
                &mut stream,
                token(slot, generation),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            self.free.push(slot);
            return;
        }
        self.conns[slot as usize] = Some(Conn {
            stream,
            generation,
            phase: Phase::Head,
            head: Vec::new(),
            until: Instant::now() + READ_TIMEOUT,
        });
        self.open += 1;
    }

    fn close(&mut self, slot: u32) {
        if let Some(mut c) = self.conns.get_mut(slot as usize).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.free.push(slot);
            self.open -= 1;
        }
    }

    /// Closes connections past their phase's deadline.
    fn expire(&mut self, now: Instant) {
        let late: Vec<u32> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
            .filter(|(_, c)| !matches!(c.phase, Phase::Rendering) && c.until <= now)
            .map(|(i, _)| i as u32)
            .collect();
        for i in late {
            self.close(i);
        }
    }

    fn conn(&mut self, slot: u32, generation: u32) -> Option<&mut Conn> {
        self.conns
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .filter(|c| c.generation == generation)
    }

    /// A connection is readable or writable.
    fn ready(&mut self, slot: u32, generation: u32) {
        let Some(c) = self.conn(slot, generation) else {
            return;
        };
        match c.phase {
            Phase::Head => self.read_head(slot, generation),
            Phase::Rendering => {}
            Phase::Writing { .. } => self.write(slot, generation),
            Phase::Closing => self.drain(slot, generation),
        }
    }

    fn read_head(&mut self, slot: u32, generation: u32) {
        let chunk = &mut self.chunk;
        let Some(c) = self
            .conns
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .filter(|c| c.generation == generation)
        else {
            return;
        };
        let end = loop {
            match c.stream.read(chunk) {
                Ok(0) => break Err(()),
                Ok(n) => {
                    let from = c.head.len().saturating_sub(3);
                    c.head.extend_from_slice(&chunk[..n]);
                    if let Some(i) = c.head[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                        break Ok(Some(from + i));
                    }
                    if c.head.len() > MAX_HEAD {
                        break Ok(None);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break Err(()),
            }
        };
        let answer = match end {
            Err(()) => return self.close(slot),
            Ok(Some(i)) if i <= MAX_HEAD => match parse_head(&c.head[..i]) {
                None => Response::text(400, "not an HTTP/1.x request"),
                Some(req) if self.rendering < MAX_RENDERING => {
                    c.phase = Phase::Rendering;
                    c.head = Vec::new();
                    self.rendering += 1;
                    let job = Job {
                        slot,
                        generation,
                        req,
                    };
                    if self.jobs.send(job).is_err() {
                        self.rendering -= 1;
                        self.close(slot);
                    }
                    return;
                }
                Some(_) => Response::text(503, "busy: too many answers being rendered, try again"),
            },
            Ok(_) => Response::text(431, "request head over 8 KiB"),
        };
        c.head = Vec::new();
        self.rendered(Done {
            slot,
            generation,
            out: encode(&answer, false),
        });
    }

    /// An answer is ready: start writing it.
    fn rendered(&mut self, d: Done) {
        let Some(c) = self.conn(d.slot, d.generation) else {
            return;
        };
        c.phase = Phase::Writing { out: d.out, pos: 0 };
        c.until = Instant::now() + WRITE_TIMEOUT;
        self.write(d.slot, d.generation);
    }

    fn write(&mut self, slot: u32, generation: u32) {
        let Some(c) = self.conn(slot, generation) else {
            return;
        };
        let Phase::Writing { out, pos } = &mut c.phase else {
            return;
        };
        while *pos < out.len() {
            match c.stream.write(&out[*pos..]) {
                Ok(0) => return self.close(slot),
                Ok(n) => *pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.close(slot),
            }
        }
        let _ = c.stream.shutdown(Shutdown::Write);
        c.phase = Phase::Closing;
        c.until = Instant::now() + LINGER;
        self.drain(slot, generation);
    }

    /// Reads and drops what the peer still sends until it closes.
    fn drain(&mut self, slot: u32, generation: u32) {
        let chunk = &mut self.chunk;
        let Some(c) = self
            .conns
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .filter(|c| c.generation == generation)
        else {
            return;
        };
        loop {
            match c.stream.read(chunk) {
                Ok(0) => return self.close(slot),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.close(slot),
            }
        }
    }
}

/// The agent's pages.
pub struct Site {
    /// Who this agent is.
    pub info: AgentInfo,
    /// The span of the recent window (for the JSON and the matrix).
    pub window: Duration,
    /// Takes a snapshot of the engine.
    pub snapshot: Box<dyn Fn() -> Snapshot + Send + Sync>,
    /// What `--watch` found (None without it).
    pub watch: Option<Arc<super::watch::Shared>>,
}

impl Site {
    /// Answers one request: `/metrics`, `/api/results`, `/`; 404 elsewhere, 405 for methods other than GET
    /// and HEAD.
    pub fn handle(&self, req: &Request) -> Response {
        let known = matches!(req.path.as_str(), "/" | "/metrics" | "/api/results");
        if !known {
            return Response::text(404, "not found: try /metrics, /api/results or /");
        }
        if req.method != "GET" && req.method != "HEAD" {
            return Response::text(405, "only GET (and HEAD) are answered");
        }
        let snap = (self.snapshot)();
        match req.path.as_str() {
            "/metrics" => {
                let format = Format::negotiate(req.accept.as_deref());
                Response {
                    status: 200,
                    content_type: format.content_type(),
                    body: {
                        let mut b = metrics::render(&snap, &self.info, format);
                        if let Some(w) = &self.watch {
                            super::watch::expose::append_metrics(
                                &mut b,
                                w,
                                &self.info.source,
                                format,
                            );
                        }
                        b.into_bytes()
                    },
                }
            }
            "/api/results" => Response {
                status: 200,
                content_type: "application/json",
                body: super::watch::expose::with_json(
                    results_json(&snap, &self.info, self.window),
                    self.watch.as_deref(),
                )
                .into_bytes(),
            },
            _ => Response {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: super::watch::expose::with_html(
                    heatmap::render(
                        &format!("roundtrip agent {}", self.info.source),
                        &matrix(&snap, &self.info, self.window),
                    ),
                    self.watch.as_deref(),
                )
                .into_bytes(),
            },
        }
    }
}

fn secs(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_secs_f64()))
}

/// The `/api/results` document: the agent and, per target, its counters and latest window.
pub fn results_json(snap: &Snapshot, info: &AgentInfo, window: Duration) -> String {
    let targets: Vec<Value> = snap
        .targets
        .iter()
        .map(|t| {
            let errors: serde_json::Map<String, Value> = ErrorReason::ALL
                .iter()
                .zip(t.errors)
                .map(|(r, n)| (r.name().to_string(), json!(n)))
                .collect();
            let labels: serde_json::Map<String, Value> = t
                .spec
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            let w = &t.window;
            json!({
                "target": t.spec.target,
                "probe": t.spec.probe.label(),
                "size": t.spec.probe.size(),
                "labels": labels,
                "up": t.up,
                "probes": t.probes,
                "errors": errors,
                "last_rtt_s": secs(t.last_rtt),
                "last_error": t.last_error,
                "window": {
                    "span_s": w.span.as_secs_f64(),
                    "sent": w.sent,
                    "lost": w.lost,
                    "loss": if w.sent > 0 { json!(w.lost as f64 / w.sent as f64) } else { Value::Null },
                    "p50_s": secs(w.p50),
                    "p90_s": secs(w.p90),
                    "p99_s": secs(w.p99),
                    "max_s": secs(w.max),
                },
            })
        })
        .collect();
    let at = snap
        .at
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    json!({
        "source": info.source,
        "version": info.version,
        "address": info.address,
        "window_s": window.as_secs_f64(),
        "at_unix_s": at,
        "targets": targets,
    })
    .to_string()
}

/// The one-row matrix of this agent's view: its source x its targets (a target probed several ways gets one
/// column per probe, named `target probe/size`).
pub fn matrix(snap: &Snapshot, info: &AgentInfo, window: Duration) -> Matrix {
    let mut count = std::collections::HashMap::new();
    for t in &snap.targets {
        *count.entry(t.spec.target.as_str()).or_insert(0) += 1;
    }
    let mut m = Matrix {
        sources: vec![info.source.clone()],
        window,
        origin: format!("agent {}", info.source),
        ..Matrix::default()
    };
    for t in &snap.targets {
        let name = if count[t.spec.target.as_str()] > 1 {
            format!(
                "{} {}/{}",
                t.spec.target,
                t.spec.probe.label(),
                t.spec.probe.size()
            )
        } else {
            t.spec.target.clone()
        };
        let w = &t.window;
        m.cells.insert(
            (info.source.clone(), name.clone()),
            Cell {
                p50: w.p50,
                p99: w.p99,
                loss: (w.sent > 0).then(|| w.lost as f64 / w.sent as f64),
                probes: w.sent,
            },
        );
        m.targets.push(name);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::super::{Histogram, ProbeKind, TargetSnapshot, TargetSpec, WindowStats};
    use super::*;
    use std::net::TcpStream;
    use std::time::SystemTime;

    fn snap() -> Snapshot {
        let h = Histogram {
            counts: [0; 26],
            sum_s: 0.0,
            count: 0,
        };
        Snapshot {
            at: SystemTime::now(),
            targets: vec![TargetSnapshot {
                spec: Arc::new(TargetSpec {
                    target: "10.0.0.2".into(),
                    addr: "10.0.0.2:11111".parse().unwrap(),
                    probe: ProbeKind::Tcp { size: 64 },
                    interval: Duration::from_secs(1),
                    timeout: Duration::from_secs(1),
                    labels: vec![("zone".into(), "a".into())],
                }),
                rtt: h.clone(),
                probes: 60,
                errors: [1, 0, 0, 0, 0, 0, 0, 0],
                up: true,
                last_rtt: Some(Duration::from_micros(51)),
                last_error: None,
                window: WindowStats {
                    span: Duration::from_secs(60),
                    sent: 60,
                    lost: 1,
                    p50: Some(Duration::from_micros(51)),
                    p90: Some(Duration::from_micros(60)),
                    p99: Some(Duration::from_micros(90)),
                    max: Some(Duration::from_micros(100)),
                },
            }],
            schedule_lag: h,
        }
    }

    fn site() -> Arc<Site> {
        Arc::new(Site {
            info: AgentInfo {
                source: "a".into(),
                address: "10.0.0.1:11111".into(),
                version: "0.1.0".into(),
            },
            window: Duration::from_secs(60),
            snapshot: Box::new(snap),
            watch: None,
        })
    }

    #[test]
    fn json_fields() {
        let s = site();
        let v: Value = serde_json::from_str(&results_json(&snap(), &s.info, s.window)).unwrap();
        assert_eq!(v["source"], "a");
        assert_eq!(v["address"], "10.0.0.1:11111");
        assert_eq!(v["window_s"], 60.0);
        assert!(v["at_unix_s"].as_f64().unwrap() > 1.6e9);
        let t = &v["targets"][0];
        assert_eq!(t["target"], "10.0.0.2");
        assert_eq!(t["probe"], "tcp");
        assert_eq!(t["size"], 64);
        assert_eq!(t["labels"]["zone"], "a");
        assert_eq!(t["up"], true);
        assert_eq!(t["errors"]["timeout"], 1);
        assert_eq!(t["errors"].as_object().unwrap().len(), 8);
        assert_eq!(t["last_error"], Value::Null);
        assert_eq!(t["window"]["p50_s"], 51e-6);
        assert!((t["window"]["loss"].as_f64().unwrap() - 1.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn one_row_matrix() {
        let s = site();
        let m = matrix(&snap(), &s.info, s.window);
        assert_eq!(m.sources, ["a"]);
        assert_eq!(m.targets, ["10.0.0.2"]);
        let c = &m.cells[&("a".to_string(), "10.0.0.2".to_string())];
        assert_eq!(c.probes, 60);
    }

    #[test]
    fn heads() {
        let r = parse_head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nACCEPT: application/openmetrics-text",
        )
        .unwrap();
        assert_eq!(r.path, "/metrics");
        assert_eq!(r.accept.as_deref(), Some("application/openmetrics-text"));
        assert!(parse_head(b"GARBAGE").is_none());
        assert!(parse_head(b"GET / SPDY/3").is_none());
        assert!(parse_head(&[0xff, 0xfe]).is_none());
    }

    fn get(addr: SocketAddr, raw: &[u8]) -> String {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let _ = s.write_all(raw);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn serves_over_loopback() {
        let s = site();
        let h: Arc<Handler> = {
            let s = s.clone();
            Arc::new(move |r: &Request| s.handle(r))
        };
        let server = HttpServer::start("127.0.0.1:0".parse().unwrap(), 2, h).unwrap();
        let a = server.local_addr();
        let r = get(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"));
        assert!(r.contains("roundtrip_up{source=\"a\",target=\"10.0.0.2\""));
        let r = get(
            a,
            b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n",
        );
        assert!(
            r.contains("application/openmetrics-text") && r.ends_with("# EOF\n"),
            "{r}"
        );
        let r = get(a, b"GET /api/results HTTP/1.1\r\n\r\n");
        assert!(r.contains("application/json") && r.contains("\"targets\""));
        assert!(get(a, b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        let r = get(a, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 405") && r.contains("Allow: GET"),
            "{r}"
        );
        assert!(get(a, b"junk\r\n\r\n").starts_with("HTTP/1.1 400"));
        let mut big = b"GET / HTTP/1.1\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'a', 10_000));
        assert!(get(a, &big).starts_with("HTTP/1.1 431"));
        let r = get(a, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("\r\n\r\n"));
        server.shutdown();
        assert!(TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_err());
    }

    #[test]
    fn idle_and_half_sent_requests_hold_no_one() {
        let s = site();
        let h: Arc<Handler> = {
            let s = s.clone();
            Arc::new(move |r: &Request| s.handle(r))
        };
        // One rendering thread: the idle clients are more than there are threads.
        let server = HttpServer::start("127.0.0.1:0".parse().unwrap(), 1, h).unwrap();
        let a = server.local_addr();
        let mut idle = Vec::new();
        for i in 0..40 {
            let mut c = TcpStream::connect_timeout(&a, Duration::from_secs(10)).unwrap();
            if i % 2 == 0 {
                // Half a request head, never finished.
                c.write_all(b"GET /metrics HTTP/1.1\r\nHost:").unwrap();
            }
            idle.push(c);
        }
        let r = get(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        // A client that sends a body it was not asked for still gets the whole answer.
        let mut post = b"POST /metrics HTTP/1.1\r\nContent-Length: 70000\r\n\r\n".to_vec();
        post.extend(std::iter::repeat_n(b'x', 70_000));
        let r = get(a, &post);
        assert!(r.starts_with("HTTP/1.1 405") && r.ends_with("\n"), "{r}");
        drop(idle);
        server.shutdown();
    }
}
