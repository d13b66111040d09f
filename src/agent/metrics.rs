//! The Prometheus exposition of a [`Snapshot`]: the text format 0.0.4, or OpenMetrics 1.0 when the scraper
//! asks for it ([`Format::negotiate`]).
//!
//! Per target, [`SERIES_PER_TARGET`](super::SERIES_PER_TARGET) series with the labels `source`, `target`,
//! `probe`, `size` and then the user's labels sorted by name:
//!
//! - `roundtrip_rtt_seconds` histogram (buckets [`BUCKET_BOUNDS`] split by the `--buckets` resolution,
//!   [`super::buckets::Buckets::probe_bounds`], and `+Inf`, `_sum`, `_count`),
//! - `roundtrip_probes_total` counter: probes with a known outcome,
//! - `roundtrip_probe_errors_total{reason=...}` counter, one per [`ErrorReason::ALL`] (zeros included),
//! - `roundtrip_up` gauge: 1 when the last probe was answered.
//!
//! and for the agent itself: `roundtrip_agent_schedule_lag_seconds` (histogram), `roundtrip_agent_targets`
//! (gauge) and `roundtrip_agent_info{address,version}` (1).

use super::{ErrorReason, Histogram, Snapshot};
use std::fmt::Write;

/// What the agent says about itself in `roundtrip_agent_info` and `/api/results`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// The `source` label.
    pub source: String,
    /// The responder's address (IP:PORT; empty without a responder).
    pub address: String,
    /// This program's version.
    pub version: String,
}

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names `application/openmetrics-text`
    /// (with a quality above 0), else the Prometheus text format.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        for part in accept.split(',') {
            let mut fields = part.split(';').map(str::trim);
            let media = fields.next().unwrap_or("");
            if !media.eq_ignore_ascii_case("application/openmetrics-text") {
                continue;
            }
            let refused = fields.any(|f| {
                f.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if !refused {
                return Format::OpenMetrics;
            }
        }
        Format::Prometheus
    }

    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Formats a float as Prometheus's Go exporters do (`strconv.FormatFloat(v, 'g', -1, 64)`): the shortest
/// representation that reads back the same, with an exponent (`1e-05`, `1e+06`) below 1e-4 and from 1e6.
pub fn fmt_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return "0".into();
    }
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{v}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// Appends `v` escaped as a label value (`\\`, `\"`, `\n`).
pub(crate) fn push_escaped(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends `name="value"` (with a leading comma unless first).
fn push_label(out: &mut String, first: bool, name: &str, value: &str) {
    if !first {
        out.push(',');
    }
    out.push_str(name);
    out.push_str("=\"");
    push_escaped(out, value);
    out.push('"');
}

struct Family {
    /// Sample name prefix (`roundtrip_rtt_seconds`).
    name: &'static str,
    /// Prometheus text TYPE.
    kind: &'static str,
    help: &'static str,
}

const RTT: Family = Family {
    name: "roundtrip_rtt_seconds",
    kind: "histogram",
    help: "Application-level round-trip time of answered probes.",
};
const PROBES: Family = Family {
    name: "roundtrip_probes_total",
    kind: "counter",
    help: "Probes whose outcome is known (answered or failed).",
};
const ERRORS: Family = Family {
    name: "roundtrip_probe_errors_total",
    kind: "counter",
    help: "Failed probes by reason.",
};
const UP: Family = Family {
    name: "roundtrip_up",
    kind: "gauge",
    help: "1 when the last probe was answered, else 0.",
};
const LAG: Family = Family {
    name: "roundtrip_agent_schedule_lag_seconds",
    kind: "histogram",
    help: "How late probes were sent relative to their schedule.",
};
const TARGETS: Family = Family {
    name: "roundtrip_agent_targets",
    kind: "gauge",
    help: "Targets this agent probes.",
};
const INFO: Family = Family {
    name: "roundtrip_agent_info",
    kind: "gauge",
    help: "This agent: its responder address and version.",
};

/// Writes the HELP and TYPE lines of a family.
fn header(out: &mut String, f: &Family, format: Format) {
    let name = match (format, f.kind) {
        (Format::OpenMetrics, "counter") => f.name.strip_suffix("_total").unwrap_or(f.name),
        (Format::OpenMetrics, _) if f.name == INFO.name => "roundtrip_agent",
        _ => f.name,
    };
    let kind = if format == Format::OpenMetrics && f.name == INFO.name {
        "info"
    } else {
        f.kind
    };
    let _ = writeln!(out, "# HELP {name} {}", f.help);
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes a histogram's `_bucket`, `_sum` and `_count` lines; `labels` is the label list without braces.
fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let le = h.buckets().probe_le();
    let mut cumulative = 0u64;
    for (k, c) in h.counts.iter().enumerate() {
        cumulative += c;
        out.push_str(name);
        out.push_str("_bucket{");
        out.push_str(labels);
        if !labels.is_empty() {
            out.push(',');
        }
        out.push_str("le=\"");
        out.push_str(&le[k]);
        out.push_str("\"} ");
        let _ = writeln!(out, "{cumulative}");
    }
    let braces = |out: &mut String| {
        out.push('{');
        out.push_str(labels);
        out.push('}');
    };
    out.push_str(name);
    out.push_str("_sum");
    braces(out);
    out.push(' ');
    out.push_str(&fmt_float(h.sum_s));
    out.push('\n');
    out.push_str(name);
    out.push_str("_count");
    braces(out);
    // The +Inf bucket's count, so the two always agree.
    let _ = writeln!(out, " {cumulative}");
}

/// The label list (without braces) of a target's series.
fn target_labels(out: &mut String, source: &str, t: &super::TargetSnapshot) {
    push_label(out, true, "source", source);
    push_label(out, false, "target", &t.spec.target);
    push_label(out, false, "probe", t.spec.probe.label());
    let _ = write!(out, ",size=\"{}\"", t.spec.probe.size());
    for (k, v) in &t.spec.labels {
        push_label(out, false, k, v);
    }
}

/// Renders `snap` in `format`. One `String`, written once; 5,000 targets take a few milliseconds.
pub fn render(snap: &Snapshot, info: &AgentInfo, format: Format) -> String {
    let mut out = String::with_capacity(4096 + snap.targets.len() * 6000);
    let labels: Vec<String> = snap
        .targets
        .iter()
        .map(|t| {
            let mut l = String::with_capacity(96);
            target_labels(&mut l, &info.source, t);
            l
        })
        .collect();

    header(&mut out, &RTT, format);
    for (t, l) in snap.targets.iter().zip(&labels) {
        histogram(&mut out, "roundtrip_rtt_seconds", l, &t.rtt);
    }
    header(&mut out, &PROBES, format);
    for (t, l) in snap.targets.iter().zip(&labels) {
        let _ = writeln!(out, "roundtrip_probes_total{{{l}}} {}", t.probes);
    }
    header(&mut out, &ERRORS, format);
    for (t, l) in snap.targets.iter().zip(&labels) {
        for (reason, n) in ErrorReason::ALL.iter().zip(t.errors) {
            let _ = writeln!(
                out,
                "roundtrip_probe_errors_total{{{l},reason=\"{}\"}} {n}",
                reason.name()
            );
        }
    }
    header(&mut out, &UP, format);
    for (t, l) in snap.targets.iter().zip(&labels) {
        let _ = writeln!(out, "roundtrip_up{{{l}}} {}", u8::from(t.up));
    }

    let mut own = String::new();
    push_label(&mut own, true, "source", &info.source);
    header(&mut out, &LAG, format);
    histogram(
        &mut out,
        "roundtrip_agent_schedule_lag_seconds",
        &own,
        &snap.schedule_lag,
    );
    header(&mut out, &TARGETS, format);
    let _ = writeln!(
        out,
        "roundtrip_agent_targets{{{own}}} {}",
        snap.targets.len()
    );
    header(&mut out, &INFO, format);
    let mut l = own.clone();
    push_label(&mut l, false, "address", &info.address);
    push_label(&mut l, false, "version", &info.version);
    let _ = writeln!(out, "roundtrip_agent_info{{{l}}} 1");
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{
        BUCKET_BOUNDS, ProbeKind, SERIES_PER_TARGET, TargetSnapshot, TargetSpec, WindowStats,
    };
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    fn hist(values: &[f64]) -> Histogram {
        let mut h = Histogram {
            counts: vec![0; 26],
            sum_s: 0.0,
            count: 0,
        };
        for &v in values {
            let k = BUCKET_BOUNDS.iter().position(|b| v <= *b).unwrap_or(25);
            h.counts[k] += 1;
            h.sum_s += v;
            h.count += 1;
        }
        h
    }

    fn target(name: &str, labels: &[(&str, &str)]) -> TargetSnapshot {
        TargetSnapshot {
            spec: Arc::new(TargetSpec {
                target: name.into(),
                addr: "10.0.0.2:11111".parse().unwrap(),
                probe: ProbeKind::Tcp { size: 64 },
                interval: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }),
            rtt: hist(&[51e-6, 60e-6, 2e-3]),
            probes: 5,
            errors: [1, 1, 0, 0, 0, 0, 0, 0],
            up: true,
            last_rtt: Some(Duration::from_micros(51)),
            last_error: None,
            window: WindowStats::default(),
        }
    }

    fn info() -> AgentInfo {
        AgentInfo {
            source: "a".into(),
            address: "10.0.0.1:11111".into(),
            version: "0.1.0".into(),
        }
    }

    fn snap(targets: Vec<TargetSnapshot>) -> Snapshot {
        Snapshot {
            at: SystemTime::now(),
            targets,
            schedule_lag: hist(&[1e-4]),
        }
    }

    #[test]
    fn floats_as_go_prints_them() {
        assert_eq!(fmt_float(1e-5), "1e-05");
        assert_eq!(fmt_float(BUCKET_BOUNDS[1]), "1.778279410038923e-05");
        assert_eq!(fmt_float(1e-4), "0.0001");
        assert_eq!(fmt_float(BUCKET_BOUNDS[5]), "0.0001778279410038923");
        assert_eq!(fmt_float(1.0), "1");
        assert_eq!(fmt_float(10.0), "10");
        assert_eq!(fmt_float(0.5), "0.5");
        assert_eq!(fmt_float(0.0), "0");
        assert_eq!(fmt_float(1e21), "1e+21");
        assert_eq!(fmt_float(1e6), "1e+06");
        assert_eq!(fmt_float(123456.0), "123456");
        assert_eq!(fmt_float(f64::INFINITY), "+Inf");
        for b in BUCKET_BOUNDS {
            assert_eq!(fmt_float(b).parse::<f64>().unwrap(), b);
        }
    }

    #[test]
    fn prometheus_text() {
        let s = snap(vec![target("10.0.0.2", &[("zone", "a")])]);
        let text = render(&s, &info(), Format::Prometheus);
        let l = r#"source="a",target="10.0.0.2",probe="tcp",size="64",zone="a""#;
        for want in [
            "# TYPE roundtrip_rtt_seconds histogram".to_string(),
            format!("roundtrip_rtt_seconds_bucket{{{l},le=\"1e-05\"}} 0"),
            format!("roundtrip_rtt_seconds_bucket{{{l},le=\"5.623413251903491e-05\"}} 1"),
            format!("roundtrip_rtt_seconds_bucket{{{l},le=\"0.0001\"}} 2"),
            format!("roundtrip_rtt_seconds_bucket{{{l},le=\"10\"}} 3"),
            format!("roundtrip_rtt_seconds_bucket{{{l},le=\"+Inf\"}} 3"),
            format!("roundtrip_rtt_seconds_count{{{l}}} 3"),
            "# TYPE roundtrip_probes_total counter".to_string(),
            format!("roundtrip_probes_total{{{l}}} 5"),
            format!("roundtrip_probe_errors_total{{{l},reason=\"timeout\"}} 1"),
            format!("roundtrip_probe_errors_total{{{l},reason=\"refused\"}} 1"),
            format!("roundtrip_probe_errors_total{{{l},reason=\"other\"}} 0"),
            format!("roundtrip_up{{{l}}} 1"),
            "roundtrip_agent_schedule_lag_seconds_bucket{source=\"a\",le=\"0.0001\"} 1".to_string(),
            "roundtrip_agent_schedule_lag_seconds_count{source=\"a\"} 1".to_string(),
            "roundtrip_agent_targets{source=\"a\"} 1".to_string(),
            "roundtrip_agent_info{source=\"a\",address=\"10.0.0.1:11111\",version=\"0.1.0\"} 1"
                .to_string(),
        ] {
            assert!(text.lines().any(|x| x == want), "missing {want}\n{text}");
        }
        let sum = text
            .lines()
            .find(|x| x.starts_with("roundtrip_rtt_seconds_sum"))
            .unwrap();
        let v: f64 = sum.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((v - 2.111e-3).abs() < 1e-12);
        assert!(!text.contains("# EOF"));
        // Every series of a target: SERIES_PER_TARGET.
        let per_target = text
            .lines()
            .filter(|x| !x.starts_with('#') && x.contains("target=\"10.0.0.2\""))
            .count();
        assert_eq!(per_target, SERIES_PER_TARGET);
    }

    #[test]
    fn openmetrics_text() {
        let s = snap(vec![target("10.0.0.2", &[])]);
        let text = render(&s, &info(), Format::OpenMetrics);
        assert!(text.contains("# TYPE roundtrip_probes counter\n"));
        assert!(text.contains("# TYPE roundtrip_probe_errors counter\n"));
        assert!(text.contains("# TYPE roundtrip_agent info\n"));
        assert!(text.contains("\nroundtrip_probes_total{"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn label_values_escaped() {
        let s = snap(vec![target("h", &[("note", "a\"b\\c\nd")])]);
        let text = render(&s, &info(), Format::Prometheus);
        assert!(text.contains(r#"note="a\"b\\c\nd""#), "{text}");
    }

    #[test]
    fn negotiation() {
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Prometheus);
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0")),
            Format::Prometheus
        );
    }

    #[test]
    fn five_thousand_targets_render_quickly() {
        let targets: Vec<_> = (0..5000)
            .map(|i| {
                target(
                    &format!("127.0.{}.{}", i / 250, i % 250 + 1),
                    &[("zone", "a")],
                )
            })
            .collect();
        let s = snap(targets);
        let start = std::time::Instant::now();
        let text = render(&s, &info(), Format::Prometheus);
        let took = start.elapsed();
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(series, 5000 * SERIES_PER_TARGET + 28 + 2);
        // Not a timing assertion (loaded machines vary); printed for the record.
        eprintln!("5,000 targets: {} bytes in {took:?}", text.len());
    }
}
