//! Drawing a [`Chart`]: axes, ticks, series marks and the legend, written out as SVG text.

use super::{
    COLORS, CSS, Chart, LEFT, LEGEND_ROW, Mark, RIGHT, Scale, TOP, esc, label, legend_width,
};
use std::fmt::Write;

impl Chart {
    /// Renders the chart as an `<svg>` element. With `standalone` the CSS and the XML namespace are included so
    /// the file opens on its own; inside an HTML page the page carries the CSS once.
    pub fn render(&self, standalone: bool) -> String {
        let (w, h) = (self.width, self.height);
        let mut o = String::with_capacity(16 * 1024);
        let _ = write!(
            o,
            "<svg class=\"rt\"{} viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{}\">",
            if standalone {
                " xmlns=\"http://www.w3.org/2000/svg\""
            } else {
                ""
            },
            esc(&self.title)
        );
        if standalone {
            let _ = write!(o, "<style>{CSS}</style>");
        }
        let _ = write!(o, "<title>{}</title>", esc(&self.title));
        let _ = write!(
            o,
            "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\"/>"
        );
        let _ = write!(
            o,
            "<text class=\"title\" x=\"{LEFT}\" y=\"22\">{}</text>",
            esc(&self.title)
        );
        self.render_legend(&mut o);
        if self.horizontal_bars() {
            self.render_horizontal(&mut o);
        } else {
            let (pl, pr) = self.plot_x();
            let (pt, pb) = self.plot_y();
            let ys = self.y_scale();
            // Horizontal grid and y ticks.
            o.push_str("<g class=\"yaxis\">");
            for v in ys.ticks() {
                let y = ys.map(v);
                let _ = write!(
                    o,
                    "<g class=\"tick y\"><line class=\"grid\" x1=\"{pl}\" x2=\"{pr}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></g>",
                    pl - 6.0,
                    y + 4.0,
                    esc(&label(v, self.y.unit))
                );
            }
            let _ = write!(
                o,
                "<text class=\"axis-title\" transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text></g>",
                (pt + pb) / 2.0,
                esc(&self.y.title())
            );
            // X ticks or categories.
            o.push_str("<g class=\"xaxis\">");
            match (&self.categories, self.x_scale()) {
                (Some(cats), _) => {
                    let n = cats.len().max(1) as f64;
                    let step = (pr - pl) / n;
                    for (i, c) in cats.iter().enumerate() {
                        let x = pl + step * (i as f64 + 0.5);
                        let _ = write!(
                            o,
                            "<g class=\"tick x cat\"><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
                            pb + 16.0,
                            esc(c)
                        );
                    }
                }
                (None, Some(xs)) => {
                    for v in xs.ticks() {
                        let x = xs.map(v);
                        let _ = write!(
                            o,
                            "<g class=\"tick x\"><line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{pt}\" y2=\"{pb}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
                            pb + 16.0,
                            esc(&label(v, self.x.unit))
                        );
                    }
                    let _ = write!(
                        o,
                        "<text class=\"axis-title\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                        (pl + pr) / 2.0,
                        pb + 38.0,
                        esc(&self.x.title())
                    );
                }
                (None, None) => {}
            }
            o.push_str("</g>");
            // Axis lines.
            let _ = write!(
                o,
                "<path class=\"axis\" d=\"M{pl} {pt}V{pb}H{pr}\" fill=\"none\"/>"
            );
            // Data, clipped to the plot area.
            let clip = format!(
                "clip{:x}",
                hash(&self.title) ^ u64::from(w) << 32 ^ u64::from(h)
            );
            let _ = write!(
                o,
                "<clipPath id=\"{clip}\"><rect x=\"{pl}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"/></clipPath><g class=\"data\" clip-path=\"url(#{clip})\">",
                pt - 4.0,
                pr - pl + 4.0,
                pb - pt + 8.0
            );
            let nbars = self
                .series
                .iter()
                .filter(|s| matches!(s.mark, Mark::Bars(_)))
                .count();
            let mut bar_index = 0;
            for s in &self.series {
                let class = format!(
                    "c{}{}",
                    s.color % COLORS,
                    if s.dashed { " dash" } else { "" }
                );
                let name = esc(&s.name);
                match (&s.mark, self.x_scale()) {
                    (Mark::Bars(vals), _) => {
                        let cats = self.categories.as_ref().map_or(vals.len(), |c| c.len());
                        let step = (pr - pl) / cats.max(1) as f64;
                        let group = step * 0.8;
                        let bw = group / nbars.max(1) as f64;
                        let base = ys.map(ys.base());
                        for (i, &v) in vals.iter().enumerate().take(cats) {
                            if !v.is_finite() {
                                continue;
                            }
                            let x = pl + step * i as f64 + step * 0.1 + bw * bar_index as f64;
                            let y = ys.map(v);
                            let _ = write!(
                                o,
                                "<rect class=\"bar {class}\" data-name=\"{name}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{name}: {}</title></rect>",
                                y.min(base),
                                (bw - 1.0).max(1.0),
                                (base - y).abs(),
                                esc(&label(v, self.y.unit))
                            );
                        }
                        bar_index += 1;
                    }
                    (_, None) => {}
                    (mark, Some(xs)) => render_mark(&mut o, mark, &class, &name, &xs, &ys),
                }
            }
            o.push_str("</g>");
        }
        if let Some(note) = &self.note {
            let _ = write!(
                o,
                "<text class=\"note\" x=\"{LEFT}\" y=\"{:.1}\">{}</text>",
                f64::from(h) - 8.0,
                esc(note)
            );
        }
        o.push_str("</svg>");
        o
    }

    /// Axes and bars of a horizontal bar chart: value ticks along the bottom, categories down the left.
    fn render_horizontal(&self, o: &mut String) {
        let (pl, pr) = self.plot_x();
        let (pt, pb) = self.plot_y();
        let xs = self.value_scale();
        o.push_str("<g class=\"xaxis\">");
        for v in xs.ticks() {
            let x = xs.map(v);
            let _ = write!(
                o,
                "<g class=\"tick x\"><line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{pt}\" y2=\"{pb}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
                pb + 16.0,
                esc(&label(v, self.y.unit))
            );
        }
        let _ = write!(
            o,
            "<text class=\"axis-title\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
            (pl + pr) / 2.0,
            pb + 38.0,
            esc(&self.y.title())
        );
        let cats = self.categories.as_deref().unwrap_or_default();
        let step = (pb - pt) / cats.len().max(1) as f64;
        o.push_str("<g class=\"yaxis\">");
        for (i, c) in cats.iter().enumerate() {
            let y = pt + step * (i as f64 + 0.5);
            let _ = write!(
                o,
                "<g class=\"tick y cat\"><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></g>",
                pl - 6.0,
                y + 4.0,
                esc(c)
            );
        }
        o.push_str("</g>");
        let _ = write!(
            o,
            "<path class=\"axis\" d=\"M{pl} {pt}V{pb}H{pr}\" fill=\"none\"/><g class=\"data\">"
        );
        let nbars = self
            .series
            .iter()
            .filter(|s| matches!(s.mark, Mark::Bars(_)))
            .count()
            .max(1);
        let bh = step * 0.8 / nbars as f64;
        let base = xs.map(xs.base());
        let mut bar_index = 0;
        for s in &self.series {
            let Mark::Bars(vals) = &s.mark else { continue };
            let class = format!("c{}", s.color % COLORS);
            let name = esc(&s.name);
            for (i, &v) in vals.iter().enumerate().take(cats.len()) {
                if !v.is_finite() || !xs.shows(v) {
                    continue;
                }
                let y = pt + step * i as f64 + step * 0.1 + bh * bar_index as f64;
                let x = xs.map(v);
                let _ = write!(
                    o,
                    "<rect class=\"bar {class}\" data-name=\"{name}\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{}: {name}: {}</title></rect>",
                    x.min(base),
                    (x - base).abs(),
                    (bh - 1.0).max(1.0),
                    esc(&cats[i]),
                    esc(&label(v, self.y.unit))
                );
            }
            bar_index += 1;
        }
        o.push_str("</g>");
    }

    fn render_legend(&self, o: &mut String) {
        let avail = f64::from(self.width) - LEFT - RIGHT;
        let mut x = 0.0;
        let mut row = 0.0;
        for s in self.series.iter().filter(|s| !s.name.is_empty()) {
            let w = legend_width(&s.name);
            if x > 0.0 && x + w > avail {
                row += 1.0;
                x = 0.0;
            }
            let lx = LEFT + x;
            let ly = TOP + 6.0 + row * LEGEND_ROW;
            let swatch = match s.mark {
                Mark::Line(_) | Mark::Step(_) | Mark::Columns(_) => format!(
                    "<line class=\"step c{}{}\" x1=\"{lx:.1}\" x2=\"{:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke-width=\"3\"/>",
                    s.color % COLORS,
                    if s.dashed { " dash" } else { "" },
                    lx + 18.0
                ),
                _ => format!(
                    "<rect class=\"c{}\" x=\"{lx:.1}\" y=\"{:.1}\" width=\"18\" height=\"10\" fill-opacity=\".6\" stroke=\"none\"/>",
                    s.color % COLORS,
                    ly - 5.0
                ),
            };
            let _ = write!(
                o,
                "<g class=\"legend\">{swatch}<text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
                lx + 24.0,
                ly + 4.0,
                esc(&s.name)
            );
            x += w;
        }
    }
}

fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn render_mark(o: &mut String, mark: &Mark, class: &str, name: &str, xs: &Scale, ys: &Scale) {
    let mut d = String::new();
    match mark {
        Mark::Line(p) => {
            for &(x, y) in p.iter().filter(|(x, y)| xs.shows(*x) && ys.shows(*y)) {
                let cmd = if d.is_empty() { 'M' } else { 'L' };
                let _ = write!(d, "{cmd}{:.1} {:.1}", xs.map(x), ys.map(y));
            }
            let _ = write!(
                o,
                "<path class=\"line {class}\" data-name=\"{name}\" d=\"{d}\"/>"
            );
        }
        Mark::Step(p) => {
            let pts: Vec<_> = p
                .iter()
                .filter(|(x, y)| xs.shows(*x) && ys.shows(*y))
                .collect();
            for (i, &&(x, y)) in pts.iter().enumerate() {
                let (px, py) = (xs.map(x), ys.map(y));
                if i == 0 {
                    let _ = write!(d, "M{px:.1} {py:.1}");
                } else {
                    let _ = write!(d, "H{px:.1}V{py:.1}");
                }
            }
            let _ = write!(
                o,
                "<path class=\"step {class}\" data-name=\"{name}\" d=\"{d}\"/>"
            );
        }
        Mark::Band(p) => {
            let pts: Vec<_> = p
                .iter()
                .filter(|(x, a, b)| xs.shows(*x) && ys.shows(*a) && ys.shows(*b))
                .collect();
            for &&(x, _, hi) in &pts {
                let cmd = if d.is_empty() { 'M' } else { 'L' };
                let _ = write!(d, "{cmd}{:.1} {:.1}", xs.map(x), ys.map(hi));
            }
            for &&(x, lo, _) in pts.iter().rev() {
                let _ = write!(d, "L{:.1} {:.1}", xs.map(x), ys.map(lo));
            }
            if !d.is_empty() {
                d.push('Z');
            }
            let _ = write!(
                o,
                "<path class=\"band {class}\" data-name=\"{name}\" d=\"{d}\"/>"
            );
        }
        Mark::Columns(p) => {
            // Stroke width: the spacing of the columns, so that adjacent columns touch.
            let mut width: f64 = 1.0;
            if p.len() > 1 {
                let span = xs.map(p[p.len() - 1].0) - xs.map(p[0].0);
                width = (span / (p.len() - 1) as f64).clamp(1.0, 3.0);
            }
            for &(x, lo, hi) in p
                .iter()
                .filter(|(x, a, b)| xs.shows(*x) && ys.shows(*a) && ys.shows(*b))
            {
                let _ = write!(d, "M{:.1} {:.1}V{:.1}", xs.map(x), ys.map(lo), ys.map(hi));
            }
            let _ = write!(
                o,
                "<path class=\"cols {class}\" data-name=\"{name}\" stroke-width=\"{width:.1}\" d=\"{d}\"/>"
            );
        }
        Mark::Histogram(p) => {
            let base = ys.map(ys.base());
            let mut last_hi = f64::NAN;
            for &(a, b, v) in p
                .iter()
                .filter(|(a, b, v)| xs.shows(*a) && xs.shows(*b) && ys.shows(*v))
            {
                let (x0, x1, y) = (xs.map(a), xs.map(b), ys.map(v));
                if d.is_empty() || (x0 - last_hi).abs() > 0.05 {
                    if !d.is_empty() {
                        let _ = write!(d, "V{base:.1}");
                    }
                    let _ = write!(d, "M{x0:.1} {base:.1}");
                }
                let _ = write!(d, "V{y:.1}H{x1:.1}");
                last_hi = x1;
            }
            if !d.is_empty() {
                let _ = write!(d, "V{base:.1}");
            }
            let _ = write!(
                o,
                "<path class=\"hist {class}\" data-name=\"{name}\" d=\"{d}\"/>"
            );
        }
        Mark::Points(p) => {
            for &(x, y) in p.iter().filter(|(x, y)| xs.shows(*x) && ys.shows(*y)) {
                let _ = write!(
                    o,
                    "<circle class=\"pts {class}\" data-name=\"{name}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\"/>",
                    xs.map(x),
                    ys.map(y)
                );
            }
        }
        Mark::Spans(p) => {
            let (top, bottom) = (ys.px0.min(ys.px1), ys.px0.max(ys.px1));
            for &(a, b) in p.iter().filter(|(a, b)| xs.shows(*a) && xs.shows(*b)) {
                let (x0, x1) = (xs.map(a), xs.map(b));
                let _ = write!(
                    d,
                    "M{x0:.1} {top:.1}H{:.1}V{bottom:.1}H{x0:.1}Z",
                    x1.max(x0 + 1.0)
                );
            }
            let _ = write!(
                o,
                "<path class=\"spans {class}\" data-name=\"{name}\" d=\"{d}\"/>"
            );
        }
        Mark::Bars(_) => {}
    }
}
