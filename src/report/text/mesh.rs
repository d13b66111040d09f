//! The text of `mesh`: the matrix of sources and targets, one cell per pair.

use crate::mesh::Filter;
use crate::report::heatmap::{Cell, Matrix, fmt_loss, fmt_window};
use crate::units::fmt_duration;
use std::fmt::Write as _;

/// One cell as text: `433us / 512us  0%`, `no answer  100%`, `-` on the diagonal, empty without data.
fn cell_text(source: &str, target: &str, c: Option<&Cell>) -> String {
    if source == target {
        return "-".into();
    }
    let Some(c) = c.filter(|c| c.p50.is_some() || c.loss.is_some()) else {
        return String::new();
    };
    let rtt = match (c.p50, c.p99) {
        (Some(p50), Some(p99)) => format!("{} / {}", fmt_duration(p50), fmt_duration(p99)),
        (Some(p50), None) => format!("{} / -", fmt_duration(p50)),
        (None, _) => "no answer".into(),
    };
    match c.loss {
        Some(l) => format!("{rtt}  {}", fmt_loss(l)),
        None => rtt,
    }
}

/// The matrix as text: a heading (origin, probe, size, window), one row per source, one column per target, and
/// a line saying what a cell holds.
pub fn text(m: &Matrix, filter: &Filter) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "roundtrip mesh: {}, probe {}{}, window {}",
        crate::terminal::escape_for_terminal(&m.origin),
        filter.probe,
        filter.size.map_or(String::new(), |n| format!(" size {n}")),
        fmt_window(m.window)
    );
    let corner = "source \\ target";
    let mut cols: Vec<Vec<String>> = Vec::with_capacity(m.targets.len() + 1);
    // Source and target names come from the agents or Prometheus: escaped for the terminal.
    let name = |n: &String| crate::terminal::escape_for_terminal(n).into_owned();
    cols.push(
        std::iter::once(corner.to_string())
            .chain(m.sources.iter().map(name))
            .collect(),
    );
    for t in &m.targets {
        let mut col = vec![name(t)];
        for src in &m.sources {
            col.push(cell_text(src, t, m.cells.get(&(src.clone(), t.clone()))));
        }
        cols.push(col);
    }
    let widths: Vec<usize> = cols
        .iter()
        .map(|c| c.iter().map(|x| x.chars().count()).max().unwrap_or(0))
        .collect();
    for row in 0..=m.sources.len() {
        let mut line = String::new();
        for (i, col) in cols.iter().enumerate() {
            if i > 0 {
                line.push_str("   ");
            }
            let _ = write!(line, "{:<w$}", col[row], w = widths[i]);
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    let _ = writeln!(
        s,
        "cells: p50 / p99 RTT of the answered probes and loss (failed / all probes) over the window; \
         - = the agent itself; blank = no data"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    #[test]
    fn text_matrix_like_the_seed() {
        let names: Vec<String> = ["AD1", "AD2", "AD3"].map(String::from).to_vec();
        let us = |n| Some(Duration::from_micros(n));
        let mut cells = BTreeMap::new();
        for (s, t, p50, loss) in [
            ("AD1", "AD2", 433, 0.0),
            ("AD1", "AD3", 458, 0.0),
            ("AD2", "AD3", 135, 0.02),
        ] {
            cells.insert(
                (s.to_string(), t.to_string()),
                Cell {
                    p50: us(p50),
                    p99: us(p50 + 100),
                    loss: Some(loss),
                    probes: 300,
                },
            );
        }
        cells.insert(
            ("AD3".into(), "AD1".into()),
            Cell {
                p50: None,
                p99: None,
                loss: Some(1.0),
                probes: 300,
            },
        );
        let m = Matrix {
            sources: names.clone(),
            targets: names,
            cells,
            window: Duration::from_secs(300),
            origin: "Prometheus http://p:9090".into(),
        };
        let t = text(&m, &Filter::default());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "roundtrip mesh: Prometheus http://p:9090, probe tcp, window 5m"
        );
        assert_eq!(
            &lines[1..5],
            [
                "source \\ target   AD1               AD2                 AD3",
                "AD1               -                 433us / 533us  0%   458us / 558us  0%",
                "AD2                                 -                   135us / 235us  2.0%",
                "AD3               no answer  100%                       -",
            ]
        );
        assert!(lines[5].starts_with("cells: p50 / p99"));
    }
}
