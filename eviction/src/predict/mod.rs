//! Next-access predictors: the [`Predictor`] trait, its exportable
//! [`PredictorStats`], the [`OracleNoise`] predictor (true future with
//! adversarial noise, simulator only) and, with the `lightgbm` feature, the
//! online-trained LightGBM predictor ([`lgbm`]) with its feature rows
//! ([`features`]: `base` block columns, `gr` entity columns from
//! [`entity`], upper-bound `future` columns from [`foresight`]; the
//! [`FeatureSet`] chosen by config picks which a model uses; [`bins`] keeps LightGBM's bin
//! boundaries across retrains). The [`reuse`] predictor needs no model: a block's idle age
//! against the reuse distances seen so far.

#[cfg(feature = "lightgbm")]
pub mod bins;
pub mod entity;
pub mod feature_set;
pub mod features;
pub mod foresight;
#[cfg(feature = "lightgbm")]
pub mod lgbm;
mod oracle;
#[cfg(feature = "lightgbm")]
mod refresher;
pub mod reuse;
pub mod trees;

use serde::Serialize;

pub use feature_set::FeatureSet;
pub use oracle::OracleNoise;
pub use reuse::ReuseHist;

use crate::BlockId;
use crate::policy::AccessEvent;

/// The predictor a live server gives learned policy `cfg` over `block_tokens`-token blocks:
/// the reuse predictor where it names it (`laru:predictor=reuse`), else the online LightGBM
/// predictor with the policy's feature set and install schedule (the simulator's defaults
/// or the policy's `install_after`/`label_horizon` keys); None for a policy that predicts
/// nothing, or needs LightGBM in a build without it.
pub fn for_serving(cfg: &crate::PolicyConfig, block_tokens: usize) -> Option<Box<dyn Predictor>> {
    if !cfg.uses_predictor() {
        return None;
    }
    if !cfg.needs_lightgbm() {
        return Some(Box::new(ReuseHist::new()));
    }
    #[cfg(feature = "lightgbm")]
    {
        let mut c = lgbm::LgbmConfig::default();
        c.features.set = cfg.features().unwrap_or_default();
        c.features.block_tokens = block_tokens.clamp(1, u32::MAX as usize) as u32;
        let (install_after, horizon) = cfg.model_schedule();
        c.install = install_after.map_or(c.install, lgbm::Install::AfterRequests);
        c.features.horizon = horizon.unwrap_or(c.features.horizon);
        Some(Box::new(lgbm::LightGbm::new(c)))
    }
    #[cfg(not(feature = "lightgbm"))]
    {
        let _ = block_tokens;
        None
    }
}

/// Plain counters a server can export (e.g. to Prometheus).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PredictorStats {
    /// Rows (blocks) predicted.
    pub predict_rows: u64,
    /// Batched predict calls.
    pub predict_calls: u64,
    /// Access events observed.
    pub observed: u64,
    /// Labelled rows produced for training.
    pub labelled_rows: u64,
    /// Training runs finished (ok or not).
    pub train_runs: u64,
    /// Training runs that failed or produced NaN/inf.
    pub train_failures: u64,
    /// Rows in the last training set.
    pub train_rows_last: u64,
    /// Wall time of the last and of all training runs, microseconds.
    pub train_us_last: u64,
    pub train_us_total: u64,
    /// Models installed.
    pub model_swaps: u64,
    /// Time the caller spent blocked waiting for a model to install (`Install::AfterRequests`,
    /// simulations only: a server installs in the background and never waits), microseconds.
    pub install_wait_us: u64,
    /// Predict requests answered "no usable model" (policy ran as LRU).
    pub fallbacks: u64,
}

/// Predicts when a block will next be accessed.
pub trait Predictor: Send {
    /// Short name ("oracle", "lightgbm").
    fn kind(&self) -> &'static str;
    /// Sees every access, in order (features and training labels).
    fn observe(&mut self, ev: &AccessEvent);
    /// The block left the cache; per-block state may be dropped.
    fn forget(&mut self, _block: BlockId) {}
    /// Called before decisions at time `now` (lets a trainer install a
    /// model at a deterministic point).
    fn tick(&mut self, _now: u64) {}
    /// Whether a prediction that lies in the past means "expired" (a learned
    /// point estimate that did not come true) rather than "soon". The oracle
    /// says false: its noise model (negated times) is the robustness test.
    fn expires(&self) -> bool {
        false
    }
    /// When a prediction made at `now` for a block last accessed at `last` is due again
    /// (the model reads the block's idle age, which has grown since); None: it holds until
    /// the block's next access or the next model.
    fn repredict_at(&self, _last: u64, _now: u64) -> Option<u64> {
        None
    }
    /// Version of the model predictions come from; None = no usable model.
    fn model_version(&self) -> Option<u64>;
    /// Predicted absolute next-access time of each `(block, last_access)`,
    /// written to `out` (same order); NaN = not available yet (async mode).
    /// False = no usable model.
    fn predict(&mut self, blocks: &[(BlockId, u64)], out: &mut Vec<f64>) -> bool;
    fn stats(&self) -> PredictorStats;
}
