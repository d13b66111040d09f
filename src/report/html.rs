//! One self-contained HTML page: inline SVG charts, tables, the runs' settings and environment. No scripts,
//! no fonts or styles fetched from anywhere; light and dark follow the viewer's `prefers-color-scheme`.
#![forbid(unsafe_code)]

use super::svg::{self, Chart, esc};
use std::fmt::Write;

/// A table of text cells; columns after the first are right-aligned.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Caption above the table.
    pub caption: String,
    /// Column names.
    pub head: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

/// A chart with a stable id (used as the HTML anchor and to pick a chart for `--svg`).
#[derive(Debug, Clone)]
pub struct Figure {
    /// Short id, e.g. `rtt-time`, `distribution`, `percentiles`.
    pub id: String,
    /// The chart.
    pub chart: Chart,
}

/// A part of the page: the charts and tables of one kind of result.
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// Heading.
    pub heading: String,
    /// The answer the section opens with, one sentence per result and its `note:` lines
    /// ([`crate::report::answer::lead`]).
    pub lead: Vec<String>,
    /// Tables shown above the charts.
    pub tables: Vec<Table>,
    /// Charts.
    pub figures: Vec<Figure>,
    /// Remarks (what was downsampled, what was left out).
    pub notes: Vec<String>,
}

/// What the page says about one result: where it came from, where and when it was measured, its settings.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    /// Label used in legends.
    pub label: String,
    /// File it was read from (or how it was made).
    pub source: String,
    /// Command that produced it.
    pub kind: String,
    /// Host name of the measuring machine.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// roundtrip version that measured.
    pub version: String,
    /// Start of the measurement, Unix seconds.
    pub started_unix_s: Option<f64>,
    /// Settings as (name, value).
    pub settings: Vec<(String, String)>,
    /// The full log drawn, if any, and its row count.
    pub full_log: Option<(String, u64)>,
}

/// The whole page.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Title.
    pub title: String,
    /// When the page was made, Unix seconds.
    pub generated_unix_s: f64,
    /// The results drawn.
    pub runs: Vec<RunInfo>,
    /// Sections in order.
    pub sections: Vec<Section>,
}

const PAGE_CSS: &str = "\
:root{color-scheme:light dark}\
body{margin:0;padding:24px 32px;background:var(--bg);color:var(--fg);\
font-family:system-ui,-apple-system,'Segoe UI','DejaVu Sans',Helvetica,Arial,sans-serif;font-size:14px;line-height:1.45}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--grid);padding-bottom:4px}\
h3{font-size:15px;margin:16px 0 6px}.meta{color:var(--axis);margin:0 0 16px}\
table{border-collapse:collapse;margin:6px 0 14px;font-variant-numeric:tabular-nums}\
caption{text-align:left;font-weight:600;padding:4px 0}\
th,td{padding:3px 10px;border-bottom:1px solid var(--grid);text-align:right;white-space:nowrap}\
th:first-child,td:first-child{text-align:left}td:last-child{white-space:normal;overflow-wrap:anywhere}th{color:var(--axis);font-weight:600}\
td.k{color:var(--axis)}figure{margin:10px 0 22px;max-width:1200px}svg.rt{display:block}\
.answer{font-size:15px;font-weight:600;margin:6px 0 10px}.note{color:var(--axis);font-size:12px}.runs{display:flex;flex-wrap:wrap;gap:8px 36px}\n";

/// Writes the start of a page into `o`: doctype, head (title, the shared styles plus `extra_css`), the
/// opening body, the `<h1>` title and the "Made by roundtrip" line dated `generated_unix_s`. Other pages (the
/// heat map) share it, so every page of roundtrip looks the same; close it with [`page_end`].
pub fn page_start(o: &mut String, title: &str, extra_css: &str, generated_unix_s: f64) {
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\" class=\"rt\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta name=\"generator\" content=\"roundtrip {}\"><title>{}</title><style>{}{}{}</style></head>\n<body class=\"rt\">\n",
        env!("CARGO_PKG_VERSION"),
        esc(title),
        svg::CSS,
        PAGE_CSS,
        extra_css
    );
    let _ = writeln!(o, "<h1>{}</h1>", esc(title));
    let _ = writeln!(
        o,
        "<p class=\"meta\">Made by roundtrip {} on {} UTC. Self-contained: no scripts, nothing fetched.</p>",
        env!("CARGO_PKG_VERSION"),
        utc(generated_unix_s)
    );
}

/// Closes a page opened with [`page_start`].
pub fn page_end(o: &mut String) {
    o.push_str("</body></html>\n");
}

/// Renders the page as one HTML document.
pub fn render(page: &Page) -> String {
    let mut o = String::with_capacity(64 * 1024);
    page_start(&mut o, &page.title, "", page.generated_unix_s);

    // Where and when each result was measured.
    o.push_str("<h2 id=\"runs\">Runs and environment</h2>\n");
    let env = Table {
        caption: String::new(),
        head: [
            "result",
            "command",
            "host",
            "kernel",
            "roundtrip",
            "started (UTC)",
            "file",
        ]
        .map(String::from)
        .to_vec(),
        rows: page
            .runs
            .iter()
            .map(|r| {
                let mut file = r.source.clone();
                if let Some((p, n)) = &r.full_log {
                    let _ = write!(file, " + full log {p} ({n} rows)");
                }
                vec![
                    r.label.clone(),
                    r.kind.clone(),
                    dash(&r.hostname),
                    dash(&r.kernel),
                    dash(&r.version),
                    r.started_unix_s.map_or("-".into(), utc),
                    file,
                ]
            })
            .collect(),
    };
    table(&mut o, &env);
    o.push_str("<div class=\"runs\">\n");
    for r in &page.runs {
        let t = Table {
            caption: format!("Settings: {}", r.label),
            head: vec!["setting".into(), "value".into()],
            rows: r
                .settings
                .iter()
                .map(|(k, v)| vec![k.clone(), v.clone()])
                .collect(),
        };
        table(&mut o, &t);
    }
    o.push_str("</div>\n");

    for s in &page.sections {
        let _ = writeln!(o, "<h2>{}</h2>", esc(&s.heading));
        for l in &s.lead {
            // The sentence, then its notes (why a share is not measurable).
            let class = if l.contains("note: ") {
                "note"
            } else {
                "answer"
            };
            let _ = writeln!(o, "<p class=\"{class}\">{}</p>", esc(l));
        }
        for t in &s.tables {
            table(&mut o, t);
        }
        for f in &s.figures {
            let _ = writeln!(
                o,
                "<figure id=\"{}\">{}</figure>",
                esc(&f.id),
                f.chart.render(false)
            );
        }
        for n in &s.notes {
            let _ = writeln!(o, "<p class=\"note\">{}</p>", esc(n));
        }
    }
    page_end(&mut o);
    o
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn table(o: &mut String, t: &Table) {
    o.push_str("<table>");
    if !t.caption.is_empty() {
        let _ = write!(o, "<caption>{}</caption>", esc(&t.caption));
    }
    o.push_str("<thead><tr>");
    for h in &t.head {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        o.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            if i == 0 {
                let _ = write!(o, "<td class=\"k\">{}</td>", esc(c));
            } else {
                let _ = write!(o, "<td>{}</td>", esc(c));
            }
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>\n");
}

/// Formats Unix seconds as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn utc(unix_s: f64) -> String {
    if !unix_s.is_finite() || unix_s < 0.0 {
        return "-".into();
    }
    let secs = unix_s as i64;
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = crate::units::civil_date(secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00");
        assert_eq!(utc(1_795_328_563.4), "2026-11-22 06:22:43");
    }

    #[test]
    fn page_is_self_contained_and_escaped() {
        let page = Page {
            title: "<b>t</b>".into(),
            generated_unix_s: 0.0,
            runs: vec![RunInfo {
                label: "a&b".into(),
                settings: vec![("target".into(), "<x>".into())],
                ..Default::default()
            }],
            sections: vec![],
        };
        let h = render(&page);
        assert!(
            h.contains("&lt;b&gt;t&lt;/b&gt;") && h.contains("a&amp;b") && h.contains("&lt;x&gt;")
        );
        assert!(!h.contains("<script") && !h.contains("http://") && !h.contains("https://"));
        assert!(h.contains("prefers-color-scheme: dark"));
    }
}
