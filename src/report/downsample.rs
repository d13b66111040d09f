//! Downsampling for plots: min and max per column, in constant memory, never dropping an extreme.
//!
//! [`MinMaxColumns`] takes (x, y) points in any order with x >= 0 and keeps, per column of equal width, the
//! count, smallest and largest y. When a point lands beyond the last column, neighbouring columns are merged
//! in pairs and the width doubles, so a stream of any length (a 10-million-row full log) is summarised in at
//! most `max_columns` columns; merging min with min and max with max loses no extreme.
#![forbid(unsafe_code)]

/// One column: every point with `x` in `[index * width, (index + 1) * width)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Column {
    /// Points in the column (0: empty).
    pub count: u64,
    /// Smallest y.
    pub min: f64,
    /// Largest y.
    pub max: f64,
}

const EMPTY: Column = Column {
    count: 0,
    min: f64::INFINITY,
    max: f64::NEG_INFINITY,
};

impl Column {
    fn add(&mut self, y: f64) {
        self.count += 1;
        if y < self.min {
            self.min = y;
        }
        if y > self.max {
            self.max = y;
        }
    }

    fn merge(&mut self, o: &Column) {
        self.count += o.count;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
}

/// Streaming min/max per column with a column width that doubles as the data grows.
#[derive(Debug, Clone)]
pub struct MinMaxColumns {
    width: f64,
    cols: Vec<Column>,
    max_columns: usize,
    points: u64,
}

impl MinMaxColumns {
    /// Starts with columns `initial_width` wide; at most `max_columns` (at least 2) are kept.
    pub fn new(initial_width: f64, max_columns: usize) -> Self {
        MinMaxColumns {
            width: if initial_width > 0.0 && initial_width.is_finite() {
                initial_width
            } else {
                1.0
            },
            cols: Vec::new(),
            max_columns: max_columns.max(2) & !1,
            points: 0,
        }
    }

    /// Adds one point; points with a negative or non-finite x or a non-finite y are ignored.
    #[inline]
    pub fn add(&mut self, x: f64, y: f64) {
        if !(x >= 0.0 && x.is_finite() && y.is_finite()) {
            return;
        }
        let mut i = (x / self.width) as usize;
        while i >= self.max_columns {
            self.halve();
            i = (x / self.width) as usize;
        }
        if i >= self.cols.len() {
            self.cols.resize(i + 1, EMPTY);
        }
        self.cols[i].add(y);
        self.points += 1;
    }

    fn halve(&mut self) {
        let n = self.cols.len().div_ceil(2);
        let mut merged = vec![EMPTY; n];
        for (i, c) in self.cols.iter().enumerate() {
            merged[i / 2].merge(c);
        }
        self.cols = merged;
        self.width *= 2.0;
    }

    /// Width of one column in x units.
    pub fn width(&self) -> f64 {
        self.width
    }

    /// Points added.
    pub fn points(&self) -> u64 {
        self.points
    }

    /// The columns, index i covering `[i * width, (i + 1) * width)`; empty ones have `count == 0`.
    pub fn columns(&self) -> &[Column] {
        &self.cols
    }

    /// Non-empty columns as (centre x, min, max).
    pub fn ranges(&self) -> Vec<(f64, f64, f64)> {
        self.cols
            .iter()
            .enumerate()
            .filter(|(_, c)| c.count > 0)
            .map(|(i, c)| ((i as f64 + 0.5) * self.width, c.min, c.max))
            .collect()
    }

    /// Smallest and largest y of all points, if any.
    pub fn extremes(&self) -> Option<(f64, f64)> {
        let mut all = EMPTY;
        for c in &self.cols {
            all.merge(c);
        }
        (all.count > 0).then_some((all.min, all.max))
    }
}

/// Merges (x, min, max) ranges that fall into the same pixel column (`to_px` maps x to pixels), so the drawing
/// never has more strokes than pixel columns; each merged range is placed at the centre of its column
/// (`from_px` maps pixels back to x). Extremes are kept.
pub fn per_pixel(
    ranges: &[(f64, f64, f64)],
    to_px: impl Fn(f64) -> f64,
    from_px: impl Fn(f64) -> f64,
) -> Vec<(f64, f64, f64)> {
    let mut out: Vec<(i64, f64, f64)> = Vec::with_capacity(ranges.len());
    for &(x, lo, hi) in ranges {
        let px = to_px(x).floor() as i64;
        match out.last_mut() {
            Some(last) if last.0 == px => {
                last.1 = last.1.min(lo);
                last.2 = last.2.max(hi);
            }
            _ => out.push((px, lo, hi)),
        }
    }
    out.into_iter()
        .map(|(px, lo, hi)| (from_px(px as f64 + 0.5), lo, hi))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn every_column_keeps_its_min_and_max() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut pts = Vec::new();
        let mut d = MinMaxColumns::new(1.0, 500);
        for i in 0..200_000u64 {
            let x = i as f64 * 0.37 + (xorshift(&mut seed) % 100) as f64 * 0.01;
            let y = (xorshift(&mut seed) % 1_000_000) as f64;
            pts.push((x, y));
            d.add(x, y);
        }
        // One huge outlier that must survive.
        d.add(12_345.6, 9e12);
        pts.push((12_345.6, 9e12));
        let w = d.width();
        assert!(d.columns().len() <= 500);
        assert!(d.columns().len() > 250, "{}", d.columns().len());
        for (i, c) in d.columns().iter().enumerate() {
            let inside: Vec<f64> = pts
                .iter()
                .filter(|(x, _)| (x / w) as usize == i)
                .map(|p| p.1)
                .collect();
            assert_eq!(c.count, inside.len() as u64, "column {i}");
            if !inside.is_empty() {
                assert_eq!(c.min, inside.iter().cloned().fold(f64::INFINITY, f64::min));
                assert_eq!(
                    c.max,
                    inside.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
                );
            }
        }
        assert_eq!(d.extremes().unwrap().1, 9e12);
        assert_eq!(d.points(), pts.len() as u64);
    }

    #[test]
    fn pixel_merge_keeps_extremes() {
        let ranges = vec![
            (0.1, 5.0, 6.0),
            (0.4, 1.0, 3.0),
            (1.2, 7.0, 7.0),
            (1.9, 2.0, 100.0),
            (3.0, 4.0, 4.0),
        ];
        let px = per_pixel(&ranges, |x| x * 1.0, |p| p);
        assert_eq!(
            px,
            vec![(0.5, 1.0, 6.0), (1.5, 2.0, 100.0), (3.5, 4.0, 4.0)]
        );
    }

    #[test]
    fn bad_points_are_ignored() {
        let mut d = MinMaxColumns::new(1.0, 10);
        d.add(-1.0, 5.0);
        d.add(f64::NAN, 5.0);
        d.add(1.0, f64::INFINITY);
        assert_eq!(d.points(), 0);
        assert_eq!(d.extremes(), None);
    }
}
