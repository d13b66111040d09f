//! Terminal text: aligned tables, summaries and histograms drawn with block characters. The text of a command
//! whose results need more than these lives in a file of its own: [`capture`] (capture headings, stats, flows, timeline), [`compare`] (`compare`), [`rpc`]
//! (`capture rpc`), [`matching`] (`capture match`), [`proxy`] (`proxy` counters), [`whatif`] (`capture whatif`),
//! [`connect`] (`connect` attempts, the DNS words), [`mesh`] (the `mesh` matrix), [`agent`] (the agent's series line).

pub mod agent;
pub mod capture;
pub mod compare;
pub mod connect;
pub mod matching;
pub mod mesh;
pub mod proxy;
pub mod rpc;
pub mod whatif;

use crate::probe::ping::{IntervalRow, PeerKind, PingResult};
use crate::stats::{LatencyHistogram, Summary};
use crate::terminal::escape_for_terminal;
use crate::units::{fmt_bytes, fmt_nanos};
use std::borrow::Cow;
use std::fmt::Write;

/// A table with a header row; columns after the first are right-aligned.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new<S: AsRef<str>>(header: &[S]) -> Self {
        Table {
            header: header
                .iter()
                .map(|s| cell(s.as_ref().to_string()))
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells are empty. Each cell is escaped for the terminal
    /// ([`escape_for_terminal`]): a cell may hold an operation name, a path or a peer's text, and a control or
    /// bidi character in it shows as a visible escape (and is counted as such when the columns are aligned).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(cell).collect());
    }

    /// Renders with two spaces between columns, each line indented by `indent` spaces.
    pub fn render(&self, indent: usize) -> String {
        let ncol = self.header.len();
        let mut width = vec![0usize; ncol];
        for r in std::iter::once(&self.header).chain(self.rows.iter()) {
            for (i, c) in r.iter().enumerate().take(ncol) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(self.rows.iter()) {
            let mut line = " ".repeat(indent);
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map_or("", |s| s.as_str());
                let pad = w - c.chars().count();
                if i == 0 {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A table cell escaped for the terminal (no copy when nothing needed escaping).
fn cell(s: String) -> String {
    match escape_for_terminal(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(e) => e,
    }
}

/// The column names of [`summary_cells`].
pub const SUMMARY_COLUMNS: [&str; 10] = [
    "min", "mean", "stddev", "p50", "p90", "p99", "p99.9", "p99.99", "max", "count",
];

/// One row of [`summary_cells`] per named histogram that holds a sample, under a header of
/// [`SUMMARY_COLUMNS`]; empty when none does (`connect`: handshake and refused; `icmp`: RTT).
pub fn summary_table(rows: &[(&str, &LatencyHistogram)]) -> String {
    let mut header = vec![""];
    header.extend(SUMMARY_COLUMNS);
    let mut t = Table::new(&header);
    let mut n = 0;
    for (name, h) in rows {
        if !h.is_empty() {
            let mut row = vec![name.to_string()];
            row.extend(summary_cells(&h.summary()));
            t.row(row);
            n += 1;
        }
    }
    if n == 0 {
        return String::new();
    }
    t.render(0)
}

/// A summary as table cells in the order of [`SUMMARY_COLUMNS`].
pub fn summary_cells(s: &Summary) -> Vec<String> {
    if s.count == 0 {
        let mut v = vec!["-".to_string(); SUMMARY_COLUMNS.len() - 1];
        v.push("0".into());
        return v;
    }
    vec![
        fmt_nanos(s.min_ns as f64),
        fmt_nanos(s.mean_ns),
        fmt_nanos(s.stddev_ns),
        fmt_nanos(s.p50_ns as f64),
        fmt_nanos(s.p90_ns as f64),
        fmt_nanos(s.p99_ns as f64),
        fmt_nanos(s.p99_9_ns as f64),
        fmt_nanos(s.p99_99_ns as f64),
        fmt_nanos(s.max_ns as f64),
        s.count.to_string(),
    ]
}

fn peer_name(p: PeerKind) -> &'static str {
    match p {
        PeerKind::Roundtrip => "roundtrip server",
        PeerKind::Sockperf => "sockperf-compatible server",
        PeerKind::Unknown => "server",
    }
}

/// The heading line printed before a ping run.
pub fn ping_heading(target: &str, r_addr: &str, transport: &str, size: usize) -> String {
    format!(
        "roundtrip ping {transport} {target} ({r_addr}), {size}-byte messages; all times are round trips (RTT), not one-way\n"
    )
}

/// One per-interval progress line, as oratcptest prints them.
pub fn interval_line(row: &IntervalRow) -> String {
    format!(
        "{:>8.2}s  {:>9} round trips  {:>8.2} MB/s  p50 {:>8}  p99 {:>8}  max {:>8}\n",
        row.end_s,
        row.round_trips,
        row.mb_per_s,
        if row.round_trips > 0 {
            fmt_nanos(row.p50_ns as f64)
        } else {
            "-".into()
        },
        if row.round_trips > 0 {
            fmt_nanos(row.p99_ns as f64)
        } else {
            "-".into()
        },
        if row.round_trips > 0 {
            fmt_nanos(row.max_ns as f64)
        } else {
            "-".into()
        },
    )
}

/// The final summary of a ping run, opening with the answer ([`crate::report::answer::ping`]).
pub fn ping_summary(r: &PingResult) -> String {
    let mut out = crate::report::answer::text(&crate::report::answer::ping(
        &r.rtt.summary(),
        (!r.server.is_empty()).then(|| r.server.summary()).as_ref(),
        r.peer,
    ));
    let lost = r.lost();
    let pct = if r.sent > 0 {
        100.0 * lost as f64 / r.sent as f64
    } else {
        0.0
    };
    let _ = writeln!(
        out,
        "--- {} {} ping: {}-byte messages ({}), {:.2}s measured, peer: {} ---",
        r.transport,
        r.addr,
        r.size,
        fmt_bytes(r.size as u64),
        r.elapsed.as_secs_f64(),
        peer_name(r.peer)
    );
    let _ = write!(
        out,
        "sent {}  received {}  lost {} ({:.2}%)",
        r.sent, r.received, lost, pct
    );
    if r.transport == crate::probe::ping::Transport::Udp {
        let _ = write!(
            out,
            "  duplicated {}  out-of-order {}  late {}",
            r.duplicated, r.out_of_order, r.late
        );
    }
    out.push('\n');
    let mut t = Table::new(&[
        "", "min", "mean", "stddev", "p50", "p90", "p99", "p99.9", "p99.99", "max",
    ]);
    let mut row = vec!["RTT".to_string()];
    row.extend(summary_cells(&r.rtt.summary()).into_iter().take(9));
    t.row(row);
    if !r.server.is_empty() {
        let mut row = vec!["server turnaround".to_string()];
        row.extend(summary_cells(&r.server.summary()).into_iter().take(9));
        t.row(row);
    }
    out.push_str(&t.render(0));
    out
}

/// A horizontal histogram of RTTs on a log scale, ten rows per decade at most.
pub fn histogram(h: &LatencyHistogram, width: usize) -> String {
    let buckets = h.buckets(10);
    let mut out = String::new();
    let total = h.len().max(1);
    let peak = buckets.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    let mut lower = h.summary().min_ns;
    for b in &buckets {
        let bar = ((b.count as f64 / peak as f64) * width as f64).round() as usize;
        let bar = if b.count > 0 { bar.max(1) } else { 0 };
        let _ = writeln!(
            out,
            "{:>8} .. {:>8}  {:<width$}  {:>9} {:>6.2}%",
            fmt_nanos(lower as f64),
            fmt_nanos(b.le_ns as f64),
            "█".repeat(bar),
            b.count,
            100.0 * b.count as f64 / total as f64,
            width = width
        );
        lower = b.le_ns;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_are_escaped_and_aligned() {
        let mut t = Table::new(&["op", "n"]);
        t.row(vec!["SET\u{1b}[2J\u{202e}x".into(), "1".into()]);
        t.row(vec!["GET".into(), "22".into()]);
        let r = t.render(0);
        assert!(!r.contains('\u{1b}') && !r.contains('\u{202e}'), "{r:?}");
        assert!(r.contains("SET\\x1b[2J\\u{202e}x   1"), "{r}");
    }

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["name", "value"]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["long name".into(), "12345".into()]);
        assert_eq!(
            t.render(0),
            "name       value\na              1\nlong name  12345\n"
        );
    }

    #[test]
    fn histogram_counts_everything() {
        let mut h = LatencyHistogram::new();
        for v in [10_000u64, 11_000, 12_000, 900_000] {
            h.record_ns(v);
        }
        let s = histogram(&h, 20);
        assert!(s.lines().count() >= 2);
        assert!(s.contains("75.00%"));
        assert!(s.contains("25.00%"));
    }
}
