//! Exporters: turn typed results into bytes (terminal text, JSON, CSV). Nothing here does network I/O.
//! [`answer`] builds the sentence every `db`, `ping` and `capture rpc` result opens with.
//!
//! One file per format, as hyperfine does: [`text`], [`json`], [`csv`]. Pictures: [`svg`] (the chart library),
//! [`html`] (the self-contained page), [`charts`] (which charts a result gets, by `kind`: one file per kind),
//! [`load`] (reading saved results and full logs back), [`downsample`] (min/max per pixel column), [`db`] (the
//! text of `roundtrip db`), [`tcp`] (the text and full log of `roundtrip tcp`), [`match_verdict`] (the words
//! of `capture match`'s verdict). The documents themselves are types of [`crate::doc`].

pub mod answer;
pub mod charts;
pub mod csv;
pub mod db;
pub mod downsample;
pub mod heatmap;
pub mod html;
pub mod json;
pub mod load;
pub mod match_verdict;
pub mod svg;
pub mod tcp;
pub mod text;
pub mod traffic;
pub mod whatif;
