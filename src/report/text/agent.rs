//! The text of `agent`: what it says about its targets.

/// The number of series `n` targets of `per_target` series each make, against the most allowed:
/// `N targets x S series = N*S series (max M)`.
pub fn series_line(n: usize, per_target: usize, max: usize) -> String {
    format!(
        "{n} targets x {per_target} series = {} series (max {max})",
        n * per_target
    )
}
