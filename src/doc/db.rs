//! The document `roundtrip db --json` writes and `roundtrip report` reads: settings, the connection phases,
//! ping, query and fetch, the attribution and, with `--link`, the round trips through the database link.
//! Durations carry their unit in the field name.

use super::{Header, Interrupted, kind};
use crate::db::{Attribution, DbConfig, DbResult, Scheme, SslMode};
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::time::UNIX_EPOCH;

/// Settings as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FetchDoc {
    /// Time per fetch.
    pub summary: Summary,
    /// Rows per fetch.
    #[serde(default)]
    pub rows: u64,
    /// Value bytes received in all fetches.
    #[serde(default)]
    pub bytes_total: u64,
    /// Median fetch time / rows.
    #[serde(default)]
    pub per_row_ns: Option<f64>,
    /// Value bytes per second over all fetches.
    #[serde(default)]
    pub throughput_bytes_per_s: Option<f64>,
}

/// The first call through a link (it opened the link; not in the statistics).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkMultiDoc {
    /// Time per multi-row call, from the local database's clock.
    pub summary: Summary,
    /// Rows per call.
    #[serde(default)]
    pub rows: u64,
    /// Bytes per row (`rpad('X', B)`).
    #[serde(default)]
    pub row_bytes: u64,
    /// (median multi-row call - median single-row call) / (rows - 1).
    #[serde(default)]
    pub per_row_ns: Option<f64>,
    /// The statement sent through the link.
    #[serde(default)]
    pub remote_sql: Option<String>,
}

/// `db --link`: round trips from the local database to the remote one, timed inside the local database.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkDoc {
    /// TARGET without password.
    #[serde(default)]
    pub target: String,
    /// How the link is made and timed.
    #[serde(default)]
    pub method: String,
    /// The statement sent through the link for a single-row call.
    #[serde(default)]
    pub remote_sql: String,
    /// The first call (link open), kept apart.
    #[serde(default)]
    pub open: Option<LinkCallDoc>,
    /// Single-row round trips through the link (local database's clock: begin and end around the remote call).
    pub round_trip: Summary,
    /// Multi-row calls.
    pub multi_row: LinkMultiDoc,
    /// The single-row call statement as the client saw it (both legs and the local work).
    pub client_statement: Summary,
    /// The client -> local database leg of the same run (protocol ping), the same numbers as `ping`.
    #[serde(default)]
    pub client_leg: Summary,
    /// Requests each call sends through the link (1: dblink; 2: FEDERATEDX's SHOW TABLE STATUS + SELECT).
    #[serde(default)]
    pub requests_per_call: u32,
    /// Median call / requests per call: the median network round trip through the link.
    #[serde(default)]
    pub round_trip_per_request_p50_ns: Option<f64>,
}

/// The document `roundtrip db --json` prints. `phases`, `ping`, `query` and `fetch` are required (a
/// document without them names the part it lacks); the rest reads as empty when absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DbDoc {
    /// `format`, `format_version`, `kind` ([`kind::DB`]) and `environment`;
    /// [`Header`] says how a missing one reads.
    #[serde(flatten)]
    pub header: Header,
    /// Start, Unix seconds.
    #[serde(default)]
    pub started_unix_s: f64,
    /// Length of the run.
    #[serde(default)]
    pub elapsed_s: f64,
    /// Settings.
    #[serde(default)]
    pub settings: DbSettings,
    /// Server version when the protocol tells it.
    #[serde(default)]
    pub server_version: Option<String>,
    /// Fresh connections that became ready.
    #[serde(default)]
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
    #[serde(default)]
    pub attribution: Option<Attribution>,
    /// Remarks.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Why the run ended early.
    #[serde(default)]
    pub error: Option<String>,
    /// Stopped by the user.
    #[serde(default)]
    pub cancelled: bool,
    /// `--link` only: the round trips through the database link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkDoc>,
    /// How far it got when interrupted: iterations on one connection done of --count (absent when it ran to
    /// its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

impl Default for DbSettings {
    fn default() -> Self {
        DbSettings {
            target: String::new(),
            scheme: Scheme::Postgres,
            address: None,
            connects: 0,
            count: 0,
            interval_ns: None,
            query: String::new(),
            rows: 0,
            row_bytes: 0,
            timeout_ns: 0,
            ssl_mode: SslMode::Prefer,
        }
    }
}

/// A run cut short by Ctrl-C: iterations on one connection done of those asked for.
pub fn interrupted(config: &DbConfig, r: &DbResult) -> Option<Interrupted> {
    r.cancelled.then(|| {
        Interrupted::count(
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
    /// (phase name, statistics) in the order a session goes through them.
    pub fn phases(&self) -> Vec<(&'static str, Summary)> {
        let p = &self.phases;
        let mut v = vec![
            ("dns", p.dns),
            ("tcp handshake", p.tcp_handshake),
            ("tls", p.tls),
            ("startup", p.startup),
            ("first query", p.first_query),
            ("ping", self.ping),
            ("query", self.query),
            ("fetch", self.fetch.summary),
        ];
        if let Some(l) = &self.link {
            v.push(("link round trip", l.round_trip));
            v.push(("link multi-row", l.multi_row.summary));
            v.push(("whole call at the client", l.client_statement));
        }
        v
    }

    /// Builds the document of a run.
    pub fn new(config: &DbConfig, r: &DbResult) -> Self {
        DbDoc {
            header: Header::new(kind::DB),
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
