//! The JSON document of `roundtrip db --json`, in the common envelope (`format`, `format_version`, `kind`,
//! `environment`). Durations carry their unit in the field name.

use super::{Attribution, DbConfig, DbResult, Scheme, SslMode};
use crate::report::json::{Environment, FORMAT, FORMAT_VERSION};
use crate::stats::Summary;
use serde::Serialize;
use std::time::UNIX_EPOCH;

/// Settings as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct DbSettings {
    /// The URL without password.
    pub target: String,
    /// Protocol.
    pub scheme: Scheme,
    /// Address used.
    pub address: Option<String>,
    /// Fresh connections timed.
    pub connects: u32,
    /// Iterations on the open connection.
    pub count: u64,
    /// Pause between iterations.
    pub interval_ns: Option<u64>,
    /// The singleton statement.
    pub query: String,
    /// Rows per fetch.
    pub rows: u64,
    /// Bytes per row.
    pub row_bytes: u64,
    /// Answer timeout.
    pub timeout_ns: u64,
    /// TLS setting.
    pub ssl_mode: SslMode,
}

/// Connection setup phases, one summary each.
#[derive(Debug, Clone, Serialize)]
pub struct Phases {
    /// Name resolution.
    pub dns: Summary,
    /// TCP handshake (the baseline network RTT).
    pub tcp_handshake: Summary,
    /// TLS (count 0 when not used).
    pub tls: Summary,
    /// Startup and authentication.
    pub startup: Summary,
    /// First query on the fresh connection.
    pub first_query: Summary,
}

/// The multi-row fetch.
#[derive(Debug, Clone, Serialize)]
pub struct FetchDoc {
    /// Time per fetch.
    pub summary: Summary,
    /// Rows per fetch.
    pub rows: u64,
    /// Value bytes received in all fetches.
    pub bytes_total: u64,
    /// Median fetch time / rows.
    pub per_row_ns: Option<f64>,
    /// Value bytes per second over all fetches.
    pub throughput_bytes_per_s: Option<f64>,
}

/// The document.
#[derive(Debug, Clone, Serialize)]
pub struct DbDoc {
    /// Always "roundtrip".
    pub format: &'static str,
    /// Layout version.
    pub format_version: u32,
    /// Always "db".
    pub kind: &'static str,
    /// Where it was measured.
    pub environment: Environment,
    /// Start, Unix seconds.
    pub started_unix_s: f64,
    /// Length of the run.
    pub elapsed_s: f64,
    /// Settings.
    pub settings: DbSettings,
    /// Server version when the protocol tells it.
    pub server_version: Option<String>,
    /// Fresh connections that became ready.
    pub connects_ok: u32,
    /// Setup phases.
    pub phases: Phases,
    /// Protocol ping.
    pub ping: Summary,
    /// Singleton query.
    pub query: Summary,
    /// Multi-row fetch.
    pub fetch: FetchDoc,
    /// Network / protocol+server / statement split.
    pub attribution: Option<Attribution>,
    /// Remarks.
    pub notes: Vec<String>,
    /// Why the run ended early.
    pub error: Option<String>,
    /// Stopped by the user.
    pub cancelled: bool,
    /// How far it got when interrupted: iterations on one connection done of --count (absent when it ran to
    /// its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<crate::report::json::Interrupted>,
}

/// A run cut short by Ctrl-C: iterations on one connection done of those asked for.
pub fn interrupted(config: &DbConfig, r: &DbResult) -> Option<crate::report::json::Interrupted> {
    r.cancelled.then(|| {
        crate::report::json::Interrupted::count(
            r.elapsed,
            r.ping.len().max(r.query.len()),
            config.count,
            "iterations",
        )
    })
}

impl DbDoc {
    /// Builds the document of a run.
    pub fn new(config: &DbConfig, r: &DbResult) -> Self {
        DbDoc {
            format: FORMAT,
            format_version: FORMAT_VERSION,
            kind: "db",
            environment: Environment::current(),
            started_unix_s: r
                .started
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            elapsed_s: r.elapsed.as_secs_f64(),
            settings: DbSettings {
                target: r.target.clone(),
                scheme: r.scheme,
                address: r.address.map(|a| a.to_string()),
                connects: config.connects,
                count: config.count,
                interval_ns: config.interval.map(|d| d.as_nanos() as u64),
                query: r.query_text.clone(),
                rows: r.fetch_rows,
                row_bytes: config.row_bytes,
                timeout_ns: config.timeout.as_nanos() as u64,
                ssl_mode: r.ssl_mode,
            },
            server_version: r.server_version.clone(),
            connects_ok: r.connects_ok,
            phases: Phases {
                dns: r.dns.summary(),
                tcp_handshake: r.tcp_handshake.summary(),
                tls: r.tls.summary(),
                startup: r.startup.summary(),
                first_query: r.first_query.summary(),
            },
            ping: r.ping.summary(),
            query: r.query.summary(),
            fetch: FetchDoc {
                summary: r.fetch.summary(),
                rows: r.fetch_rows,
                bytes_total: r.fetch_bytes_total,
                per_row_ns: r.per_row_ns(),
                throughput_bytes_per_s: r.fetch_throughput_bytes_per_s(),
            },
            attribution: r.attribution(),
            notes: r.notes.clone(),
            error: r.error.as_ref().map(|e| e.to_string()),
            cancelled: r.cancelled,
            interrupted: interrupted(config, r),
        }
    }
}

/// The heading printed before a run.
pub fn text_heading(r_target: &str, scheme: Scheme) -> String {
    format!(
        "roundtrip db {r_target} ({}); all times are round trips as the client sees them\n",
        scheme.name()
    )
}

fn signed_nanos(ns: i64) -> String {
    if ns < 0 {
        format!("-{}", crate::units::fmt_nanos(ns.unsigned_abs() as f64))
    } else {
        crate::units::fmt_nanos(ns as f64)
    }
}

/// A part of the attribution got by subtraction: "not measurable" when negative (see the note printed with it).
fn difference(ns: i64) -> String {
    if ns < 0 {
        "not measurable".into()
    } else {
        crate::units::fmt_nanos(ns as f64)
    }
}

/// The text summary of a run: setup phases, the loop on one connection, fetch rates and the attribution.
pub fn text_summary(config: &DbConfig, r: &DbResult) -> String {
    use crate::report::text::{Table, summary_cells};
    use crate::units::{fmt_bytes, fmt_nanos};
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "--- {} at {}{}, {:.2}s ---",
        r.scheme.product(r.server_version.as_deref()),
        r.address
            .map(|a| a.to_string())
            .unwrap_or_else(|| "-".into()),
        r.server_version
            .as_ref()
            .map(|v| format!(", server {v}"))
            .unwrap_or_default(),
        r.elapsed.as_secs_f64()
    );
    let mut t = Table::new(&[
        "", "min", "mean", "stddev", "p50", "p90", "p99", "max", "count",
    ]);
    let mut row = |name: String, h: &crate::stats::LatencyHistogram| {
        let c = summary_cells(&h.summary());
        let mut v = vec![name];
        v.extend(
            [&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[8], &c[9]]
                .iter()
                .map(|s| s.to_string()),
        );
        t.row(v);
    };
    if r.scheme == Scheme::Oracle {
        let _ = writeln!(
            out,
            "TNS ping, one fresh connection per ping ({} of {}):",
            r.connects_ok, config.count
        );
        // A literal address has no lookup: its zero "times" are not a row.
        if r.dns.summary().max_ns > 0 {
            row("dns".into(), &r.dns);
        }
        row("tcp handshake".into(), &r.tcp_handshake);
        row("TNS ping (CONNECT -> REFUSE)".into(), &r.ping);
        out.push_str(&t.render(2));
    } else {
        let _ = writeln!(
            out,
            "connection setup ({} of {} fresh connections ready):",
            r.connects_ok, config.connects
        );
        // A literal address has no lookup: its zero "times" are not a row.
        if r.dns.summary().max_ns > 0 {
            row("dns".into(), &r.dns);
        }
        row("tcp handshake".into(), &r.tcp_handshake);
        if !r.tls.is_empty() {
            row("tls".into(), &r.tls);
        }
        row("startup + auth".into(), &r.startup);
        row("first query".into(), &r.first_query);
        out.push_str(&t.render(2));
        let mut t2 = Table::new(&[
            "", "min", "mean", "stddev", "p50", "p90", "p99", "max", "count",
        ]);
        let mut row2 = |name: String, h: &crate::stats::LatencyHistogram| {
            let c = summary_cells(&h.summary());
            let mut v = vec![name];
            v.extend(
                [&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[8], &c[9]]
                    .iter()
                    .map(|s| s.to_string()),
            );
            t2.row(v);
        };
        let ping_name = match r.scheme {
            Scheme::Postgres => "protocol ping (empty query)",
            Scheme::Mysql => "protocol ping (COM_PING)",
            _ => "protocol ping (PING)",
        };
        let _ = writeln!(out, "on one connection ({} iterations):", r.ping.len());
        row2(ping_name.into(), &r.ping);
        let q = if r.query_text.chars().count() > 32 {
            format!("{}...", r.query_text.chars().take(29).collect::<String>())
        } else {
            r.query_text.clone()
        };
        row2(format!("query ({q})"), &r.query);
        if r.fetch_rows > 0 {
            row2(
                format!(
                    "fetch ({} rows x {})",
                    r.fetch_rows,
                    fmt_bytes(config.row_bytes)
                ),
                &r.fetch,
            );
        }
        out.push_str(&t2.render(2));
        if let (Some(per_row), Some(tp)) = (r.per_row_ns(), r.fetch_throughput_bytes_per_s()) {
            let _ = writeln!(
                out,
                "fetch: {} per row (median fetch / rows), {}/s of values",
                fmt_nanos(per_row),
                fmt_bytes(tp as u64)
            );
        }
    }
    if let Some(a) = r.attribution() {
        let _ = write!(
            out,
            "attribution (medians): network ~ {} (TCP handshake); protocol + server ~ {} (ping - handshake)",
            fmt_nanos(a.network_ns as f64),
            difference(a.protocol_server_ns)
        );
        if let Some(s) = a.statement_ns {
            let _ = write!(out, "; statement ~ {} (query - ping)", difference(s));
        }
        out.push('\n');
        if a.protocol_server_ns < 0 || a.statement_ns.is_some_and(|s| s < 0) {
            let _ = writeln!(
                out,
                "note: a part shown as \"not measurable\" came out negative ({}): the two medians it subtracts \
                 differ by less than their own variation here, so that part is too small to separate",
                [
                    (a.protocol_server_ns < 0).then(|| format!(
                        "ping - handshake = {}",
                        signed_nanos(a.protocol_server_ns)
                    )),
                    a.statement_ns
                        .filter(|s| *s < 0)
                        .map(|s| format!("query - ping = {}", signed_nanos(s))),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
            );
        }
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if let Some(i) = interrupted(config, r) {
        out.push_str(&i.line());
    }
    out
}
