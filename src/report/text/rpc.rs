//! The text of `roundtrip capture rpc`: per-operation latency, per interval, per connection, the slowest
//! requests and what was not paired.

use crate::capture::rpc::Proto;
use crate::capture::rpc::run::RpcResult;
use crate::report::text::Table;
use crate::terminal::escape_for_terminal as esc;
use crate::units::{fmt_bytes, fmt_nanos};
use std::fmt::Write as _;

/// The sentence a `capture rpc` result opens with, from its operations ([`crate::report::answer::rpc`]).
pub fn answer(ops: &[crate::capture::rpc::stats::OpRow]) -> crate::report::answer::Answer {
    let ops: Vec<crate::report::answer::RpcOp> = ops
        .iter()
        .map(|o| crate::report::answer::RpcOp {
            op: &o.op,
            first_byte: o.first_byte_known(),
            last_byte: &o.last_byte,
        })
        .collect();
    crate::report::answer::rpc(&ops)
}

/// The text report of `capture rpc`: the heading line, the answer ([`answer`]), then the tables.
pub fn rpc_text(r: &RpcResult) -> String {
    let mut s = String::new();
    let c = &r.capture;
    if let Some(l) = &c.source {
        let _ = writeln!(
            s,
            "{}; {} connections, {} requests answered{}",
            super::capture::live_heading(c, l),
            r.counts.connections,
            r.report.transactions,
            if r.counts.evicted_connections > 0 {
                format!(
                    "; {} connections closed early at the --max-connections cap",
                    r.counts.evicted_connections
                )
            } else {
                String::new()
            }
        );
    } else {
        let _ = writeln!(
            s,
            "{}: {}{}, {} ({}), {} packets, {} connections, {} requests answered",
            c.file,
            c.format,
            if c.gzip { " (gzip)" } else { "" },
            c.link_types.join("+"),
            fmt_bytes(c.file_bytes),
            c.packets_read,
            r.counts.connections,
            r.report.transactions
        );
    }
    let rep = &r.report;
    s.push_str(&crate::report::answer::text(&answer(&rep.ops)));
    if !rep.ops.is_empty() {
        let with_bytes = rep.ops.iter().any(|o| o.bytes.is_some());
        let mut head = vec![
            "operation",
            "proto",
            "count",
            "errors",
            "first mean",
            "first p50",
            "first p99",
            "last mean",
            "last p50",
            "last p90",
            "last p99",
            "last max",
        ];
        if with_bytes {
            head.push("bytes");
        }
        let mut t = Table::new(&head);
        for o in &rep.ops {
            let mut row = vec![
                o.op.clone(),
                o.proto.name().to_string(),
                o.last_byte.count.to_string(),
                o.errors.to_string(),
            ];
            row.extend(first_cells(&o.first_byte));
            row.extend(cells(&o.last_byte));
            if with_bytes {
                row.push(o.bytes.map(fmt_bytes).unwrap_or_default());
            }
            t.row(row);
        }
        s.push_str(&t.render(0));
        let named: Vec<String> = rep
            .ops
            .iter()
            .flat_map(|o| {
                o.errors_by_status
                    .iter()
                    .map(move |(name, n)| format!("{} {} x{n}", esc(&o.op), esc(name)))
            })
            .collect();
        if !named.is_empty() {
            let _ = writeln!(s, "errors: {}", named.join(", "));
        }
        s.push_str(
            "first = request end to the first response packet (server + network round trip, as tshark's \
             rpc,srt); last = to the last response packet (adds the transfer)\n",
        );
        if rep.ops.iter().any(|o| o.proto == Proto::Smb2) {
            s.push_str("tshark's smb2,srt times SMB2 responses to their last packet: compare with 'last'\n");
        }
    }
    if !rep.intervals.is_empty() {
        s.push_str("per interval (by response time):\n");
        let mut t = Table::new(&[
            "start",
            "count",
            "first mean",
            "first p99",
            "last mean",
            "last p50",
            "last p99",
            "last max",
        ]);
        for iv in &rep.intervals {
            t.row(vec![
                format!("{:.3}s", iv.start_s),
                iv.count.to_string(),
                fmt_nanos(iv.first_byte_mean_ns),
                fmt_nanos(iv.first_byte_p99_ns as f64),
                fmt_nanos(iv.mean_ns),
                fmt_nanos(iv.p50_ns as f64),
                fmt_nanos(iv.p99_ns as f64),
                fmt_nanos(iv.max_ns as f64),
            ]);
        }
        s.push_str(&t.render(2));
    }
    if !rep.connections.is_empty() {
        s.push_str("per connection:\n");
        let mut t = Table::new(&[
            "client",
            "server",
            "proto",
            "count",
            "errors",
            "first mean",
            "first max",
            "last mean",
            "last max",
        ]);
        for cs in &rep.connections {
            t.row(vec![
                cs.conn.client.to_string(),
                cs.conn.server.to_string(),
                cs.conn.proto.name().into(),
                cs.count.to_string(),
                cs.errors.to_string(),
                fmt_nanos(cs.first_byte_mean_ns),
                fmt_nanos(cs.first_byte_max_ns as f64),
                fmt_nanos(cs.mean_ns),
                fmt_nanos(cs.max_ns as f64),
            ]);
        }
        s.push_str(&t.render(2));
    }
    if !rep.slowest.is_empty() {
        let _ = writeln!(
            s,
            "slowest {} requests (by the time to the last byte):",
            rep.slowest.len()
        );
        let mut t = Table::new(&[
            "request at (UTC)",
            "first",
            "last",
            "proto",
            "operation",
            "client",
            "server",
            "id",
        ]);
        for w in &rep.slowest {
            let id = match (w.xid, w.request_seq) {
                (Some(x), _) => format!("xid 0x{x:08x}"),
                (None, Some(q)) => format!("seq {q}"),
                _ => "-".into(),
            };
            t.row(vec![
                utc(w.request_unix_s),
                fmt_nanos(w.first_byte_ns as f64),
                fmt_nanos(w.last_byte_ns as f64),
                w.proto.name().into(),
                format!("{}{}", w.op, if w.error { " (error)" } else { "" }),
                w.client.to_string(),
                w.server.to_string(),
                id,
            ]);
        }
        s.push_str(&t.render(2));
    }
    if !rep.anomalies.is_empty() {
        s.push_str("not paired:\n");
        let mut t = Table::new(&["what", "proto", "count"]);
        for a in &rep.anomalies {
            t.row(vec![
                a.kind.clone(),
                a.proto.name().into(),
                a.count.to_string(),
            ]);
        }
        s.push_str(&t.render(2));
    }
    s
}

/// Time of day in UTC with microseconds, from Unix seconds.
fn utc(unix_s: f64) -> String {
    let total_us = (unix_s * 1e6).round() as i64;
    let secs = total_us.div_euclid(1_000_000);
    let us = total_us.rem_euclid(1_000_000);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = crate::units::civil_date(secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{us:06}",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

fn first_cells(s: &crate::stats::Summary) -> Vec<String> {
    if s.count == 0 {
        return vec!["-".into(); 3];
    }
    vec![
        fmt_nanos(s.mean_ns),
        fmt_nanos(s.p50_ns as f64),
        fmt_nanos(s.p99_ns as f64),
    ]
}

fn cells(s: &crate::stats::Summary) -> Vec<String> {
    if s.count == 0 {
        return vec!["-".into(); 5];
    }
    vec![
        fmt_nanos(s.mean_ns),
        fmt_nanos(s.p50_ns as f64),
        fmt_nanos(s.p90_ns as f64),
        fmt_nanos(s.p99_ns as f64),
        fmt_nanos(s.max_ns as f64),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00.000000");
        assert_eq!(utc(1_700_000_000.25), "2023-11-14 22:13:20.250000");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00.000000");
    }
}
