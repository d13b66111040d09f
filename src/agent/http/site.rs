//! The agent's pages on the server: [`Site`] answers `/metrics`, `/api/results` and `/`; [`results_json`] and
//! [`matrix`] make the JSON and the HTML matrix from a snapshot.
#![forbid(unsafe_code)]

use super::{Request, Response};
use crate::agent::metrics::{self, AgentInfo, Format};
use crate::agent::{ErrorReason, Snapshot};
use crate::mesh::matrix::{Cell, Matrix};
use crate::report::heatmap;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// The agent's pages.
pub struct Site {
    /// Who this agent is.
    pub info: AgentInfo,
    /// The span of the recent window (for the JSON and the matrix).
    pub window: Duration,
    /// Takes a snapshot of the engine.
    pub snapshot: Box<dyn Fn() -> Snapshot + Send + Sync>,
    /// What `--watch` found (None without it).
    pub watch: Option<Arc<crate::agent::watch::Shared>>,
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
                            crate::agent::watch::expose::append_metrics(
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
                body: crate::agent::watch::expose::with_json(
                    results_json(&snap, &self.info, self.window),
                    self.watch.as_deref(),
                )
                .into_bytes(),
            },
            _ => Response {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: crate::agent::watch::expose::with_html(
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
