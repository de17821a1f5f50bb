//! The predictor's cost: LightGBM training time on a 20k-row window and batch
//! prediction time for 25k rows (the Rust evaluator), with rows from a trace's
//! feature pipeline (`base` columns). Not a timed test.

use serde::Serialize;

use super::error::BenchError;

#[derive(Debug, Clone, Serialize)]
pub struct PredictorBench {
    pub train_rows: usize,
    pub features: usize,
    pub iterations: u32,
    /// Median of `repeats` training runs as the trainer thread runs most of them: bin
    /// boundaries taken from an earlier window's sample (`predict::bins`), milliseconds.
    pub train_ms: f64,
    pub train_ms_all: Vec<f64>,
    /// Median of `repeats` runs that find the boundaries first (one retrain in
    /// `bins_refresh`), milliseconds.
    pub train_ms_fresh_bins: f64,
    /// What a retrain costs on average: one fresh-bins run per `bins_refresh`.
    pub train_ms_mean: f64,
    pub bins_refresh: u32,
    pub predict_rows: usize,
    /// Median batch prediction of `predict_rows` rows (Rust evaluator), ms.
    pub predict_ms: f64,
    pub predict_ns_per_row: f64,
    pub trees: usize,
}

/// `recache bench predictor`: rows from the trace at `path`, training on
/// 20k rows and predicting 25k, median of 5 runs. Print it as JSON.
pub fn run_predictor_bench(path: &std::path::Path) -> Result<PredictorBench, BenchError> {
    let requests = recache_eviction::trace::load_mooncake(path)?;
    let (x, y) = rows_from_trace(&requests);
    bench_predictor(&x, &y, 20_000, 25_000, 5)
}

/// Builds feature rows by replaying `requests` under LRU at 5% capacity
/// (every access produces a row; labels as in the online predictor).
pub fn rows_from_trace(requests: &[recache_eviction::trace::Request]) -> (Vec<f32>, Vec<f32>) {
    use recache_eviction::policy::{AccessEvent, RequestCtx};
    use recache_eviction::predict::features::{FeatureConfig, Features};
    let cfg = FeatureConfig {
        window_rows: usize::MAX,
        ..FeatureConfig::default()
    };
    let mut f = Features::new(cfg);
    let mut seen = recache_eviction::hash::FastSet::default();
    for (t, r) in requests.iter().enumerate() {
        // Hits under an infinite cache are enough for feature shapes.
        let hits = r.hash_ids.iter().take_while(|b| seen.contains(*b)).count();
        for (pos, &b) in r.hash_ids.iter().enumerate() {
            let ctx = RequestCtx {
                req_len: r.hash_ids.len() as u32,
                hit_len: hits as u32,
                pos: pos as u32,
                input_tokens: r.input_length,
                anchor: hits.checked_sub(1).map(|i| r.hash_ids[i]),
                tip: r.hash_ids.last().copied(),
                entity: None,
            };
            f.observe(&AccessEvent {
                block: b,
                depth: pos as u32 + 1,
                time: t as u64,
                ctx,
            });
            seen.insert(b);
        }
    }
    f.training_set()
}

/// Times training on the first `train_rows` rows and prediction of
/// `predict_rows` rows (cycled), median of `repeats`.
#[cfg(feature = "lightgbm")]
pub fn bench_predictor(
    x: &[f32],
    y: &[f32],
    train_rows: usize,
    predict_rows: usize,
    repeats: usize,
) -> Result<PredictorBench, BenchError> {
    use recache_eviction::predict::bins::{BinCache, REFRESH};
    use recache_eviction::predict::features::NF;
    use recache_eviction::predict::lgbm::{LgbmConfig, params, train_with};
    use std::time::Instant;
    if y.len() < train_rows {
        return Err(BenchError::TooFewRows {
            got: y.len(),
            need: train_rows,
        });
    }
    recache_eviction::predict::lgbm::limit_threads();
    let cfg = LgbmConfig::default();
    let p = params(&cfg);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let cols: Vec<usize> = (0..NF).collect();
    let (wx, wy) = (&x[..train_rows * NF], &y[..train_rows]);
    // Fresh boundaries: a new cache each run.
    let mut fresh_ms = Vec::new();
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        train_with(&mut BinCache::default(), wx, wy, &cols, &p).map_err(BenchError::Train)?;
        fresh_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    // Reused boundaries, found on the window after this one where the trace has it (as the
    // trainer thread's are found on an earlier window), else on this one.
    let mut bins = BinCache::default();
    let other = if y.len() >= 2 * train_rows {
        train_rows
    } else {
        0
    };
    train_with(
        &mut bins,
        &x[other * NF..(other + train_rows) * NF],
        &y[other..other + train_rows],
        &cols,
        &p,
    )
    .map_err(BenchError::Train)?;
    let mut train_ms_all = Vec::new();
    let mut model = None;
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        let (m, _) = train_with(&mut bins, wx, wy, &cols, &p).map_err(BenchError::Train)?;
        train_ms_all.push(start.elapsed().as_secs_f64() * 1e3);
        model = Some(m);
    }
    let model = model.ok_or(BenchError::Train("no run".into()))?;
    let rows: Vec<&[f32]> = x.chunks_exact(NF).cycle().take(predict_rows).collect();
    let mut pred_ms = Vec::new();
    let mut sink = 0.0;
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        sink += rows.iter().map(|r| model.predict(r)).sum::<f64>();
        pred_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    std::hint::black_box(sink);
    let predict_ms = median(pred_ms);
    let train_ms = median(train_ms_all.clone());
    let train_ms_fresh_bins = median(fresh_ms);
    Ok(PredictorBench {
        train_rows,
        features: NF,
        iterations: cfg.iterations,
        train_ms,
        train_ms_all,
        train_ms_fresh_bins,
        train_ms_mean: (train_ms_fresh_bins + (REFRESH - 1) as f64 * train_ms) / REFRESH as f64,
        bins_refresh: REFRESH,
        predict_rows,
        predict_ms,
        predict_ns_per_row: predict_ms * 1e6 / predict_rows as f64,
        trees: model.num_trees(),
    })
}

#[cfg(not(feature = "lightgbm"))]
pub fn bench_predictor(
    _x: &[f32],
    _y: &[f32],
    _train_rows: usize,
    _predict_rows: usize,
    _repeats: usize,
) -> Result<PredictorBench, BenchError> {
    Err(BenchError::Unavailable)
}
