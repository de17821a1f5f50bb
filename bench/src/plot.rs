//! Every PNG the benchmarks draw (`bench gr --out/--sweep-out`, `bench slo --png`, `bench
//! retrieve --png`, `bench route --out`, `bench costfit --out`, `recache sim --plot`): panels
//! side by side in one bitmap, each a bar chart, a line chart or a scatter plot. The
//! benchmarks say what to draw ([`Panel`]); how it looks is decided here once.
//!
//! plotters' bitmap backend renders text with `ab_glyph` from a TTF file read at run time, so
//! the build needs no font library: `$RECACHE_PLOT_FONT`, else DejaVu Sans / Liberation Sans
//! from the usual Debian paths.

use std::path::Path;
use std::sync::OnceLock;

/// Where a line chart puts its legend.
pub use plotters::chart::SeriesLabelPosition;
use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers the TTF font every plot draws with (once per process); the error says how to
/// name one.
pub fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var("RECACHE_PLOT_FONT").ok();
        let path = env
            .iter()
            .map(String::as_str)
            .chain(FONTS.iter().copied())
            .find(|p| Path::new(p).is_file())
            .ok_or("no TTF font found; set RECACHE_PLOT_FONT=/path/to/font.ttf")?;
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes.leak())
            .map_err(|_| format!("{path}: not a usable font"))
    })
    .clone()
}

/// One chart of a PNG.
pub enum Panel<'a> {
    /// One bar per name, its value written on it.
    Bars {
        title: &'a str,
        names: &'a [String],
        values: &'a [f64],
    },
    Lines(Lines<'a>),
    /// The same points unjoined: one marker per point, per series.
    Scatter(Lines<'a>),
}

/// Lines through points, one per series, with an optional min–max bar per point.
pub struct Lines<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    /// Empty: no y label.
    pub y_desc: &'a str,
    pub x_axis: XAxis,
    /// Draw y = x (achieved = offered: where a line leaves it, that series saturated).
    pub diagonal: bool,
    pub legend: SeriesLabelPosition,
    pub series: Vec<Series>,
}

/// How the x axis spans the points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// From 0 to a little past the largest x.
    FromZero,
    /// From the smallest to the largest x.
    Span,
    /// Logarithmic, from 1.
    Log,
}

/// One line: its points, and a min–max range at some x (repeats' spread).
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// (x, min, max)
    pub spread: Vec<(f64, f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            spread: Vec::new(),
        }
    }
}

/// Draws `panels` side by side into a `size` PNG at `path`.
pub fn draw(path: &Path, size: (u32, u32), panels: &[Panel<'_>]) -> Result<(), String> {
    register_font()?;
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        match panel {
            Panel::Bars {
                title,
                names,
                values,
            } => bars(area, title, names, values)?,
            Panel::Lines(lines) => draw_lines(area, lines, true)?,
            Panel::Scatter(lines) => draw_lines(area, lines, false)?,
        }
    }
    root.present().map_err(|e| e.to_string())
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    names: &[String],
    values: &[f64],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let ymax = values.iter().copied().fold(0.0, f64::max).max(1e-6) * 1.15;
    let n = names.len();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    chart
        .draw_series(values.iter().enumerate().map(|(i, v)| {
            let x = i as f64;
            Rectangle::new(
                [(x - 0.35, 0.0), (x + 0.35, *v)],
                Palette99::pick(i).filled(),
            )
        }))
        .map_err(err)?;
    chart
        .draw_series(
            values.iter().enumerate().map(|(i, v)| {
                Text::new(format!("{v:.3}"), (i as f64 - 0.2, *v), ("sans-serif", 14))
            }),
        )
        .map_err(err)?;
    Ok(())
}

/// The (x, y) ranges `lines` needs: every point and spread with finite coordinates.
fn ranges(lines: &Lines<'_>) -> ((f64, f64), f64) {
    let finite = |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let pts: Vec<(f64, f64)> = (lines.series.iter())
        .flat_map(|s| (s.points.iter().copied()).chain(s.spread.iter().map(|s| (s.0, s.2))))
        .filter(finite)
        .collect();
    let (lo, hi) = (pts.iter()).fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-6) * 1.1;
    let x = match lines.x_axis {
        XAxis::FromZero => (0.0, hi.max(1e-6) * 1.08),
        XAxis::Span if lo < hi => (lo, hi),
        XAxis::Span if lo <= hi => (lo - 0.5, lo + 0.5),
        XAxis::Span => (0.0, 1.0),
        XAxis::Log => (1.0, hi.max(1.0) * 1.3),
    };
    (x, ymax)
}

/// A line chart, its points joined (`join`) or not.
fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &Lines<'_>,
    join: bool,
) -> Result<(), String> {
    let ((x0, x1), ymax) = ranges(lines);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(lines.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64);
    if lines.x_axis == XAxis::Log {
        let chart = builder
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..ymax)
            .map_err(|e| e.to_string())?;
        fill(chart, lines, (x0, x1), join)
    } else {
        let chart = builder
            .build_cartesian_2d(x0..x1, 0.0..ymax)
            .map_err(|e| e.to_string())?;
        fill(chart, lines, (x0, x1), join)
    }
}

/// Mesh, series, spread bars and legend of one line chart, on either x scale.
fn fill<'a, DB, X>(
    mut chart: ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    lines: &Lines<'_>,
    (x0, x1): (f64, f64),
    join: bool,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(lines.x_desc);
    if !lines.y_desc.is_empty() {
        mesh.y_desc(lines.y_desc);
    }
    mesh.draw().map_err(err)?;
    if lines.diagonal {
        let end = x1.min(chart.y_range().end);
        let style = BLACK.mix(0.3).stroke_width(1);
        chart
            .draw_series(std::iter::once(PathElement::new(
                [(x0.max(0.0), x0.max(0.0)), (end, end)],
                style,
            )))
            .map_err(err)?;
    }
    // Half-width of a spread bar's caps.
    let cap = (x1 - x0) * 0.006;
    for (i, s) in lines.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let xy: Vec<(f64, f64)> = (s.points.iter().copied())
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        if join {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    xy.clone(),
                    color.stroke_width(2),
                )))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(xy.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
        } else {
            chart
                .draw_series(xy.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
        }
        let spreads = (s.spread.iter())
            .filter(|(x, lo, hi)| x.is_finite() && lo.is_finite() && hi.is_finite());
        chart
            .draw_series(spreads.map(|&(x, lo, hi)| {
                let pts = vec![
                    (x - cap, lo),
                    (x + cap, lo),
                    (x, lo),
                    (x, hi),
                    (x - cap, hi),
                    (x + cap, hi),
                ];
                PathElement::new(pts, color)
            }))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(lines.legend.clone())
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(x_axis: XAxis, points: Vec<(f64, f64)>) -> Lines<'static> {
        Lines {
            title: "t",
            x_desc: "x",
            y_desc: "",
            x_axis,
            diagonal: false,
            legend: SeriesLabelPosition::UpperLeft,
            series: vec![Series::new("a", points)],
        }
    }

    #[test]
    fn ranges_cover_the_points_per_axis_kind() {
        let pts = vec![(2.0, 1.0), (4.0, 3.0), (f64::NAN, 100.0)];
        let ((x0, x1), y) = ranges(&lines(XAxis::FromZero, pts.clone()));
        assert_eq!(x0, 0.0);
        assert!(x1 > 4.0 && (y - 3.3).abs() < 1e-9, "{x1} {y}");
        assert_eq!(ranges(&lines(XAxis::Span, pts.clone())).0, (2.0, 4.0));
        assert_eq!(ranges(&lines(XAxis::Span, vec![(3.0, 1.0)])).0, (2.5, 3.5));
        assert_eq!(ranges(&lines(XAxis::Log, pts)).0.0, 1.0);
    }
}
