//! One result row per mode (the JSON contract), the text table, and the `--out` PNG
//! (throughput and engine hit rate per mode, plotters' bitmap backend; text is drawn with
//! `ab_glyph` from a TTF found at run time, as in the eviction crate's plots).

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::bench::BenchError;

#[derive(Debug, Clone, Default, Serialize)]
pub struct ModeResult {
    pub mode: String,
    pub requests: usize,
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Engine's own prefix-cache hit rate over the mode (token hits / token queries).
    pub hit_rate: f64,
    /// Prompt tokens the engine had to compute (queries - hits).
    pub computed_tokens: u64,
    /// Of the hits, prompt tokens the item pool's connector supplied.
    pub pool_hit_tokens: u64,
    pub errors: usize,
    /// Requests laid out user-as-prefix (the rest item-as-prefix).
    pub user_prefix: usize,
    pub prompt_tokens: u64,
    /// Sum of `usage.cached_tokens` recache reported.
    pub cached_tokens: u64,
    pub wall_s: f64,
    /// The request stream: `default` (`--users` active users) or `bat` (BAT §6.1: every user
    /// of `--data`, drawn with replacement by activity).
    pub workload: String,
    /// Distinct users in the stream, and the share of requests from a user seen before in it.
    pub distinct_users: usize,
    pub returning_share: f64,
    /// Total KV bytes of the mode: engine KV cache + item pool (equal across modes with
    /// `--kv-bytes`); 0 when the bench does not know the engine's cache size.
    pub kv_bytes: u64,
    pub engine_kv_bytes: u64,
    pub pool_bytes: u64,
    /// Items the pool may hold (0 for modes without it).
    pub pool_items: usize,
    /// Offered load in requests/s (0: closed loop, all requests queued at once).
    pub offered_rps: f64,
    pub concurrency: usize,
    /// Which repetition of this (mode, offered load) the row is (0-based).
    pub repeat: usize,
    /// Where the time goes. Tokens the pool's background fills computed during the timed
    /// stream (part of `computed_tokens`).
    pub fill_tokens: u64,
    /// The catalog's item KV computed before the timed stream (untimed, not in
    /// `computed_tokens`; 0 when the pool already held it).
    pub precompute_tokens: u64,
    pub precompute_s: f64,
    /// Engine-side seconds summed over requests: prefill and queueing (vLLM histograms).
    pub engine_prefill_s: f64,
    pub engine_queue_s: f64,
    /// Connector seconds over the stream: loading pooled K/V into requests, capturing fills.
    pub connector_load_s: f64,
    pub connector_fill_s: f64,
    /// recache's own time per ranking request (rewrite, selection, pool bookkeeping), ms.
    pub recache_ms_per_request: f64,
}

pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub fn table(rows: &[ModeResult]) -> String {
    let mut s = format!(
        "{:<9} {:>8} {:>7} {:>9} {:>9} {:>8} {:>15} {:>6} {:>7}\n",
        "mode",
        "requests",
        "rps",
        "p50_ms",
        "p99_ms",
        "hit_rate",
        "computed_tokens",
        "UP",
        "errors"
    );
    for r in rows {
        s += &format!(
            "{:<9} {:>8} {:>7.3} {:>9.0} {:>9.0} {:>8.3} {:>15} {:>6} {:>7}\n",
            r.mode,
            r.requests,
            r.rps,
            r.p50_ms,
            r.p99_ms,
            r.hit_rate,
            r.computed_tokens,
            r.user_prefix,
            r.errors
        );
    }
    s
}

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

pub(crate) fn register_font() -> Result<(), String> {
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
}

pub(crate) fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
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

pub fn plot(path: &Path, rows: &[ModeResult]) -> Result<(), BenchError> {
    let fail = |msg: String| BenchError::Setup(format!("plot {}: {msg}", path.display()));
    register_font().map_err(fail)?;
    let names: Vec<String> = rows.iter().map(|r| r.mode.clone()).collect();
    let rps: Vec<f64> = rows.iter().map(|r| r.rps).collect();
    let hit: Vec<f64> = rows.iter().map(|r| r.hit_rate).collect();
    let root = BitMapBackend::new(path, (1100, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (left, right) = root.split_horizontally(550);
    bars(&left, "throughput (requests/s)", &names, &rps).map_err(fail)?;
    bars(&right, "engine prefix-cache hit rate", &names, &hit).map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}
