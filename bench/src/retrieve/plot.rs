//! The `--png` plot: latency (p50, p99) and engine-computed tokens per retrieval against beam
//! width, with the greedy decode's computed tokens as a reference line ([`crate::plot`]).

use std::path::Path;

use super::report::{Report, WidthRow};
use crate::error::BenchError;
use crate::plot::{self, Lines, Panel, Series, SeriesLabelPosition, XAxis};

/// One chart against beam width (log scale).
fn lines<'a>(title: &'a str, y_desc: &'a str, series: Vec<Series>) -> Lines<'a> {
    Lines {
        title,
        x_desc: "beam width",
        y_desc,
        x_axis: XAxis::Log,
        diagonal: false,
        legend: SeriesLabelPosition::UpperLeft,
        series,
    }
}

pub fn plot(path: &Path, r: &Report) -> Result<(), BenchError> {
    let aligned: Vec<_> = r
        .rows
        .iter()
        .filter(|w| w.align == r.rows[0].align)
        .collect();
    let xy = |f: fn(&WidthRow) -> f64| -> Vec<(f64, f64)> {
        aligned
            .iter()
            .map(|w| (w.beam_width as f64, f(w)))
            .collect()
    };
    let greedy: Vec<(f64, f64)> = aligned
        .iter()
        .map(|w| (w.beam_width as f64, r.greedy_computed_tokens))
        .collect();
    let mut tokens = vec![
        Series::new("constrained (recache)", xy(|w| w.computed_tokens)),
        Series::new("greedy decode, same depth", greedy),
    ];
    if aligned
        .iter()
        .any(|w| w.unconstrained_computed_tokens.is_some())
    {
        tokens.push(Series::new(
            "unconstrained beam",
            xy(|w| w.unconstrained_computed_tokens.unwrap_or(f64::NAN)),
        ));
    }
    let latency = vec![
        Series::new("p50", xy(|w| w.p50_ms)),
        Series::new("p99", xy(|w| w.p99_ms)),
    ];
    let panels = [
        Panel::Lines(lines("retrieval latency (one at a time)", "ms", latency)),
        Panel::Lines(lines(
            "engine-computed tokens per retrieval",
            "tokens",
            tokens,
        )),
    ];
    plot::draw(path, (1200, 480), &panels)
        .map_err(|msg| BenchError::Setup(format!("--png {}: {msg}", path.display())))
}
