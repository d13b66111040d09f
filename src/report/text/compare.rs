//! The text of `roundtrip compare`: one row per probe (min, p50, p99, count), what each row means, the
//! conclusion.

use crate::doc::Interrupted;
use crate::probe::compare::CompareResult;
use crate::report::text::Table;
use crate::units::fmt_nanos;

/// The text of `compare` against `whom` (the server and its address), with the interruption line when the run
/// was cut short.
pub fn compare_text(
    result: &CompareResult,
    whom: &str,
    interrupted: Option<&Interrupted>,
) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "roundtrip compare {whom}: all times are round trips (RTT)\n"
    ));
    let mut t = Table::new(&["probe", "min", "p50", "p99", "count", "note"]);
    let f = |v: u64| fmt_nanos(v as f64);
    for r in &result.rows {
        let sum = &r.summary;
        let mut row = vec![r.label.clone()];
        if sum.count > 0 {
            row.extend([f(sum.min_ns), f(sum.p50_ns), f(sum.p99_ns)]);
        } else {
            row.extend(["-".to_string(), "-".to_string(), "-".to_string()]);
        }
        row.push(format!("{}/{}", sum.count, r.attempts));
        row.push(if r.error.is_some() {
            "see below".into()
        } else {
            String::new()
        });
        t.row(row);
    }
    s.push_str(&t.render(0));
    s.push('\n');
    for r in &result.rows {
        s.push_str(&format!("{:<24} {}\n", r.label, r.interpretation));
        if let Some(e) = &r.error {
            s.push_str(&format!("{:<24}   ! {e}\n", ""));
        }
    }
    if let Some(c) = result.conclusion() {
        s.push_str(&format!("\nIn short: {c}.\n"));
    }
    if let Some(i) = interrupted {
        s.push_str(&format!("\n{}", i.line()));
    }
    s
}
