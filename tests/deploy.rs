//! The deploy files, checked offline: every Kubernetes manifest in deploy/kubernetes against the Kubernetes
//! API schemas (the kubernetes-validate Python package, strict) and custom resources (PodMonitor) against a
//! schema of our own (tests/fixtures/deploy/); the static Prometheus configuration with `promtool check config`;
//! and every PromQL expression of the Grafana dashboard, its variables substituted, evaluated by a real
//! Prometheus (a parse error or an unknown function fails).

mod common;

use common::prometheus::{self, Prometheus};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

/// The Kubernetes version the manifests are checked against (the oldest one supported upstream).
const KUBERNETES: &str = "1.32";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &str, ext: &[&str]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| ext.contains(&e))
        })
        .collect();
    v.sort();
    v
}

/// True when python3 can import the checker's packages (else skipped; a failure under CI).
fn checker_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import kubernetes_validate, jsonschema, yaml"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok || common::skip(
        "python3 cannot import kubernetes_validate, jsonschema and yaml (.ci/run installs them with pip)",
    )
}

/// Runs the checker on `paths`: (success, its output).
fn check(paths: &[PathBuf]) -> (bool, String) {
    let out = Command::new("python3")
        .arg(root().join("tests/deploy_check.py"))
        .arg(KUBERNETES)
        .args(paths)
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn kubernetes_manifests_match_the_api_schemas() {
    if !checker_available() {
        return;
    }
    let manifests = files("deploy/kubernetes", &["yaml", "yml"]);
    assert!(manifests.len() >= 5, "{manifests:?}");
    let (ok, out) = check(&manifests);
    assert!(ok, "{out}");
    for m in &manifests {
        let name = m.file_name().unwrap().to_str().unwrap();
        assert!(
            out.lines()
                .any(|l| l.starts_with("ok ") && l.contains(name)),
            "{name} not checked:\n{out}"
        );
    }
    for kind in [
        "DaemonSet/roundtrip-agent",
        "DaemonSet/roundtrip-watch",
        "Namespace/roundtrip-watch",
        "PodMonitor/roundtrip-agent (own schema)",
        "PodMonitor/roundtrip-watch (own schema)",
    ] {
        assert!(out.contains(kind), "{kind} not checked:\n{out}");
    }
    // The watching DaemonSet holds what its comments promise.
    let watch =
        std::fs::read_to_string(root().join("deploy/kubernetes/watch-daemonset.yaml")).unwrap();
    for needle in [
        "hostNetwork: true",
        "add: [\"NET_RAW\"]",
        "drop: [\"ALL\"]",
        "runAsNonRoot: true",
        "- --watch",
        "- --no-responder",
        "pod-security.kubernetes.io/enforce: privileged",
    ] {
        assert!(
            watch.contains(needle),
            "watch-daemonset.yaml lacks {needle:?}"
        );
    }
    let docker = std::fs::read_to_string(root().join("deploy/docker/Dockerfile")).unwrap();
    assert!(docker.contains("AS watch") && docker.contains("setcap cap_net_raw=ep"));
}

#[test]
fn the_manifest_checker_refuses_broken_manifests() {
    if !checker_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ds = std::fs::read_to_string(root().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    let pm = std::fs::read_to_string(root().join("deploy/kubernetes/podmonitor.yaml")).unwrap();
    let cases = [
        // A misspelt field (strict).
        ("typo.yaml", ds.replace("containerPort:", "containerPrt:")),
        // A wrong type.
        (
            "type.yaml",
            ds.replace(
                "terminationGracePeriodSeconds: 10",
                "terminationGracePeriodSeconds: ten",
            ),
        ),
        // A PodMonitor field that does not exist.
        (
            "pm.yaml",
            pm.replacen("podMetricsEndpoints:", "podMetricEndpoints:", 1),
        ),
        // A kind nobody has a schema for.
        (
            "kind.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n".to_string(),
        ),
    ];
    for (name, text) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, &text).unwrap();
        let (ok, out) = check(&[p]);
        assert!(!ok && out.contains("FAIL"), "{name} passed:\n{out}");
    }
}

#[test]
fn prometheus_configurations_pass_promtool() {
    if !common::have("promtool") {
        return;
    }
    // Debian's Prometheus is built without Kubernetes service discovery, so kubernetes.yml (kubernetes_sd_configs)
    // cannot be checked by its promtool: the static configuration is.
    let f = root().join("deploy/prometheus/prometheus.yml");
    let out = Command::new("promtool")
        .args(["check", "config", "--syntax-only"])
        .arg(&f)
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "{}: {}{}",
        f.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

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

/// The PromQL Prometheus is asked: Grafana's variables replaced by values of the right kind (label regexes
/// by `.*`, the probe by `tcp`, ranges by durations); a `label_values(SELECTOR, LABEL)` template query by its
/// selector; None for Grafana-only queries without one (`label_values(LABEL)`, the datasource's `prometheus`).
fn substitute(expr: &str) -> Option<String> {
    let mut e = expr.to_string();
    for (var, value) in [
        ("$__rate_interval", "1m"),
        ("$__interval", "15s"),
        ("$__range", "1h"),
        ("$probe", "tcp"),
        ("$size", ".*"),
        ("$source", ".*"),
        ("$target", ".*"),
        ("$server", ".*"),
        ("$proto", ".*"),
    ] {
        e = e.replace(var, value);
    }
    assert!(
        !e.contains('$'),
        "a variable the test does not know in {expr}"
    );
    if let Some(inner) = e
        .strip_prefix("label_values(")
        .and_then(|s| s.strip_suffix(')'))
    {
        return inner
            .rsplit_once(',')
            .map(|(sel, _)| sel.trim().to_string());
    }
    (e != "prometheus").then_some(e)
}

#[test]
fn every_dashboard_expression_is_accepted_by_prometheus() {
    if !prometheus::available() {
        return;
    }
    let mut exprs = BTreeSet::new();
    for f in files("deploy/grafana", &["json"]) {
        let text = std::fs::read_to_string(&f).unwrap();
        let dash: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut found = Vec::new();
        promql(&dash, &mut found);
        exprs.extend(found.iter().filter_map(|e| substitute(e)));
    }
    // The watch row is there, under the names the agent exports.
    for name in [
        "roundtrip_request_duration_seconds_bucket",
        "roundtrip_request_duration_seconds_sum",
        "roundtrip_requests_total",
        "roundtrip_response_bytes_total",
        "roundtrip_network_rtt_seconds_sum",
        "roundtrip_watch_packets_total",
        "roundtrip_watch_kernel_drops_total",
        "roundtrip_watch_connections",
        "roundtrip_watch_evictions_total",
        "roundtrip_watch_folded_requests_total",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(name)),
            "no dashboard expression uses {name}"
        );
    }
    assert!(exprs.len() >= 20, "{exprs:?}");
    let p = Prometheus::start(None, Ipv4Addr::LOCALHOST, "deploy", &["self".to_string()]);
    let mut bad = Vec::new();
    for e in &exprs {
        if let Err(why) = p.query(e) {
            bad.push(why);
        }
    }
    assert!(bad.is_empty(), "Prometheus refused:\n{}", bad.join("\n"));
    // A broken expression is refused (the check checks).
    assert!(p.query("sum by (le (rate(x[1m]))").is_err());
}
