//! The `--png` plot: SLO attainment and goodput against offered load (× saturation), one line
//! per mode with a min–max bar per point over repeats; drawn like `bench gr`'s sweep PNG
//! (plotters' bitmap backend, the same font lookup).

use std::path::Path;

use plotters::prelude::*;

use super::tally::Row;
use crate::bench::BenchError;
use crate::bench::gr::report::register_font;

/// One panel: `value` (median, and the spread's key for its range) against load per mode.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    rows: &[Row],
    value: fn(&Row) -> f64,
    key: &str,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    let xmax = rows.iter().map(|r| r.load).fold(0.0, f64::max) * 1.1;
    let top = |r: &Row| r.spread.get(key).map_or(value(r), |s| s.max);
    let ymax = rows
        .iter()
        .map(|r| finite(top(r)))
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered load (x saturation)")
        .draw()
        .map_err(err)?;
    let cap = xmax * 0.006;
    for (i, mode) in ["plain", "slo"].iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut line: Vec<&Row> = rows.iter().filter(|r| r.mode == *mode).collect();
        line.sort_by(|a, b| a.load.total_cmp(&b.load));
        let xy: Vec<(f64, f64)> = line
            .iter()
            .map(|r| (r.load, value(r)))
            .filter(|p| p.1.is_finite())
            .collect();
        chart
            .draw_series(std::iter::once(PathElement::new(
                xy.clone(),
                color.stroke_width(2),
            )))
            .map_err(err)?
            .label(*mode)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(xy.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
        let spreads = line
            .iter()
            .filter_map(|r| Some((r.load, *r.spread.get(key)?)));
        chart
            .draw_series(spreads.filter(|(_, s)| s.min.is_finite()).map(|(x, s)| {
                let pts = vec![
                    (x - cap, s.min),
                    (x + cap, s.min),
                    (x, s.min),
                    (x, s.max),
                    (x - cap, s.max),
                    (x + cap, s.max),
                ];
                PathElement::new(pts, color)
            }))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

pub fn plot(path: &Path, rows: &[Row]) -> Result<(), BenchError> {
    let fail = |msg: String| BenchError::Setup(format!("--png {}: {msg}", path.display()));
    register_font().map_err(fail)?;
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (left, right) = root.split_horizontally(600);
    panel(
        &left,
        "SLO attainment (on time / offered)",
        rows,
        |r| r.attainment,
        "attainment",
    )
    .map_err(fail)?;
    panel(
        &right,
        "goodput (on time per s)",
        rows,
        |r| r.goodput_rps,
        "goodput_rps",
    )
    .map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}
