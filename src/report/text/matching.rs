//! The text of `roundtrip capture match`: the matched requests' latency at both capture points, what was not
//! matched, how requests were paired, and the verdict.

use crate::capture::CaptureInfo;
use crate::capture::matching::{MatchReport, Verdict};
use crate::report::match_verdict;
use crate::report::text::Table;
use crate::units::fmt_nanos;
use std::fmt::Write as _;

/// A signed duration: `-1.2ms` below zero.
fn fmt_signed(v: f64) -> String {
    if v < 0.0 {
        format!("-{}", fmt_nanos(-v))
    } else {
        fmt_nanos(v)
    }
}

/// The text report of `capture match`, its verdict in [`match_verdict::words`].
pub fn match_text(
    client: &CaptureInfo,
    server: &CaptureInfo,
    r: &MatchReport,
    verdict: &Verdict,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "client capture {}: {} requests answered; server capture {}: {} requests answered; {} matched",
        client.file, r.client_requests, server.file, r.server_requests, r.matched
    );
    if r.matched > 0 {
        let mut t = Table::new(&[
            "operation",
            "proto",
            "matched",
            "first server",
            "first client",
            "first diff",
            "last server",
            "last client",
            "last diff",
            "diff p50",
            "server p99",
            "client p99",
        ]);
        for o in r.ops.iter().filter(|o| o.matched > 0) {
            t.row(vec![
                o.op.clone(),
                o.proto.name().into(),
                format!("{} of {}/{}", o.matched, o.client_count, o.server_count),
                fmt_nanos(o.server_first_byte.mean_ns),
                fmt_nanos(o.client_first_byte.mean_ns),
                fmt_signed(o.first_byte_diff_mean_ns),
                fmt_nanos(o.server.mean_ns),
                fmt_nanos(o.client.mean_ns),
                fmt_signed(o.diff_mean_ns),
                fmt_signed(o.diff_p50_ns as f64),
                fmt_nanos(o.server.p99_ns as f64),
                fmt_nanos(o.client.p99_ns as f64),
            ]);
        }
        s.push_str(
            "mean latency of the matched requests, to the first and to the last response byte (diff = client - \
             server: the path between the two capture points):\n",
        );
        s.push_str(&t.render(2));
    }
    if !r.unmatched.is_empty() {
        s.push_str("unmatched:\n");
        let mut t = Table::new(&["reason", "count"]);
        for u in &r.unmatched {
            t.row(vec![u.text.to_string(), u.count.to_string()]);
        }
        s.push_str(&t.render(2));
    }
    if r.matched > 0 {
        let p = &r.paired_by;
        let _ = writeln!(
            s,
            "paired by: {} xid, {} tcp seq, {} content (leading request bytes), {} order",
            p.xid, p.tcp_seq, p.content, p.order
        );
    }
    if let Some(o) = r.clock_offset_ns {
        let _ = writeln!(
            s,
            "clock offset (server capture - client capture, assuming a symmetric path): {}{}",
            if o < 0 { "-" } else { "" },
            fmt_nanos(o.unsigned_abs() as f64)
        );
    }
    let _ = writeln!(s, "verdict: {}", match_verdict::words(verdict));
    s
}
