//! The online LightGBM predictor (LCR §3.2, §5.1).
//!
//! The request path only builds feature rows ([`Features`]) and evaluates the
//! current [`Ensemble`] in Rust. Training runs on a dedicated thread that
//! owns every LightGBM object (`Booster` is neither `Send` nor `Sync`): it
//! gets the sliding window, trains, dumps the model as text, parses it, and
//! sends it back over a channel. A failed run, or one with NaN/inf values,
//! keeps the old model (or none: the policy then runs as LRU) and counts a
//! failure.
//!
//! Install points: [`Install::Background`] takes a new model as soon as it is
//! ready (servers); [`Install::AfterRequests`] installs it exactly `n` time
//! units after the job was sent, waiting if needed, so simulations are
//! deterministic while training still overlaps the requests.
//!
//! Build: `lightgbm3-sys` compiles LightGBM with the `cmake` crate, which
//! runs `$CMAKE` if set, else `cmake` from PATH; it must be >= 3.28 (Debian
//! bookworm has 3.25: `pip install 'cmake<4'` and put its binary on PATH or in
//! `$CMAKE`). bindgen needs libclang (`apt-get install libclang-dev`). See
//! the crate README, "Build requirements".

use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::Instant;

use lightgbm3::{Booster, Dataset};

use std::sync::Arc;

use super::bins::BinCache;
use super::feature_set::{AGE_COL, FeatureSet};
use super::features::{FeatureConfig, Features, next_age_step};
use super::foresight::Foresight;
use super::refresher::Refresher;
use super::trees::Ensemble;
use super::{Predictor, PredictorStats};
use crate::BlockId;
use crate::policy::AccessEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    Background,
    AfterRequests(u64),
}

#[derive(Debug, Clone)]
pub struct LgbmConfig {
    pub features: FeatureConfig,
    /// Retrain after this many new labelled rows.
    pub retrain_every: u64,
    /// No training before the window has this many rows.
    pub min_rows: usize,
    /// Boosting rounds (trees) and their shrinkage: 16 at 0.2 (until 2026-11-26, 32 at 0.1,
    /// the same total step). A retrain costs about a third less and a prediction half, with
    /// the same hit ratios and AUCs within the per-window spread (docs/eviction.md).
    pub iterations: u32,
    pub learning_rate: f64,
    pub num_leaves: u32,
    pub install: Install,
    /// Predict on a worker thread at each access instead of at decisions.
    pub async_predict: bool,
}

impl Default for LgbmConfig {
    fn default() -> Self {
        Self {
            features: FeatureConfig::default(),
            retrain_every: 20_000,
            min_rows: 2_000,
            iterations: 16,
            learning_rate: 0.2,
            num_leaves: 31,
            install: Install::AfterRequests(1000),
            async_predict: false,
        }
    }
}

struct Job {
    x: Vec<f32>,
    y: Vec<f32>,
    /// The full-row columns `x` holds (the configured feature set).
    cols: Vec<usize>,
}

struct Trained {
    model: Result<Ensemble, String>,
    us: u64,
    rows: u64,
}

/// LightGBM parameters: deterministic, single-threaded (the request path
/// keeps the other core), silent.
pub fn params(cfg: &LgbmConfig) -> serde_json::Value {
    serde_json::json!({
        "objective": "regression",
        "num_iterations": cfg.iterations,
        "num_leaves": cfg.num_leaves,
        "learning_rate": cfg.learning_rate,
        "min_data_in_leaf": 50,
        "num_threads": 1,
        "deterministic": true,
        "force_row_wise": true,
        "verbosity": -1,
    })
}

/// Trains one model from a row-major matrix whose columns are the full-row columns `cols`;
/// the returned model reads full rows. Runs on the calling thread.
pub fn train(
    x: &[f32],
    y: &[f32],
    cols: &[usize],
    params: &serde_json::Value,
) -> Result<Ensemble, String> {
    let ds = Dataset::from_slice(x, y, cols.len() as i32, true).map_err(|e| e.to_string())?;
    fit(ds, cols, params)
}

/// Boosts on `ds` and brings the model over as an [`Ensemble`] reading full rows.
fn fit(ds: Dataset, cols: &[usize], params: &serde_json::Value) -> Result<Ensemble, String> {
    let booster = Booster::train(ds, params).map_err(|e| e.to_string())?;
    let text = booster.save_string().map_err(|e| e.to_string())?;
    Ensemble::parse(&text)
        .and_then(|m| m.remap_features(cols))
        .map_err(|e| e.to_string())
}

/// [`train`] with the bin boundaries of `bins` (rebuilt there when due; see [`BinCache`]):
/// what the trainer thread runs. Also says whether the boundaries were fresh.
pub fn train_with(
    bins: &mut BinCache,
    x: &[f32],
    y: &[f32],
    cols: &[usize],
    params: &serde_json::Value,
) -> Result<(Ensemble, bool), String> {
    let (ds, fresh) = bins.dataset(x, y, cols)?;
    Ok((fit(ds, cols, params)?, fresh))
}

/// Caps LightGBM's OpenMP threads at one for this process. lightgbm3 passes
/// no parameters when it builds a `Dataset`, so `num_threads` in the training
/// parameters does not reach dataset construction; without the cap it would
/// take every core (and OpenMP's spinning workers) from the request path.
pub fn limit_threads() {
    // SAFETY: plain C call taking an int; no pointers or shared state of ours.
    unsafe {
        lightgbm3_sys::LGBM_SetMaxThreads(1);
    }
}

fn trainer(jobs: Receiver<Job>, done: Sender<Trained>, params: serde_json::Value) {
    limit_threads();
    let mut bins = BinCache::default();
    while let Ok(job) = jobs.recv() {
        let start = Instant::now();
        let model = train_with(&mut bins, &job.x, &job.y, &job.cols, &params).map(|(m, _)| m);
        let us = start.elapsed().as_micros() as u64;
        if done
            .send(Trained {
                model,
                us,
                rows: job.y.len() as u64,
            })
            .is_err()
        {
            return;
        }
    }
}

pub struct LightGbm {
    cfg: LgbmConfig,
    feats: Features,
    model: Option<Arc<Ensemble>>,
    refresher: Option<Refresher>,
    version: u64,
    jobs: Option<Sender<Job>>,
    done: Receiver<Trained>,
    thread: Option<JoinHandle<()>>,
    /// Time the in-flight job was sent.
    in_flight: Option<u64>,
    labelled_at_last_job: u64,
    now: u64,
    stats: PredictorStats,
}

impl LightGbm {
    pub fn new(cfg: LgbmConfig) -> Self {
        let refresher = cfg.async_predict.then(Refresher::new);
        let (jtx, jrx) = channel();
        let (dtx, drx) = channel();
        let p = params(&cfg);
        let thread = std::thread::Builder::new()
            .name("recache-lgbm-train".into())
            .spawn(move || trainer(jrx, dtx, p))
            .ok();
        Self {
            feats: Features::new(cfg.features),
            cfg,
            model: None,
            refresher,
            version: 0,
            jobs: thread.as_ref().map(|_| jtx),
            done: drx,
            thread,
            in_flight: None,
            labelled_at_last_job: 0,
            now: 0,
            stats: PredictorStats::default(),
        }
    }

    /// Gives the predictor the trace's future for the `future` columns (upper-bound runs).
    pub fn with_foresight(mut self, foresight: Arc<Foresight>) -> Self {
        self.feats = Features::new(self.cfg.features).with_foresight(foresight);
        self
    }

    fn install(&mut self, t: Trained) {
        self.in_flight = None;
        self.stats.train_runs += 1;
        self.stats.train_us_last = t.us;
        self.stats.train_us_total += t.us;
        self.stats.train_rows_last = t.rows;
        match t.model {
            Ok(m) => {
                let m = Arc::new(m);
                if let Some(r) = &self.refresher {
                    r.set_model(m.clone());
                }
                self.model = Some(m);
                self.version += 1;
                self.stats.model_swaps += 1;
            }
            Err(_) => self.stats.train_failures += 1,
        }
    }

    /// Installs a finished model when due; sends a new job when enough new
    /// labelled rows arrived.
    fn poll(&mut self, now: u64) {
        self.now = now;
        if let Some(sent) = self.in_flight {
            let got = match self.cfg.install {
                Install::Background => match self.done.try_recv() {
                    Ok(t) => Some(t),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => self.trainer_died(),
                },
                Install::AfterRequests(n) if now >= sent + n => {
                    let start = Instant::now();
                    let got = self.done.recv().ok();
                    self.stats.install_wait_us += start.elapsed().as_micros() as u64;
                    got.or_else(|| self.trainer_died())
                }
                Install::AfterRequests(_) => None,
            };
            if let Some(t) = got {
                self.install(t);
            }
        }
        let fresh = self.feats.labelled - self.labelled_at_last_job;
        // No model before the first censored row: until one horizon has passed, every label
        // is a reuse (blocks never used again are labelled only at the horizon), and a model
        // trained on that survivor-only window predicts reuse for everything. On the Beauty
        // GR trace such models made LARU miss 1-2% more than LRU for the first ~3,000
        // requests, and the guard's backoff then distrusted the good models that followed.
        if self.in_flight.is_none()
            && self.feats.censored > 0
            && self.feats.window.len() >= self.cfg.min_rows
            && (fresh >= self.cfg.retrain_every || self.model.is_none())
        {
            let (x, y) = self.feats.training_set();
            let cols = self.feats.columns().to_vec();
            if let Some(tx) = &self.jobs {
                if tx.send(Job { x, y, cols }).is_ok() {
                    self.in_flight = Some(now);
                    self.labelled_at_last_job = self.feats.labelled;
                }
            }
        }
    }

    /// Whether the model reads the idle age (the `age` feature set).
    fn ages(&self) -> bool {
        self.cfg.features.set.contains(FeatureSet::AGE) && self.refresher.is_none()
    }

    fn trainer_died(&mut self) -> Option<Trained> {
        self.jobs = None;
        self.in_flight = None;
        self.stats.train_failures += 1;
        None
    }
}

impl Drop for LightGbm {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Predictor for LightGbm {
    fn kind(&self) -> &'static str {
        "lightgbm"
    }

    fn observe(&mut self, ev: &AccessEvent) {
        self.stats.observed += 1;
        self.feats.observe(ev);
        self.stats.labelled_rows = self.feats.labelled;
        if let (Some(r), Some(row)) = (&self.refresher, self.feats.row(ev.block)) {
            r.submit(ev.block, ev.time, row);
        }
        if ev.time != self.now || ev.ctx.pos == 0 {
            self.poll(ev.time);
        }
    }

    fn forget(&mut self, block: BlockId) {
        self.feats.forget(block);
        if let Some(r) = &mut self.refresher {
            r.forget(block);
        }
    }

    fn tick(&mut self, now: u64) {
        if now != self.now {
            self.poll(now);
        }
    }

    fn expires(&self) -> bool {
        // A prediction from the idle age is re-made as the age grows ([`Self::repredict_at`]);
        // one from the access alone goes stale once its time has passed.
        !self.ages()
    }

    fn repredict_at(&self, last: u64, now: u64) -> Option<u64> {
        self.ages()
            .then(|| last.saturating_add(next_age_step(now.saturating_sub(last))))
    }

    fn model_version(&self) -> Option<u64> {
        // Async predictions are refreshed per access, not per model.
        let version = if self.refresher.is_some() {
            1
        } else {
            self.version
        };
        self.model.as_ref().map(|_| version)
    }

    fn predict(&mut self, blocks: &[(BlockId, u64)], out: &mut Vec<f64>) -> bool {
        let Some(model) = &self.model else {
            self.stats.fallbacks += 1;
            return false;
        };
        out.clear();
        if let Some(r) = &mut self.refresher {
            r.drain();
            out.extend(
                blocks
                    .iter()
                    .map(|&(b, last)| r.gap(b, last).map_or(f64::NAN, |g| last as f64 + g)),
            );
            self.stats.predict_calls += 1;
            self.stats.predict_rows = r.rows;
            return true;
        }
        let ages = self.ages();
        for &(b, last) in blocks {
            // A block with no row (never observed) is predicted "now": keep.
            let Some(row) = self.feats.row(b) else {
                out.push(last as f64);
                continue;
            };
            if ages {
                // Time left from now, at the block's current idle age.
                let mut r = *row;
                let age = self.now.saturating_sub(last);
                r[AGE_COL] = age as f32;
                out.push(self.now as f64 + model.predict(&r).exp_m1());
            } else {
                out.push(last as f64 + model.predict(row).exp_m1());
            }
        }
        if out.iter().any(|p| !p.is_finite()) {
            self.stats.fallbacks += 1;
            return false;
        }
        self.stats.predict_calls += 1;
        self.stats.predict_rows += blocks.len() as u64;
        true
    }

    fn stats(&self) -> PredictorStats {
        self.stats.clone()
    }
}
