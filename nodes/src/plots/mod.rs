//! Charts for results: PNG and SVG from the same drawing code, on `plotters` with a bundled
//! font (see [`font`]) so they render on a machine without fontconfig or system fonts.
//!
//! Each function writes `<dir>/<name>.png` and/or `<dir>/<name>.svg` (per [`Formats`]) and
//! returns the paths written. Data are plain values (`f64`, labels); the functions never
//! panic on odd data: non-finite values are skipped, and a chart with nothing to draw is a
//! [`PlotError::NoData`].
//!
//! - [`heatmap`]: a grid of values (rows × columns) with a color bar,
//! - [`lines_with_ci`]: mean per x with a shaded 95 % confidence band, one line per series,
//! - [`grouped_bars`]: one bar per series within each group,
//! - [`cdf`]: empirical CDF per sample set,
//! - [`box_plot`]: box (quartiles), median and 1.5-IQR whiskers per sample set,
//! - [`time_series`]: lines over time with shaded event spans and horizontal reference lines.

mod charts;
pub mod five_number;
pub mod font;

pub use charts::{box_plot, cdf, grouped_bars, heatmap, lines_with_ci, time_series};

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Errors from rendering a chart.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("the bundled font could not be registered with plotters")]
    Font,
    #[error("creating folder {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("drawing {path}: {message}")]
    Draw { path: PathBuf, message: String },
    #[error("chart {name}: no finite data to draw")]
    NoData { name: String },
    #[error("unknown image format {0:?} (expected png or svg)")]
    Format(String),
}

/// Which files to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Formats {
    pub png: bool,
    pub svg: bool,
}

impl Default for Formats {
    fn default() -> Self {
        Self {
            png: true,
            svg: true,
        }
    }
}

impl std::str::FromStr for Formats {
    type Err = PlotError;
    /// Parses a comma-separated list such as `png,svg`.
    fn from_str(s: &str) -> Result<Self, PlotError> {
        let mut f = Formats {
            png: false,
            svg: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.to_ascii_lowercase().as_str() {
                "png" => f.png = true,
                "svg" => f.svg = true,
                other => return Err(PlotError::Format(other.to_string())),
            }
        }
        if !f.png && !f.svg {
            return Err(PlotError::Format(s.to_string()));
        }
        Ok(f)
    }
}

/// Title and axis descriptions of a chart.
#[derive(Debug, Clone, Default)]
pub struct Labels {
    pub title: String,
    pub x: String,
    pub y: String,
}

impl Labels {
    pub fn new(title: impl Into<String>, x: impl Into<String>, y: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            x: x.into(),
            y: y.into(),
        }
    }
}

/// A named line of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// One x with the mean and 95 % confidence interval of the samples taken there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CiPoint {
    pub x: f64,
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
}

impl CiPoint {
    /// Mean and Student-t 95 % interval of `samples` at `x`; `None` when there are none.
    pub fn from_samples(x: f64, samples: &[f64]) -> Option<Self> {
        let finite: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        edgemu_stats::mean_ci95(&finite).map(|(mean, lo, hi)| Self { x, mean, lo, hi })
    }
}

/// A named line of means with confidence band.
#[derive(Debug, Clone)]
pub struct CiSeries {
    pub label: String,
    pub points: Vec<CiPoint>,
}

/// A named set of samples (for CDFs and box plots).
#[derive(Debug, Clone)]
pub struct Samples {
    pub label: String,
    pub values: Vec<f64>,
}

/// A named series of bar heights, one per group (NaN: no bar).
#[derive(Debug, Clone)]
pub struct BarSeries {
    pub label: String,
    pub values: Vec<f64>,
}

/// An event span on a time axis (start == end: an instant, drawn as a line).
#[derive(Debug, Clone)]
pub struct Span {
    pub start: f64,
    pub end: f64,
    pub label: String,
}

/// A horizontal reference line (e.g. the 90 % KV line).
#[derive(Debug, Clone)]
pub struct RefLine {
    pub y: f64,
    pub label: String,
}

/// A grid of values: `values[row][col]`, row and column names.
#[derive(Debug, Clone)]
pub struct Grid {
    pub rows: Vec<String>,
    pub cols: Vec<String>,
    pub values: Vec<Vec<f64>>,
}

/// A chart that can draw itself on any plotters backend.
pub(crate) trait Figure {
    fn size(&self) -> (u32, u32) {
        (900, 540)
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError>
    where
        DB::ErrorType: 'static;
}

pub(crate) type DrawError = Box<dyn std::error::Error>;

/// Renders `fig` to `<dir>/<name>.png` / `.svg`.
pub(crate) fn render(
    dir: &Path,
    name: &str,
    formats: Formats,
    fig: &impl Figure,
) -> Result<Vec<PathBuf>, PlotError> {
    font::ensure_registered()?;
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    let draw_err = |path: &Path, e: DrawError| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    if formats.png {
        let path = dir.join(format!("{name}.png"));
        {
            let root = BitMapBackend::new(&path, fig.size()).into_drawing_area();
            root.fill(&WHITE).map_err(|e| draw_err(&path, e.into()))?;
            fig.draw(&root).map_err(|e| draw_err(&path, e))?;
            root.present().map_err(|e| draw_err(&path, e.into()))?;
        }
        written.push(path);
    }
    if formats.svg {
        let path = dir.join(format!("{name}.svg"));
        {
            let root = SVGBackend::new(&path, fig.size()).into_drawing_area();
            root.fill(&WHITE).map_err(|e| draw_err(&path, e.into()))?;
            fig.draw(&root).map_err(|e| draw_err(&path, e))?;
            root.present().map_err(|e| draw_err(&path, e.into()))?;
        }
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
