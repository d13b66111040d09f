//! A small HTTP/1.1 server on `std::net` for the agent: `GET /metrics` (Prometheus text or OpenMetrics by
//! `Accept`), `GET /api/results` (JSON) and `GET /` (the HTML matrix). Other paths answer 404, other methods
//! 405. One request per connection; request heads are bounded ([`MAX_HEAD`]) and must arrive within
//! [`READ_TIMEOUT`]; a few worker threads ([`HttpServer::start`]) serve them, and connections beyond what
//! they can queue are closed at once.

use super::metrics::{self, AgentInfo, Format};
use super::{ErrorReason, Snapshot};
use crate::report::heatmap::{self, Cell, Matrix};
use serde_json::{Value, json};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, UNIX_EPOCH};

/// The largest request head (request line and headers) accepted; a longer one is answered 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take to read the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections accepted but not yet served, at most; beyond, they are closed at once.
pub const QUEUE: usize = 32;

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

/// A running server.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Binds `addr` (port 0: a free port) and serves with `workers` threads (at least 1).
    pub fn start(
        addr: SocketAddr,
        workers: usize,
        handler: Arc<Handler>,
    ) -> io::Result<HttpServer> {
        HttpServer::serve(TcpListener::bind(addr)?, workers, handler)
    }

    /// Serves on a listener bound earlier (so that a port in use is found before anything else starts).
    pub fn serve(
        listener: TcpListener,
        workers: usize,
        handler: Arc<Handler>,
    ) -> io::Result<HttpServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx): (SyncSender<TcpStream>, Receiver<TcpStream>) = sync_channel(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..workers.max(1) {
            let rx = rx.clone();
            let handler = handler.clone();
            std::thread::Builder::new()
                .name(format!("agent-http-{i}"))
                .spawn(move || {
                    loop {
                        let next = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        let Ok(stream) = next else { return };
                        serve(stream, &*handler);
                    }
                })?;
        }
        let stop2 = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("agent-http".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = conn else {
                        // Out of files or the like: do not spin.
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    match tx.try_send(stream) {
                        Ok(()) => {}
                        Err(TrySendError::Full(s)) | Err(TrySendError::Disconnected(s)) => {
                            let _ = s.shutdown(Shutdown::Both);
                        }
                    }
                }
            })?;
        Ok(HttpServer {
            addr,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and joins the acceptor; requests being served finish on their own.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let wake = match self.addr.ip() {
            IpAddr::V4(v4) if v4.is_unspecified() => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.addr.port())
            }
            IpAddr::V6(v6) if v6.is_unspecified() => {
                SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.addr.port())
            }
            _ => self.addr,
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.stop_now();
        }
    }
}

/// Reads one request head (bounded, with a deadline), answers it and closes.
fn serve(mut stream: TcpStream, handler: &Handler) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let deadline = std::time::Instant::now() + READ_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break Some(i);
        }
        if buf.len() > MAX_HEAD {
            break None;
        }
        if std::time::Instant::now() >= deadline {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let (resp, head_only) = match head_end {
        None => (Response::text(431, "request head over 8 KiB"), false),
        Some(i) if i > MAX_HEAD => (Response::text(431, "request head over 8 KiB"), false),
        Some(i) => match parse_head(&buf[..i]) {
            None => (Response::text(400, "not an HTTP/1.x request"), false),
            Some(req) => {
                let head_only = req.method == "HEAD";
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&req)))
                    .unwrap_or_else(|_| Response::text(500, "internal error"));
                (r, head_only)
            }
        },
    };
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
    let _ = stream.write_all(out.as_bytes());
    if !head_only {
        let _ = stream.write_all(&resp.body);
    }
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
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
}
