//! Builds the predictor of a learned policy for one simulation: the oracle (true future with
//! noise) or the online LightGBM model with the policy's feature set (its `features`
//! parameter, else `--features`). The `future` set needs the trace's future: the simulator
//! has it and hands it over as a [`Foresight`]; nothing else ever does.

use std::sync::{Arc, OnceLock};

use super::SimError;
use super::args::{PredictorKind, SimArgs};
use crate::future::FutureIndex;
use crate::policy::PolicyConfig;
use crate::predict::features::TrainRows;
use crate::predict::foresight::Foresight;
use crate::predict::{FeatureSet, OracleNoise, Predictor};
use crate::trace::Request;

/// The trace-wide inputs predictors may need, built once per simulator run.
pub struct Sources<'a> {
    pub requests: &'a [Request],
    pub future: Arc<FutureIndex>,
    /// Tokens per block ([`crate::trace::block_tokens`]): 512 on Mooncake, 32 on recache's
    /// GR traces.
    pub block_tokens: u32,
    foresight: OnceLock<Arc<Foresight>>,
}

impl<'a> Sources<'a> {
    pub fn new(requests: &'a [Request], future: Arc<FutureIndex>) -> Self {
        Self {
            requests,
            future,
            block_tokens: crate::trace::block_tokens(requests),
            foresight: OnceLock::new(),
        }
    }

    /// The trace's future per chain tip and entity (built on first use).
    pub fn foresight(&self) -> Arc<Foresight> {
        self.foresight
            .get_or_init(|| {
                Arc::new(Foresight::new(
                    self.requests,
                    self.future.clone(),
                    self.block_tokens,
                ))
            })
            .clone()
    }
}

/// The feature set a learned policy runs with.
pub fn feature_set(cfg: &PolicyConfig, args: &SimArgs) -> FeatureSet {
    cfg.features().unwrap_or(args.features)
}

/// The predictor for `cfg` at oracle noise `noise`: the policy's own `predictor=reuse`,
/// else `--predictor`.
pub fn build(
    args: &SimArgs,
    cfg: &PolicyConfig,
    noise: f64,
    src: &Sources<'_>,
) -> Result<Box<dyn Predictor>, SimError> {
    // A policy that names the reuse predictor gets it whatever --predictor says.
    if cfg.predictor() == Some(crate::policy::PredictorChoice::Reuse) {
        return Ok(Box::new(crate::predict::ReuseHist::new()));
    }
    match args.predictor {
        PredictorKind::Oracle => Ok(Box::new(OracleNoise::new(
            src.future.clone(),
            noise,
            args.seed,
        ))),
        PredictorKind::Reuse => Ok(Box::new(crate::predict::ReuseHist::new())),
        PredictorKind::ReuseOracle => Ok(Box::new(
            crate::predict::ReuseHist::new().knowing_whether(src.future.clone()),
        )),
        PredictorKind::WhenOracle => Ok(Box::new(
            crate::predict::ReuseHist::new().knowing_when(src.future.clone(), args.seed),
        )),
        PredictorKind::Lightgbm => {
            let mut flags = LgbmFlags::from_args(args);
            // The policy's own keys win over the run's flags.
            let (install_after, label_horizon) = cfg.model_schedule();
            flags.install_after = install_after.or(flags.install_after);
            flags.label_horizon = label_horizon.or(flags.label_horizon);
            lightgbm(feature_set(cfg, args), src, &flags)
        }
    }
}

/// The simulator's LightGBM flags (None: the predictor's default).
#[derive(Debug, Clone, Default)]
pub struct LgbmFlags {
    pub background: bool,
    pub async_predict: bool,
    pub label_horizon: Option<u64>,
    pub install_after: Option<u64>,
    pub train_rows: Option<TrainRows>,
}

impl LgbmFlags {
    pub fn from_args(args: &SimArgs) -> Self {
        Self {
            background: args.background_training,
            async_predict: args.async_predict,
            label_horizon: args.label_horizon,
            install_after: args.install_after,
            train_rows: args.train_rows,
        }
    }
}

/// The online LightGBM predictor with feature set `set` and the simulator's flags
/// (deterministic install schedule unless `background`).
#[cfg(feature = "lightgbm")]
pub fn lightgbm(
    set: FeatureSet,
    src: &Sources<'_>,
    args: &LgbmFlags,
) -> Result<Box<dyn Predictor>, SimError> {
    use crate::predict::lgbm::{Install, LgbmConfig, LightGbm};
    let mut cfg = LgbmConfig::default();
    if let Some(n) = args.install_after {
        cfg.install = Install::AfterRequests(n);
    }
    if args.background {
        cfg.install = Install::Background;
    }
    if let Some(h) = args.label_horizon {
        cfg.features.horizon = h;
    }
    if let Some(r) = args.train_rows {
        cfg.features.rows = r;
    }
    cfg.async_predict = args.async_predict;
    cfg.features.set = set;
    cfg.features.block_tokens = src.block_tokens;
    let p = LightGbm::new(cfg);
    Ok(Box::new(if set.contains(FeatureSet::FUTURE) {
        p.with_foresight(src.foresight())
    } else {
        p
    }))
}

#[cfg(not(feature = "lightgbm"))]
pub fn lightgbm(
    _set: FeatureSet,
    _src: &Sources<'_>,
    _args: &LgbmFlags,
) -> Result<Box<dyn Predictor>, SimError> {
    Err(SimError::PredictorUnavailable("lightgbm"))
}
