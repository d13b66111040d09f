//! The text of `roundtrip db`: the heading printed before a run, one line per call through a link, and the
//! summary tables (setup phases, the loop on one connection, fetch rates, the attribution).

use crate::db::{DbConfig, DbResult, Scheme};
use crate::report::text::{Table, summary_cells};
use crate::stats::LatencyHistogram;
use crate::terminal::escape_for_terminal;

/// One line per call through a link, as seed 001 prints them: the local database's clock before and after.
pub fn link_call_line(s: &crate::db::DbSample) -> Option<String> {
    use crate::db::Op;
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

/// A table of timings: the name, then min, mean, stddev, p50, p90, p99, max and the count.
fn timing_table() -> Table {
    Table::new(&[
        "", "min", "mean", "stddev", "p50", "p90", "p99", "max", "count",
    ])
}

/// One row of a [`timing_table`]: `name` and the summary of `h`.
fn timing_row(t: &mut Table, name: String, h: &LatencyHistogram) {
    let c = summary_cells(&h.summary());
    let mut v = vec![name];
    v.extend(
        [&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[8], &c[9]]
            .iter()
            .map(|s| s.to_string()),
    );
    t.row(v);
}

/// The attribution line of a run (a part that came out negative reads "not measurable"; the answer's note,
/// printed right after the sentence the result opens with, says by how much): the text summary and the
/// HTML report print the same line.
pub fn attribution_line(a: &crate::db::Attribution) -> String {
    use crate::units::fmt_nanos;
    let mut line = format!(
        "attribution (medians): network ~ {} (TCP handshake); protocol + server ~ {} (ping - handshake)",
        fmt_nanos(a.network_ns as f64),
        difference(a.protocol_server_ns)
    );
    if let Some(s) = a.statement_ns {
        line.push_str(&format!("; statement ~ {} (query - ping)", difference(s)));
    }
    line
}

/// The sentence a run's text and HTML open with ([`crate::report::answer::db`]).
pub fn answer(r: &DbResult) -> crate::report::answer::Answer {
    crate::report::answer::db(
        r.attribution().as_ref(),
        &r.ping.summary(),
        &r.query.summary(),
        r.link.as_ref().map(|l| l.single.summary()).as_ref(),
    )
}

/// The text summary of a run, opening with the answer ([`answer`]): setup phases, the loop on one connection, fetch rates and the attribution.
pub fn text_summary(config: &DbConfig, r: &DbResult) -> String {
    use crate::units::{fmt_bytes, fmt_nanos};
    use std::fmt::Write;
    let mut out = crate::report::answer::text(&answer(r));
    let _ = writeln!(
        out,
        "--- {} at {}{}, {:.2}s ---",
        r.scheme.product(r.server_version.as_deref()),
        r.address
            .map(|a| a.to_string())
            .unwrap_or_else(|| "-".into()),
        r.server_version
            .as_ref()
            // The version comes from the server's banner.
            .map(|v| format!(", server {}", escape_for_terminal(v)))
            .unwrap_or_default(),
        r.elapsed.as_secs_f64()
    );
    let mut t = timing_table();
    let mut row = |name: String, h: &LatencyHistogram| timing_row(&mut t, name, h);
    let oracle = r.scheme == Scheme::Oracle;
    let _ = if oracle {
        writeln!(
            out,
            "TNS ping, one fresh connection per ping ({} of {}):",
            r.connects_ok, config.count
        )
    } else {
        writeln!(
            out,
            "connection setup ({} of {} fresh connections ready):",
            r.connects_ok, config.connects
        )
    };
    // A literal address has no lookup: its zero "times" are not a row.
    if r.dns.summary().max_ns > 0 {
        row("dns".into(), &r.dns);
    }
    row("tcp handshake".into(), &r.tcp_handshake);
    if oracle {
        row("TNS ping (CONNECT -> REFUSE)".into(), &r.ping);
        out.push_str(&t.render(2));
    } else {
        if !r.tls.is_empty() {
            row("tls".into(), &r.tls);
        }
        row("startup + auth".into(), &r.startup);
        row("first query".into(), &r.first_query);
        out.push_str(&t.render(2));
        let mut t2 = timing_table();
        let mut row2 = |name: String, h: &LatencyHistogram| timing_row(&mut t2, name, h);
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
        let mut t3 = timing_table();
        let mut row3 = |name: String, h: &LatencyHistogram| timing_row(&mut t3, name, h);
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
        let _ = writeln!(out, "{}", attribution_line(&a));
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if let Some(i) = crate::doc::db::interrupted(config, r) {
        out.push_str(&i.line());
    }
    out
}
