//! Latency over message size x offered rate: one [`super::load`] run per cell, in one go.
//!
//! qperf's `-oo` option loops over sizes but reports means only; a sweep reports the percentiles (from the
//! scheduled send time and from the actual send time), the schedule lag, and whether each rate was held.

use super::load::{self, LoadConfig, LoadResult};
use super::stream::StreamError;
use std::sync::atomic::Ordering;

/// Most cells (sizes x rates) one sweep runs: each is a whole load run with its own histograms.
pub const MAX_CELLS: usize = 1_000;

/// Settings of a sweep: the load settings of every cell, with the sizes and rates to cross.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Settings shared by every cell; its `size` and `rate` are replaced per cell.
    pub base: LoadConfig,
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Offered rates in messages per second, in order.
    pub rates: Vec<f64>,
}

impl SweepConfig {
    /// Checks every cell's settings before any I/O.
    pub fn validate(&self) -> Result<(), StreamError> {
        if self.sizes.is_empty() || self.rates.is_empty() {
            return Err(StreamError::Invalid(
                "a sweep needs at least one size and one rate".into(),
            ));
        }
        let cells = self.sizes.len().saturating_mul(self.rates.len());
        if cells > MAX_CELLS {
            return Err(StreamError::Invalid(format!(
                "--sizes ({}) x --rates ({}) make {cells} cells, more than the {MAX_CELLS} a sweep runs; split it into several sweeps",
                self.sizes.len(),
                self.rates.len()
            )));
        }
        for &size in &self.sizes {
            for &rate in &self.rates {
                self.cell(size, rate).validate()?;
            }
        }
        Ok(())
    }

    fn cell(&self, size: usize, rate: f64) -> LoadConfig {
        let mut c = self.base.clone();
        c.size = size;
        c.rate = rate;
        c
    }
}

/// Receives each cell as it completes.
pub trait Observer {
    /// Called after every cell.
    fn cell(&mut self, _result: &LoadResult) {}
}

/// An observer that ignores everything.
pub struct NoObserver;
impl Observer for NoObserver {}

/// What a sweep measured: the cells that ran, and the error that ended it early, if one did.
#[derive(Debug, Clone, Default)]
pub struct SweepResult {
    /// Cells in the order they ran.
    pub cells: Vec<LoadResult>,
    /// Why the sweep stopped before the last cell (a cell that could not start; a cell that failed mid-run
    /// also carries its own error).
    pub error: Option<std::sync::Arc<StreamError>>,
}

/// Runs every size x rate cell, sizes outer, rates inner. `Err` only when the first cell cannot start; a
/// later failure ends the sweep with the cells so far (a cell that failed mid-run, with its error, included).
pub fn run(config: &SweepConfig, observer: &mut dyn Observer) -> Result<SweepResult, StreamError> {
    config.validate()?;
    let mut cells = Vec::new();
    let mut error = None;
    'outer: for &size in &config.sizes {
        for &rate in &config.rates {
            if config.base.cancel.load(Ordering::Relaxed) {
                break 'outer;
            }
            let r = match load::run(&config.cell(size, rate)) {
                Ok(r) => r,
                Err(e) if cells.is_empty() => return Err(e),
                Err(e) => {
                    error = Some(std::sync::Arc::new(e));
                    break 'outer;
                }
            };
            observer.cell(&r);
            let failed = r.error.is_some();
            cells.push(r);
            if failed {
                break 'outer;
            }
        }
    }
    Ok(SweepResult { cells, error })
}
