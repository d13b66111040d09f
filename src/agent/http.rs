//! A small HTTP/1.1 server for the agent: `GET /metrics` (Prometheus text or OpenMetrics by `Accept`),
//! `GET /api/results` (JSON) and `GET /` (the HTML matrix). Other paths answer 404, other methods 405. One
//! request per connection.
//!
//! Every connection lives on one `mio` event loop ([`HttpServer::serve`]): an idle or slow client holds a
//! descriptor and a few bytes, never a thread, so it cannot make a scrape wait. Complete requests go to a few
//! rendering threads and their answers come back to the loop to be written without blocking. Limits: request
//! heads of at most [`MAX_HEAD`], complete within [`READ_TIMEOUT`]; answers read within [`WRITE_TIMEOUT`];
//! at most [`MAX_CONNECTIONS`] connections (past it the one that has waited longest for its request head is
//! closed to make room; when every one is being answered, the newcomer gets 503) and [`MAX_RENDERING`] answers
//! rendering at once (past it: 503). A head with two different `Content-Length` values is answered 400.
//!
//! The request parser ([`parse_request`], [`parse_head`]) is fuzzed (fuzz/fuzz_targets/agent_http.rs).
#![forbid(unsafe_code)]

mod site;

pub use site::{Site, matrix, results_json};

use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// The server's limits; [`Limits::default`] holds the constants above, which the agent uses. Tests run the
/// same loop with smaller ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a client has to send its request head ([`READ_TIMEOUT`]).
    pub read_timeout: Duration,
    /// How long a client may take to read the answer ([`WRITE_TIMEOUT`]).
    pub write_timeout: Duration,
    /// Connections held at once, at most ([`MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Answers being rendered at once, at most ([`MAX_RENDERING`]).
    pub max_rendering: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_timeout: READ_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_rendering: MAX_RENDERING,
        }
    }
}

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

/// What the server makes of the bytes a client sent so far, as its event loop decides: `Ok(None)` while the
/// request head is incomplete (and within [`MAX_HEAD`]), `Ok(Some(request))` once it is complete, `Err(status)`
/// for the answer a bad head gets (400 not HTTP/1.x or two different `Content-Length` values, 431 over
/// [`MAX_HEAD`]). Bytes after the head are ignored
/// (one request per connection, no body is read).
pub fn parse_request(bytes: &[u8]) -> Result<Option<Request>, u16> {
    match bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) if i <= MAX_HEAD && conflicting_lengths(&bytes[..i]) => Err(400),
        Some(i) if i <= MAX_HEAD => parse_head(&bytes[..i]).map(Some).ok_or(400),
        Some(_) => Err(431),
        None if bytes.len() > MAX_HEAD => Err(431),
        None => Ok(None),
    }
}

/// True when the head carries two `Content-Length` headers of different values (which one ends the body is
/// ambiguous: the way to request smuggling, RFC 9112 6.3).
pub fn conflicting_lengths(head: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(head) else {
        return false;
    };
    let mut seen: Option<&str> = None;
    for l in text.split("\r\n").skip(1) {
        if let Some((k, v)) = l.split_once(':')
            && k.trim().eq_ignore_ascii_case("content-length")
        {
            let v = v.trim();
            if seen.is_some_and(|s| s != v) {
                return true;
            }
            seen = Some(v);
        }
    }
    false
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
        HttpServer::serve_with(listener, workers, handler, Limits::default())
    }

    /// [`HttpServer::serve`] with other limits than the defaults.
    pub fn serve_with(
        listener: TcpListener,
        workers: usize,
        handler: Arc<Handler>,
        limits: Limits,
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
            limits,
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
    limits: Limits,
}

/// The connection in `slot` when it is still the one of `generation` (a slot is reused once closed).
fn live_conn(conns: &mut [Option<Conn>], slot: u32, generation: u32) -> Option<&mut Conn> {
    conns
        .get_mut(slot as usize)
        .and_then(Option::as_mut)
        .filter(|c| c.generation == generation)
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
        if self.open >= self.limits.max_connections {
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
                None => {
                    // Every slot is answering: this one is told so (the answer fits in a fresh socket's buffer,
                    // so the write does not wait), then closed.
                    let busy =
                        Response::text(503, "busy: every connection is being answered, try again");
                    let _ = stream.write_all(&encode(&busy, false));
                    let _ = stream.shutdown(Shutdown::Write);
                    let _ = stream.read(&mut [0u8; 4096]);
                    return;
                }
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
            until: Instant::now() + self.limits.read_timeout,
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
        live_conn(&mut self.conns, slot, generation)
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
        let Some(c) = live_conn(&mut self.conns, slot, generation) else {
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
            Ok(Some(i)) if i <= MAX_HEAD && conflicting_lengths(&c.head[..i]) => {
                Response::text(400, "two different Content-Length headers")
            }
            Ok(Some(i)) if i <= MAX_HEAD => match parse_head(&c.head[..i]) {
                None => Response::text(400, "not an HTTP/1.x request"),
                Some(req) if self.rendering < self.limits.max_rendering => {
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
        let write_timeout = self.limits.write_timeout;
        let Some(c) = self.conn(d.slot, d.generation) else {
            return;
        };
        c.phase = Phase::Writing { out: d.out, pos: 0 };
        c.until = Instant::now() + write_timeout;
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
        let Some(c) = live_conn(&mut self.conns, slot, generation) else {
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

#[cfg(test)]
mod tests;
