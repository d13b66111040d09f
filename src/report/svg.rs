//! A small SVG chart library: linear and logarithmic axes with units and ticks at 1, 2, 5 x 10^n, line, step,
//! band, min/max column, histogram, bar, point and shaded-period series, a legend, and light and dark colours chosen by the
//! viewer's `prefers-color-scheme`. No scripts, no fonts fetched from anywhere.
//!
//! Tick labels are written in units [`crate::units`] can parse back (`250us`, `1.5ms`, `2s`), so a test can map
//! every drawn coordinate back to a value through the labelled axis, as a reader of the picture would.
#![forbid(unsafe_code)]

use std::fmt::Write;

/// The CSS every chart uses; an HTML page includes it once, a standalone SVG carries it inside.
pub const CSS: &str = "\
.rt{--fg:#1d1d1f;--bg:#ffffff;--grid:#e3e3e8;--axis:#6e6e73;\
--c0:#1f77b4;--c1:#d62728;--c2:#2ca02c;--c3:#9467bd;--c4:#ff7f0e;--c5:#17becf;--c6:#8c564b;--c7:#e377c2}\
@media (prefers-color-scheme: dark){.rt{--fg:#e8e8ed;--bg:#1c1c1e;--grid:#3a3a3c;--axis:#98989d;\
--c0:#5eaaf0;--c1:#ff6b6b;--c2:#5fd35f;--c3:#c39bff;--c4:#ffb05e;--c5:#4fe0ee;--c6:#d0a080;--c7:#ff9fd8}}\
svg.rt{width:100%;max-width:1200px;height:auto;font-family:system-ui,-apple-system,'Segoe UI','DejaVu Sans',Helvetica,Arial,sans-serif;font-size:12px}\
.rt .bg{fill:var(--bg)}.rt text{fill:var(--fg)}.rt .title{font-size:15px;font-weight:600}\
.rt .grid{stroke:var(--grid);stroke-width:1}.rt .axis{stroke:var(--axis);stroke-width:1}\
.rt .tick text{fill:var(--axis);font-size:11px}.rt .note{fill:var(--axis);font-size:11px}\
.rt .line,.rt .step{fill:none;stroke-width:1.8;stroke-linejoin:round}\
.rt .cols{fill:none;stroke-linecap:square;stroke-opacity:.75}\
.rt .band{stroke:none;fill-opacity:.22}.rt .spans{stroke:none;fill-opacity:.16}.rt .hist{stroke-width:1.2;fill-opacity:.28}\
.rt .bar{stroke:none;fill-opacity:.85}.rt .pts{stroke:none}.rt .dash{stroke-dasharray:4 3}\
.rt .c0{stroke:var(--c0);fill:var(--c0)}.rt .c1{stroke:var(--c1);fill:var(--c1)}\
.rt .c2{stroke:var(--c2);fill:var(--c2)}.rt .c3{stroke:var(--c3);fill:var(--c3)}\
.rt .c4{stroke:var(--c4);fill:var(--c4)}.rt .c5{stroke:var(--c5);fill:var(--c5)}\
.rt .c6{stroke:var(--c6);fill:var(--c6)}.rt .c7{stroke:var(--c7);fill:var(--c7)}\
.rt .line.c0,.rt .line.c1,.rt .line.c2,.rt .line.c3,.rt .line.c4,.rt .line.c5,.rt .line.c6,.rt .line.c7,\
.rt .step.c0,.rt .step.c1,.rt .step.c2,.rt .step.c3,.rt .step.c4,.rt .step.c5,.rt .step.c6,.rt .step.c7,\
.rt .cols.c0,.rt .cols.c1,.rt .cols.c2,.rt .cols.c3,.rt .cols.c4,.rt .cols.c5,.rt .cols.c6,.rt .cols.c7\
{fill:none}.rt path.spans{stroke:none}\n";

/// Number of distinct series colours before they repeat.
pub const COLORS: usize = 8;

/// Linear or logarithmic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleKind {
    /// Equal distances for equal differences.
    Linear,
    /// Equal distances for equal ratios (values must be positive).
    Log,
}

/// What an axis measures, which decides how its tick labels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Durations given in nanoseconds, labelled `250us`, `1.5ms`.
    Nanos,
    /// Durations given in seconds, labelled `500ms`, `2s`.
    Seconds,
    /// Plain counts, labelled `200`, `1.5k`, `2M`.
    Count,
    /// Percentages given as 0..=100, labelled `25%`.
    Percent,
    /// A percentile axis drawn as 1/(1-p): values are `1/(1-p)`, labelled `90%`, `99.9%` (HdrHistogram style).
    TailPercentile,
    /// Byte counts, labelled `64B`, `1kB`, `1MB` (powers of ten).
    Bytes,
    /// Bit rates given in bits per second, labelled `500kbit/s`, `2Gbit/s` (powers of ten).
    BitsPerSecond,
    /// A plain number with no unit.
    Plain,
}

/// One axis: label, unit, scale and optional fixed bounds.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Label printed beside the axis; say the unit in it, e.g. "RTT".
    pub label: String,
    /// Unit of the values.
    pub unit: Unit,
    /// Linear or log.
    pub scale: ScaleKind,
    /// Lowest value shown, instead of the data's.
    pub min: Option<f64>,
    /// Highest value shown, instead of the data's.
    pub max: Option<f64>,
    /// Make a linear axis include zero.
    pub zero: bool,
}

impl Axis {
    /// A linear axis that includes zero.
    pub fn linear(label: impl Into<String>, unit: Unit) -> Self {
        Axis {
            label: label.into(),
            unit,
            scale: ScaleKind::Linear,
            min: None,
            max: None,
            zero: true,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: impl Into<String>, unit: Unit) -> Self {
        Axis {
            label: label.into(),
            unit,
            scale: ScaleKind::Log,
            min: None,
            max: None,
            zero: false,
        }
    }

    /// The label with the unit the ticks are written in, e.g. "RTT (time)".
    fn title(&self) -> String {
        if self.unit == Unit::TailPercentile {
            return format!("{} (axis: log of 1/(1-p))", self.label);
        }
        let unit = match self.unit {
            Unit::Count => "count",
            Unit::Percent => "%",
            Unit::Bytes => "bytes",
            Unit::BitsPerSecond => "bit/s",
            _ => "",
        };
        let log = self.scale == ScaleKind::Log;
        match (unit.is_empty(), log) {
            (true, false) => self.label.clone(),
            (true, true) => format!("{} (log scale)", self.label),
            (false, false) => format!("{} ({unit})", self.label),
            (false, true) => format!("{} ({unit}, log scale)", self.label),
        }
    }
}

/// How a series is drawn.
#[derive(Debug, Clone)]
pub enum Mark {
    /// A polyline through (x, y).
    Line(Vec<(f64, f64)>),
    /// A staircase: each y holds from its x to the next point's x.
    Step(Vec<(f64, f64)>),
    /// A filled area between `lo` and `hi`: (x, lo, hi).
    Band(Vec<(f64, f64, f64)>),
    /// One vertical stroke per pixel column from min to max: (x, min, max). Built by
    /// [`crate::report::downsample`]; a column holding one value is drawn as a dot.
    Columns(Vec<(f64, f64, f64)>),
    /// Histogram bins (lo, hi, value) drawn as a filled outline.
    Histogram(Vec<(f64, f64, f64)>),
    /// One value per category of the chart (grouped bars); NaN leaves a gap.
    Bars(Vec<f64>),
    /// Dots at (x, y).
    Points(Vec<(f64, f64)>),
    /// Shaded periods (x from, x to) over the whole height of the plot, at least one pixel wide.
    Spans(Vec<(f64, f64)>),
}

/// A named series.
#[derive(Debug, Clone)]
pub struct Series {
    /// Name shown in the legend (empty: not in the legend).
    pub name: String,
    /// Colour index (wraps at [`COLORS`]).
    pub color: usize,
    /// Draw the stroke dashed.
    pub dashed: bool,
    /// The data.
    pub mark: Mark,
}

impl Series {
    /// A solid series.
    pub fn new(name: impl Into<String>, color: usize, mark: Mark) -> Self {
        Series {
            name: name.into(),
            color,
            dashed: false,
            mark,
        }
    }

    /// The same series drawn dashed.
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
}

/// One chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title printed on top.
    pub title: String,
    /// Horizontal axis (ignored for bar charts, which use `categories`).
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// Categories of a bar chart; when set the x axis is categorical (the y axis with `horizontal`).
    pub categories: Option<Vec<String>>,
    /// Bar charts only: categories down the left side and bars growing to the right along the value axis
    /// (`y` still describes the value axis), so long category names stay readable.
    pub horizontal: bool,
    /// The series, drawn in order.
    pub series: Vec<Series>,
    /// A line of small print under the plot (what was downsampled, where the data came from).
    pub note: Option<String>,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 34.0;
const LEGEND_ROW: f64 = 18.0;
const BOTTOM: f64 = 52.0;

impl Chart {
    /// An empty chart of the default size (960 x 400).
    pub fn new(title: impl Into<String>, x: Axis, y: Axis) -> Self {
        Chart {
            title: title.into(),
            x,
            y,
            categories: None,
            horizontal: false,
            series: Vec::new(),
            note: None,
            width: 960,
            height: 400,
        }
    }

    /// Adds a series.
    pub fn push(&mut self, s: Series) {
        self.series.push(s);
    }

    /// Horizontal pixel span of the plot area: (left, right).
    pub fn plot_x(&self) -> (f64, f64) {
        let left = match (&self.categories, self.horizontal) {
            (Some(c), true) => {
                let longest = c.iter().map(|c| c.chars().count()).max().unwrap_or(0);
                (14.0 + 7.2 * longest as f64).clamp(LEFT, f64::from(self.width) / 3.0)
            }
            _ => LEFT,
        };
        (left, f64::from(self.width) - RIGHT)
    }

    fn horizontal_bars(&self) -> bool {
        self.horizontal && self.categories.is_some()
    }

    /// The value scale of a bar chart: vertical, or horizontal along the plot width with `horizontal`.
    pub fn value_scale(&self) -> Scale {
        if self.horizontal_bars() {
            let (l, r) = self.plot_x();
            let (lo, hi) = self.bounds(false);
            Scale::fitted(&self.y, lo, hi, l, r)
        } else {
            self.y_scale()
        }
    }

    /// Sets the height of a horizontal bar chart so every category gets room for its bars.
    pub fn fit_height_to_categories(&mut self) {
        let cats = self.categories.as_ref().map_or(0, Vec::len) as f64;
        let bars = self
            .series
            .iter()
            .filter(|s| matches!(s.mark, Mark::Bars(_)))
            .count()
            .max(1) as f64;
        let fixed = TOP + LEGEND_ROW * self.legend_rows() as f64 + 8.0 + BOTTOM + 14.0;
        self.height = (fixed + cats * (bars * 9.0 + 10.0)).clamp(220.0, 4000.0) as u32;
    }

    fn legend_rows(&self) -> usize {
        let names: Vec<&str> = self
            .series
            .iter()
            .map(|s| s.name.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return 0;
        }
        let avail = f64::from(self.width) - LEFT - RIGHT;
        let mut rows = 1;
        let mut x = 0.0;
        for n in names {
            let w = legend_width(n);
            if x > 0.0 && x + w > avail {
                rows += 1;
                x = 0.0;
            }
            x += w;
        }
        rows
    }

    /// Vertical pixel span of the plot area: (top, bottom).
    pub fn plot_y(&self) -> (f64, f64) {
        let top = TOP + LEGEND_ROW * self.legend_rows() as f64 + 8.0;
        let bottom = f64::from(self.height) - BOTTOM - if self.note.is_some() { 14.0 } else { 0.0 };
        (top, bottom.max(top + 20.0))
    }

    /// The x scale in use (data bounds widened to tick values), or None for a bar chart.
    pub fn x_scale(&self) -> Option<Scale> {
        if self.categories.is_some() {
            return None;
        }
        let (l, r) = self.plot_x();
        let (lo, hi) = self.bounds(true);
        Some(Scale::fitted(&self.x, lo, hi, l, r))
    }

    /// The y scale in use (data bounds widened to tick values).
    pub fn y_scale(&self) -> Scale {
        let (t, b) = self.plot_y();
        let (lo, hi) = self.bounds(false);
        Scale::fitted(&self.y, lo, hi, b, t)
    }

    /// Data bounds along x (`true`) or y, only counting values the axis can show.
    fn bounds(&self, along_x: bool) -> (f64, f64) {
        let axis = if along_x { &self.x } else { &self.y };
        let ok = |v: f64| v.is_finite() && (axis.scale == ScaleKind::Linear || v > 0.0);
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        let mut see = |v: f64| {
            if ok(v) {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        };
        for s in &self.series {
            match &s.mark {
                Mark::Line(p) | Mark::Step(p) | Mark::Points(p) => {
                    for &(x, y) in p {
                        see(if along_x { x } else { y });
                    }
                }
                Mark::Band(p) | Mark::Columns(p) => {
                    for &(x, a, b) in p {
                        if along_x {
                            see(x);
                        } else {
                            see(a);
                            see(b);
                        }
                    }
                }
                Mark::Histogram(p) => {
                    for &(a, b, v) in p {
                        if along_x {
                            see(a);
                            see(b);
                        } else {
                            see(v);
                        }
                    }
                }
                Mark::Bars(v) => {
                    if !along_x {
                        for &y in v {
                            see(y);
                        }
                    }
                }
                Mark::Spans(p) => {
                    if along_x {
                        for &(a, b) in p {
                            see(a);
                            see(b);
                        }
                    }
                }
            }
        }
        if let Some(m) = axis.min {
            lo = m;
        }
        if let Some(m) = axis.max {
            hi = m;
        }
        if axis.zero && axis.scale == ScaleKind::Linear {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if !lo.is_finite() || !hi.is_finite() {
            return match axis.scale {
                ScaleKind::Linear => (0.0, 1.0),
                ScaleKind::Log => (1.0, 10.0),
            };
        }
        (lo, hi)
    }

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

fn legend_width(name: &str) -> f64 {
    34.0 + 7.0 * name.chars().count() as f64
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

/// Maps values to pixels along one axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Linear or log.
    pub kind: ScaleKind,
    /// Lowest value (at `px0`).
    pub lo: f64,
    /// Highest value (at `px1`).
    pub hi: f64,
    /// Pixel of `lo`.
    pub px0: f64,
    /// Pixel of `hi`.
    pub px1: f64,
}

impl Scale {
    /// A scale over data bounds [lo, hi] widened to the nearest tick values (1, 2, 5 x 10^n).
    pub fn fitted(axis: &Axis, lo: f64, hi: f64, px0: f64, px1: f64) -> Scale {
        let (lo, hi) = match axis.scale {
            ScaleKind::Linear => {
                let (lo, hi) = if hi > lo {
                    (lo, hi)
                } else {
                    let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
                    (lo - pad, hi + pad)
                };
                let step = nice_step((hi - lo) / 6.0);
                let nlo = if axis.min.is_some() {
                    lo
                } else {
                    (lo / step).floor() * step
                };
                let nhi = if axis.max.is_some() {
                    hi
                } else {
                    (hi / step).ceil() * step
                };
                (nlo, nhi)
            }
            ScaleKind::Log => {
                let lo = lo.max(f64::MIN_POSITIVE);
                let (lo, hi) = if hi > lo {
                    (lo, hi)
                } else {
                    (lo / 2.0, hi * 2.0)
                };
                let nlo = if axis.min.is_some() {
                    lo
                } else {
                    nice_below(lo)
                };
                let nhi = if axis.max.is_some() {
                    hi
                } else {
                    nice_above(hi)
                };
                (nlo, nhi)
            }
        };
        Scale {
            kind: axis.scale,
            lo,
            hi,
            px0,
            px1,
        }
    }

    /// True when the value lies on the axis (and, on a log axis, is positive).
    pub fn shows(&self, v: f64) -> bool {
        v.is_finite() && (self.kind == ScaleKind::Linear || v > 0.0)
    }

    fn t(&self, v: f64) -> f64 {
        match self.kind {
            ScaleKind::Linear => v,
            ScaleKind::Log => v.max(f64::MIN_POSITIVE).log10(),
        }
    }

    /// The pixel of a value.
    pub fn map(&self, v: f64) -> f64 {
        let (a, b) = (self.t(self.lo), self.t(self.hi));
        let f = if b > a {
            (self.t(v) - a) / (b - a)
        } else {
            0.5
        };
        self.px0 + f * (self.px1 - self.px0)
    }

    /// The value at a pixel (the inverse of [`Scale::map`]).
    pub fn invert(&self, px: f64) -> f64 {
        let (a, b) = (self.t(self.lo), self.t(self.hi));
        let f = (px - self.px0) / (self.px1 - self.px0);
        let t = a + f * (b - a);
        match self.kind {
            ScaleKind::Linear => t,
            ScaleKind::Log => 10f64.powf(t),
        }
    }

    /// Where bars and histograms start: zero on a linear axis, the bottom on a log axis.
    pub fn base(&self) -> f64 {
        match self.kind {
            ScaleKind::Linear => 0.0f64.clamp(self.lo, self.hi),
            ScaleKind::Log => self.lo,
        }
    }

    /// Tick values for this scale.
    pub fn ticks(&self) -> Vec<f64> {
        match self.kind {
            ScaleKind::Linear => linear_ticks(self.lo, self.hi, 6),
            ScaleKind::Log => log_ticks(self.lo, self.hi),
        }
    }
}

/// The smallest step of the form 1, 2 or 5 x 10^n that is at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= raw * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// Ticks at multiples of a 1/2/5 x 10^n step within [lo, hi], about `target` of them.
pub fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return vec![lo];
    }
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last)
        .map(|k| {
            let v = k as f64 * step;
            // Round away the float noise of k * step so labels read 0.3, not 0.30000000000000004.
            let digits = (-step.log10().floor()).max(0.0) as i32 + 1;
            let f = 10f64.powi(digits);
            (v * f).round() / f
        })
        .collect()
}

/// Ticks at 1, 2, 5 x 10^n within [lo, hi] on a log axis; only decades when the axis spans more than three.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return vec![];
    }
    let decades = hi.log10() - lo.log10();
    let mults: &[f64] = if decades > 3.5 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    let mut out = Vec::new();
    let mut e = lo.log10().floor() as i32 - 1;
    let end = hi.log10().ceil() as i32 + 1;
    // Thin decade ticks on very wide axes so labels do not collide.
    let every = if decades > 9.0 { 2 } else { 1 };
    while e <= end {
        if mults.len() > 1 || e.rem_euclid(every) == 0 {
            for &m in mults {
                let v = m * 10f64.powi(e);
                if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        e += 1;
    }
    out
}

/// The largest 1, 2 or 5 x 10^n not above `v`.
pub fn nice_below(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    for m in [5.0, 2.0, 1.0] {
        if m * p <= v * (1.0 + 1e-9) {
            return m * p;
        }
    }
    p
}

/// The smallest 1, 2 or 5 x 10^n not below `v`.
pub fn nice_above(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// Formats a number with at most `max_decimals`, without trailing zeros.
fn trim(v: f64, max_decimals: usize) -> String {
    let s = format!("{v:.max_decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The label of a tick value in a unit, e.g. `250us`, `1.5ms`, `99.9%`, `2k`.
pub fn label(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Nanos => duration_label(v),
        Unit::Seconds => duration_label(v * 1e9),
        Unit::Count | Unit::Plain => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{}G", trim(v / 1e9, 3))
            } else if a >= 1e6 {
                format!("{}M", trim(v / 1e6, 3))
            } else if a >= 1e4 {
                format!("{}k", trim(v / 1e3, 3))
            } else {
                trim(v, 4)
            }
        }
        Unit::Bytes => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{}GB", trim(v / 1e9, 3))
            } else if a >= 1e6 {
                format!("{}MB", trim(v / 1e6, 3))
            } else if a >= 1e3 {
                format!("{}kB", trim(v / 1e3, 3))
            } else {
                format!("{}B", trim(v, 2))
            }
        }
        Unit::BitsPerSecond => {
            let a = v.abs();
            if a >= 1e9 {
                format!("{}Gbit/s", trim(v / 1e9, 3))
            } else if a >= 1e6 {
                format!("{}Mbit/s", trim(v / 1e6, 3))
            } else if a >= 1e3 {
                format!("{}kbit/s", trim(v / 1e3, 3))
            } else {
                format!("{}bit/s", trim(v, 2))
            }
        }
        Unit::Percent => format!("{}%", trim(v, 4)),
        Unit::TailPercentile => {
            if v <= 1.0 {
                "0%".to_string()
            } else {
                format!("{}%", trim(100.0 * (1.0 - 1.0 / v), 6))
            }
        }
    }
}

fn duration_label(ns: f64) -> String {
    let a = ns.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a < 1e3 {
        format!("{}ns", trim(ns, 2))
    } else if a < 1e6 {
        format!("{}us", trim(ns / 1e3, 3))
    } else if a < 1e9 {
        format!("{}ms", trim(ns / 1e6, 3))
    } else {
        format!("{}s", trim(ns / 1e9, 3))
    }
}

/// Escapes text for SVG/HTML content and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_125(v: f64) -> bool {
        let p = 10f64.powf(v.abs().log10().floor());
        let m = v.abs() / p;
        [1.0, 2.0, 5.0].iter().any(|x| (m - x).abs() < 1e-6)
    }

    #[test]
    fn steps_are_1_2_5() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.1), 2.0);
        assert_eq!(nice_step(2.5), 5.0);
        assert_eq!(nice_step(6.0), 10.0);
        assert_eq!(nice_step(0.013), 0.02);
        assert_eq!(nice_step(340_000.0), 500_000.0);
        for raw in [1e-3, 0.37, 3.0, 17.0, 999.0, 1234.5, 7.7e8] {
            assert!(is_125(nice_step(raw)), "{raw}");
            assert!(nice_step(raw) >= raw);
            assert!(nice_step(raw) < raw * 2.5 + 1e-12);
        }
    }

    #[test]
    fn linear_ticks_are_even_multiples() {
        let t = linear_ticks(0.0, 1000.0, 5);
        assert_eq!(t, vec![0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
        let t = linear_ticks(0.0, 0.9, 6);
        assert_eq!(t, vec![0.0, 0.2, 0.4, 0.6, 0.8]);
        let t = linear_ticks(32_000.0, 17_300_000.0, 6);
        assert_eq!(t.first(), Some(&5_000_000.0));
        for w in t.windows(2) {
            assert!(is_125(w[1] - w[0]));
        }
        // Labels read as people write them.
        assert_eq!(label(0.3, Unit::Plain), "0.3");
        assert_eq!(label(2_500_000.0, Unit::Nanos), "2.5ms");
        assert_eq!(label(250_000.0, Unit::Nanos), "250us");
        assert_eq!(label(0.5, Unit::Seconds), "500ms");
        assert_eq!(label(20_000.0, Unit::Count), "20k");
        assert_eq!(label(1000.0, Unit::TailPercentile), "99.9%");
        assert_eq!(label(2.0, Unit::TailPercentile), "50%");
    }

    #[test]
    fn log_ticks_are_1_2_5_per_decade() {
        assert_eq!(
            log_ticks(10.0, 1000.0),
            vec![10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
        );
        let t = log_ticks(1e3, 1e9);
        assert_eq!(t, vec![1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9]);
        for v in log_ticks(2e4, 5e7) {
            assert!(is_125(v), "{v}");
        }
        assert_eq!(nice_below(32_730.0), 20_000.0);
        assert_eq!(nice_above(17_258_905.0), 20_000_000.0);
        assert_eq!(nice_above(5.0), 5.0);
        assert_eq!(nice_below(0.3), 0.2);
    }

    #[test]
    fn scale_round_trips() {
        let ax = Axis::log("RTT", Unit::Nanos);
        let s = Scale::fitted(&ax, 32_000.0, 17e6, 300.0, 50.0);
        assert_eq!((s.lo, s.hi), (20_000.0, 20e6));
        for v in [20_000.0, 57_439.0, 1e6, 17e6] {
            assert!((s.invert(s.map(v)) - v).abs() / v < 1e-9);
        }
        assert_eq!(s.map(20_000.0), 300.0);
        assert_eq!(s.map(20e6), 50.0);
    }

    #[test]
    fn text_is_escaped() {
        let mut c = Chart::new(
            "a<b & \"c\"",
            Axis::linear("x", Unit::Plain),
            Axis::linear("y", Unit::Plain),
        );
        c.push(Series::new("<script>", 0, Mark::Line(vec![(0.0, 1.0)])));
        let svg = c.render(true);
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot;"));
    }
}
