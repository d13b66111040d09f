//! The matrix from the agents themselves: `GET URL/api/results` on each (in parallel), one row per agent
//! (its `source`), the cells from each target's recent window. The window is each agent's own (its
//! `--span`, 60 s by default), not `roundtrip mesh --span`.
#![forbid(unsafe_code)]

use super::http::{self, Url};
use super::matrix::{Cell, Matrix};
use super::{Filter, Mesh, MeshError, order_names};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The API path of an agent's results.
pub const RESULTS_PATH: &str = "/api/results";

/// Agents asked at the same time.
const PARALLEL: usize = 32;

/// An agent's `/api/results` document (the fields the matrix needs; others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct Results {
    /// The agent's `source` label.
    pub source: String,
    /// Its version.
    #[serde(default)]
    pub version: Option<String>,
    /// Its responder address.
    #[serde(default)]
    pub address: Option<String>,
    /// Its window, seconds.
    #[serde(default)]
    pub window_s: Option<f64>,
    /// Per target.
    pub targets: Vec<TargetResult>,
}

/// One target in [`Results`].
#[derive(Debug, Clone, Deserialize)]
pub struct TargetResult {
    /// The `target` label.
    pub target: String,
    /// The `probe` label.
    pub probe: String,
    /// The `size` label (a number; a string of digits is accepted too).
    #[serde(default, deserialize_with = "number_or_string")]
    pub size: u64,
    /// Probes since the target was added.
    #[serde(default)]
    pub probes: Option<u64>,
    /// The recent window.
    #[serde(default)]
    pub window: Option<WindowResult>,
}

/// The recent window of one target in [`Results`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WindowResult {
    /// Span covered, seconds.
    #[serde(default)]
    pub span_s: Option<f64>,
    /// Probes with a known outcome.
    #[serde(default)]
    pub sent: Option<u64>,
    /// Of those, failed.
    #[serde(default)]
    pub lost: Option<u64>,
    /// lost / sent.
    #[serde(default)]
    pub loss: Option<f64>,
    /// Median RTT, seconds.
    #[serde(default)]
    pub p50_s: Option<f64>,
    /// 99th percentile RTT, seconds.
    #[serde(default)]
    pub p99_s: Option<f64>,
}

fn number_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| D::Error::custom("size is not a whole number")),
        serde_json::Value::String(s) => s
            .parse()
            .map_err(|_| D::Error::custom("size is not a whole number")),
        serde_json::Value::Null => Ok(0),
        _ => Err(D::Error::custom("size is not a number")),
    }
}

/// Parses an agent's answer body; Err says why it is not one.
pub fn parse(body: &[u8]) -> Result<Results, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "the answer is not JSON".to_string())?;
    if v.get("source").is_none() || v.get("targets").is_none() {
        return Err("the JSON has no \"source\" and \"targets\"".into());
    }
    serde_json::from_value(v).map_err(|e| format!("unexpected /api/results JSON: {e}"))
}

fn secs(v: Option<f64>) -> Option<Duration> {
    v.filter(|v| v.is_finite() && *v >= 0.0)
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
}

/// The cell of one target's window.
fn cell(t: &TargetResult) -> Cell {
    let w = t.window.clone().unwrap_or_default();
    let sent = w.sent.unwrap_or(0);
    let loss = match (w.loss.filter(|l| l.is_finite()), w.lost) {
        (Some(l), _) => Some(l.clamp(0.0, 1.0)),
        (None, Some(lost)) if sent > 0 => Some((lost as f64 / sent as f64).min(1.0)),
        _ => None,
    };
    Cell {
        p50: secs(w.p50_s),
        p99: secs(w.p99_s),
        loss: if sent > 0 { loss } else { None },
        probes: sent,
    }
}

/// Reads one agent.
pub fn fetch(url: &str, timeout: Duration) -> Result<Results, MeshError> {
    let parsed = Url::parse(url).map_err(MeshError::BadUrl)?;
    let mut base = parsed.clone();
    // Accept the API URL itself as well as the agent's base URL.
    if let Some(p) = base.path.strip_suffix(RESULTS_PATH) {
        base.path = p.to_string();
    }
    let resp = http::get(&base, RESULTS_PATH, timeout)
        .map_err(|e| http::error(&parsed, "a roundtrip agent", &e))?;
    let foreign = |why: String| MeshError::NotService {
        url: parsed.text.clone(),
        what: "a roundtrip agent",
        why,
    };
    if resp.status != 200 {
        return Err(foreign(format!(
            "HTTP {} for {RESULTS_PATH} (give the agent's --metrics address, e.g. http://10.0.0.1:9911)",
            resp.status
        )));
    }
    parse(&resp.body).map_err(|why| {
        foreign(format!(
            "{why} ({} answer to {RESULTS_PATH})",
            if resp.content_type.is_empty() {
                "untyped"
            } else {
                &resp.content_type
            }
        ))
    })
}

/// Builds the matrix of the agents' documents (one row each, in `filter`'s probe and size); a target probed
/// in several sizes (no `filter.size`) or with several label sets shows the window with the most probes.
pub fn assemble(docs: &[(String, Results)], filter: &Filter) -> (Matrix, Vec<String>) {
    let mut m = Matrix::default();
    let mut notes = Vec::new();
    let mut windows: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut several = 0usize;
    let mut other_kinds = BTreeSet::new();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (url, r) in docs {
        if let Some(first) = seen.insert(&r.source, url) {
            notes.push(format!(
                "{first} and {url} both report source {}: their rows are merged",
                r.source
            ));
        }
        m.sources.push(r.source.clone());
        let w = r
            .window_s
            .filter(|w| w.is_finite() && *w > 0.0)
            .unwrap_or(0.0);
        windows
            .entry((w * 1000.0).round() as u64)
            .or_default()
            .push(r.source.clone());
        let mut best: BTreeMap<&str, (usize, Cell)> = BTreeMap::new();
        for t in &r.targets {
            if t.probe != filter.probe || filter.size.is_some_and(|s| u64::from(s) != t.size) {
                other_kinds.insert(format!("{} size {}", t.probe, t.size));
                continue;
            }
            let c = cell(t);
            let e = best.entry(&t.target).or_insert((0, Cell::default()));
            e.0 += 1;
            if e.0 == 1 || c.probes > e.1.probes {
                e.1 = c;
            }
        }
        for (target, (n, c)) in best {
            if n > 1 {
                several += 1;
            }
            m.targets.push(target.to_string());
            m.cells.insert((r.source.clone(), target.to_string()), c);
        }
    }
    if several > 0 {
        notes.push(format!(
            "{several} pairs are probed in several sizes or label sets: each cell shows the one with the most probes{}",
            if filter.size.is_none() { "; pick a size with --size" } else { "" }
        ));
    }
    if m.targets.is_empty() && !other_kinds.is_empty() {
        notes.push(format!(
            "the agents probe no target with probe {}{}; they probe: {}",
            filter.probe,
            filter.size.map_or(String::new(), |s| format!(" size {s}")),
            other_kinds.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let longest = windows.keys().copied().max().unwrap_or(0);
    m.window = Duration::from_millis(longest);
    if windows.len() > 1 {
        let list: Vec<String> = windows
            .iter()
            .map(|(w, who)| {
                format!(
                    "{} ({})",
                    super::matrix::fmt_window(Duration::from_millis(*w)),
                    who.join(", ")
                )
            })
            .collect();
        notes.push(format!(
            "the agents' windows differ: {}; each row covers its agent's own window",
            list.join(", ")
        ));
    }
    m.origin = match docs {
        [(url, _)] => format!("agent {url} (its own window)"),
        _ => format!("{} agents (each its own window)", docs.len()),
    };
    order_names(&mut m);
    (m, notes)
}

/// Reads the matrix from the agents at `urls`. Agents that fail while others answer are listed in
/// [`Mesh::failed`]; when none answers, the first failure is the error.
pub fn read(urls: &[String], filter: &Filter, timeout: Duration) -> Result<Mesh, MeshError> {
    for u in urls {
        Url::parse(u).map_err(MeshError::BadUrl)?;
    }
    let mut answers: Vec<(String, Result<Results, MeshError>)> = Vec::with_capacity(urls.len());
    for chunk in urls.chunks(PARALLEL) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|u| (u, s.spawn(move || fetch(u, timeout))))
                .collect();
            for (u, h) in handles {
                let r = h.join().unwrap_or_else(|_| {
                    Err(MeshError::Unreachable {
                        url: u.clone(),
                        why: "the reader thread failed".into(),
                    })
                });
                answers.push((u.clone(), r));
            }
        });
    }
    let mut docs = Vec::new();
    let mut failed = Vec::new();
    for (u, r) in answers {
        match r {
            Ok(d) => docs.push((Url::parse(&u).map_or(u, |p| p.text), d)),
            Err(e) => failed.push(e),
        }
    }
    if docs.is_empty() {
        let n = failed.len();
        let mut first = failed
            .into_iter()
            .next()
            .ok_or_else(|| MeshError::BadUrl("no --agent URL given".into()))?;
        if n > 1
            && let MeshError::Unreachable { why, .. } | MeshError::NotService { why, .. } =
                &mut first
        {
            let others = n - 1;
            why.push_str(&format!(
                " (and {others} other agent{} failed)",
                if others == 1 { "" } else { "s" }
            ));
        }
        return Err(first);
    }
    let (matrix, notes) = assemble(&docs, filter);
    if matrix.targets.is_empty() {
        let why = notes
            .last()
            .cloned()
            .unwrap_or_else(|| "the agents have no targets yet".into());
        return Err(MeshError::NoData {
            url: docs
                .iter()
                .map(|(u, _)| u.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            why,
        });
    }
    Ok(Mesh {
        matrix,
        notes,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &str) -> Results {
        let body = std::fs::read(format!(
            "{}/tests/fixtures/mesh/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        parse(&body).unwrap()
    }

    fn three() -> Vec<(String, Results)> {
        ["agent1.json", "agent2.json", "agent3.json"]
            .iter()
            .map(|n| (format!("http://x/{n}"), doc(n)))
            .collect()
    }

    #[test]
    fn every_cut_of_another_servers_answer_is_refused_or_read() {
        for raw in super::super::http::recorded_answers() {
            for n in 0..raw.len() {
                // Never a panic: Prometheus's answers (head and body) are not an agent's document.
                let _ = parse(&raw[..n]);
            }
        }
    }

    #[test]
    fn three_agents_make_a_3x3_matrix() {
        let (m, notes) = assemble(&three(), &Filter::default());
        let names = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];
        assert_eq!(m.sources, names);
        assert_eq!(m.targets, names);
        assert_eq!(m.cells.len(), 6);
        let c = &m.cells[&("10.0.0.1".to_string(), "10.0.0.2".to_string())];
        assert_eq!(c.p50, Some(Duration::from_micros(433)));
        assert_eq!(c.p99, Some(Duration::from_micros(512)));
        assert_eq!((c.loss, c.probes), (Some(0.0), 60));
        // The dead peer: probes, no answer.
        let c = &m.cells[&("10.0.0.3".to_string(), "10.0.0.2".to_string())];
        assert_eq!((c.p50, c.loss, c.probes), (None, Some(1.0), 60));
        assert_eq!(m.window, Duration::from_secs(60));
        assert_eq!(m.origin, "3 agents (each its own window)");
        // agent1 also probes 10.0.0.2 with udp: not in the tcp matrix, and no note for it.
        assert!(notes.is_empty(), "{notes:?}");
        let (m, _) = assemble(
            &three(),
            &Filter {
                probe: "udp".into(),
                size: None,
            },
        );
        assert_eq!(m.cells.len(), 1);
        let (m, notes) = assemble(
            &three(),
            &Filter {
                probe: "icmp".into(),
                size: None,
            },
        );
        assert!(m.targets.is_empty());
        assert!(
            notes[0].contains("they probe: tcp size 64, udp size 64"),
            "{notes:?}"
        );
    }

    #[test]
    fn windows_that_differ_are_said() {
        let mut docs = three();
        docs[2].1.window_s = Some(30.0);
        let (m, notes) = assemble(&docs, &Filter::default());
        assert_eq!(m.window, Duration::from_secs(60));
        assert!(
            notes.iter().any(|n| n.contains("30s (10.0.0.3)")),
            "{notes:?}"
        );
    }

    #[test]
    fn the_same_source_twice_is_said() {
        let mut docs = three();
        docs[1].1.source = "10.0.0.1".into();
        let (m, notes) = assemble(&docs, &Filter::default());
        assert_eq!(m.sources, ["10.0.0.1", "10.0.0.3"]);
        assert!(
            notes[0].contains(
                "http://x/agent1.json and http://x/agent2.json both report source 10.0.0.1"
            ),
            "{notes:?}"
        );
    }

    #[test]
    fn not_agent_answers() {
        assert_eq!(parse(b"<html>").unwrap_err(), "the answer is not JSON");
        assert!(
            parse(br#"{"status":"success"}"#)
                .unwrap_err()
                .contains("no \"source\"")
        );
        assert!(
            parse(br#"{"source":1,"targets":[]}"#)
                .unwrap_err()
                .contains("unexpected")
        );
        // Nulls and odd numbers are no-data, not panics.
        let r = parse(
            br#"{"source":"a","targets":[{"target":"b","probe":"tcp","size":64,"window":{"sent":5,"lost":null,"loss":null,"p50_s":-1,"p99_s":1e300}}]}"#,
        )
        .unwrap();
        let c = cell(&r.targets[0]);
        let r2 = parse(br#"{"source":"a","targets":[{"target":"b","probe":"tcp","size":"64"}]}"#)
            .unwrap();
        assert_eq!(r2.targets[0].size, 64);
        assert!(
            parse(br#"{"source":"a","targets":[{"target":"b","probe":"tcp","size":-1}]}"#).is_err()
        );
        assert_eq!((c.p50, c.p99, c.loss, c.probes), (None, None, None, 5));
    }
}
