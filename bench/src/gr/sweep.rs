//! The `--sweep-out` PNG: per mode, achieved throughput and p99 latency against offered load
//! (medians over rounds with min–max bars), drawn by [`crate::plot`].

use std::path::Path;

use super::summary::Summary;
use crate::error::BenchError;
use crate::plot::{self, Lines, Panel, Series, SeriesLabelPosition, XAxis};
use crate::stats::Spread;

/// One line chart: `value` against offered load per mode (medians), with each point's
/// min–max over rounds.
fn lines<'a>(
    title: &'a str,
    modes: &[&str],
    points: &[&Summary],
    value: fn(&Summary) -> Spread,
    diagonal: bool,
) -> Lines<'a> {
    let series = modes
        .iter()
        .map(|mode| {
            let mut line: Vec<&Summary> =
                points.iter().copied().filter(|s| s.mode == *mode).collect();
            line.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
            Series {
                name: mode.to_string(),
                points: line
                    .iter()
                    .map(|s| (s.offered_rps, value(s).median))
                    .collect(),
                spread: (line.iter())
                    .map(|s| (s.offered_rps, value(s).min, value(s).max))
                    .collect(),
            }
        })
        .collect();
    Lines {
        title,
        x_desc: "offered load (requests/s)",
        y_desc: "",
        x_axis: XAxis::FromZero,
        diagonal,
        legend: SeriesLabelPosition::UpperLeft,
        series,
    }
}

/// The sweep PNG. Closed-loop rows (offered load 0) have no place on an offered-load axis
/// and are left out; with nothing else left the sweep was not one, which is an error.
pub fn plot_sweep(path: &Path, summaries: &[Summary]) -> Result<(), BenchError> {
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
    let panels = [
        Panel::Lines(lines(
            "achieved throughput (requests/s)",
            &modes,
            &points,
            |s| s.rps,
            true,
        )),
        Panel::Lines(lines(
            "p99 latency (ms)",
            &modes,
            &points,
            |s| s.p99_ms,
            false,
        )),
    ];
    plot::draw(path, (1200, 480), &panels)
        .map_err(|msg| BenchError::Setup(format!("plot {}: {msg}", path.display())))
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
        // No font is a failure, not a pass: tests/prereqs installs one.
        if let Err(e) = plot::register_font() {
            panic!("the PNG cannot be checked: {e}");
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
