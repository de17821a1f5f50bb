//! The `--png` plot: SLO attainment and goodput against offered load (× saturation), one line
//! per mode with a min–max bar per point over repeats ([`crate::plot`]).

use std::path::Path;

use super::tally::Row;
use crate::error::BenchError;
use crate::plot::{self, Lines, Panel, Series, SeriesLabelPosition, XAxis};

/// One chart: `value` (median, and the spread's `key` for its range) against load per mode.
fn lines<'a>(title: &'a str, rows: &[Row], value: fn(&Row) -> f64, key: &str) -> Lines<'a> {
    let series = ["plain", "slo"]
        .iter()
        .map(|mode| {
            let mut line: Vec<&Row> = rows.iter().filter(|r| r.mode == *mode).collect();
            line.sort_by(|a, b| a.load.total_cmp(&b.load));
            Series {
                name: mode.to_string(),
                points: line.iter().map(|r| (r.load, value(r))).collect(),
                spread: (line.iter())
                    .filter_map(|r| Some((r.load, *r.spread.get(key)?)))
                    .map(|(x, s)| (x, s.min, s.max))
                    .collect(),
            }
        })
        .collect();
    Lines {
        title,
        x_desc: "offered load (x saturation)",
        y_desc: "",
        x_axis: XAxis::FromZero,
        diagonal: false,
        legend: SeriesLabelPosition::UpperRight,
        series,
    }
}

pub fn plot(path: &Path, rows: &[Row]) -> Result<(), BenchError> {
    let panels = [
        Panel::Lines(lines(
            "SLO attainment (on time / offered)",
            rows,
            |r| r.attainment,
            "attainment",
        )),
        Panel::Lines(lines(
            "goodput (on time per s)",
            rows,
            |r| r.goodput_rps,
            "goodput_rps",
        )),
    ];
    plot::draw(path, (1200, 480), &panels)
        .map_err(|msg| BenchError::Setup(format!("--png {}: {msg}", path.display())))
}
