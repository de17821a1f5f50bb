//! The `--sweep-out` PNG: per mode, achieved throughput and p99 latency against offered load
//! (medians over rounds with min–max bars), drawn like [`super::report`]'s `--out` PNG.

use std::path::Path;

use plotters::prelude::*;

use super::report;
use super::summary::{Spread, Summary};
use crate::bench::BenchError;

/// One panel: `value` against offered load per mode, with a min–max bar per point.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    modes: &[&str],
    points: &[&Summary],
    value: fn(&Summary) -> Spread,
    diagonal: bool,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    let xmax = points.iter().map(|s| s.offered_rps).fold(0.0, f64::max) * 1.08;
    let cap = xmax * 0.006; // half-width of an error bar's cap
    let ymax = points
        .iter()
        .map(|s| finite(value(s).max))
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
        .x_desc("offered load (requests/s)")
        .draw()
        .map_err(err)?;
    if diagonal {
        // achieved = offered: where a mode's line leaves it, the mode is saturated.
        let end = xmax.min(ymax);
        let style = BLACK.mix(0.3).stroke_width(1);
        chart
            .draw_series(std::iter::once(PathElement::new(
                [(0.0, 0.0), (end, end)],
                style,
            )))
            .map_err(err)?;
    }
    for (i, mode) in modes.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut line: Vec<&Summary> = points.iter().copied().filter(|s| s.mode == *mode).collect();
        line.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
        let xy: Vec<(f64, f64)> = line
            .iter()
            .map(|s| (s.offered_rps, value(s).median))
            .filter(|p| p.1.is_finite())
            .collect();
        chart
            // Plain path elements: the crate builds plotters without its series features.
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
        // Rounds' spread: a capped vertical bar from min to max at each offered load.
        chart
            .draw_series(line.iter().filter(|s| value(s).min.is_finite()).map(|s| {
                let (v, x, w) = (value(s), s.offered_rps, cap);
                let bar = [(x - w, v.min), (x + w, v.min), (x, v.min)];
                let top = [(x, v.max), (x - w, v.max), (x + w, v.max)];
                PathElement::new(bar.into_iter().chain(top).collect::<Vec<_>>(), color)
            }))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// The sweep PNG. Closed-loop rows (offered load 0) have no place on an offered-load axis
/// and are left out; with nothing else left the sweep was not one, which is an error.
pub fn plot_sweep(path: &Path, summaries: &[Summary]) -> Result<(), BenchError> {
    let fail = |msg: String| BenchError::Setup(format!("plot {}: {msg}", path.display()));
    let points: Vec<&Summary> = summaries.iter().filter(|s| s.offered_rps > 0.0).collect();
    if points.is_empty() {
        return Err(BenchError::Setup(format!(
            "--sweep-out {}: every run was closed loop (offered load 0); --sweep-out plots \
             against offered load and needs --rates with at least one rate > 0",
            path.display()
        )));
    }
    let mut modes: Vec<&str> = Vec::new();
    for s in &points {
        if !modes.contains(&s.mode.as_str()) {
            modes.push(&s.mode);
        }
    }
    report::register_font().map_err(fail)?;
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (left, right) = root.split_horizontally(600);
    panel(
        &left,
        "achieved throughput (requests/s)",
        &modes,
        &points,
        |s| s.rps,
        true,
    )
    .map_err(fail)?;
    panel(
        &right,
        "p99 latency (ms)",
        &modes,
        &points,
        |s| s.p99_ms,
        false,
    )
    .map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::report::ModeResult;
    use super::super::summary::{summarize, tests::row};
    use super::*;

    #[test]
    fn sweep_png_and_closed_loop_error() -> Result<(), BenchError> {
        let dir = tempfile::tempdir().map_err(BenchError::io("temp dir"))?;
        let path = dir.path().join("sweep.png");
        let closed = summarize(&[row("re", 0.0, 1.0)]);
        let e = plot_sweep(&path, &closed).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("--rates")));
        if report::register_font().is_err() {
            eprintln!("no TTF font here: PNG not checked");
            return Ok(());
        }
        let rows: Vec<ModeResult> = [1.0, 2.0, 4.0]
            .into_iter()
            .flat_map(|o| {
                [
                    row("re", o, o * 0.9),
                    row("re", o, o * 0.8),
                    row("bat", o, o),
                ]
            })
            .collect();
        plot_sweep(&path, &summarize(&rows))?;
        let len = std::fs::metadata(&path)
            .map_err(BenchError::io("png"))?
            .len();
        assert!(len > 1000, "{len} bytes");
        Ok(())
    }
}
