//! `capture whatif` pictures: one stacked bar per RTT (think, server, round trips, transfer).

use std::fmt::Write as _;

/// One bar: its label and the four parts in seconds (think, server, round trips, transfer).
#[derive(Debug, Clone)]
pub struct Bar {
    /// Label under the bar ("0.6 ms").
    pub label: String,
    /// Think, server, round trips, transfer, seconds.
    pub parts: [f64; 4],
}

const NAMES: [&str; 4] = ["think", "server", "round trips", "transfer"];
const COLORS: [&str; 4] = ["#9e9e9e", "#4e79a7", "#e15759", "#f28e2b"];

/// A stacked bar chart as a standalone SVG document.
pub fn stacked_svg(title: &str, bars: &[Bar]) -> String {
    let (w, h, left, top, bottom) = (120.0 + 110.0 * bars.len() as f64, 360.0, 70.0, 40.0, 60.0);
    let max = bars
        .iter()
        .map(|b| b.parts.iter().sum::<f64>())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let scale = (h - top - bottom) / max;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><text x="{left}" y="20" font-size="14">{}</text>"#,
        esc(title)
    );
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let y = h - bottom - v * scale;
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{v:.3} s</text>"##,
            w - 10.0,
            left - 5.0,
            y + 4.0
        );
    }
    for (i, b) in bars.iter().enumerate() {
        let x = left + 20.0 + 110.0 * i as f64;
        let mut y = h - bottom;
        for (p, c) in b.parts.iter().zip(COLORS) {
            let hh = p.max(0.0) * scale;
            y -= hh;
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="60" height="{hh:.1}" fill="{c}"/>"#
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" text-anchor="middle">{:.3} s</text>"#,
            x + 30.0,
            h - bottom + 16.0,
            esc(&b.label),
            x + 30.0,
            y - 4.0,
            b.parts.iter().sum::<f64>()
        );
    }
    for (k, (n, c)) in NAMES.iter().zip(COLORS).enumerate() {
        let x = left + 110.0 * k as f64;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{c}"/><text x="{}" y="{}">{n}</text>"#,
            h - 22.0,
            x + 14.0,
            h - 13.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The chart in a small HTML page with the text output below it.
pub fn html(title: &str, svg: &str, text: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title></head><body><h1>{t}</h1>{svg}<pre>{}</pre></body></html>\n",
        esc(text),
        t = esc(title)
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
