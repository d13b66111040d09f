//! A small SVG chart library: linear and logarithmic axes with units and ticks at 1, 2, 5 x 10^n, line, step,
//! band, min/max column, histogram, bar, point and shaded-period series, a legend, and light and dark colours chosen by the
//! viewer's `prefers-color-scheme`. No scripts, no fonts fetched from anywhere.
//!
//! Tick labels are written in units [`crate::units`] can parse back (`250us`, `1.5ms`, `2s`), so a test can map
//! every drawn coordinate back to a value through the labelled axis, as a reader of the picture would.
//!
//! Here: the chart's parts and layout. Drawing is in `render`, scales, ticks and tick labels in `scale`.
#![forbid(unsafe_code)]

mod render;
mod scale;

pub use scale::{Scale, label, linear_ticks, log_ticks, nice_above, nice_below, nice_step};

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
}

fn legend_width(name: &str) -> f64 {
    34.0 + 7.0 * name.chars().count() as f64
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
mod tests;
