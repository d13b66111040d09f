//! The watch figures on the agent's pages: Prometheus series on `/metrics` ([`append_metrics`]), the
//! per-server table in `/api/results` ([`with_json`]) and on `/` ([`with_html`]), with a verdict per server.
//!
//! # Verdict (per server, over the agent's window)
//! `request` is the median request duration (end of request to first response byte, at the capture point),
//! `network` the median network RTT (handshakes in the window, else every handshake seen), `server` =
//! `request - network` (at least 0), `client` the median time the client took between a response and its next
//! request on the same connection (gaps over 1 s are idle time, left out).
//! - fewer than [`MIN_REQUESTS`] requests in the window: no verdict;
//! - `client` when the client's time is more than the request's (`client > request`): the application waits
//!   on itself more than on the database;
//! - else `network` when `network >= server` (the network's share of the request is at least half),
//! - else `server`;
//! - no handshake seen yet: `server`'s share is unknown and the verdict is `unknown network`.

use super::{Health, Hist, Oriented, ServerTotals, Shared};
use crate::agent::buckets::Buckets;
use crate::agent::metrics::{Format, fmt_float, push_escaped};
use serde::Serialize;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// Fewest requests in the window for a verdict.
pub const MIN_REQUESTS: u64 = 10;

fn label(out: &mut String, name: &str, value: &str) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(name);
    out.push_str("=\"");
    push_escaped(out, value);
    out.push('"');
}

fn header(out: &mut String, name: &str, kind: &str, help: &str, format: Format) {
    let shown = match (format, kind) {
        (Format::OpenMetrics, "counter") => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let _ = writeln!(out, "# HELP {shown} {help}");
    let _ = writeln!(out, "# TYPE {shown} {kind}");
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Hist, buckets: Buckets) {
    let mut cum = 0u64;
    let le = h.buckets().unwrap_or(buckets).watch_le();
    for (k, le) in le.iter().enumerate() {
        cum += h.counts.get(k).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cum}");
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", fmt_float(h.sum_s));
    let _ = writeln!(out, "{name}_count{{{labels}}} {cum}");
}

fn user_labels(out: &mut String, labels: &[(String, String)]) {
    for (k, v) in labels {
        label(out, k, v);
    }
}

/// Appends the watch series to a `/metrics` body in `format` (before OpenMetrics' `# EOF`).
pub fn append_metrics(body: &mut String, shared: &Shared, source: &str, format: Format) {
    let had_eof = body.ends_with("# EOF\n");
    if had_eof {
        body.truncate(body.len() - "# EOF\n".len());
    }
    let st = shared.lock();
    let out = body;
    let mut ops: Vec<_> = st.ops.iter().collect();
    ops.sort_by(|a, b| a.0.cmp(b.0));
    let op_labels: Vec<String> = ops
        .iter()
        .map(|(k, _)| {
            let mut l = String::new();
            label(&mut l, "source", source);
            label(&mut l, "server", &k.server);
            label(&mut l, "proto", k.proto);
            label(&mut l, "op", k.op);
            if let Some(c) = &k.client {
                label(&mut l, "client", c);
            }
            user_labels(&mut l, &k.labels);
            l
        })
        .collect();
    header(
        out,
        "roundtrip_request_duration_seconds",
        "histogram",
        "Watched requests: end of the request to the first byte of the response, at the capture point.",
        format,
    );
    for ((_, o), l) in ops.iter().zip(&op_labels) {
        histogram(
            out,
            "roundtrip_request_duration_seconds",
            l,
            &o.duration,
            st.buckets,
        );
    }
    header(
        out,
        "roundtrip_requests_total",
        "counter",
        "Watched requests answered, by outcome (ok, error).",
        format,
    );
    for ((_, o), l) in ops.iter().zip(&op_labels) {
        let _ = writeln!(
            out,
            "roundtrip_requests_total{{{l},outcome=\"ok\"}} {}",
            o.ok
        );
        let _ = writeln!(
            out,
            "roundtrip_requests_total{{{l},outcome=\"error\"}} {}",
            o.error
        );
    }
    header(
        out,
        "roundtrip_response_bytes_total",
        "counter",
        "TCP payload bytes the server sent in answer to the watched requests.",
        format,
    );
    for ((_, o), l) in ops.iter().zip(&op_labels) {
        let _ = writeln!(
            out,
            "roundtrip_response_bytes_total{{{l}}} {}",
            o.response_bytes
        );
    }
    let mut servers: Vec<_> = st.servers.iter().collect();
    servers.sort_by(|a, b| a.0.cmp(b.0));
    let s_labels: Vec<String> = servers
        .iter()
        .map(|(k, _)| {
            let mut l = String::new();
            label(&mut l, "source", source);
            label(&mut l, "server", &k.server);
            user_labels(&mut l, &k.labels);
            l
        })
        .collect();
    header(
        out,
        "roundtrip_network_rtt_seconds",
        "histogram",
        "Network round trip to the watched servers through the capture point (TCP handshakes: SYN to the client's ACK).",
        format,
    );
    for ((_, s), l) in servers.iter().zip(&s_labels) {
        histogram(
            out,
            "roundtrip_network_rtt_seconds",
            l,
            &s.total.rtt,
            st.buckets,
        );
    }
    header(
        out,
        "roundtrip_retransmissions_total",
        "counter",
        "TCP segments seen again on the watched connections (either direction).",
        format,
    );
    for ((_, s), l) in servers.iter().zip(&s_labels) {
        let _ = writeln!(
            out,
            "roundtrip_retransmissions_total{{{l}}} {}",
            s.total.retransmissions
        );
    }
    let health =
        |out: &mut String, name: &str, kind: &str, help: &str, v: &dyn Fn(&Health) -> String| {
            header(out, name, kind, help, format);
            for h in &st.health {
                let mut l = String::new();
                label(&mut l, "source", source);
                label(&mut l, "interface", &h.interface);
                let _ = writeln!(out, "{name}{{{l}}} {}", v(h));
            }
        };
    health(
        out,
        "roundtrip_watch_up",
        "gauge",
        "1 while the watched interface is captured.",
        &|h| u8::from(h.up).to_string(),
    );
    health(
        out,
        "roundtrip_watch_packets_total",
        "counter",
        "Packets the watcher read (after the kernel filter).",
        &|h| h.packets.to_string(),
    );
    health(
        out,
        "roundtrip_watch_kernel_drops_total",
        "counter",
        "Packets the kernel dropped because the watcher's ring was full.",
        &|h| h.kernel_drops.to_string(),
    );
    health(
        out,
        "roundtrip_watch_connections",
        "gauge",
        "Connections tracked now.",
        &|h| h.connections.to_string(),
    );
    health(
        out,
        "roundtrip_watch_evictions_total",
        "counter",
        "Connections dropped from the table at its cap, the longest silent first.",
        &|h| h.evictions.to_string(),
    );
    health(
        out,
        "roundtrip_watch_cpu_seconds_total",
        "counter",
        "CPU time of the watcher's thread.",
        &|h| fmt_float(h.cpu_s),
    );
    health(
        out,
        "roundtrip_watch_failures_total",
        "counter",
        "Failed attempts to open or read the interface (gone, no privilege); retried.",
        &|h| h.failures.to_string(),
    );
    header(
        out,
        "roundtrip_watch_connections_total",
        "counter",
        "Connections seen, by how client and server were told apart (handshake; when open before: protocol, else port).",
        format,
    );
    for h in &st.health {
        for (i, how) in Oriented::ALL.iter().map(|o| o.name()).enumerate() {
            let mut l = String::new();
            label(&mut l, "source", source);
            label(&mut l, "interface", &h.interface);
            label(&mut l, "oriented_by", how);
            let _ = writeln!(
                out,
                "roundtrip_watch_connections_total{{{l}}} {}",
                h.oriented[i]
            );
        }
    }
    let mut l = String::new();
    label(&mut l, "source", source);
    header(
        out,
        "roundtrip_watch_folded_requests_total",
        "counter",
        "Requests counted under op=\"other\" or server=\"other\" because --max-series was reached.",
        format,
    );
    let _ = writeln!(
        out,
        "roundtrip_watch_folded_requests_total{{{l}}} {}",
        st.folded
    );
    header(
        out,
        "roundtrip_watch_series",
        "gauge",
        "Series the watchers use (histograms count their buckets + 2), against their budget.",
        format,
    );
    let _ = writeln!(out, "roundtrip_watch_series{{{l}}} {}", st.series);
    if had_eof {
        out.push_str("# EOF\n");
    }
}

/// Series the health part adds per watcher, and once.
pub const HEALTH_SERIES_PER_WATCHER: usize = 9;
/// Series the health part adds once.
pub const HEALTH_SERIES_ONCE: usize = 2;

/// One row of the per-server table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerRow {
    /// ADDR:PORT.
    pub server: String,
    /// The watcher's labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Protocols seen.
    pub protos: Vec<&'static str>,
    /// Requests since watching started.
    pub requests: u64,
    /// The span the window figures cover, seconds.
    pub window_s: f64,
    /// Requests per second over the window.
    pub requests_per_s: f64,
    /// Median request duration over the window, seconds.
    pub p50_s: Option<f64>,
    /// 99th percentile.
    pub p99_s: Option<f64>,
    /// Median network RTT, seconds.
    pub network_rtt_s: Option<f64>,
    /// Median server time (request - network), seconds.
    pub server_s: Option<f64>,
    /// The server's share of the median request (0..=1).
    pub server_share: Option<f64>,
    /// Median client time between a response and the next request, seconds.
    pub client_s: Option<f64>,
    /// Requests answered with an error in the window.
    pub errors: u64,
    /// Retransmissions in the window.
    pub retransmissions: u64,
    /// `network`, `server`, `client`, `unknown network` or `too few requests`.
    pub verdict: &'static str,
}

fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

/// The verdict of a server from its window medians (see the module's documentation).
pub fn verdict(
    requests: u64,
    request: Option<Duration>,
    network: Option<Duration>,
    client: Option<Duration>,
) -> &'static str {
    let Some(r) = request.filter(|_| requests >= MIN_REQUESTS) else {
        return "too few requests";
    };
    if client.is_some_and(|c| c > r) {
        return "client";
    }
    let Some(n) = network else {
        return "unknown network";
    };
    let n = n.min(r);
    if n >= r - n { "network" } else { "server" }
}

/// The per-server table, largest request rate first.
pub fn servers(shared: &Shared) -> Vec<ServerRow> {
    let st = shared.lock();
    let now = Instant::now();
    let mut rows = Vec::new();
    for (k, s) in &st.servers {
        let (w, span) = match s
            .history
            .iter()
            .find(|(t, _)| now.duration_since(*t) <= st.window)
        {
            Some((t, old)) => (diff(&s.total, old), now.duration_since(*t)),
            None => (s.total.clone(), Duration::ZERO),
        };
        let rtt = if w.rtt.count > 0 {
            &w.rtt
        } else {
            &s.total.rtt
        };
        let req = w.duration.quantile(0.5);
        let net = rtt.quantile(0.5);
        let server = req.zip(net).map(|(r, n)| r.saturating_sub(n));
        let mut protos: Vec<&'static str> = st
            .ops
            .keys()
            .filter(|o| o.server == k.server && o.labels == k.labels)
            .map(|o| o.proto)
            .collect();
        protos.sort();
        protos.dedup();
        rows.push(ServerRow {
            server: k.server.clone(),
            labels: k.labels.iter().cloned().collect(),
            protos,
            requests: s.total.duration.count,
            window_s: span.as_secs_f64(),
            requests_per_s: if span.is_zero() {
                0.0
            } else {
                w.duration.count as f64 / span.as_secs_f64()
            },
            p50_s: secs(req),
            p99_s: secs(w.duration.quantile(0.99)),
            network_rtt_s: secs(net),
            server_s: secs(server),
            server_share: req
                .zip(server)
                .filter(|(r, _)| !r.is_zero())
                .map(|(r, s)| s.as_secs_f64() / r.as_secs_f64()),
            client_s: secs(w.client_gap.quantile(0.5)),
            errors: w.errors,
            retransmissions: w.retransmissions,
            verdict: verdict(w.duration.count, req, net, w.client_gap.quantile(0.5)),
        });
    }
    rows.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then_with(|| a.server.cmp(&b.server))
    });
    rows
}

fn diff(new: &ServerTotals, old: &ServerTotals) -> ServerTotals {
    ServerTotals {
        duration: new.duration.since(&old.duration),
        rtt: new.rtt.since(&old.rtt),
        client_gap: new.client_gap.since(&old.client_gap),
        errors: new.errors.saturating_sub(old.errors),
        retransmissions: new.retransmissions.saturating_sub(old.retransmissions),
    }
}

/// The `watch` part of `/api/results`: the watchers' health and the per-server table.
pub fn json(shared: &Shared) -> serde_json::Value {
    let rows = servers(shared);
    let st = shared.lock();
    let health: Vec<serde_json::Value> = st
        .health
        .iter()
        .map(|h| {
            serde_json::json!({
                "interface": h.interface,
                "filter": h.filter,
                "up": h.up,
                "packets": h.packets,
                "kernel_drops": h.kernel_drops,
                "connections": h.connections,
                "evictions": h.evictions,
                "oriented_by_handshake": h.oriented[0],
                "oriented_by_protocol": h.oriented[1],
                "oriented_by_port": h.oriented[2],
                "cpu_s": h.cpu_s,
                "failures": h.failures,
                "last_error": h.last_error,
            })
        })
        .collect();
    serde_json::json!({
        "interfaces": health,
        "folded_requests": st.folded,
        "series": st.series,
        "series_budget": st.budget,
        "servers": rows,
    })
}

/// `/api/results` with the `watch` part added (unchanged when `shared` is None).
pub fn with_json(doc: String, shared: Option<&Shared>) -> String {
    let Some(shared) = shared else { return doc };
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&doc) else {
        return doc;
    };
    if let Some(o) = v.as_object_mut() {
        o.insert("watch".into(), json(shared));
    }
    v.to_string()
}

fn html_esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| {
        crate::units::fmt_duration(Duration::from_secs_f64(s))
    })
}

/// The `/` page with the per-server table added before `</body>` (unchanged when `shared` is None).
pub fn with_html(page: String, shared: Option<&Shared>) -> String {
    let Some(shared) = shared else { return page };
    let rows = servers(shared);
    let drops: u64 = shared.lock().health.iter().map(|h| h.kernel_drops).sum();
    let mut t = String::from(
        "<h2>Watched servers</h2>\n<table class=\"watch\"><tr><th>server</th><th>proto</th><th>requests/s</th>\
         <th>p50</th><th>p99</th><th>network RTT</th><th>server share</th><th>client</th><th>errors</th>\
         <th>retransmissions</th><th>verdict</th></tr>\n",
    );
    for r in &rows {
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            html_esc(&r.server),
            html_esc(&r.protos.join(" ")),
            r.requests_per_s,
            ms(r.p50_s),
            ms(r.p99_s),
            ms(r.network_rtt_s),
            r.server_share
                .map_or("-".into(), |s| format!("{:.0}%", s * 100.0)),
            ms(r.client_s),
            r.errors,
            r.retransmissions,
            r.verdict
        );
    }
    let _ = writeln!(
        t,
        "</table>\n<p>kernel drops: {drops}. Verdict: client when the client's time between requests exceeds \
         the request's median, else network when the network RTT is at least half of it, else server.</p>"
    );
    match page.rfind("</body>") {
        Some(i) => {
            let mut p = page;
            p.insert_str(i, &t);
            p
        }
        None => page + &t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(5, ms(10), ms(9), None), "too few requests");
        assert_eq!(verdict(100, ms(11), ms(10), ms(1)), "network");
        assert_eq!(verdict(100, ms(21), ms(0), None), "server");
        assert_eq!(verdict(100, ms(2), ms(1), ms(5)), "client");
        assert_eq!(verdict(100, ms(2), None, None), "unknown network");
    }
}
