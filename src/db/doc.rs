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

/// The first call through a link (it opened the link; not in the statistics).
#[derive(Debug, Clone, Serialize)]
pub struct LinkCallDoc {
    /// The local database's clock before the remote call, Unix seconds.
    pub began_unix_s: f64,
    /// The local database's clock after it, Unix seconds.
    pub ended_unix_s: f64,
    /// End - begin.
    pub round_trip_ns: u64,
    /// The whole statement as the client saw it.
    pub client_ns: u64,
}

/// The multi-row calls through a link.
#[derive(Debug, Clone, Serialize)]
pub struct LinkMultiDoc {
    /// Time per multi-row call, from the local database's clock.
    pub summary: Summary,
    /// Rows per call.
    pub rows: u64,
    /// Bytes per row (`rpad('X', B)`).
    pub row_bytes: u64,
    /// (median multi-row call - median single-row call) / (rows - 1).
    pub per_row_ns: Option<f64>,
    /// The statement sent through the link.
    pub remote_sql: Option<String>,
}

/// `db --link`: round trips from the local database to the remote one, timed inside the local database.
#[derive(Debug, Clone, Serialize)]
pub struct LinkDoc {
    /// TARGET without password.
    pub target: String,
    /// How the link is made and timed.
    pub method: String,
    /// The statement sent through the link for a single-row call.
    pub remote_sql: String,
    /// The first call (link open), kept apart.
    pub open: Option<LinkCallDoc>,
    /// Single-row round trips through the link (local database's clock: begin and end around the remote call).
    pub round_trip: Summary,
    /// Multi-row calls.
    pub multi_row: LinkMultiDoc,
    /// The single-row call statement as the client saw it (both legs and the local work).
    pub client_statement: Summary,
    /// The client -> local database leg of the same run (protocol ping), the same numbers as `ping`.
    pub client_leg: Summary,
    /// Requests each call sends through the link (1: dblink; 2: FEDERATEDX's SHOW TABLE STATUS + SELECT).
    pub requests_per_call: u32,
    /// Median call / requests per call: the median network round trip through the link.
    pub round_trip_per_request_p50_ns: Option<f64>,
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
    /// `--link` only: the round trips through the database link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkDoc>,
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
            r.ping
                .len()
                .max(r.query.len())
                .max(r.link.as_ref().map_or(0, |l| l.single.len())),
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
            link: r.link.as_ref().map(|l| LinkDoc {
                target: l.target.clone(),
                method: l.method.clone(),
                remote_sql: l.remote_sql.clone(),
                open: l.open.map(|c| LinkCallDoc {
                    began_unix_s: c.began_unix_us as f64 / 1e6,
                    ended_unix_s: c.ended_unix_us as f64 / 1e6,
                    round_trip_ns: c.round_trip().as_nanos() as u64,
                    client_ns: c.client.as_nanos() as u64,
                }),
                round_trip: l.single.summary(),
                multi_row: LinkMultiDoc {
                    summary: l.multi.summary(),
                    rows: l.rows,
                    row_bytes: l.row_bytes,
                    per_row_ns: l.per_row_ns(),
                    remote_sql: l.remote_multi_sql.clone(),
                },
                client_statement: l.statement.summary(),
                client_leg: r.ping.summary(),
                requests_per_call: l.requests_per_call,
                round_trip_per_request_p50_ns: l.per_request_p50_ns(),
            }),
            interrupted: interrupted(config, r),
        }
    }
}

/// One line per call through a link, as seed 001 prints them: the local database's clock before and after.
pub fn link_call_line(s: &super::DbSample) -> Option<String> {
    use super::Op;
    let (b, e) = s.db_span?;
    let what = match s.op {
        Op::LinkOpen => "link open (first call, not in the statistics)".to_string(),
        Op::Link => format!("call {}", s.seq + 1),
        Op::LinkMulti => format!("multi-row {} ({} rows)", s.seq + 1, s.rows),
        _ => return None,
    };
    Some(format!(
        "{what}: local begin {}.{:06} end {}.{:06} round trip {}",
        b.div_euclid(1_000_000),
        b.rem_euclid(1_000_000),
        e.div_euclid(1_000_000),
        e.rem_euclid(1_000_000),
        crate::units::fmt_nanos(s.duration.as_nanos() as f64)
    ))
}

/// The heading printed before a `--link` run.
pub fn link_heading(r_target: &str, scheme: Scheme, link: &str) -> String {
    format!(
        "roundtrip db {r_target} ({}) --link {link}: round trips from that database to the remote one, timed inside it\n",
        scheme.name()
    )
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
        if config.link.is_none() {
            let _ = writeln!(out, "on one connection ({} iterations):", r.ping.len());
        }
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
        if config.link.is_none() {
            out.push_str(&t2.render(2));
        }
        if let (Some(per_row), Some(tp)) = (r.per_row_ns(), r.fetch_throughput_bytes_per_s()) {
            let _ = writeln!(
                out,
                "fetch: {} per row (median fetch / rows), {}/s of values",
                fmt_nanos(per_row),
                fmt_bytes(tp as u64)
            );
        }
    }
    if let Some(l) = &r.link {
        let mut t3 = Table::new(&[
            "", "min", "mean", "stddev", "p50", "p90", "p99", "max", "count",
        ]);
        let mut row3 = |name: String, h: &crate::stats::LatencyHistogram| {
            let c = summary_cells(&h.summary());
            let mut v = vec![name];
            v.extend(
                [&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[8], &c[9]]
                    .iter()
                    .map(|s| s.to_string()),
            );
            t3.row(v);
        };
        let _ = writeln!(out, "link to {} ({}):", l.target, l.method);
        if let Some(o) = &l.open {
            let _ = writeln!(
                out,
                "  link open (first call, not in the statistics): {} inside the database, {} at the client",
                fmt_nanos(o.round_trip().as_nanos() as f64),
                fmt_nanos(o.client.as_nanos() as f64)
            );
        }
        if l.requests_per_call > 1 {
            row3(
                format!(
                    "link call ({} requests; {})",
                    l.requests_per_call, l.remote_sql
                ),
                &l.single,
            );
        } else {
            row3(format!("link round trip ({})", l.remote_sql), &l.single);
        }
        if l.rows > 0 {
            row3(
                format!(
                    "link multi-row ({} rows x {})",
                    l.rows,
                    fmt_bytes(l.row_bytes)
                ),
                &l.multi,
            );
        }
        row3("client -> local database (ping)".into(), &r.ping);
        row3("whole call at the client".into(), &l.statement);
        out.push_str(&t3.render(2));
        if let Some(p) = l.per_row_ns() {
            let _ = writeln!(
                out,
                "per row through the link: {} ((median multi-row - median single-row) / {})",
                signed_nanos(p.round() as i64),
                l.rows - 1
            );
        }
        if let (true, Some(q)) = (l.requests_per_call > 1, l.per_request_p50_ns()) {
            let _ = writeln!(
                out,
                "per network round trip through the link: {} (median call / {} requests per call)",
                fmt_nanos(q),
                l.requests_per_call
            );
        }
        if !l.single.is_empty() && !r.ping.is_empty() {
            let _ = writeln!(
                out,
                "legs (medians): client -> local database {}; local database -> remote through the link {}",
                fmt_nanos(r.ping.percentile_ns(50.0) as f64),
                fmt_nanos(l.per_request_p50_ns().unwrap_or_default())
            );
        }
    }
    if let Some(a) = r.attribution().filter(|_| r.link.is_none()) {
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
