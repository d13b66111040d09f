//! `roundtrip mesh` against a tiny HTTP server in the test (port 0) that plays recorded answers of a real
//! Prometheus 2.42 (tests/fixtures/prometheus/*.http, byte-exact with their headers) and agents'
//! `/api/results` documents (tests/fixtures/mesh/); and the deploy files: the Grafana dashboard's PromQL names
//! only the metrics the agent exports, the Kubernetes and Prometheus files carry the right flags. The
//! end-to-end run with real agents and a real Prometheus is tests/fleet.rs.

use assert_cmd::Command;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(root().join("tests/fixtures").join(path)).unwrap()
}

/// A raw HTTP answer around `body`.
fn answer(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// An HTTP server on 127.0.0.1:0 answering every request with `route(path, decoded query)`; it records the
/// queries it was asked. Its thread ends with the test process.
struct Server {
    port: u16,
    queries: Arc<Mutex<Vec<String>>>,
}

fn serve(route: impl Fn(&str, &str) -> Vec<u8> + Send + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let queries = Arc::new(Mutex::new(Vec::new()));
    let seen = queries.clone();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head);
            let target = head.split(' ').nth(1).unwrap_or("/").to_string();
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let q = query.strip_prefix("query=").map(decode).unwrap_or_default();
            if !q.is_empty() {
                seen.lock().unwrap().push(q.clone());
            }
            let _ = c.write_all(&route(path, &q));
        }
    });
    Server { port, queries }
}

/// The recorded answer of a real Prometheus to each query `roundtrip mesh` sends.
fn prometheus(path: &str, q: &str) -> Vec<u8> {
    if path != "/api/v1/query" {
        return fixture("prometheus/notfound.http");
    }
    let name = if q.starts_with("count by (probe,size)") {
        "count"
    } else if q.starts_with("histogram_quantile(0.5,") {
        "p50"
    } else if q.starts_with("histogram_quantile(0.99,") {
        "p99"
    } else if q.contains(" / ") {
        "loss"
    } else if q.starts_with("sum by (source,target) (increase(roundtrip_probes_total") {
        "probes"
    } else {
        "baddata"
    };
    fixture(&format!("prometheus/{name}.http"))
}

/// Agents at /a1, /a2, /a3 of one server.
fn agents(path: &str, _q: &str) -> Vec<u8> {
    match path {
        "/a1/api/results" => answer("200 OK", "application/json", &fixture("mesh/agent1.json")),
        "/a2/api/results" => answer("200 OK", "application/json", &fixture("mesh/agent2.json")),
        "/a3/api/results" => answer("200 OK", "application/json", &fixture("mesh/agent3.json")),
        _ => answer("404 Not Found", "text/plain", b"not found\n"),
    }
}

fn mesh(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_roundtrip"))
        .arg("mesh")
        .args(args)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// Exit 1 (the run failed), nothing on stdout, exactly one error line containing `says`.
fn fails_with_one_line(args: &[&str], says: &str) {
    ends_with_one_line(args, 1, says)
}

/// Exit 2 (refused before any I/O: a URL this client cannot use), nothing on stdout, one error line.
fn refused_with_one_line(args: &[&str], says: &str) {
    ends_with_one_line(args, 2, says)
}

/// Exit `want`, nothing on stdout, exactly one error line containing `says`.
fn ends_with_one_line(args: &[&str], want: i32, says: &str) {
    let (code, out, err) = mesh(args);
    assert_eq!(code, want, "{args:?}: {out}{err}");
    assert!(out.is_empty(), "{args:?}: {out}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.starts_with("roundtrip: error: ") && err.contains(says),
        "{args:?}: {err}"
    );
}

#[test]
fn prometheus_3x3_matrix() {
    let s = serve(prometheus);
    let url = format!("http://127.0.0.1:{}", s.port);
    let (code, out, err) = mesh(&["--prometheus", &url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.is_empty(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!("roundtrip mesh: Prometheus {url}, probe tcp, window 5m")
    );
    assert_eq!(
        &lines[1..5],
        [
            "source \\ target   10.0.0.1             10.0.0.2            10.0.0.3",
            "10.0.0.1          -                    439us / 560us  0%   439us / 560us  0%",
            "10.0.0.2          439us / 560us  0%    -                   139us / 177us  0%",
            "10.0.0.3          439us / 560us  10%   139us / 177us  0%   -",
        ]
    );
    assert!(lines[5].starts_with("cells: "));
    // Exactly the spec's PromQL, over the default window.
    let q = s.queries.lock().unwrap().clone();
    assert_eq!(
        q,
        [
            "count by (probe,size) (roundtrip_probes_total)",
            r#"sum by (source,target) (increase(roundtrip_probes_total{probe="tcp"}[5m]))"#,
            r#"histogram_quantile(0.5, sum by (source,target,le) (rate(roundtrip_rtt_seconds_bucket{probe="tcp"}[5m])))"#,
            r#"histogram_quantile(0.99, sum by (source,target,le) (rate(roundtrip_rtt_seconds_bucket{probe="tcp"}[5m])))"#,
            r#"sum by (source,target) (increase(roundtrip_probe_errors_total{probe="tcp"}[5m])) / sum by (source,target) (increase(roundtrip_probes_total{probe="tcp"}[5m]))"#,
        ]
    );
}

#[test]
fn prometheus_json_and_report() {
    let s = serve(prometheus);
    let url = format!("http://127.0.0.1:{}/", s.port);
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("mesh.html");
    let (code, out, err) = mesh(&[
        "--prometheus",
        &url,
        "--span",
        "90s",
        "--size",
        "64",
        "--json",
        "--report",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "mesh");
    assert_eq!(v["window_seconds"], 90.0);
    assert_eq!(v["size_bytes"], 64);
    assert_eq!(v["cells"].as_array().unwrap().len(), 6);
    let lossy = &v["cells"][4];
    assert_eq!(
        (lossy["source"].as_str(), lossy["target"].as_str()),
        (Some("10.0.0.3"), Some("10.0.0.1"))
    );
    assert!((lossy["loss"].as_f64().unwrap() - 0.1).abs() < 1e-9);
    assert_eq!(lossy["probes"], 271);
    assert!(s.queries.lock().unwrap()[1].contains(r#"{probe="tcp",size="64"}[90s]"#));
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<td").count(), 9);
    assert!(page.contains("over 90s") && page.contains("class=\"l bad\">10%"));
    assert!(err.contains("report: "), "{err}");
}

#[test]
fn prometheus_bad_answers_are_one_line() {
    // A URL this client cannot use.
    refused_with_one_line(
        &["--prometheus", "https://127.0.0.1:9090"],
        "https is not supported",
    );
    refused_with_one_line(&["--prometheus", "http://127.0.0.1:0"], "bad port");
    // Nobody listening.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    fails_with_one_line(
        &["--prometheus", &format!("http://127.0.0.1:{port}")],
        &format!("cannot reach http://127.0.0.1:{port}: connection refused"),
    );
    // Something else answers: an HTML page, a 404, garbage, a silent server.
    let html = serve(|_, _| fixture("prometheus/html.http"));
    fails_with_one_line(
        &["--prometheus", &format!("http://127.0.0.1:{}", html.port)],
        "does not look like a Prometheus server: HTTP 200 text/html",
    );
    let nf = serve(|_, _| fixture("prometheus/notfound.http"));
    fails_with_one_line(
        &["--prometheus", &format!("http://127.0.0.1:{}", nf.port)],
        "HTTP 404 for /api/v1/query",
    );
    let junk = serve(|_, _| b"SSH-2.0-OpenSSH_9.2\r\n".to_vec());
    fails_with_one_line(
        &["--prometheus", &format!("http://127.0.0.1:{}", junk.port)],
        "the answer is not HTTP",
    );
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    fails_with_one_line(
        &[
            "--prometheus",
            &format!("http://127.0.0.1:{}", silent.local_addr().unwrap().port()),
            "--timeout",
            "1s",
        ],
        "no complete answer within 1.00s",
    );
    // Prometheus without roundtrip series, with others only, with an error status.
    let empty = serve(|_, _| fixture("prometheus/empty.http"));
    let empty_url = format!("http://127.0.0.1:{}", empty.port);
    fails_with_one_line(&["--prometheus", &empty_url], "no roundtrip metrics");
    let s = serve(prometheus);
    fails_with_one_line(
        &[
            "--prometheus",
            &format!("http://127.0.0.1:{}", s.port),
            "--probe",
            "udp",
        ],
        "no roundtrip series with probe=\"udp\" (there are: tcp size 64)",
    );
    let bad = serve(|_, _| fixture("prometheus/baddata.http"));
    fails_with_one_line(
        &["--prometheus", &format!("http://127.0.0.1:{}", bad.port)],
        "Prometheus refused the query (bad_data): invalid parameter",
    );
    // Arguments are checked before any request: a bad --report folder sends nothing.
    let s = serve(prometheus);
    let args = [
        "--prometheus",
        &format!("http://127.0.0.1:{}", s.port),
        "--report",
        "/nonexistent-dir/x.html",
    ];
    let (code, out, err) = mesh(&args);
    // Refused before any request: exit 2, one line.
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("roundtrip: error: ") && err.contains("does not exist"),
        "{err}"
    );
    assert!(s.queries.lock().unwrap().is_empty());
}

#[test]
fn usage_errors() {
    for args in [
        &[][..],
        &["--prometheus", "http://a", "--agent", "http://b"],
        &["--prometheus", "http://a", "--probe", "http"],
        &["--prometheus", "http://a", "--span", "0s"],
        &["--prometheus", "http://a", "--span", "5"],
        &["--prometheus", "http://a", "--size", "-1"],
    ] {
        let (code, out, err) = mesh(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}

#[test]
fn agents_3x3_matrix() {
    let s = serve(agents);
    let a = |n: u32| format!("http://127.0.0.1:{}/a{n}", s.port);
    let (code, out, err) = mesh(&["--agent", &a(1), "--agent", &a(2), "--agent", &a(3)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.is_empty(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "roundtrip mesh: 3 agents (each its own window), probe tcp, window 1m"
    );
    assert_eq!(
        &lines[1..5],
        [
            "source \\ target   10.0.0.1             10.0.0.2            10.0.0.3",
            "10.0.0.1          -                    433us / 512us  0%   458us / 530us  0%",
            "10.0.0.2          433us / 515us  0%    -                   135us / 170us  0%",
            "10.0.0.3          458us / 560us  10%   no answer  100%     -",
        ]
    );
    // The API URL itself works too, and --span says it does not apply.
    let (code, out, err) = mesh(&[
        "--agent",
        &format!("{}/api/results", a(2)),
        "--span",
        "5m",
        "--probe",
        "tcp",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("each agent reports over its own span"),
        "{err}"
    );
    assert!(
        out.contains(&format!("agent {}/api/results (its own window)", a(2))),
        "{out}"
    );
    assert_eq!(
        out.lines().nth(2).unwrap(),
        "10.0.0.2          433us / 515us  0%   135us / 170us  0%"
    );
}

#[test]
fn agents_that_fail() {
    let s = serve(agents);
    let a = |n: u32| format!("http://127.0.0.1:{}/a{n}", s.port);
    // One agent of three does not answer: the others' rows, then its error; exit 1.
    let (code, out, err) = mesh(&["--agent", &a(1), "--agent", &a(9), "--agent", &a(3)]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out.lines().count(), 5, "{out}");
    assert!(
        out.contains("10.0.0.1  ") && out.contains("10.0.0.3  ") && !out.contains("\n10.0.0.2  ")
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "{} does not look like a roundtrip agent: HTTP 404",
            a(9)
        )),
        "{err}"
    );
    // Not JSON; not an agent's JSON; nobody there.
    let html = serve(|_, _| answer("200 OK", "text/html", b"<html>hello</html>"));
    fails_with_one_line(
        &["--agent", &format!("http://127.0.0.1:{}", html.port)],
        "does not look like a roundtrip agent: the answer is not JSON (text/html answer to /api/results)",
    );
    let prom = serve(|_, _| {
        answer(
            "200 OK",
            "application/json",
            br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        )
    });
    fails_with_one_line(
        &["--agent", &format!("http://127.0.0.1:{}", prom.port)],
        "the JSON has no \"source\" and \"targets\"",
    );
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    fails_with_one_line(
        &[
            "--agent",
            &format!("http://127.0.0.1:{port}"),
            "--agent",
            &format!("127.0.0.1:{port}"),
        ],
        "connection refused (and 1 other agent failed)",
    );
    // Agents with no target of this probe kind.
    fails_with_one_line(
        &["--agent", &a(1), "--probe", "icmp"],
        "they probe: tcp size 64, udp size 64",
    );
}

// ---- deploy files ----

/// The metric names `roundtrip agent` exports, with the histogram's series.
const EXPORTED: [&str; 23] = [
    // The watching agent's (roundtrip agent --watch).
    "roundtrip_request_duration_seconds_bucket",
    "roundtrip_request_duration_seconds_sum",
    "roundtrip_request_duration_seconds_count",
    "roundtrip_requests_total",
    "roundtrip_response_bytes_total",
    "roundtrip_network_rtt_seconds_bucket",
    "roundtrip_network_rtt_seconds_sum",
    "roundtrip_network_rtt_seconds_count",
    "roundtrip_watch_packets_total",
    "roundtrip_watch_kernel_drops_total",
    "roundtrip_watch_connections",
    "roundtrip_watch_evictions_total",
    "roundtrip_watch_folded_requests_total",
    // The probing agent's.
    "roundtrip_rtt_seconds_bucket",
    "roundtrip_rtt_seconds_sum",
    "roundtrip_rtt_seconds_count",
    "roundtrip_probes_total",
    "roundtrip_probe_errors_total",
    "roundtrip_up",
    "roundtrip_agent_schedule_lag_seconds_bucket",
    "roundtrip_agent_targets",
    "roundtrip_agent_info",
    "roundtrip_agent_schedule_lag_seconds_count",
];

/// Every string under a key named `expr`, `query` or `definition` (panels' targets, templating).
fn promql(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match x.as_str() {
                    Some(s) if ["expr", "query", "definition"].contains(&k.as_str()) => {
                        out.push(s.to_string())
                    }
                    _ => promql(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| promql(x, out)),
        _ => {}
    }
}

fn identifiers(expr: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(off) = expr[i..].find("roundtrip_") {
        let start = i + off;
        let prev_ok = start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        if prev_ok {
            ids.insert(expr[start..end].to_string());
        }
        i = end;
    }
    ids
}

#[test]
fn grafana_dashboard_names_only_exported_metrics() {
    let text = std::fs::read_to_string(root().join("deploy/grafana/roundtrip.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut exprs = Vec::new();
    promql(&dash, &mut exprs);
    let exprs: Vec<String> = exprs
        .into_iter()
        .filter(|e| e.contains("roundtrip_"))
        .collect();
    assert!(exprs.len() >= 5, "{exprs:?}");
    // The list itself is checked against the agent's code: each name (a histogram's by its family name) is a
    // string the agent writes.
    let mut agent_src = String::new();
    for dir in ["src/agent", "src/agent/watch"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                agent_src.push_str(&std::fs::read_to_string(p).unwrap());
            }
        }
    }
    for name in EXPORTED {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            agent_src.contains(&format!("\"{family}")),
            "{name}: not a metric the agent writes (src/agent)"
        );
    }
    let mut used = BTreeSet::new();
    for e in &exprs {
        for id in identifiers(e) {
            assert!(
                EXPORTED.contains(&id.as_str()),
                "{id} in {e} is not exported by the agent"
            );
            used.insert(id);
        }
    }
    // The dashboard shows the RTT percentiles, loss and up.
    for m in [
        "roundtrip_rtt_seconds_bucket",
        "roundtrip_probes_total",
        "roundtrip_probe_errors_total",
        "roundtrip_up",
    ] {
        assert!(used.contains(m), "{m} unused: {used:?}");
    }
    assert!(exprs.iter().any(|e| e.contains("histogram_quantile(")));
    // Templated source, target and datasource.
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for v in ["datasource", "source", "target"] {
        assert!(vars.contains(&v), "no ${v} variable: {vars:?}");
    }
    assert!(text.contains("${datasource}"));
}

#[test]
fn deploy_files_carry_the_right_flags() {
    let read = |p: &str| {
        std::fs::read_to_string(root().join("deploy").join(p))
            .unwrap_or_else(|e| panic!("deploy/{p}: {e}"))
    };
    let ds = read("kubernetes/daemonset.yaml");
    for needle in [
        "kind: DaemonSet",
        "- agent",
        "- --bind",
        "- 0.0.0.0",
        "- --metrics",
        "- 0.0.0.0:9911",
        "- --peers-dns",
        "roundtrip-agent.",
        ".svc.cluster.local",
        "- --source",
        "- $(POD_IP)",
        "fieldPath: status.podIP",
        "path: /metrics",
        "readinessProbe:",
        "resources:",
        "limits:",
        "requests:",
        "securityContext:",
        "defaultMode: 0400",
        "--psk-file",
        "app.kubernetes.io/name: roundtrip-agent",
    ] {
        assert!(ds.contains(needle), "daemonset.yaml lacks {needle:?}");
    }
    let svc = read("kubernetes/service.yaml");
    for needle in [
        "kind: Service",
        "name: roundtrip-agent",
        "clusterIP: None",
        "publishNotReadyAddresses: true",
        "port: 11111",
        "protocol: UDP",
        "app.kubernetes.io/name: roundtrip-agent",
    ] {
        assert!(svc.contains(needle), "service.yaml lacks {needle:?}");
    }
    let prom = read("prometheus/prometheus.yml");
    for needle in [
        "scrape_configs:",
        "static_configs:",
        ":9911",
        "job_name: roundtrip",
    ] {
        assert!(prom.contains(needle), "prometheus.yml lacks {needle:?}");
    }
    let k8s = read("prometheus/kubernetes.yml");
    for needle in [
        "kubernetes_sd_configs:",
        "role: pod",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name",
        "regex: roundtrip-agent",
        "__meta_kubernetes_pod_container_port_name",
    ] {
        assert!(k8s.contains(needle), "kubernetes.yml lacks {needle:?}");
    }
    let docker = read("docker/Dockerfile");
    for needle in [
        "FROM rust:",
        "x86_64-unknown-linux-musl",
        "--release",
        "ENTRYPOINT",
        "USER",
    ] {
        assert!(docker.contains(needle), "Dockerfile lacks {needle:?}");
    }
    assert!(
        docker.contains("FROM scratch") || docker.contains("distroless"),
        "the runtime image is not scratch or distroless"
    );
}
