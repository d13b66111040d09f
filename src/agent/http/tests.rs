#![forbid(unsafe_code)]
use super::super::{Histogram, ProbeKind, TargetSnapshot, TargetSpec, WindowStats};
use super::*;
use crate::agent::Snapshot;
use crate::agent::metrics::AgentInfo;
use serde_json::Value;
use std::net::TcpStream;
use std::time::SystemTime;

fn snap() -> Snapshot {
    let h = Histogram {
        counts: vec![0; 26],
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

/// An HTTP server of [`site`] on a loopback port, with `threads` rendering threads.
fn serve_site(threads: usize) -> HttpServer {
    let s = site();
    let h: Arc<Handler> = Arc::new(move |r: &Request| s.handle(r));
    HttpServer::start("127.0.0.1:0".parse().unwrap(), threads, h).unwrap()
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
    let r =
        parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nACCEPT: application/openmetrics-text")
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
    let server = serve_site(2);
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
    // One rendering thread: the idle clients are more than there are threads.
    let server = serve_site(1);
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

#[test]
fn parse_request_decides_as_the_loop() {
    assert_eq!(parse_request(b"GET /metrics HTTP/1.1\r\nHost"), Ok(None));
    let r = parse_request(b"GET /metrics?x HTTP/1.1\r\nAccept: text/plain\r\n\r\nrest").unwrap();
    assert_eq!(
        r.map(|r| (r.method, r.path)),
        Some(("GET".into(), "/metrics".into()))
    );
    assert_eq!(parse_request(b"junk\r\n\r\n"), Err(400));
    assert_eq!(parse_request(&vec![b'a'; MAX_HEAD + 1]), Err(431));
    let mut long = vec![b'a'; MAX_HEAD + 1];
    long.extend_from_slice(b"\r\n\r\n");
    assert_eq!(parse_request(&long), Err(431));
    assert_eq!(
        parse_request(b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
        Err(400)
    );
}

#[test]
fn two_different_content_lengths_get_400() {
    assert!(conflicting_lengths(
        b"GET / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 6"
    ));
    assert!(!conflicting_lengths(
        b"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5"
    ));
    let server = serve_site(1);
    let a = server.local_addr();
    let r = get(
        a,
        b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 40\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("two different Content-Length headers"), "{r}");
    let r = get(
        a,
        b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    server.shutdown();
}
