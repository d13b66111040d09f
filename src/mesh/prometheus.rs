//! The matrix from a Prometheus server that scrapes the agents, through its HTTP API (`GET /api/v1/query`,
//! instant queries). Per source x target over the window:
//!
//! - p50 and p99: `histogram_quantile(0.5, sum by (source,target,le) (rate(roundtrip_rtt_seconds_bucket{probe="tcp"}[5m])))`
//! - loss: `sum by (source,target) (increase(roundtrip_probe_errors_total{probe="tcp"}[5m])) / sum by (source,target) (increase(roundtrip_probes_total{probe="tcp"}[5m]))`
//! - probes: the loss's denominator.
//!
//! A first query, `count by (probe,size) (roundtrip_probes_total)`, tells a server without roundtrip series
//! from a filter that matches none, and which sizes the cells combine.
#![forbid(unsafe_code)]

use super::http::{self, Response, Url};
use super::matrix::{Cell, Matrix};
use super::{Filter, Mesh, MeshError, order_names};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The API path of instant queries.
pub const QUERY_PATH: &str = "/api/v1/query";

/// The PromQL of one matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queries {
    /// Median RTT per source, target.
    pub p50: String,
    /// 99th percentile RTT per source, target.
    pub p99: String,
    /// Failed probes / probes per source, target.
    pub loss: String,
    /// Probes per source, target.
    pub probes: String,
    /// Series present per probe, size (to explain an empty answer).
    pub inventory: String,
}

/// A PromQL string literal (double-quoted, escaped).
pub fn promql_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A window as a PromQL range (`5m`, `90s`, `1500ms`); None when it is not a whole number of milliseconds
/// or is zero.
pub fn promql_range(window: Duration) -> Option<String> {
    if window.is_zero() || !window.subsec_nanos().is_multiple_of(1_000_000) {
        return None;
    }
    Some(super::matrix::fmt_window(window))
}

/// The label matchers of `filter`: `{probe="tcp"}` or `{probe="tcp",size="64"}`.
pub fn selector(filter: &Filter) -> String {
    match filter.size {
        Some(size) => format!(
            "{{probe={},size={}}}",
            promql_string(&filter.probe),
            promql_string(&size.to_string())
        ),
        None => format!("{{probe={}}}", promql_string(&filter.probe)),
    }
}

/// The queries for `filter` over `range` (a PromQL range such as `5m`, from [`promql_range`]).
pub fn queries(filter: &Filter, range: &str) -> Queries {
    let sel = selector(filter);
    let quantile = |q: &str| {
        format!(
            "histogram_quantile({q}, sum by (source,target,le) (rate(roundtrip_rtt_seconds_bucket{sel}[{range}])))"
        )
    };
    let probes = format!("sum by (source,target) (increase(roundtrip_probes_total{sel}[{range}]))");
    Queries {
        p50: quantile("0.5"),
        p99: quantile("0.99"),
        loss: format!(
            "sum by (source,target) (increase(roundtrip_probe_errors_total{sel}[{range}])) / {probes}"
        ),
        probes,
        inventory: "count by (probe,size) (roundtrip_probes_total)".into(),
    }
}

/// One element of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value (NaN and infinities as Prometheus writes them: `"NaN"`, `"+Inf"`, `"-Inf"`).
    pub value: f64,
}

/// What an answer to `/api/v1/query` means.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `status: success` with an instant vector.
    Vector(Vec<Sample>),
    /// `status: error`: its `errorType` and `error`.
    Error(String, String),
    /// Not the Prometheus API: why.
    Foreign(String),
}

/// Reads an answer to `GET /api/v1/query` (any status code: Prometheus sends its errors as JSON with 400,
/// 422 or 503).
pub fn interpret(resp: &Response) -> Answer {
    let what = || {
        let ct = if resp.content_type.is_empty() {
            "no content type".to_string()
        } else {
            resp.content_type.clone()
        };
        match (&resp.location, resp.status) {
            (Some(loc), 300..=399) => {
                format!("HTTP {} redirect to {loc} for {QUERY_PATH}", resp.status)
            }
            (_, 404) => format!("HTTP 404 for {QUERY_PATH}"),
            (_, s) => format!("HTTP {s} {ct} answer to {QUERY_PATH}, not the API's JSON"),
        }
    };
    let Ok(v) = serde_json::from_slice::<Value>(&resp.body) else {
        return Answer::Foreign(what());
    };
    match v.get("status").and_then(Value::as_str) {
        Some("success") => {}
        Some("error") => {
            let s = |k: &str| {
                v.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_string()
            };
            return Answer::Error(s("errorType"), s("error"));
        }
        _ => return Answer::Foreign(what()),
    }
    let data = v.get("data");
    let kind = data
        .and_then(|d| d.get("resultType"))
        .and_then(Value::as_str);
    if kind != Some("vector") {
        return Answer::Foreign(format!(
            "the query answered a {} where an instant vector was asked for",
            kind.unwrap_or("missing resultType")
        ));
    }
    let Some(result) = data.and_then(|d| d.get("result")).and_then(Value::as_array) else {
        return Answer::Foreign("a vector answer without a result list".into());
    };
    let mut out = Vec::with_capacity(result.len());
    for r in result {
        let labels: BTreeMap<String, String> = r
            .get("metric")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let value = r
            .get("value")
            .and_then(Value::as_array)
            .and_then(|a| a.get(1))
            .and_then(Value::as_str)
            .and_then(parse_value);
        match value {
            Some(value) => out.push(Sample { labels, value }),
            None => {
                return Answer::Foreign("a vector element without a [time, \"value\"] pair".into());
            }
        }
    }
    Answer::Vector(out)
}

/// A sample value as Prometheus writes it.
pub fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// Runs one instant query.
fn query(url: &Url, promql: &str, timeout: Duration) -> Result<Vec<Sample>, MeshError> {
    let path = format!("{QUERY_PATH}?query={}", http::encode_component(promql));
    let resp =
        http::get(url, &path, timeout).map_err(|e| http::error(url, "a Prometheus server", &e))?;
    match interpret(&resp) {
        Answer::Vector(v) => Ok(v),
        Answer::Error(kind, message) => Err(MeshError::Prometheus {
            url: url.text.clone(),
            kind,
            message,
        }),
        Answer::Foreign(why) => Err(MeshError::NotService {
            url: url.text.clone(),
            what: "a Prometheus server",
            why: format!(
                "{why} (give the server's base URL, e.g. http://prometheus:9090, with its --web.route-prefix if any)"
            ),
        }),
    }
}

/// Per (source, target) values of a vector; samples without both labels are left out.
fn by_pair(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    samples
        .iter()
        .filter_map(|s| {
            Some((
                (
                    s.labels.get("source")?.clone(),
                    s.labels.get("target")?.clone(),
                ),
                s.value,
            ))
        })
        .collect()
}

/// Builds the matrix from the query answers (split out so it is tested on recorded answers).
pub fn assemble(p50: &[Sample], p99: &[Sample], loss: &[Sample], probes: &[Sample]) -> Matrix {
    let (p50, p99, loss, probes) = (by_pair(p50), by_pair(p99), by_pair(loss), by_pair(probes));
    let secs = |v: Option<&f64>| {
        v.copied()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .and_then(|v| Duration::try_from_secs_f64(v).ok())
    };
    let pairs: BTreeSet<&(String, String)> = p50
        .keys()
        .chain(p99.keys())
        .chain(loss.keys())
        .chain(probes.keys())
        .collect();
    let mut m = Matrix::default();
    for pair in pairs {
        let n = probes
            .get(pair)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0);
        let cell = Cell {
            p50: secs(p50.get(pair)),
            p99: secs(p99.get(pair)),
            // 0/0 (no probe in the window) is NaN: no loss figure.
            loss: loss
                .get(pair)
                .copied()
                .filter(|v| v.is_finite())
                .map(|v| v.clamp(0.0, 1.0)),
            probes: n.map_or(0, |n| n.round() as u64),
        };
        m.sources.push(pair.0.clone());
        m.targets.push(pair.1.clone());
        m.cells.insert(pair.clone(), cell);
    }
    order_names(&mut m);
    m
}

/// Reads the matrix for `filter` over `window` from the Prometheus server at `url`.
pub fn read(
    url: &str,
    filter: &Filter,
    window: Duration,
    timeout: Duration,
) -> Result<Mesh, MeshError> {
    let url = Url::parse(url).map_err(MeshError::BadUrl)?;
    let range = promql_range(window).ok_or_else(|| {
        MeshError::BadUrl(format!(
            "window {window:?} is not a whole number of milliseconds"
        ))
    })?;
    let q = queries(filter, &range);
    let mut notes = Vec::new();
    // What there is, to tell "no roundtrip metrics" from "none with this probe/size".
    let inventory = query(&url, &q.inventory, timeout)?;
    let kinds: BTreeSet<(String, u64)> = inventory
        .iter()
        .map(|s| {
            let l = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
            (l("probe"), l("size").parse().unwrap_or(0))
        })
        .collect();
    if kinds.is_empty() {
        return Err(MeshError::NoData {
            url: url.text.clone(),
            why: "no roundtrip metrics (no roundtrip_probes_total series): is this Prometheus scraping the \
                  agents (`roundtrip agent --metrics ADDR:PORT`, see deploy/prometheus)?"
                .into(),
        });
    }
    let sizes: Vec<u64> = kinds
        .iter()
        .filter(|(p, _)| *p == filter.probe)
        .map(|(_, s)| *s)
        .collect();
    let listed = || {
        kinds
            .iter()
            .map(|(p, s)| format!("{p} size {s}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let matches = match filter.size {
        Some(size) => sizes.contains(&u64::from(size)),
        None => !sizes.is_empty(),
    };
    if !matches {
        return Err(MeshError::NoData {
            url: url.text.clone(),
            why: format!(
                "no roundtrip series with {} (there are: {}); pick one with --probe and --size",
                selector(filter).trim_matches(['{', '}']),
                listed()
            ),
        });
    }
    if filter.size.is_none() && sizes.len() > 1 {
        notes.push(format!(
            "cells combine the message sizes {} of probe {}; pick one with --size",
            sizes
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            filter.probe
        ));
    }
    let probes = query(&url, &q.probes, timeout)?;
    if probes.is_empty() {
        return Err(MeshError::NoData {
            url: url.text.clone(),
            why: format!(
                "roundtrip series with {} exist but have fewer than two samples in the last {range}: wait for \
                 a few scrapes or give a longer --span",
                selector(filter).trim_matches(['{', '}'])
            ),
        });
    }
    let p50 = query(&url, &q.p50, timeout)?;
    let p99 = query(&url, &q.p99, timeout)?;
    let loss = query(&url, &q.loss, timeout)?;
    let mut matrix = assemble(&p50, &p99, &loss, &probes);
    matrix.window = window;
    matrix.origin = format!("Prometheus {}", url.text);
    Ok(Mesh {
        matrix,
        notes,
        failed: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(name: &str) -> Response {
        let raw = std::fs::read(format!(
            "{}/tests/fixtures/prometheus/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        http::parse_response(&raw).unwrap()
    }

    fn vector(name: &str) -> Vec<Sample> {
        match interpret(&recorded(name)) {
            Answer::Vector(v) => v,
            other => panic!("{name}: {other:?}"),
        }
    }

    #[test]
    fn promql() {
        let q = queries(&Filter::default(), "5m");
        assert_eq!(
            q.p50,
            r#"histogram_quantile(0.5, sum by (source,target,le) (rate(roundtrip_rtt_seconds_bucket{probe="tcp"}[5m])))"#
        );
        assert_eq!(
            q.p99,
            r#"histogram_quantile(0.99, sum by (source,target,le) (rate(roundtrip_rtt_seconds_bucket{probe="tcp"}[5m])))"#
        );
        assert_eq!(
            q.loss,
            r#"sum by (source,target) (increase(roundtrip_probe_errors_total{probe="tcp"}[5m])) / sum by (source,target) (increase(roundtrip_probes_total{probe="tcp"}[5m]))"#
        );
        assert_eq!(
            q.probes,
            r#"sum by (source,target) (increase(roundtrip_probes_total{probe="tcp"}[5m]))"#
        );
        let f = Filter {
            probe: "udp".into(),
            size: Some(1024),
        };
        assert_eq!(selector(&f), r#"{probe="udp",size="1024"}"#);
        assert!(
            queries(&f, "90s")
                .p99
                .contains(r#"{probe="udp",size="1024"}[90s]"#)
        );
        assert_eq!(promql_string("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(
            promql_range(Duration::from_secs(300)).as_deref(),
            Some("5m")
        );
        assert_eq!(
            promql_range(Duration::from_millis(2500)).as_deref(),
            Some("2500ms")
        );
        assert_eq!(
            promql_range(Duration::from_secs(7200)).as_deref(),
            Some("2h")
        );
        assert_eq!(promql_range(Duration::from_micros(1500)), None);
        assert_eq!(promql_range(Duration::ZERO), None);
    }

    #[test]
    fn documented_example_answer() {
        // The example of the Prometheus HTTP API documentation (instant query of `up`), as printed there.
        let body = r#"{
   "status" : "success",
   "data" : {
      "resultType" : "vector",
      "result" : [
         {
            "metric" : {
               "__name__" : "up",
               "job" : "prometheus",
               "instance" : "localhost:9090"
            },
            "value": [ 1435781451.781, "1" ]
         },
         {
            "metric" : {
               "__name__" : "up",
               "job" : "node",
               "instance" : "localhost:9100"
            },
            "value" : [ 1435781451.781, "0" ]
         }
      ]
   }
}"#;
        let resp = Response {
            status: 200,
            content_type: "application/json".into(),
            location: None,
            body: body.as_bytes().to_vec(),
        };
        let Answer::Vector(v) = interpret(&resp) else {
            panic!()
        };
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].labels["instance"], "localhost:9100");
        assert_eq!((v[0].value, v[1].value), (1.0, 0.0));
    }

    #[test]
    fn every_cut_of_a_recorded_answer_is_interpreted() {
        for raw in super::super::http::recorded_answers() {
            for n in 0..raw.len() {
                // Never a panic, whatever part of the answer came.
                if let Ok(r) = http::parse_response(&raw[..n]) {
                    let _ = interpret(&r);
                }
            }
        }
    }

    #[test]
    fn recorded_answers_make_the_matrix() {
        // Answers of a real Prometheus 2.42 scraping three exporters of roundtrip series (10 probes/s per
        // pair, 10.0.0.3 -> 10.0.0.1 losing 10%), to the queries of `queries(&Filter::default(), "1m")`.
        let m = assemble(
            &vector("p50.http"),
            &vector("p99.http"),
            &vector("loss.http"),
            &vector("probes.http"),
        );
        let names = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];
        assert_eq!(m.sources, names);
        assert_eq!(m.targets, names);
        assert_eq!(m.cells.len(), 6);
        let c = |s: &str, t: &str| m.cells[&(s.to_string(), t.to_string())].clone();
        let ab = c("10.0.0.1", "10.0.0.2");
        // Interpolated inside the (316us, 562us] bucket.
        assert_eq!(ab.p50, Some(Duration::from_secs_f64(0.0004392845456035935)));
        assert_eq!(ab.p99, Some(Duration::from_secs_f64(0.000559880189598614)));
        assert_eq!((ab.loss, ab.probes), (Some(0.0), 269));
        let lossy = c("10.0.0.3", "10.0.0.1");
        assert!((lossy.loss.unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(lossy.probes, 271);
        assert!(c("10.0.0.2", "10.0.0.3").p50.unwrap() < Duration::from_micros(178));
    }

    #[test]
    fn nan_and_empty_and_errors() {
        // histogram_quantile of a pair without answered probes is NaN: no p50.
        let nan = vector("nan.http");
        assert!(nan.iter().all(|s| s.value.is_nan()));
        let m = assemble(&nan, &nan, &nan, &[]);
        assert!(m.cells.values().all(|c| *c == Cell::default()));
        assert!(vector("empty.http").is_empty());
        let inv = vector("count.http");
        assert_eq!(
            (
                inv[0].labels["probe"].as_str(),
                inv[0].labels["size"].as_str()
            ),
            ("tcp", "64")
        );
        match interpret(&recorded("baddata.http")) {
            Answer::Error(kind, msg) => {
                assert_eq!(kind, "bad_data");
                assert!(
                    msg.starts_with("invalid parameter \"query\": 1:23: parse error"),
                    "{msg}"
                );
            }
            other => panic!("{other:?}"),
        }
        for (name, says) in [
            ("notfound.http", "HTTP 404 for /api/v1/query"),
            ("root.http", "HTTP 302 redirect to /classic/graph"),
            ("html.http", "HTTP 200 text/html; charset=utf-8 answer"),
        ] {
            match interpret(&recorded(name)) {
                Answer::Foreign(why) => assert!(why.contains(says), "{name}: {why}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        // JSON that is not the API, or a matrix where a vector was asked.
        for body in [
            r#"{"source":"a","targets":[]}"#,
            r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}"#,
            r#"{"status":"success","data":{"resultType":"vector"}}"#,
            "[1,2]",
        ] {
            let resp = Response {
                status: 200,
                content_type: "application/json".into(),
                location: None,
                body: body.into(),
            };
            assert!(matches!(interpret(&resp), Answer::Foreign(_)), "{body}");
        }
        assert_eq!(parse_value("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value("-Inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_value("1e-05"), Some(1e-5));
        assert_eq!(parse_value("x"), None);
    }
}
