//! The text of `agent`: what it says about its targets.

/// The number of series `n` targets of `per_target` series each make, against the most allowed, at the histogram
/// resolution `buckets` (`le` buckets per step of the old layout: `--buckets`):
/// `N targets x S series = N*S series (max M, --buckets B)`.
pub fn series_line(n: usize, per_target: usize, max: usize, buckets: usize) -> String {
    format!(
        "{n} targets x {per_target} series = {} series (max {max}, --buckets {buckets})",
        n * per_target
    )
}
