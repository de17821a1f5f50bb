//! Builds the predictor of a learned policy for one simulation: the oracle (true future with
//! noise) or the online LightGBM model with the policy's feature set (its `features`
//! parameter, else `--features`). The `future` set needs the trace's future: the simulator
//! has it and hands it over as a [`Foresight`]; nothing else ever does.

use std::sync::{Arc, OnceLock};

use super::SimError;
use super::args::{PredictorKind, SimArgs};
use crate::future::FutureIndex;
use crate::policy::PolicyConfig;
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

/// The predictor for `cfg` at oracle noise `noise`.
pub fn build(
    args: &SimArgs,
    cfg: &PolicyConfig,
    noise: f64,
    src: &Sources<'_>,
) -> Result<Box<dyn Predictor>, SimError> {
    match args.predictor {
        PredictorKind::Oracle => Ok(Box::new(OracleNoise::new(
            src.future.clone(),
            noise,
            args.seed,
        ))),
        PredictorKind::Lightgbm => {
            let set = feature_set(cfg, args);
            lightgbm(set, src, args.background_training, args.async_predict)
        }
    }
}

/// The online LightGBM predictor with feature set `set` (deterministic install schedule
/// unless `background`).
#[cfg(feature = "lightgbm")]
pub fn lightgbm(
    set: FeatureSet,
    src: &Sources<'_>,
    background: bool,
    async_predict: bool,
) -> Result<Box<dyn Predictor>, SimError> {
    use crate::predict::lgbm::{Install, LgbmConfig, LightGbm};
    let mut cfg = LgbmConfig::default();
    if background {
        cfg.install = Install::Background;
    }
    cfg.async_predict = async_predict;
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
    _background: bool,
    _async_predict: bool,
) -> Result<Box<dyn Predictor>, SimError> {
    Err(SimError::PredictorUnavailable("lightgbm"))
}
