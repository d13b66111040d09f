//! The control API: a small HTTP/1.1 server (one request per connection).
//!
//! - `GET /impairment`: the impairment in force, as JSON ([`super::Impairment`]).
//! - `PUT /impairment`: replace it (body: JSON; missing fields mean "none"). Open connections keep running
//!   and follow the new values from their next chunk on (data already in the path keeps its release time, and
//!   order is kept). Faults apply to connections accepted afterwards. 400 with `{"error": ...}` when refused.
//! - `PATCH /impairment`: change only the fields given (a JSON merge patch, RFC 7396: objects merge, `null`
//!   resets a field to "none"); the rest stays in force. PUT and PATCH both answer the full resulting
//!   impairment, and both go through [`change_impairment`].
//! - `GET /counters`: totals and per-connection counters ([`super::CountersDoc`]).
//!
//! Every request runs on its own thread, apart from the data path, so a slow API client never delays relayed
//! traffic; at most [`MAX_REQUESTS`] run at once (the next is answered 503 at once), each must arrive within
//! [`REQUEST_DEADLINE`], heads are capped at [`MAX_HEAD`] and bodies at [`MAX_BODY`]; two different
//! `Content-Length` values are refused (400). With a token ([`super::ControlToken`]), a request without
//! `Authorization: Bearer <token>` (the scheme in any case, RFC 7235) gets 401. Stopping never waits on a
//! blocked accept: the listener is shut down ([`AcceptWaker`]), no connection to it is needed (one may be
//! impossible, as in a network namespace whose `lo` is down).
#![forbid(unsafe_code)]

use super::{Impairment, ProxyError, Shared};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head (request line and headers), bytes: 431 beyond.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest request body, bytes: 413 beyond.
pub const MAX_BODY: usize = 64 * 1024;
/// Requests served at once; one more is answered 503.
pub const MAX_REQUESTS: usize = 32;
/// Time a client has to send its whole request (and to take the answer).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// Binds the control listener and starts its thread.
pub(crate) fn start(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> Result<(SocketAddr, AcceptWaker, JoinHandle<()>), ProxyError> {
    start_api(addr, shared)
}

/// Wakes a thread blocked in `accept` on a listener without connecting to it: shutdown(2) of the listening
/// socket makes the blocked accept, and every later one, fail at once (Linux). Connecting to wake it may be
/// impossible (a network namespace whose `lo` is down, a firewall), and then a stop would wait for ever.
#[derive(Debug)]
pub struct AcceptWaker(TcpListener);

impl AcceptWaker {
    /// A waker for `listener` (a duplicate of its descriptor).
    pub fn new(listener: &TcpListener) -> std::io::Result<AcceptWaker> {
        listener.try_clone().map(AcceptWaker)
    }
    /// Shuts the listener down; the thread in accept returns (call after setting the stop flag it checks).
    pub fn wake(&self) {
        let _ = socket2::SockRef::from(&self.0).shutdown(std::net::Shutdown::Both);
    }
}

/// The token of an `Authorization` header value of the `Bearer` scheme, the scheme matched in any case
/// (RFC 7235: auth schemes are case-insensitive); None for another scheme or no token.
pub fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let (scheme, token) = authorization?.trim().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The answer to a client over [`MAX_REQUESTS`]: written without blocking the accepting thread (it fits in a
/// fresh socket's buffer), then the socket is closed.
fn busy_answer(s: TcpStream) {
    let body = error_json(&format!(
        "busy: {MAX_REQUESTS} control requests are being served, try again"
    ));
    let head = format!(
        "HTTP/1.1 503 {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(503),
        body.len()
    );
    let _ = s.set_nonblocking(true);
    let _ = (&s).write_all(&[head.as_bytes(), &body].concat());
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Take what the client sent so far, so that the close is not turned into a reset before it reads.
    let _ = (&s).read(&mut [0u8; 4096]);
}

/// What a control API serves: the proxy's [`Shared`] state, or the bridge's ([`super::bridge`]).
pub trait Api: Send + Sync + 'static {
    /// Answers one request: (status, JSON body).
    fn respond(&self, req: &Request) -> (u16, Vec<u8>);
    /// True once its owner stops (the listener thread then ends).
    fn stopping(&self) -> bool;
    /// Counts a request turned away.
    fn refused(&self);
}

impl Api for Shared {
    fn respond(&self, req: &Request) -> (u16, Vec<u8>) {
        respond(req, self)
    }
    fn stopping(&self) -> bool {
        Shared::stopping(self)
    }
    fn refused(&self) {
        self.totals()
            .control_refused
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Binds the control listener of any [`Api`] and starts its thread.
pub(crate) fn start_api<A: Api>(
    addr: SocketAddr,
    api: Arc<A>,
) -> Result<(SocketAddr, AcceptWaker, JoinHandle<()>), ProxyError> {
    let bind_err = |source| ProxyError::Bind {
        what: "the control api",
        addr,
        source,
    };
    let listener = TcpListener::bind(addr).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let waker = AcceptWaker::new(&listener).map_err(bind_err)?;
    let thread = std::thread::Builder::new()
        .name("proxy-control".into())
        .spawn(move || {
            let busy = Arc::new(AtomicUsize::new(0));
            for s in listener.incoming() {
                if api.stopping() {
                    return;
                }
                let s = match s {
                    Ok(s) => s,
                    // A listener that was shut down fails every accept: nothing more to serve.
                    Err(e) if e.raw_os_error() == Some(22) => return,
                    // Out of descriptors, a client gone before accept: keep serving.
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                if busy.fetch_add(1, Ordering::SeqCst) >= MAX_REQUESTS {
                    busy.fetch_sub(1, Ordering::SeqCst);
                    api.refused();
                    busy_answer(s);
                    continue;
                }
                let (api, busy2) = (api.clone(), busy.clone());
                let spawned = std::thread::Builder::new()
                    .name("proxy-control-req".into())
                    .spawn(move || {
                        serve(s, &*api);
                        busy2.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    busy.fetch_sub(1, Ordering::SeqCst);
                }
            }
        })
        .map_err(bind_err)?;
    Ok((local, waker, thread))
}

/// A parsed request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// GET, PUT, ...
    pub method: String,
    /// The path, query removed.
    pub path: String,
    /// The body.
    pub body: Vec<u8>,
    /// The value of the `Authorization` header, if any.
    pub authorization: Option<String>,
}

/// Reads one request; `Err` carries the status line and message to answer with.
pub fn read_request(s: &mut impl Read) -> Result<Request, (u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            // The cap is on the head itself, however the reads fell (a head that ends in the read that
            // crossed the cap is refused too).
            if p > MAX_HEAD {
                return Err((431, "request head too large".into()));
            }
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err((431, "request head too large".into()));
        }
        match s.read(&mut chunk) {
            Ok(0) => {
                return Err((
                    400,
                    "connection closed before the request head ended".into(),
                ));
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err((status_of(&e), format!("reading the request: {e}"))),
        }
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| (400, "request head is not UTF-8".to_string()))?;
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err((400, format!("bad request line '{first}'")));
    };
    let mut len: Option<usize> = None;
    let mut authorization = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        if k.trim().eq_ignore_ascii_case("content-length") {
            let n: usize = v
                .trim()
                .parse()
                .map_err(|_| (400, format!("bad Content-Length '{}'", v.trim())))?;
            // Two different lengths: which one ends the body is ambiguous (request smuggling, RFC 9112 6.3).
            if len.is_some_and(|l| l != n) {
                return Err((400, "two different Content-Length headers".into()));
            }
            len = Some(n);
        } else if k.trim().eq_ignore_ascii_case("authorization") {
            authorization = Some(v.trim().to_string());
        }
    }
    let len = len.unwrap_or(0);
    if len > MAX_BODY {
        return Err((
            413,
            format!("body of {len} bytes is too large (at most {MAX_BODY})"),
        ));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        match s.read(&mut chunk) {
            Ok(0) => return Err((400, "connection closed before the body ended".into())),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) => return Err((status_of(&e), format!("reading the body: {e}"))),
        }
    }
    body.truncate(len);
    Ok(Request {
        method: method.to_string(),
        path: target.split('?').next().unwrap_or_default().to_string(),
        body,
        authorization,
    })
}

/// 408 for a client too slow to send its request, else 400.
fn status_of(e: &std::io::Error) -> u16 {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => 408,
        _ => 400,
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        408 => "Request Timeout",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        503 => "Service Unavailable",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

/// The body of a refusal: `{"error": msg}` and a newline.
pub(crate) fn error_json(msg: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&serde_json::json!({ "error": msg })).expect("json");
    v.push(b'\n');
    v
}

/// The body of an answer: `v` as pretty JSON and a newline (the layout of the result documents).
pub(crate) fn json_body<T: serde::Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(v).expect("control api values always serialise");
    out.push(b'\n');
    out
}

/// How a request body changes the impairment in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The body is the whole new impairment (missing fields: none), as PUT.
    Replace,
    /// The body is a JSON merge patch (RFC 7396) on the impairment in force, as PATCH.
    Merge,
}

/// Changes are read-modify-write for PATCH: one at a time, so two patches never lose each other's fields.
static CHANGING: Mutex<()> = Mutex::new(());

/// Applies a request body to the proxy's impairment (the one function every client of the control API, PUT,
/// PATCH or another front end, goes through); returns the full impairment now in force, or why the body
/// was refused (nothing changed then).
pub fn change_impairment(
    shared: &Shared,
    body: &[u8],
    how: Change,
) -> Result<Arc<Impairment>, String> {
    change_with(
        || shared.impairment(),
        |i| {
            shared
                .set_impairment(i)
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
        body,
        how,
    )
}

/// [`change_impairment`] for any impairment type (the TCP/UDP proxy's, the packet bridge's): reads the one in
/// force with `current`, applies the body as PUT (replace) or PATCH (merge), hands the result to `set`, and
/// returns the impairment now in force.
pub fn change_with<T: serde::Serialize + serde::de::DeserializeOwned>(
    current: impl Fn() -> Arc<T>,
    set: impl FnOnce(T) -> Result<(), String>,
    body: &[u8],
    how: Change,
) -> Result<Arc<T>, String> {
    let _one_at_a_time = CHANGING.lock().unwrap_or_else(|p| p.into_inner());
    let body: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not JSON: {e} (GET /impairment shows the fields)"))?;
    if !body.is_object() {
        return Err(
            "the body must be a JSON object of impairment fields (GET /impairment shows them)"
                .into(),
        );
    }
    let new = match how {
        Change::Replace => body,
        Change::Merge => {
            let mut in_force = serde_json::to_value(&*current())
                .map_err(|e| format!("cannot read the impairment in force: {e}"))?;
            merge_patch(&mut in_force, body);
            in_force
        }
    };
    let i: T = serde_json::from_value(new).map_err(|e| {
        format!("the body is not an impairment: {e} (GET /impairment shows the fields)")
    })?;
    set(i)?;
    Ok(current())
}

/// RFC 7396 JSON merge patch: an object merges into an object field by field, `null` removes a field, any
/// other value replaces.
fn merge_patch(target: &mut serde_json::Value, patch: serde_json::Value) {
    use serde_json::Value;
    let Value::Object(fields) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in fields {
        if v.is_null() {
            t.remove(&k);
        } else {
            merge_patch(t.entry(k).or_insert(Value::Null), v);
        }
    }
}

/// Answers one request against `shared`: (status, JSON body).
pub fn respond(req: &Request, shared: &Shared) -> (u16, Vec<u8>) {
    if let Some(token) = &shared.control_token {
        let presented = bearer_token(req.authorization.as_deref());
        if !presented.is_some_and(|p| token.matches(p.as_bytes())) {
            shared
                .totals()
                .control_refused
                .fetch_add(1, Ordering::Relaxed);
            return (
                401,
                error_json("this control api needs the header 'Authorization: Bearer <token>'"),
            );
        }
    }
    let json = |v: &dyn erased::Ser| (200, v.bytes());
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/impairment") => json(&*shared.impairment()),
        ("PUT", "/impairment") => match change_impairment(shared, &req.body, Change::Replace) {
            Ok(i) => json(&*i),
            Err(e) => (400, error_json(&e)),
        },
        ("PATCH", "/impairment") => match change_impairment(shared, &req.body, Change::Merge) {
            Ok(i) => json(&*i),
            Err(e) => (400, error_json(&e)),
        },
        ("GET", "/counters") => json(&shared.counters()),
        (_, "/impairment") | (_, "/counters") => {
            (405, error_json("use GET (or PUT / PATCH for /impairment)"))
        }
        _ => (
            404,
            error_json("unknown path: try /impairment or /counters"),
        ),
    }
}

mod erased {
    pub trait Ser {
        fn bytes(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn bytes(&self) -> Vec<u8> {
            super::json_body(self)
        }
    }
}

/// A socket whose reads give up at a deadline for the whole request (a client sending a byte now and then
/// cannot hold its thread).
struct Deadlined<'a> {
    s: &'a TcpStream,
    until: Instant,
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the request did not arrive within {REQUEST_DEADLINE:?}"),
            ));
        }
        self.s.set_read_timeout(Some(left))?;
        (&mut &*self.s).read(buf)
    }
}

fn serve(mut s: TcpStream, api: &dyn Api) {
    let until = Instant::now() + REQUEST_DEADLINE;
    let _ = s.set_write_timeout(Some(REQUEST_DEADLINE));
    let read = read_request(&mut Deadlined { s: &s, until });
    let (code, body) = match read {
        Ok(req) => api.respond(&req),
        Err((code, msg)) => (code, error_json(&msg)),
    };
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(code),
        body.len()
    );
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(&body);
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Let the client read before the socket closes (unread request bytes would turn the close into a RST),
    // for a second at most.
    let mut sink = [0u8; 1024];
    let mut rest = Deadlined {
        s: &s,
        until: Instant::now() + Duration::from_secs(1),
    };
    while matches!(rest.read(&mut sink), Ok(n) if n > 0) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests_byte_by_byte() {
        let raw = b"PUT /impairment?x=1 HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\n\r\nhello";
        let r = read_request(&mut &raw[..]).unwrap();
        assert_eq!(r.method, "PUT");
        assert_eq!(r.path, "/impairment");
        assert_eq!(r.body, b"hello");
        assert_eq!(
            read_request(&mut &b"GET /x HTTP/1.1\r\n"[..])
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(
            read_request(&mut &b"GET /x HTTP/1.1\r\nContent-Length: nine\r\n\r\n"[..])
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(
            read_request(&mut &b"\xff\xfe\r\n\r\n"[..]).unwrap_err().0,
            400
        );
        assert_eq!(
            read_request(&mut &b"PUT / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"[..])
                .unwrap_err()
                .0,
            413
        );
    }

    /// A reader that hands out at most `step` bytes per read.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn the_head_cap_holds_however_the_reads_fall() {
        // A head a little over the cap ends inside the read that crosses it: refused whatever the read size.
        let mut raw = b"GET /x HTTP/1.1\r\nX: ".to_vec();
        raw.resize(MAX_HEAD + 100, b'a');
        raw.extend_from_slice(b"\r\n\r\n");
        for step in [1, 7, 4096, raw.len()] {
            let r = read_request(&mut Trickle { data: &raw, step });
            assert_eq!(r.unwrap_err().0, 431, "reads of {step} bytes");
        }
        // One just under it is read whatever the read size.
        let mut ok = b"GET /x HTTP/1.1\r\nX: ".to_vec();
        ok.resize(MAX_HEAD - 10, b'a');
        ok.extend_from_slice(b"\r\n\r\n");
        for step in [1, 7, 4096, ok.len()] {
            assert!(
                read_request(&mut Trickle { data: &ok, step }).is_ok(),
                "reads of {step} bytes"
            );
        }
    }
}
