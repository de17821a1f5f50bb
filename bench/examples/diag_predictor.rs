//! Offline check of the learned predictor on a trace: trains on a 20k-row
//! window, then reports, for the following rows, the Rust evaluator's
//! agreement with LightGBM's own `Booster::predict` and the mean predicted vs
//! true label per "blocks from the end of the prompt" bucket.
//! `cargo run --release -p recache-bench --example diag_predictor -- [TRACE]`

use std::path::PathBuf;

use recache_bench::predictor::rows_from_trace;
use recache_eviction::predict::features::NF;
use recache_eviction::predict::lgbm::{LgbmConfig, params};
use recache_eviction::predict::trees::Ensemble;
use recache_eviction::trace::load_mooncake;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).map_or_else(
        || PathBuf::from("../shared/data/mooncake/conversation_trace.jsonl"),
        PathBuf::from,
    );
    let (x, y) = rows_from_trace(&load_mooncake(&path)?);
    let (start, n, m) = (60_000, 20_000, 20_000);
    let cfg = LgbmConfig::default();
    let ds = lightgbm3::Dataset::from_slice(
        &x[start * NF..(start + n) * NF],
        &y[start..start + n],
        NF as i32,
        true,
    )?;
    let booster = lightgbm3::Booster::train(ds, &params(&cfg))?;
    let model = Ensemble::parse(&booster.save_string()?)?;
    let test = &x[(start + n) * NF..(start + n + m) * NF];
    let native = booster.predict(test, NF as i32, true)?;
    let mut max_diff = 0f64;
    let mut buckets = [(0f64, 0f64, 0u32); 4];
    for (i, row) in test.chunks_exact(NF).enumerate() {
        let p = model.predict(row);
        max_diff = max_diff.max((p - native[i]).abs());
        let b = (row[25] as usize).min(3);
        buckets[b].0 += p;
        buckets[b].1 += f64::from(y[start + n + i]);
        buckets[b].2 += 1;
    }
    println!("max |rust - lightgbm| = {max_diff:e}");
    // AUC of "reused within the horizon" (label below the censored value),
    // scoring by the negated prediction (shorter predicted gap = reuse).
    let cens = y.iter().copied().fold(0f32, f32::max) - 1e-3;
    let mut scored: Vec<(f64, bool)> = test
        .chunks_exact(NF)
        .enumerate()
        .map(|(i, r)| (-model.predict(r), y[start + n + i] < cens))
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut pos_rank, mut npos) = (0f64, 0f64);
    for (rank, (_, p)) in scored.iter().enumerate() {
        if *p {
            pos_rank += rank as f64 + 1.0;
            npos += 1.0;
        }
    }
    let nneg = scored.len() as f64 - npos;
    let auc = (pos_rank - npos * (npos + 1.0) / 2.0) / (npos * nneg);
    println!(
        "reuse within horizon: {npos} of {}, AUC of -prediction {auc:.3}",
        scored.len()
    );
    for (i, (p, t, c)) in buckets.iter().enumerate() {
        println!(
            "from_end {i}: rows {c}, mean pred {:.3}, mean label {:.3}",
            p / f64::from(*c),
            t / f64::from(*c)
        );
    }
    Ok(())
}
