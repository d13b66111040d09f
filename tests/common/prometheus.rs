//! A real Prometheus server (Debian's /usr/bin/prometheus) for the fleet tests: a generated configuration
//! (scrape every second, static targets), its data in a temporary directory, on a free port, optionally
//! inside a network namespace; killed on drop. And a small HTTP client (GET over a TcpStream with
//! timeouts) for its query API and for agents' endpoints.
#![allow(dead_code)]

use super::netns;
use super::procs::Proc;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// The Prometheus binary the tests start.
pub const BINARY: &str = "/usr/bin/prometheus";

/// True when the Prometheus binary is installed; otherwise prints why the test is skipped, or fails under CI
/// (ROUNDTRIP_REQUIRE_SERVICES=1).
pub fn available() -> bool {
    if std::path::Path::new(BINARY).exists() {
        return true;
    }
    super::skip(&format!(
        "{BINARY} is not installed (Debian package prometheus; .ci/run installs it)"
    ))
}

/// A running Prometheus.
pub struct Prometheus {
    /// The namespace it runs in (None: the test's own).
    pub ns: Option<String>,
    /// Where its HTTP API listens (reachable from `ns`).
    pub addr: SocketAddr,
    proc: Proc,
    _dir: Option<tempfile::TempDir>,
}

/// GET `path` from `addr` (connecting from namespace `ns`), everything within `timeout`; the status code
/// and the body.
pub fn http_get(
    ns: Option<&str>,
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let end = Instant::now() + timeout;
    let mut s = netns::connect(ns, addr, timeout)?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    // HTTP/1.0: the server closes after the answer and sends no chunked encoding
    let req =
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .map_err(|e| format!("GET http://{addr}{path}: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if Instant::now() >= end {
            return Err(format!(
                "GET http://{addr}{path}: no full answer within {timeout:?}"
            ));
        }
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("GET http://{addr}{path}: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET http://{addr}{path}: no HTTP header in {text:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("GET http://{addr}{path}: bad status line in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// Calls `f` every 500 ms until it returns `Some`, at most `timeout`; an error naming `what` (and the last
/// error or value `f` reported through `last`) after that.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut(&mut String) -> Option<T>,
) -> Result<T, String> {
    let end = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        if let Some(v) = f(&mut last) {
            return Ok(v);
        }
        if Instant::now() >= end {
            return Err(format!("{what}: not within {timeout:?} (last: {last})"));
        }
        thread::sleep(Duration::from_millis(500));
    }
}

/// One element of an instant vector: its labels and value.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The series' labels.
    pub labels: BTreeMap<String, String>,
    /// Its value (NaN possible).
    pub value: f64,
}

impl Prometheus {
    /// Starts Prometheus in namespace `ns` (None: here) listening on `listen_ip` at a free port, scraping
    /// `targets` (HOST:PORT, path /metrics; `self` stands for its own address) every second as job `job`, and
    /// waits (up to 120 s) until it is ready. Panics with its output when it does not start.
    pub fn start(
        ns: Option<&str>,
        listen_ip: Ipv4Addr,
        job: &str,
        targets: &[String],
    ) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("prometheus.yml");
        let mut last_err = String::new();
        // a port free when picked may be taken before Prometheus binds it: try again with another
        for attempt in 0..5 {
            let port = netns::free_port(ns, listen_ip).unwrap();
            let addr = SocketAddr::from((listen_ip, port));
            let list: Vec<String> = targets
                .iter()
                .map(|t| {
                    if t == "self" {
                        format!("'{addr}'")
                    } else {
                        format!("'{t}'")
                    }
                })
                .collect();
            let config = format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: '{job}'\n    static_configs:\n      - targets: [{}]\n",
                list.join(", ")
            );
            std::fs::write(&cfg, config).unwrap();
            let data = dir.path().join(format!("data{attempt}"));
            let mut args = vec![
                format!("--config.file={}", cfg.display()),
                format!("--storage.tsdb.path={}", data.display()),
                format!("--web.listen-address={addr}"),
                "--log.level=warn".to_string(),
            ];
            // the Debian package's defaults point at /etc/prometheus: keep the test's files to itself
            for (flag, sub) in [
                ("--web.console.templates", "consoles"),
                ("--web.console.libraries", "console_libraries"),
            ] {
                args.push(format!("{flag}={}", dir.path().join(sub).display()));
            }
            let mut cmd;
            match ns {
                Some(n) => {
                    cmd = Command::new("ip");
                    cmd.args(["netns", "exec", n, BINARY]);
                }
                None => cmd = Command::new(BINARY),
            }
            cmd.args(&args);
            let proc = Proc::spawn("prometheus", cmd);
            let mut p = Prometheus {
                ns: ns.map(str::to_string),
                addr,
                proc,
                _dir: None,
            };
            match p.wait_ready(Duration::from_secs(120)) {
                Ok(()) => {
                    p._dir = Some(dir);
                    return p;
                }
                Err(e) => {
                    let out = p.proc.output();
                    last_err = e;
                    if !out.contains("address already in use") {
                        break;
                    }
                }
            }
        }
        panic!("Prometheus did not start: {last_err}");
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(st) = self.proc.try_wait() {
                return Err(format!(
                    "prometheus exited ({st}); its output:\n{}",
                    self.proc.output()
                ));
            }
            if let Ok((200, _)) = http_get(
                self.ns.as_deref(),
                self.addr,
                "/-/ready",
                Duration::from_secs(5),
            ) {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(format!(
                    "prometheus not ready within {timeout:?}; its output:\n{}",
                    self.proc.output()
                ));
            }
            thread::sleep(Duration::from_millis(250));
        }
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its output so far (for messages).
    pub fn output(&self) -> String {
        self.proc.output()
    }

    /// `/api/v1/query?query=Q`: the parsed `data` of a successful answer, else an error.
    pub fn query(&self, q: &str) -> Result<serde_json::Value, String> {
        let path = format!(
            "/api/v1/query?query={}",
            roundtrip::mesh::http::encode_component(q)
        );
        let (code, body) = http_get(
            self.ns.as_deref(),
            self.addr,
            &path,
            Duration::from_secs(20),
        )?;
        let doc: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| format!("query {q}: HTTP {code}, not JSON ({e}): {body}"))?;
        if code != 200 || doc["status"] != "success" {
            return Err(format!("query {q}: HTTP {code}: {body}"));
        }
        Ok(doc["data"].clone())
    }

    /// An instant-vector query's samples.
    pub fn vector(&self, q: &str) -> Result<Vec<Sample>, String> {
        let data = self.query(q)?;
        if data["resultType"] != "vector" {
            return Err(format!("query {q}: not a vector: {data}"));
        }
        let mut out = Vec::new();
        for r in data["result"].as_array().into_iter().flatten() {
            let labels = r["metric"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let value = r["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("query {q}: bad value in {r}"))?;
            out.push(Sample { labels, value });
        }
        Ok(out)
    }

    /// The single value of a query answering one sample; None when it answers none; an error when more.
    pub fn scalar(&self, q: &str) -> Result<Option<f64>, String> {
        let v = self.vector(q)?;
        match v.len() {
            0 => Ok(None),
            1 => Ok(Some(v[0].value)),
            n => Err(format!("query {q}: {n} samples, expected one: {v:?}")),
        }
    }
}
