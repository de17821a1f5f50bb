//! The `--png` plot: latency (p50, p99) and engine-computed tokens per retrieval against beam
//! width, with the greedy decode's computed tokens as a reference line.

use std::path::Path;

use plotters::prelude::*;

use super::Report;
use crate::bench::BenchError;
use crate::bench::gr::report::register_font;

type Series = (&'static str, Vec<(f64, f64)>);

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let pts = series
        .iter()
        .flat_map(|s| s.1.iter())
        .filter(|p| p.1.is_finite());
    let (xmax, ymax) = pts.fold((1.0f64, 1e-6f64), |a, p| (a.0.max(p.0), a.1.max(p.1)));
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((1.0..xmax * 1.3).log_scale(), 0.0..ymax * 1.15)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("beam width")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, (name, xy)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let xy: Vec<(f64, f64)> = xy.iter().copied().filter(|p| p.1.is_finite()).collect();
        chart
            .draw_series(std::iter::once(PathElement::new(
                xy.clone(),
                color.stroke_width(2),
            )))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(xy.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

pub fn plot(path: &Path, r: &Report) -> Result<(), BenchError> {
    let fail = |msg: String| BenchError::Setup(format!("--png {}: {msg}", path.display()));
    register_font().map_err(fail)?;
    let aligned: Vec<_> = r
        .rows
        .iter()
        .filter(|w| w.align == r.rows[0].align)
        .collect();
    let xy = |f: fn(&super::WidthRow) -> f64| -> Vec<(f64, f64)> {
        aligned
            .iter()
            .map(|w| (w.beam_width as f64, f(w)))
            .collect()
    };
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (left, right) = root.split_horizontally(600);
    panel(
        &left,
        "retrieval latency (one at a time)",
        "ms",
        &[("p50", xy(|w| w.p50_ms)), ("p99", xy(|w| w.p99_ms))],
    )
    .map_err(fail)?;
    let greedy: Vec<(f64, f64)> = aligned
        .iter()
        .map(|w| (w.beam_width as f64, r.greedy_computed_tokens))
        .collect();
    let mut tokens: Vec<Series> = vec![
        ("constrained (recache)", xy(|w| w.computed_tokens)),
        ("greedy decode, same depth", greedy),
    ];
    if aligned
        .iter()
        .any(|w| w.unconstrained_computed_tokens.is_some())
    {
        tokens.push((
            "unconstrained beam",
            xy(|w| w.unconstrained_computed_tokens.unwrap_or(f64::NAN)),
        ));
    }
    panel(
        &right,
        "engine-computed tokens per retrieval",
        "tokens",
        &tokens,
    )
    .map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}
