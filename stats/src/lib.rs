//! The summary statistics every experiment, report and live summary of
//! edgemu prints, each defined once:
//!
//! - [`percentile`]: the nearest-rank percentile of sorted values (the
//!   `P`-th percentile is the smallest value with at least `P` % of the
//!   sample at or below it; no interpolation, so it is always a value that
//!   was measured);
//! - [`mean_ci95`]: the mean with its two-sided 95 % Student-t confidence
//!   interval, and [`cluster_means`] for taking that interval over units that
//!   vary independently;
//! - [`mean`] and [`sorted_finite`], the two steps the others share;
//! - [`cpu`]: CPU seconds of the process or of some of its threads.
//!
//! Functions take plain slices and return `None` for an empty sample, so a
//! caller decides what an empty cell prints.

pub mod cpu;
mod interval;
mod quantile;

pub use interval::{cluster_means, mean_ci95, t975};
pub use quantile::{mean, percentile, sorted_finite};
