//! The all-pairs matrix as a self-contained HTML heat map: rows are sources, columns targets, each cell
//! coloured by its p50 RTT and showing p50 / p99 and loss. Used by `roundtrip mesh --report` and by the
//! agent's `/` page. (Interface fixed; rendering by the mesh work.)

use super::html;
use super::svg::esc;
pub use crate::mesh::matrix::{Cell, Matrix, fmt_window};
use crate::units::fmt_duration;
use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Renders `matrix` as one self-contained HTML page titled `title`.
///
/// Each cell's background is its p50 on a log scale from the fastest p50 of the matrix (green) to the
/// slowest (red); the scale spans at least one decade, so cells a few percent apart do not look far apart.
/// Cells show `p50 / p99` and the loss; loss above zero is outlined. The diagonal (an agent and itself) and
/// pairs without data are grey; pairs probed without any answer are dark red. With one source and more than
/// [`TRANSPOSE_OVER`] targets (an agent's own page) the matrix is drawn with one row per target.
pub fn render(title: &str, matrix: &Matrix) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut o = String::with_capacity(16 * 1024 + 256 * matrix.cells.len());
    html::page_start(&mut o, title, HEAT_CSS, now);
    let _ = writeln!(
        o,
        "<p>From {}, over {}. Each cell: median (p50) / 99th percentile RTT of the answered probes, and the \
loss (failed probes / probes) in the window.</p>",
        esc(&matrix.origin),
        esc(&fmt_window(matrix.window))
    );
    if matrix.sources.is_empty() || matrix.targets.is_empty() {
        o.push_str("<p class=\"note\">No data: the matrix has no source or no target.</p>\n");
        html::page_end(&mut o);
        return o;
    }
    let scale = Scale::of(matrix);
    legend(&mut o, &scale);
    if matrix.sources.len() == 1 && matrix.targets.len() > TRANSPOSE_OVER {
        let source = &matrix.sources[0];
        let _ = write!(
            o,
            "<table class=\"hm\"><thead><tr><th>target</th><th>from {}</th></tr></thead><tbody>",
            esc(source)
        );
        for target in &matrix.targets {
            let _ = write!(o, "<tr><th scope=\"row\">{}</th>", esc(target));
            cell(&mut o, matrix, &scale, source, target);
            o.push_str("</tr>");
        }
    } else {
        o.push_str("<table class=\"hm\"><thead><tr><th>source \\ target</th>");
        for target in &matrix.targets {
            let _ = write!(o, "<th>{}</th>", esc(target));
        }
        o.push_str("</tr></thead><tbody>");
        for source in &matrix.sources {
            let _ = write!(o, "<tr><th scope=\"row\">{}</th>", esc(source));
            for target in &matrix.targets {
                cell(&mut o, matrix, &scale, source, target);
            }
            o.push_str("</tr>");
        }
    }
    o.push_str("</tbody></table>\n");
    html::page_end(&mut o);
    o
}

/// With one source and more targets than this, [`render`] draws one row per target.
pub const TRANSPOSE_OVER: usize = 12;

/// Formats a loss fraction as a percentage: `0%`, `0.25%`, `2.5%`, `100%`.
pub fn fmt_loss(loss: f64) -> String {
    let pct = loss * 100.0;
    if pct <= 0.0 {
        "0%".into()
    } else if pct < 0.01 {
        "<0.01%".into()
    } else if pct < 1.0 {
        format!("{pct:.2}%")
    } else if pct < 10.0 {
        format!("{pct:.1}%")
    } else {
        format!("{pct:.0}%")
    }
}

const HEAT_CSS: &str = "\
table.hm th,table.hm td{text-align:center;white-space:nowrap;padding:4px 8px;border:1px solid var(--grid)}\
table.hm th{font-weight:600}table.hm thead th{color:var(--axis)}\
table.hm td.c{color:#111}table.hm td.na{background:var(--grid);color:var(--axis)}\
table.hm td.dead{background:#7f1d1d;color:#fff}table.hm td.lossy{outline:2px solid #d62728;outline-offset:-3px}\
table.hm .l{font-size:12px}table.hm .bad{color:#b00020;font-weight:700}table.hm td.dead .bad{color:#fff}\
.legend{display:flex;flex-wrap:wrap;align-items:center;gap:4px 6px;margin:8px 0 12px;font-size:12px}\
.legend span.sw{display:inline-block;padding:2px 8px;color:#111;border:1px solid var(--grid)}\n";

/// The colour scale: p50 from `lo` (green) to `hi` (red), logarithmic.
struct Scale {
    lo: f64,
    hi: f64,
}

impl Scale {
    fn of(matrix: &Matrix) -> Scale {
        let p50s = matrix
            .cells
            .iter()
            .filter(|((s, t), _)| s != t)
            .filter_map(|(_, c)| c.p50)
            .map(|d| d.as_secs_f64())
            .filter(|v| *v > 0.0 && v.is_finite());
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for v in p50s {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            lo = 1e-4;
            hi = 1e-3;
        }
        Scale {
            lo,
            hi: hi.max(lo * 10.0),
        }
    }

    /// 0 at `lo`, 1 at `hi`.
    fn position(&self, secs: f64) -> f64 {
        let t = (secs / self.lo).ln() / (self.hi / self.lo).ln();
        if t.is_finite() {
            t.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    fn colour(&self, secs: f64) -> String {
        colour_at(self.position(secs))
    }
}

/// Green (0) through yellow to red (1).
fn colour_at(t: f64) -> String {
    format!("hsl({:.0},70%,72%)", 120.0 * (1.0 - t))
}

fn legend(o: &mut String, scale: &Scale) {
    o.push_str("<div class=\"legend\"><span>p50, log scale:</span>");
    const STEPS: usize = 6;
    for k in 0..STEPS {
        let t = k as f64 / (STEPS - 1) as f64;
        let v = scale.lo * (scale.hi / scale.lo).powf(t);
        let _ = write!(
            o,
            "<span class=\"sw\" style=\"background:{}\">{}</span>",
            colour_at(t),
            esc(&fmt_duration(Duration::from_secs_f64(v)))
        );
    }
    o.push_str(
        "<span class=\"sw\" style=\"background:var(--grid);color:var(--axis)\">itself / no data</span>\
<span class=\"sw\" style=\"background:#7f1d1d;color:#fff\">no answer</span>\
<span class=\"sw\" style=\"outline:2px solid #d62728;outline-offset:-3px\">loss &gt; 0</span></div>\n",
    );
}

fn cell(o: &mut String, matrix: &Matrix, scale: &Scale, source: &str, target: &str) {
    if source == target {
        let _ = write!(
            o,
            "<td class=\"na\" title=\"{} itself\">-</td>",
            esc(source)
        );
        return;
    }
    let c = matrix.cells.get(&(source.to_string(), target.to_string()));
    let Some(c) = c.filter(|c| c.p50.is_some() || c.loss.is_some()) else {
        let _ = write!(
            o,
            "<td class=\"na\" title=\"{} to {}: no data\"></td>",
            esc(source),
            esc(target)
        );
        return;
    };
    let dur = |d: Option<Duration>| d.map_or("-".to_string(), fmt_duration);
    let loss = c.loss.map_or("-".to_string(), fmt_loss);
    let lossy = c.loss.is_some_and(|l| l > 0.0);
    let title = format!(
        "{source} to {target}: p50 {}, p99 {}, loss {loss}, {} probes",
        dur(c.p50),
        dur(c.p99),
        c.probes
    );
    let loss_span = format!(
        "<span class=\"l{}\">{}</span>",
        if lossy { " bad" } else { "" },
        esc(&loss)
    );
    match c.p50 {
        Some(p50) => {
            let _ = write!(
                o,
                "<td class=\"c{}\" style=\"background:{}\" title=\"{}\">{} / {}<br>{loss_span}</td>",
                if lossy { " lossy" } else { "" },
                scale.colour(p50.as_secs_f64()),
                esc(&title),
                esc(&fmt_duration(p50)),
                esc(&dur(c.p99)),
            );
        }
        None => {
            let _ = write!(
                o,
                "<td class=\"dead\" title=\"{}\">no answer<br>{loss_span}</td>",
                esc(&title)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn us(n: u64) -> Option<Duration> {
        Some(Duration::from_micros(n))
    }

    fn three() -> Matrix {
        let names: Vec<String> = ["ad1", "ad2", "ad3"].map(String::from).to_vec();
        let mut cells = BTreeMap::new();
        let mut put = |s: &str, t: &str, p50: u64, loss: f64| {
            cells.insert(
                (s.to_string(), t.to_string()),
                Cell {
                    p50: us(p50),
                    p99: us(p50 * 2),
                    loss: Some(loss),
                    probes: 300,
                },
            );
        };
        put("ad1", "ad2", 433, 0.0);
        put("ad1", "ad3", 458, 0.0);
        put("ad2", "ad1", 433, 0.0);
        put("ad2", "ad3", 135, 0.1);
        put("ad3", "ad1", 458, 0.0);
        // ad3 -> ad2 missing.
        Matrix {
            sources: names.clone(),
            targets: names,
            cells,
            window: Duration::from_secs(300),
            origin: "agents a, b, c".into(),
        }
    }

    fn tds(h: &str) -> Vec<&str> {
        h.split("<td")
            .skip(1)
            .map(|s| &s[..s.find("</td>").unwrap()])
            .collect()
    }

    #[test]
    fn matrix_cells_diagonal_and_missing() {
        let h = render("mesh", &three());
        let cells = tds(&h);
        assert_eq!(cells.len(), 9, "{h}");
        // Row-major: the diagonal is grey with a dash, the missing ad3 -> ad2 grey and empty.
        for k in [0, 4, 8] {
            assert!(
                cells[k].starts_with(" class=\"na\"") && cells[k].ends_with(">-"),
                "{}",
                cells[k]
            );
        }
        assert!(
            cells[7].contains("class=\"na\"") && cells[7].ends_with("\">"),
            "{}",
            cells[7]
        );
        assert!(cells[7].contains("no data"));
        assert!(cells[1].contains("433us / 866us") && cells[1].contains(">0%<"));
        // Loss above zero is outlined and highlighted.
        assert!(cells[5].contains("lossy") && cells[5].contains("class=\"l bad\">10%"));
        assert!(!cells[1].contains("lossy"));
        // The origin and the window are stated, and the legend has the scale.
        assert!(h.contains("From agents a, b, c, over 5m."));
        assert!(h.contains("log scale") && h.contains(">135us<"));
        assert!(!h.contains("<script") && !h.contains("http://") && !h.contains("https://"));
    }

    #[test]
    fn faster_cells_are_greener() {
        let h = render("mesh", &three());
        let hue = |cell: &str| -> f64 {
            let i = cell.find("hsl(").unwrap() + 4;
            cell[i..cell[i..].find(',').unwrap() + i].parse().unwrap()
        };
        let cells = tds(&h);
        let (fast, slow) = (hue(cells[5]), hue(cells[2]));
        assert_eq!(fast, 120.0);
        assert!(slow < fast && slow > 0.0, "{slow}");
    }

    #[test]
    fn names_are_escaped() {
        let mut m = three();
        m.sources[0] = "<script>alert(1)</script>".into();
        m.targets[1] = "a\"b&c".into();
        m.origin = "<i>o</i>".into();
        let h = render("<b>t</b>", &m);
        assert!(!h.contains("<script>") && !h.contains("<i>o") && !h.contains("<b>t"));
        assert!(h.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(h.contains("a&quot;b&amp;c") && h.contains("&lt;i&gt;o&lt;/i&gt;"));
    }

    #[test]
    fn empty_matrix_says_so() {
        let h = render("empty", &Matrix::default());
        assert!(h.contains("No data") && !h.contains("<td"), "{h}");
        assert!(h.ends_with("</body></html>\n"));
    }

    #[test]
    fn no_answer_and_no_probe() {
        let mut m = three();
        m.cells.insert(
            ("ad3".into(), "ad2".into()),
            Cell {
                p50: None,
                p99: None,
                loss: Some(1.0),
                probes: 10,
            },
        );
        m.cells
            .insert(("ad1".into(), "ad2".into()), Cell::default());
        let h = render("m", &m);
        let cells = tds(&h);
        assert!(cells[7].contains("class=\"dead\"") && cells[7].contains("no answer"));
        assert!(cells[7].contains("100%"));
        assert!(cells[1].contains("class=\"na\""), "{}", cells[1]);
    }

    #[test]
    fn one_source_many_targets_is_one_row_per_target() {
        let targets: Vec<String> = (1..=20).map(|i| format!("10.0.0.{i}")).collect();
        let mut cells = BTreeMap::new();
        for t in &targets {
            cells.insert(
                ("me".to_string(), t.clone()),
                Cell {
                    p50: us(50),
                    p99: us(90),
                    loss: Some(0.0),
                    probes: 60,
                },
            );
        }
        let m = Matrix {
            sources: vec!["me".into()],
            targets,
            cells,
            window: Duration::from_secs(60),
            origin: "agent me".into(),
        };
        let h = render("agent", &m);
        assert_eq!(h.matches("<tr>").count(), 21);
        assert!(h.contains("from me") && h.contains("over 1m."));
    }

    #[test]
    fn windows_and_losses() {
        assert_eq!(fmt_window(Duration::from_secs(300)), "5m");
        assert_eq!(fmt_window(Duration::from_secs(3600)), "1h");
        assert_eq!(fmt_window(Duration::from_secs(90)), "90s");
        assert_eq!(fmt_window(Duration::from_millis(1500)), "1500ms");
        assert_eq!(fmt_loss(0.0), "0%");
        assert_eq!(fmt_loss(0.0025), "0.25%");
        assert_eq!(fmt_loss(0.1), "10%");
        assert_eq!(fmt_loss(1.0), "100%");
    }
}
