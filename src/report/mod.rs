//! Exporters: turn typed results into bytes (terminal text, JSON, CSV). Nothing here does network I/O.
//!
//! One file per format, as hyperfine does: [`text`], [`json`], [`csv`]. Pictures: [`svg`] (the chart library),
//! [`html`] (the self-contained page), [`charts`] (which charts a result gets, by `kind`: one file per kind), [`load`] (reading
//! saved results and full logs back), [`downsample`] (min/max per pixel column), [`ratelimit`] (log lines
//! at most once per reason per second).

pub mod charts;
pub mod csv;
pub mod downsample;
pub mod heatmap;
pub mod html;
pub mod json;
pub mod load;
pub mod ratelimit;
pub mod svg;
pub mod text;
pub mod traffic;
pub mod whatif;

use serde::Serializer;
use std::time::Duration;

/// Serialises a [`Duration`] as fractional seconds (for fields whose name ends in `_s`).
pub fn ser_duration_s<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
