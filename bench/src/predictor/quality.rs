//! The predictor's ranking quality per feature set (`recache bench predictor`): what is
//! predictable about a trace, measured against the decision that matters.
//!
//! Label, per access of block b at time t: b's next access is a hit under OPT (Belady) at the
//! report's capacity, i.e. OPT keeps b until it is used again (0 when b is never used again).
//! Feature rows are built as the live predictor builds them, from the access events of an
//! LRU cache of the same capacity (the context a deployed predictor sees; OPT's own hits would
//! leak its decisions into `hit_len` and `is_hit`). Rows are taken in time order and cut into
//! windows of [`WINDOW_ROWS`]; for each pair, a model trained on window k scores window k + 1:
//!
//! - `auc_gap`: the predictor's own model (regression on ln(1 + time to next access),
//!   censored at the horizon), ranked by −prediction: how well the ranking LARU and FPB use
//!   separates what OPT keeps from what it drops.
//! - `auc_opt`: a classifier trained on the OPT label itself: what these columns can tell at
//!   all (an upper bound for the feature set, whatever the objective).
//! - `*_reused`: the same AUCs among rows whose block is used again at all: of the blocks
//!   that come back, which OPT keeps. Over all rows, never-reused blocks (a GR request's
//!   unique candidates, a prompt's partial last block) are easy and can dominate; NaN where
//!   OPT keeps every block that comes back (Mooncake at 5%: OPT is at the ceiling).
//!
//! Next to them, the hit ratios of FPB and LARU running the online LightGBM predictor with
//! that feature set (and LRU and OPT), so AUC can be read against hits. The upper-bound row
//! adds the `future` columns (true time to the chain tip's and the entity's next use).

use std::sync::Arc;
#[cfg(feature = "lightgbm")]
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget};
use serde::Serialize;

use super::error::BenchError;
use super::record::Recording;
use recache_eviction::cache::{Access, Cache};
use recache_eviction::future::FutureIndex;
use recache_eviction::hash::{FastSet, unit};
use recache_eviction::policy::{Lru, Opt, PolicyConfig};
use recache_eviction::predict::FeatureSet;
use recache_eviction::predict::features::{FeatureConfig, Features, Row};
use recache_eviction::sim::predictor::{LgbmFlags, Sources, lightgbm};
use recache_eviction::trace::Request;

/// Rows per window (the online predictor's training window).
#[cfg(feature = "lightgbm")]
pub const WINDOW_ROWS: usize = 20_000;
/// Most (train, score) window pairs evaluated, spread evenly over the trace.
#[cfg(feature = "lightgbm")]
pub const MAX_PAIRS: usize = 12;

/// One feature set's report line.
#[derive(Debug, Clone, Serialize)]
pub struct QualityRow {
    pub trace: String,
    pub capacity: f64,
    pub capacity_blocks: usize,
    pub features: String,
    /// True for the row with true-future columns (not available to a deployed predictor).
    pub upper_bound: bool,
    /// Rows evaluated (sampled evenly when the trace has more than `--max-rows`).
    pub rows: usize,
    /// Share of rows whose next access is an OPT hit.
    pub positive_share: f64,
    pub windows: usize,
    pub auc_gap: f64,
    pub auc_opt: f64,
    pub auc_gap_windows: Vec<f64>,
    pub auc_opt_windows: Vec<f64>,
    pub auc_gap_reused: f64,
    pub auc_opt_reused: f64,
    /// Median training time of one window's regression model with these columns, ms.
    pub train_ms: f64,
    pub lru_hit_ratio: f64,
    pub opt_hit_ratio: f64,
    pub fpb_hit_ratio: f64,
    pub laru_hit_ratio: f64,
    /// LARU's share of the LRU → OPT gap closed.
    pub laru_gap_closed: f64,
    pub laru_refs_per_s: f64,
}

struct Rows {
    x: Vec<Row>,
    y_gap: Vec<f32>,
    y_opt: Vec<f32>,
    /// The block is used again (at any distance).
    reused: Vec<bool>,
}

fn serve_all(
    cache: &mut Cache,
    requests: &[Request],
    mut each: impl FnMut(u64, &Request, &[(usize, usize)], &[usize]),
) -> Result<u64, BenchError> {
    let mut hits = 0;
    for (t, req) in requests.iter().enumerate() {
        let chains = req.chains();
        let entities = req.entities();
        let runs: Vec<usize> = chains
            .iter()
            .map(|&(s, e)| cache.resident_run(&req.hash_ids[s..e]))
            .collect();
        each(t as u64, req, &chains, &runs);
        let access = Access {
            blocks: &req.hash_ids,
            chains: &chains,
            input_tokens: req.input_length,
            entities: &entities,
        };
        hits += cache.serve(&access, t as u64)?.hits as u64;
    }
    Ok(hits)
}

/// (time, block) of every access OPT hits, and OPT's hit count.
fn opt_hits(
    requests: &[Request],
    blocks: usize,
    future: &Arc<FutureIndex>,
) -> Result<(FastSet<(u64, u64)>, u64), BenchError> {
    let mut cache = Cache::new(blocks, Box::new(Opt::new(future.clone())));
    let mut set = FastSet::default();
    let hits = serve_all(&mut cache, requests, |t, req, chains, runs| {
        for (&(s, _), &run) in chains.iter().zip(runs) {
            set.extend(req.hash_ids[s..s + run].iter().map(|&b| (t, b)));
        }
    })?;
    Ok((set, hits))
}

/// Feature rows from an LRU cache's access events, labelled from the future; and LRU's hits.
fn rows_under_lru(
    requests: &[Request],
    blocks: usize,
    src: &Sources<'_>,
    opt: &FastSet<(u64, u64)>,
    max_rows: usize,
) -> Result<(Rows, u64), BenchError> {
    let (rec, log) = Recording::new(Box::new(Lru));
    let mut cache = Cache::new(blocks, Box::new(rec));
    let fcfg = FeatureConfig {
        window_rows: 1,
        block_tokens: src.block_tokens,
        ..FeatureConfig::default()
    };
    let horizon = fcfg.horizon;
    let mut feats = Features::new(fcfg).with_foresight(src.foresight());
    let refs: usize = requests.iter().map(|r| r.hash_ids.len()).sum();
    let rate = (max_rows as f64 / refs.max(1) as f64).min(1.0);
    let mut rows = Rows {
        x: Vec::new(),
        y_gap: Vec::new(),
        y_opt: Vec::new(),
        reused: Vec::new(),
    };
    let mut hits = 0;
    for (t, req) in requests.iter().enumerate() {
        hits += serve_all_one(&mut cache, req, t as u64)?;
        let events: Vec<_> = log
            .lock()
            .map(|mut l| l.drain(..).collect())
            .unwrap_or_default();
        for ev in events {
            feats.observe(&ev);
            let keep = rate >= 1.0 || unit(17, ev.block, ev.time) < rate;
            if let (true, Some(row)) = (keep, feats.row(ev.block)) {
                let next = src.future.next_after(ev.block, ev.time);
                let gap = next.map_or(horizon, |n| (n - ev.time).min(horizon));
                rows.x.push(*row);
                rows.reused.push(next.is_some());
                rows.y_gap.push((gap as f32).ln_1p());
                rows.y_opt.push(f32::from(u8::from(
                    next.is_some_and(|n| opt.contains(&(n, ev.block))),
                )));
            }
            // The row was read; a live predictor keeps it only while the block is cached.
            feats.forget(ev.block);
        }
    }
    Ok((rows, hits))
}

fn serve_all_one(cache: &mut Cache, req: &Request, t: u64) -> Result<u64, BenchError> {
    let chains = req.chains();
    let entities = req.entities();
    let access = Access {
        blocks: &req.hash_ids,
        chains: &chains,
        input_tokens: req.input_length,
        entities: &entities,
    };
    Ok(cache.serve(&access, t)?.hits as u64)
}

/// Area under the ROC curve of `scores` for binary `labels` (ties share their mean rank);
/// NaN when one class is missing.
pub fn auc(scores: &[f64], labels: &[f32]) -> f64 {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let (mut rank_sum, mut pos) = (0.0, 0.0);
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && scores[idx[j + 1]] == scores[idx[i]] {
            j += 1;
        }
        let mean_rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            if labels[k] > 0.5 {
                rank_sum += mean_rank;
                pos += 1.0;
            }
        }
        i = j + 1;
    }
    let neg = scores.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return f64::NAN;
    }
    (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
}

fn mean(v: &[f64]) -> f64 {
    let ok: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if ok.is_empty() {
        f64::NAN
    } else {
        ok.iter().sum::<f64>() / ok.len() as f64
    }
}

/// AUCs of one feature set over the window pairs.
#[derive(Default)]
struct Aucs {
    gap: Vec<f64>,
    opt: Vec<f64>,
    gap_reused: Vec<f64>,
    opt_reused: Vec<f64>,
    /// Median training time of the gap model, ms.
    train_ms: f64,
}

/// `auc` over all of `idx`, and over those `reused`.
#[cfg(feature = "lightgbm")]
fn both(s: &[f64], rows: &Rows, idx: std::ops::Range<usize>) -> (f64, f64) {
    let y = &rows.y_opt[idx.clone()];
    let keep: Vec<usize> = (0..y.len())
        .filter(|&i| rows.reused[idx.start + i])
        .collect();
    let s2: Vec<f64> = keep.iter().map(|&i| s[i]).collect();
    let y2: Vec<f32> = keep.iter().map(|&i| y[i]).collect();
    (auc(s, y), auc(&s2, &y2))
}

/// AUCs per window pair for `set`.
#[cfg(feature = "lightgbm")]
fn window_aucs(rows: &Rows, set: FeatureSet) -> Result<Aucs, BenchError> {
    use recache_eviction::predict::lgbm::{LgbmConfig, params, train};
    let cfg = LgbmConfig::default();
    let reg = params(&cfg);
    let mut bin = reg.clone();
    bin["objective"] = "binary".into();
    let cols = set.columns();
    let w = WINDOW_ROWS.min(rows.x.len() / 2).max(1);
    let n = rows.x.len() / w;
    let pairs = n.saturating_sub(1);
    let step = pairs.div_ceil(MAX_PAIRS).max(1);
    let mut a = Aucs::default();
    let mut ms = Vec::new();
    for k in (0..pairs).step_by(step) {
        let (tr, te) = (k * w..(k + 1) * w, (k + 1) * w..(k + 2) * w);
        let x: Vec<f32> = rows.x[tr.clone()]
            .iter()
            .flat_map(|r| cols.iter().map(|&c| r[c]))
            .collect();
        let start = Instant::now();
        let m = train(&x, &rows.y_gap[tr.clone()], &cols, &reg).map_err(BenchError::Train)?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
        let s: Vec<f64> = rows.x[te.clone()].iter().map(|r| -m.predict(r)).collect();
        let (all, reused) = both(&s, rows, te.clone());
        a.gap.push(all);
        a.gap_reused.push(reused);
        let y = &rows.y_opt[tr];
        let (all, reused) = if y.iter().any(|&v| v > 0.5) && y.iter().any(|&v| v < 0.5) {
            let c = train(&x, y, &cols, &bin).map_err(BenchError::Train)?;
            let s: Vec<f64> = rows.x[te.clone()].iter().map(|r| c.predict(r)).collect();
            both(&s, rows, te)
        } else {
            (f64::NAN, f64::NAN)
        };
        a.opt.push(all);
        a.opt_reused.push(reused);
    }
    ms.sort_by(f64::total_cmp);
    a.train_ms = ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN);
    Ok(a)
}

#[cfg(not(feature = "lightgbm"))]
fn window_aucs(_rows: &Rows, _set: FeatureSet) -> Result<Aucs, BenchError> {
    Err(BenchError::Unavailable)
}

/// (hit ratio, refs/s) of `cfg` with the LightGBM predictor on `set`.
fn hit_ratio(
    requests: &[Request],
    cfg: &PolicyConfig,
    blocks: usize,
    src: &Sources<'_>,
    set: FeatureSet,
) -> Result<(f64, f64), BenchError> {
    let pred =
        lightgbm(set, src, &LgbmFlags::default()).map_err(|e| BenchError::Sim(Box::new(e)))?;
    let run = recache_eviction::sim::simulate(
        requests,
        cfg,
        blocks,
        &src.future,
        Some(pred),
        1,
        &ProgressBar::hidden(),
    )
    .map_err(|e| BenchError::Sim(Box::new(e)))?;
    let ratio = run.hits as f64 / run.refs.max(1) as f64;
    Ok((ratio, run.refs as f64 / run.wall_s.max(1e-9)))
}

/// The report: one row per set in `sets`, then the upper-bound row (their union plus
/// `future`) unless a requested set already has `future`.
pub fn report(
    requests: &[Request],
    trace: &str,
    capacity: f64,
    sets: &[FeatureSet],
    max_rows: usize,
) -> Result<Vec<QualityRow>, BenchError> {
    let future = Arc::new(FutureIndex::new(
        requests.iter().map(|r| r.hash_ids.as_slice()),
    ));
    let blocks = ((capacity * future.distinct() as f64).floor() as usize).max(1);
    let src = Sources::new(requests, future.clone());
    let refs: u64 = requests.iter().map(|r| r.hash_ids.len() as u64).sum();
    // Steps: OPT, the rows under LRU, then per feature set (and the upper bound) its
    // windows' AUCs, FPB and LARU. Each step is logged as it ends (a log without a terminal).
    let steps = 2 + 3 * (sets.len() + 1);
    let progress = ProgressBar::with_draw_target(Some(steps as u64), ProgressDrawTarget::stderr());
    let step = |what: String| {
        progress.inc(1);
        progress.suspend(|| eprintln!("bench predictor: {what}"));
    };
    let (opt, opt_hits) = opt_hits(requests, blocks, &future)?;
    step(format!("OPT at {blocks} blocks"));
    let (rows, lru_hits) = rows_under_lru(requests, blocks, &src, &opt, max_rows)?;
    step(format!("{} rows under LRU", rows.x.len()));
    drop(opt);
    let (lru, best) = (
        lru_hits as f64 / refs.max(1) as f64,
        opt_hits as f64 / refs.max(1) as f64,
    );
    let mut all: Vec<(FeatureSet, bool)> = sets.iter().map(|&s| (s, false)).collect();
    if !sets.iter().any(|s| s.contains(FeatureSet::FUTURE)) {
        let union = sets.iter().fold(FeatureSet::FUTURE, |a, &s| a.union(s));
        all.push((union, true));
    }
    let positive = rows.y_opt.iter().filter(|&&v| v > 0.5).count();
    let mut out = Vec::new();
    for (set, upper_bound) in all {
        let a = window_aucs(&rows, set)?;
        step(format!("{set}: AUCs over {} windows", a.gap.len()));
        let features = Some(set);
        let (fpb, _) = hit_ratio(
            requests,
            &PolicyConfig::Fpb {
                features,
                install_after: None,
                label_horizon: None,
                predictor: None,
            },
            blocks,
            &src,
            set,
        )?;
        step(format!("{set}: FPB {fpb:.4}"));
        let laru_cfg = PolicyConfig::laru_with_features(features);
        let (laru, laru_rps) = hit_ratio(requests, &laru_cfg, blocks, &src, set)?;
        step(format!("{set}: LARU {laru:.4}"));
        out.push(QualityRow {
            trace: trace.to_string(),
            capacity,
            capacity_blocks: blocks,
            features: set.to_string(),
            upper_bound,
            rows: rows.x.len(),
            positive_share: positive as f64 / rows.x.len().max(1) as f64,
            windows: a.gap.len(),
            auc_gap: mean(&a.gap),
            auc_opt: mean(&a.opt),
            auc_gap_reused: mean(&a.gap_reused),
            auc_opt_reused: mean(&a.opt_reused),
            auc_gap_windows: a.gap,
            auc_opt_windows: a.opt,
            train_ms: a.train_ms,
            lru_hit_ratio: lru,
            opt_hit_ratio: best,
            fpb_hit_ratio: fpb,
            laru_hit_ratio: laru,
            laru_gap_closed: if best > lru {
                (laru - lru) / (best - lru)
            } else {
                f64::NAN
            },
            laru_refs_per_s: laru_rps,
        });
    }
    progress.finish_and_clear();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::auc;

    #[test]
    fn auc_counts_pairs_and_ties() {
        assert_eq!(auc(&[0.1, 0.2, 0.3, 0.4], &[0.0, 0.0, 1.0, 1.0]), 1.0);
        assert_eq!(auc(&[0.4, 0.3, 0.2, 0.1], &[0.0, 0.0, 1.0, 1.0]), 0.0);
        assert_eq!(auc(&[0.5, 0.5], &[0.0, 1.0]), 0.5);
        assert!(auc(&[0.1, 0.2], &[1.0, 1.0]).is_nan());
    }
}
