//! The six chart kinds. Each is a small struct implementing [`Figure`] so one drawing
//! routine serves the PNG and the SVG backend.

use super::five_number::FiveNumber;
use super::font::FAMILY;
use super::{
    render, BarSeries, CiSeries, DrawError, Figure, Formats, Grid, Labels, PlotError, RefLine,
    Samples, Series, Span,
};
use edgemu_stats::sorted_finite;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// Tableau 10: distinguishable, prints well in grey.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Axis range covering the finite values, padded by 5 %; a sensible range when degenerate.
fn bounds(values: impl IntoIterator<Item = f64>, pad: bool) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return None;
    }
    if hi - lo < 1e-12 {
        let d = if lo.abs() > 1e-12 {
            lo.abs() * 0.1
        } else {
            1.0
        };
        return Some((lo - d, hi + d));
    }
    let p = if pad { (hi - lo) * 0.05 } else { 0.0 };
    Some((lo - p, hi + p))
}

/// A titled f64 × f64 chart with the project's margins and label areas
/// (`y_label_area` px for the y tick labels).
fn titled_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    y_label_area: u32,
) -> Result<
    ChartContext<
        'a,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    DrawError,
>
where
    DB::ErrorType: 'static,
{
    Ok(ChartBuilder::on(root)
        .caption(title, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(y_label_area)
        .build_cartesian_2d(x, y)?)
}

/// [`titled_chart`] with the mesh drawn and the axes described by `labels`
/// (what every x–y chart here starts with).
fn labelled_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    labels: &Labels,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    y_label_area: u32,
) -> Result<
    ChartContext<
        'a,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    DrawError,
>
where
    DB::ErrorType: 'static,
{
    let mut chart = titled_chart(root, &labels.title, x, y, y_label_area)?;
    chart
        .configure_mesh()
        .x_desc(&labels.x)
        .y_desc(&labels.y)
        .label_style((FAMILY, 14))
        .draw()?;
    Ok(chart)
}

fn no_data(name: &str) -> PlotError {
    PlotError::NoData {
        name: name.to_string(),
    }
}

fn legend_line(c: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
}

fn draw_legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Result<(), DrawError>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()?;
    Ok(())
}

// ---------------------------------------------------------------- lines with CI

struct LinesCi<'a> {
    labels: &'a Labels,
    series: &'a [CiSeries],
    x: (f64, f64),
    y: (f64, f64),
}

impl Figure for LinesCi<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError>
    where
        DB::ErrorType: 'static,
    {
        let mut chart = labelled_chart(
            root,
            self.labels,
            self.x.0..self.x.1,
            self.y.0..self.y.1,
            70,
        )?;
        for (i, s) in self.series.iter().enumerate() {
            let c = color(i);
            let pts: Vec<_> = s
                .points
                .iter()
                .filter(|p| {
                    p.x.is_finite() && p.mean.is_finite() && p.lo.is_finite() && p.hi.is_finite()
                })
                .collect();
            let mut band: Vec<(f64, f64)> = pts.iter().map(|p| (p.x, p.hi)).collect();
            band.extend(pts.iter().rev().map(|p| (p.x, p.lo)));
            if band.len() >= 3 {
                chart.draw_series(std::iter::once(Polygon::new(band, c.mix(0.2).filled())))?;
            }
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|p| (p.x, p.mean)),
                    c.stroke_width(2),
                ))?
                .label(&s.label)
                .legend(legend_line(c));
            chart.draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.x, p.mean), 3, c.filled())),
            )?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

/// Mean per x with a shaded 95 % confidence band (build points with
/// [`super::CiPoint::from_samples`]), one line per series, legend lower right.
pub fn lines_with_ci(
    dir: &Path,
    name: &str,
    formats: Formats,
    labels: &Labels,
    series: &[CiSeries],
) -> Result<Vec<PathBuf>, PlotError> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x = bounds(all().map(|p| p.x), true).ok_or_else(|| no_data(name))?;
    let y = bounds(all().flat_map(|p| [p.lo, p.hi, p.mean]), true).ok_or_else(|| no_data(name))?;
    render(
        dir,
        name,
        formats,
        &LinesCi {
            labels,
            series,
            x,
            y,
        },
    )
}

// ---------------------------------------------------------------- time series

struct TimeSeries<'a> {
    labels: &'a Labels,
    series: &'a [Series],
    spans: &'a [Span],
    refs: &'a [RefLine],
    x: (f64, f64),
    y: (f64, f64),
}

impl Figure for TimeSeries<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError>
    where
        DB::ErrorType: 'static,
    {
        let mut chart = labelled_chart(
            root,
            self.labels,
            self.x.0..self.x.1,
            self.y.0..self.y.1,
            70,
        )?;
        let shade = RGBColor(120, 120, 120);
        for span in self
            .spans
            .iter()
            .filter(|s| s.start.is_finite() && s.end.is_finite())
        {
            let (a, b) = (span.start.min(span.end), span.start.max(span.end));
            if b - a > (self.x.1 - self.x.0) * 1e-3 {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(a, self.y.0), (b, self.y.1)],
                    shade.mix(0.18).filled(),
                )))?;
            } else {
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(a, self.y.0), (a, self.y.1)],
                    shade.stroke_width(1),
                )))?;
            }
            chart.draw_series(std::iter::once(Text::new(
                span.label.clone(),
                (a, self.y.1),
                (FAMILY, 12).into_font().color(&BLACK),
            )))?;
        }
        for (i, s) in self.series.iter().enumerate() {
            let c = color(i);
            let pts = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite());
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
                .label(&s.label)
                .legend(legend_line(c));
        }
        for (j, r) in self.refs.iter().filter(|r| r.y.is_finite()).enumerate() {
            let c = if j == 0 {
                RGBColor(200, 0, 0)
            } else {
                color(self.series.len() + j)
            };
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(self.x.0, r.y), (self.x.1, r.y)],
                    8,
                    5,
                    c.stroke_width(2),
                ))?
                .label(&r.label)
                .legend(legend_line(c));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

/// Lines over time with shaded event spans (labelled at the top) and dashed horizontal
/// reference lines.
pub fn time_series(
    dir: &Path,
    name: &str,
    formats: Formats,
    labels: &Labels,
    series: &[Series],
    spans: &[Span],
    refs: &[RefLine],
) -> Result<Vec<PathBuf>, PlotError> {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let x = bounds(xs, false).ok_or_else(|| no_data(name))?;
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let y = bounds(ys.chain(refs.iter().map(|r| r.y)).chain([0.0]), true)
        .ok_or_else(|| no_data(name))?;
    // Headroom for span labels.
    let y = (y.0, y.1 + (y.1 - y.0) * 0.08);
    render(
        dir,
        name,
        formats,
        &TimeSeries {
            labels,
            series,
            spans,
            refs,
            x,
            y,
        },
    )
}

// ---------------------------------------------------------------- CDF

struct Cdf<'a> {
    labels: &'a Labels,
    sorted: Vec<(&'a str, Vec<f64>)>,
    x: (f64, f64),
}

impl Figure for Cdf<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError>
    where
        DB::ErrorType: 'static,
    {
        let mut chart = titled_chart(root, &self.labels.title, self.x.0..self.x.1, 0.0..1.0, 70)?;
        chart
            .configure_mesh()
            .x_desc(&self.labels.x)
            .y_desc(&self.labels.y)
            .label_style((FAMILY, 14))
            .draw()?;
        for (i, (label, v)) in self.sorted.iter().enumerate() {
            let c = color(i);
            let n = v.len() as f64;
            let mut pts = Vec::with_capacity(2 * v.len() + 1);
            pts.push((self.x.0, 0.0));
            for (k, &x) in v.iter().enumerate() {
                pts.push((x, k as f64 / n));
                pts.push((x, (k + 1) as f64 / n));
            }
            pts.push((self.x.1, 1.0));
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
                .label(*label)
                .legend(legend_line(c));
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

/// Empirical CDF of each sample set (non-finite values skipped).
pub fn cdf(
    dir: &Path,
    name: &str,
    formats: Formats,
    labels: &Labels,
    samples: &[Samples],
) -> Result<Vec<PathBuf>, PlotError> {
    let sorted: Vec<_> = samples
        .iter()
        .map(|s| (s.label.as_str(), sorted_finite(&s.values)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let x = bounds(sorted.iter().flat_map(|(_, v)| v.iter().copied()), true)
        .ok_or_else(|| no_data(name))?;
    render(dir, name, formats, &Cdf { labels, sorted, x })
}

// ---------------------------------------------------------------- categorical axes

/// Label of the category at `x` on an axis whose categories sit at 0, 1, 2, … (the axis
/// spans −0.5..n−0.5 and asks for at most n + 1 ticks, so plotters places them at the
/// integers; any other tick gets no label).
fn category_label(names: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
        names[i as usize].clone()
    } else {
        String::new()
    }
}

struct Bars<'a> {
    labels: &'a Labels,
    groups: &'a [String],
    series: &'a [BarSeries],
    y: (f64, f64),
}

impl Figure for Bars<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError>
    where
        DB::ErrorType: 'static,
    {
        let n = self.groups.len();
        let mut chart = titled_chart(
            root,
            &self.labels.title,
            -0.5..n as f64 - 0.5,
            self.y.0..self.y.1,
            70,
        )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n + 1)
            .x_label_formatter(&|x| category_label(self.groups, *x))
            .x_desc(&self.labels.x)
            .y_desc(&self.labels.y)
            .label_style((FAMILY, 14))
            .draw()?;
        let k = self.series.len().max(1) as f64;
        let w = 0.8 / k;
        for (j, s) in self.series.iter().enumerate() {
            let c = color(j);
            let bars = s
                .values
                .iter()
                .enumerate()
                .filter(|(g, v)| *g < n && v.is_finite())
                .map(|(g, &v)| {
                    let left = g as f64 - 0.4 + j as f64 * w;
                    Rectangle::new(
                        [(left, 0.0f64.max(self.y.0)), (left + w * 0.92, v)],
                        c.filled(),
                    )
                });
            chart
                .draw_series(bars)?
                .label(&s.label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}

/// Grouped bars: `groups` along x, within each group one bar per series
/// (`series[j].values[g]`, NaN for none).
pub fn grouped_bars(
    dir: &Path,
    name: &str,
    formats: Formats,
    labels: &Labels,
    groups: &[String],
    series: &[BarSeries],
) -> Result<Vec<PathBuf>, PlotError> {
    if groups.is_empty() {
        return Err(no_data(name));
    }
    let vals = series.iter().flat_map(|s| s.values.iter().copied());
    let (lo, hi) = bounds(vals.chain([0.0]), false).ok_or_else(|| no_data(name))?;
    // Room above the tallest bar for the legend.
    let y = (lo, hi + (hi - lo) * 0.25);
    render(
        dir,
        name,
        formats,
        &Bars {
            labels,
            groups,
            series,
            y,
        },
    )
}

struct Boxes<'a> {
    labels: &'a Labels,
    names: Vec<String>,
    boxes: Vec<Option<FiveNumber>>,
    y: (f64, f64),
}

impl Figure for Boxes<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError>
    where
        DB::ErrorType: 'static,
    {
        let n = self.names.len();
        let mut chart = titled_chart(
            root,
            &self.labels.title,
            -0.5..n as f64 - 0.5,
            self.y.0..self.y.1,
            70,
        )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n + 1)
            .x_label_formatter(&|x| category_label(&self.names, *x))
            .x_desc(&self.labels.x)
            .y_desc(&self.labels.y)
            .label_style((FAMILY, 14))
            .draw()?;
        for (i, b) in self.boxes.iter().enumerate() {
            let Some(b) = b else { continue };
            let c = color(i);
            let x = i as f64;
            chart.draw_series([
                Rectangle::new([(x - 0.3, b.q1), (x + 0.3, b.q3)], c.mix(0.3).filled()),
                Rectangle::new([(x - 0.3, b.q1), (x + 0.3, b.q3)], c.stroke_width(2)),
            ])?;
            chart.draw_series([
                PathElement::new(
                    vec![(x - 0.3, b.median), (x + 0.3, b.median)],
                    BLACK.stroke_width(2),
                ),
                PathElement::new(vec![(x, b.q3), (x, b.high_whisker)], c.stroke_width(1)),
                PathElement::new(vec![(x, b.q1), (x, b.low_whisker)], c.stroke_width(1)),
                PathElement::new(
                    vec![(x - 0.12, b.high_whisker), (x + 0.12, b.high_whisker)],
                    c.stroke_width(1),
                ),
                PathElement::new(
                    vec![(x - 0.12, b.low_whisker), (x + 0.12, b.low_whisker)],
                    c.stroke_width(1),
                ),
            ])?;
        }
        Ok(())
    }
}

/// Box plot per sample set: quartile box, median, whiskers at 1.5 IQR (outliers not drawn).
pub fn box_plot(
    dir: &Path,
    name: &str,
    formats: Formats,
    labels: &Labels,
    samples: &[Samples],
) -> Result<Vec<PathBuf>, PlotError> {
    let boxes: Vec<Option<FiveNumber>> =
        samples.iter().map(|s| FiveNumber::of(&s.values)).collect();
    let y = bounds(
        boxes
            .iter()
            .flatten()
            .flat_map(|b| [b.low_whisker, b.high_whisker]),
        true,
    )
    .ok_or_else(|| no_data(name))?;
    let names = samples.iter().map(|s| s.label.clone()).collect();
    render(
        dir,
        name,
        formats,
        &Boxes {
            labels,
            names,
            boxes,
            y,
        },
    )
}

// ---------------------------------------------------------------- heatmap

/// Viridis, sampled at five stops and interpolated linearly.
fn viridis(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let pos = t * (STOPS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(STOPS.len() - 2);
    let f = pos - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

struct Heatmap<'a> {
    labels: &'a Labels,
    grid: &'a Grid,
    range: (f64, f64),
}

impl Figure for Heatmap<'_> {
    fn size(&self) -> (u32, u32) {
        (1000, 600)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError>
    where
        DB::ErrorType: 'static,
    {
        let (w, _) = root.dim_in_pixel();
        let (main, bar) = root.split_horizontally(w.saturating_sub(110));
        let (rows, cols) = (self.grid.rows.len(), self.grid.cols.len());
        let mut chart = titled_chart(
            &main,
            &self.labels.title,
            -0.5..cols as f64 - 0.5,
            -0.5..rows as f64 - 0.5,
            90,
        )?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(cols + 1)
            .y_labels(rows + 1)
            .x_label_formatter(&|x| category_label(&self.grid.cols, *x))
            .y_label_formatter(&|y| category_label(&self.grid.rows, *y))
            .x_desc(&self.labels.x)
            .y_desc(&self.labels.y)
            .label_style((FAMILY, 13))
            .draw()?;
        let (lo, hi) = self.range;
        let norm = |v: f64| (v - lo) / (hi - lo);
        let annotate = rows * cols <= 160;
        for (r, row) in self.grid.values.iter().enumerate().take(rows) {
            for (c, &v) in row.iter().enumerate().take(cols) {
                let fill = if v.is_finite() {
                    viridis(norm(v))
                } else {
                    RGBColor(220, 220, 220)
                };
                let (x, y) = (c as f64 - 0.5, r as f64 - 0.5);
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x, y), (x + 1.0, y + 1.0)],
                    fill.filled(),
                )))?;
                if annotate && v.is_finite() {
                    let ink = if norm(v) > 0.6 { BLACK } else { WHITE };
                    let style = (FAMILY, 11)
                        .into_font()
                        .color(&ink)
                        .pos(Pos::new(HPos::Center, VPos::Center));
                    chart.draw_series(std::iter::once(Text::new(
                        format!("{v:.3}"),
                        (x + 0.5, y + 0.5),
                        style,
                    )))?;
                }
            }
        }
        // Color bar.
        let mut cb = ChartBuilder::on(&bar)
            .margin_top(50)
            .margin_bottom(62)
            .margin_right(10)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..1.0, lo..hi)?;
        cb.configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_labels(6)
            .label_style((FAMILY, 12))
            .draw()?;
        let steps = 64;
        cb.draw_series((0..steps).map(|k| {
            let a = lo + (hi - lo) * k as f64 / steps as f64;
            let b = lo + (hi - lo) * (k + 1) as f64 / steps as f64;
            Rectangle::new(
                [(0.0, a), (1.0, b)],
                viridis((k as f64 + 0.5) / steps as f64).filled(),
            )
        }))?;
        Ok(())
    }
}

/// Heatmap of `grid.values[row][col]` with row/column names on the axes, a viridis color
/// bar, and the values written in the cells when the grid is small (≤ 160 cells).
pub fn heatmap(
    dir: &Path,
    name: &str,
    formats: Formats,
    labels: &Labels,
    grid: &Grid,
) -> Result<Vec<PathBuf>, PlotError> {
    if grid.rows.is_empty() || grid.cols.is_empty() {
        return Err(no_data(name));
    }
    let range =
        bounds(grid.values.iter().flatten().copied(), false).ok_or_else(|| no_data(name))?;
    render(
        dir,
        name,
        formats,
        &Heatmap {
            labels,
            grid,
            range,
        },
    )
}
