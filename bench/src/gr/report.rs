//! One result row per mode (the JSON contract), the text table, and the `--out` PNG
//! (throughput and engine hit rate per mode, [`crate::plot`]).

use std::path::Path;

use serde::Serialize;

use crate::error::BenchError;
use crate::plot::{self, Panel};

#[derive(Debug, Clone, Default, Serialize)]
pub struct ModeResult {
    pub mode: String,
    /// The served model the mode ran on (the engine's name for it).
    pub model: String,
    pub requests: usize,
    pub rps: f64,
    /// Latency quantiles of the successful requests: at an offered load (open loop) from each
    /// request's planned arrival, so waiting for a client slot or in the server counts; in a
    /// closed loop from when it was sent (`latency_from`).
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Service time quantiles: from when each request was sent to its answer.
    pub service_p50_ms: f64,
    pub service_p99_ms: f64,
    /// What `p50_ms`/`p99_ms` count from: `arrival` (open loop) or `sent` (closed loop).
    pub latency_from: String,
    /// Engine's own prefix-cache hit rate over the mode (token hits / token queries).
    pub hit_rate: f64,
    /// Prompt tokens the engine had to compute (queries - hits).
    pub computed_tokens: u64,
    /// Of the hits, prompt tokens the item pool's connector supplied.
    pub pool_hit_tokens: u64,
    /// The pool modes' `--rank-pool-recompute` setting (`none` for modes without the pool).
    pub pool_recompute: String,
    /// Which token scored a candidate (`--rank-readout`): label or item.
    pub readout: String,
    pub errors: usize,
    /// Requests laid out user-as-prefix (the rest item-as-prefix).
    pub user_prefix: usize,
    pub prompt_tokens: u64,
    /// Sum of `usage.cached_tokens` recache reported.
    pub cached_tokens: u64,
    /// Query–key pairs the requests' computed tokens attended (per request `T·P + T·(T+1)/2`,
    /// `P` its `usage.cached_tokens`, `T` the rest of its prompt): with `computed_tokens`
    /// what `bench costfit`'s fit `a·tokens + b·pairs + c` predicts `engine_prefill_s` from.
    pub attended_pairs: u64,
    pub wall_s: f64,
    /// The request stream: `default` (`--users` active users) or `bat` (BAT §6.1: every user
    /// of `--data`, drawn with replacement by activity).
    pub workload: String,
    /// Distinct users in the stream, and the share of requests from a user seen before in it.
    pub distinct_users: usize,
    pub returning_share: f64,
    /// Total KV bytes of the mode: its engine KV cache + its item pool (equal across modes
    /// with `--kv-bytes`; a pool mode run with `--allow-unequal-memory` has more); 0 when the
    /// bench does not know the engine's cache size.
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
    /// Where the time goes. Tokens the pool's background fills computed for the timed stream,
    /// those still running at its end included (part of `computed_tokens`).
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
    /// Seconds waited after the stream for the item pool's fills still running (their tokens
    /// are in `fill_tokens` and `computed_tokens`), and fills still running when that wait gave
    /// up (0 unless the engine is stuck).
    pub fill_wait_s: f64,
    pub fills_pending: usize,
    /// recache's own time per ranking request (rewrite, selection, pool bookkeeping), ms.
    pub recache_ms_per_request: f64,
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

/// The `--out` PNG: throughput and the engine's hit rate per mode, as bars with their values,
/// the throughput panel's title followed by `ratios` (each mode's ratio to UP, from
/// `summary::ratios_to_up`).
pub fn plot(path: &Path, rows: &[ModeResult], ratios: &str) -> Result<(), BenchError> {
    let names: Vec<String> = rows.iter().map(|r| r.mode.clone()).collect();
    let rps: Vec<f64> = rows.iter().map(|r| r.rps).collect();
    let hit: Vec<f64> = rows.iter().map(|r| r.hit_rate).collect();
    let title = format!("throughput (requests/s){ratios}");
    let panels = [
        Panel::Bars {
            title: &title,
            names: &names,
            values: &rps,
        },
        Panel::Bars {
            title: "engine prefix-cache hit rate",
            names: &names,
            values: &hit,
        },
    ];
    plot::draw(path, (1100, 440), &panels)
        .map_err(|msg| BenchError::Setup(format!("plot {}: {msg}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::super::summary::tests::row;
    use super::*;

    #[test]
    fn the_out_png_draws_bars_with_the_ratio_to_up() -> Result<(), BenchError> {
        let rows = [row("up", 50.0, 2.0), row("bat-pool", 50.0, 3.7)];
        // No font is a failure, not a pass: tests/prereqs installs one.
        if let Err(e) = plot::register_font() {
            panic!("the PNG cannot be checked: {e}");
        }
        let dir = tempfile::tempdir().map_err(BenchError::io("temp dir"))?;
        let path = dir.path().join("gr.png");
        plot(&path, &rows, ": bat-pool 1.85x UP")?;
        let len = std::fs::metadata(&path)
            .map_err(BenchError::io("png"))?
            .len();
        assert!(len > 1000, "{len} bytes");
        Ok(())
    }
}
