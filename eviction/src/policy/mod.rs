//! The [`EvictionPolicy`] trait, the serde-tagged [`PolicyConfig`] enum that
//! names every policy with its parameters, and the one factory ([`build`]).
//!
//! Pingora-cache style: the cache tells the policy what happened (accesses,
//! evictable-leaf changes, removals) and asks it for a victim; the cache, not
//! the policy, deletes the block, after checking that the victim really is an
//! evictable leaf. Candidates therefore always come from the [`RadixIndex`].

mod dead_first;
mod events;
mod fpb;
mod guard;
mod hf;
mod laru;
mod lfu;
mod lru;
mod opt;
mod scored;
mod sieve;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use dead_first::DeadFirst;
pub use events::{AccessEvent, EntityCtx, EvictCtx, RequestCtx};
pub use fpb::Fpb;
pub use guard::Margin as GuardMargin;
pub use hf::Hf;
pub use laru::{Fallback as LaruFallback, Laru};
pub use lfu::Lfu;
pub use lru::Lru;
pub use opt::Opt;
pub use sieve::Sieve;

use crate::BlockId;
use crate::future::FutureIndex;
use crate::index::{LeafEvent, RadixIndex};
use crate::predict::{FeatureSet, Predictor, PredictorStats};

/// Counters a server can export; all plain numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PolicyStats {
    /// Victims chosen by plain LRU because no usable prediction existed.
    pub lru_fallbacks: u64,
    /// LARU: current confidence λ.
    pub lambda: Option<f64>,
    /// LARU: phases started.
    pub phases: u64,
    /// LARU: misses on blocks a prediction evicted earlier in the phase.
    pub prediction_induced_misses: u64,
    /// LARU: times the guard stopped trusting predictions (its shadow LRU missed clearly
    /// less over a window; `policy/guard.rs`).
    pub guard_trips: u64,
    pub predictor: Option<PredictorStats>,
}

/// An eviction policy. Implementations keep their own ordering in step with
/// the index through the `on_*` hooks and must only return evictable leaves.
pub trait EvictionPolicy: Send {
    fn name(&self) -> &'static str;
    /// A block was accessed (hit) or inserted, at `ev.time`.
    fn on_access(&mut self, _idx: &RadixIndex, _ev: &AccessEvent) {}
    /// A block became, or stopped being, an evictable leaf.
    fn on_leaf(&mut self, _idx: &RadixIndex, _ev: LeafEvent) {}
    /// A block left the index (evicted or removed by the engine).
    fn on_remove(&mut self, _block: BlockId) {}
    /// Chooses the next victim among `idx`'s evictable leaves.
    fn select_victim(&mut self, idx: &RadixIndex, ctx: &EvictCtx) -> Option<BlockId>;
    /// The evictable leaves in the order this policy would take them next, at most `limit`,
    /// at time `now`, without choosing: learned policies may bring their cached predictions
    /// up to date (what their next decision does first), nothing else changes. A server
    /// publishes it after the blocks already evicted, so an engine that must make room before
    /// the server has seen the request that needs it still follows the policy. The first
    /// leaf is the next victim; for learned policies the rest is an estimate (each eviction
    /// changes what the next one sees). None: the policy cannot rank without deciding
    /// (sampled policies, HF).
    fn next_leaves(&mut self, _idx: &RadixIndex, _limit: usize, _now: u64) -> Option<Vec<BlockId>> {
        None
    }
    fn stats(&self) -> PolicyStats {
        PolicyStats::default()
    }
}

fn default_guard() -> bool {
    true
}

fn default_hf_candidates() -> usize {
    4
}

/// Every policy with its parameters, e.g. `{"policy":"lru"}` or
/// `{"policy":"laru","lambda_min_misses":8}`.
/// The predictor a learned policy asks (`fpb:predictor=reuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PredictorChoice {
    Lightgbm,
    Reuse,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Struct variants, even empty ones: serde ignores unknown fields on unit
// variants of an internally tagged enum, and `{"policy":"lru","x":1}` must fail.
#[serde(tag = "policy", rename_all = "snake_case", deny_unknown_fields)]
pub enum PolicyConfig {
    Lru {},
    Lfu {},
    /// SIEVE (NSDI'24) over evictable leaves; stands in for S3-FIFO.
    Sieve {},
    /// Furthest predicted block among all evictable leaves.
    Fpb {
        /// The learned predictor's feature set (`base`, `base+gr`, ...); None: the
        /// simulator's `--features`, else `base`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        features: Option<FeatureSet>,
        /// Requests between sending a retrain and installing its model (default 1,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        install_after: Option<u64>,
        /// Requests after which a row not yet reused is labelled censored (default 2,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_horizon: Option<u64>,
        /// Which predictor: `lightgbm` (the default) or `reuse` (idle age against the reuse
        /// distances seen, no model: `predict::reuse`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        predictor: Option<PredictorChoice>,
    },
    /// LRU pre-selects `candidates` (default 4), the prediction picks.
    Hf {
        #[serde(default = "default_hf_candidates")]
        candidates: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        features: Option<FeatureSet>,
        /// Requests between sending a retrain and installing its model (default 1,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        install_after: Option<u64>,
        /// Requests after which a row not yet reused is labelled censored (default 2,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_horizon: Option<u64>,
        /// Which predictor: `lightgbm` (the default) or `reuse` (idle age against the reuse
        /// distances seen, no model: `predict::reuse`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        predictor: Option<PredictorChoice>,
    },
    /// Learning-augmented LRU (LCR Algorithm 1).
    Laru {
        /// Prediction-induced misses before λ halves; default max(k/32, 1).
        #[serde(default)]
        lambda_min_misses: Option<u64>,
        /// Fall back to LRU while a shadow LRU would miss clearly less (default on;
        /// `guard=false` is LCR Algorithm 1 alone).
        #[serde(default = "default_guard")]
        guard: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        features: Option<FeatureSet>,
        /// Accesses per guard window (default [`laru::GUARD_WINDOW`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guard_window: Option<u64>,
        /// Windows the guard judges together (default [`laru::GUARD_SPAN`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guard_span: Option<usize>,
        /// What the guard's 2% margin is a share of: the shadow LRU's `hits` (default) or its
        /// `misses` ([`GuardMargin`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guard_margin: Option<GuardMargin>,
        /// What λ scales to the candidate count l: the evictable leaves (default) or the
        /// cache size k (LCR's l = max(⌊λk⌋, 1)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lambda_over: Option<LambdaOver>,
        /// The order predictions refine: LRU (default) or dead-first (request-unique blocks
        /// first, with no prediction asked).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base: Option<LaruBase>,
        /// When a miss on a block a prediction evicted makes LARU evict by LRU once:
        /// `always` (LCR, default) or `behind` (only while the guard does not see the cache
        /// ahead of its shadow LRU; [`laru::Fallback`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<laru::Fallback>,
        /// Requests between sending a retrain and installing its model (default 1,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        install_after: Option<u64>,
        /// Requests after which a row not yet reused is labelled censored (default 2,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_horizon: Option<u64>,
        /// Which predictor: `lightgbm` (the default) or `reuse` (idle age against the reuse
        /// distances seen, no model: `predict::reuse`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        predictor: Option<PredictorChoice>,
    },
    /// Belady: furthest true next use. Needs the future (simulator only).
    Opt {},
    /// Request-unique blocks (GR candidate runs and instructions) first, then LRU.
    #[serde(rename = "dead-first")]
    DeadFirst {},
}

/// What LARU's λ is a fraction of (see [`PolicyConfig::Laru`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LambdaOver {
    Leaves,
    Cache,
}

/// The order LARU falls back on and refines (see [`PolicyConfig::Laru`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LaruBase {
    Lru,
    DeadFirst,
}

/// Error from [`PolicyConfig::from_name`] and [`build`].
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown policy {name:?}, valid: {valid}")]
    Unknown {
        name: String,
        valid: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("bad parameters for policy {spec:?}")]
    BadParams {
        spec: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("policy {0} needs a predictor")]
    NeedsPredictor(&'static str),
    #[error("policy opt needs the future of the trace (simulator only)")]
    NeedsFuture,
}

impl PolicyConfig {
    /// Valid `policy` tags, for error messages and the admin endpoint.
    pub const NAMES: &'static [&'static str] = &[
        "lru",
        "lfu",
        "sieve",
        "fpb",
        "hf",
        "laru",
        "opt",
        "dead-first",
    ];

    /// `lru, lfu, ...`: the list an "unknown policy" answer shows.
    pub fn valid_names() -> String {
        Self::NAMES.join(", ")
    }

    /// LARU with every key at its default but the feature set (`None`: the default set), for
    /// callers that build it in code rather than from a spec.
    pub fn laru_with_features(features: Option<FeatureSet>) -> Self {
        Self::Laru {
            lambda_min_misses: None,
            guard: true,
            features,
            guard_window: None,
            guard_span: None,
            guard_margin: None,
            lambda_over: None,
            base: None,
            fallback: None,
            install_after: None,
            label_horizon: None,
            predictor: None,
        }
    }

    /// The default configuration of the policy called `name`; goes through
    /// the serde enum so the tag spelling lives in one place.
    pub fn from_name(name: &str) -> Result<Self, PolicyError> {
        serde_json::from_value(serde_json::json!({ "policy": name })).map_err(|source| {
            PolicyError::Unknown {
                name: name.to_string(),
                valid: Self::valid_names(),
                source,
            }
        })
    }

    /// Parses `name` or `name:key=value:key=value` (values are JSON if they
    /// parse as JSON, else strings), e.g. `laru:lambda_min_misses=1`; goes
    /// through the serde enum like [`Self::from_name`].
    pub fn from_spec(spec: &str) -> Result<Self, PolicyError> {
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or_default().trim();
        let mut obj = serde_json::Map::new();
        obj.insert("policy".into(), name.into());
        for kv in parts {
            let (k, v) = kv.split_once('=').unwrap_or((kv, "true"));
            let v = serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::from(v));
            obj.insert(k.trim().to_string(), v);
        }
        serde_json::from_value(obj.into()).map_err(|source| {
            if Self::NAMES.contains(&name) {
                PolicyError::BadParams {
                    spec: spec.to_string(),
                    source,
                }
            } else {
                PolicyError::Unknown {
                    name: name.to_string(),
                    valid: Self::valid_names(),
                    source,
                }
            }
        })
    }

    /// The tag of this configuration.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Lru {} => "lru",
            Self::Lfu {} => "lfu",
            Self::Sieve {} => "sieve",
            Self::Fpb { .. } => "fpb",
            Self::Hf { .. } => "hf",
            Self::Laru { .. } => "laru",
            Self::Opt {} => "opt",
            Self::DeadFirst {} => "dead-first",
        }
    }

    pub fn uses_predictor(&self) -> bool {
        matches!(self, Self::Fpb { .. } | Self::Hf { .. } | Self::Laru { .. })
    }

    /// The feature set this learned policy asks its predictor for, if it names one.
    pub fn features(&self) -> Option<FeatureSet> {
        match self {
            Self::Fpb { features, .. }
            | Self::Hf { features, .. }
            | Self::Laru { features, .. } => *features,
            _ => None,
        }
    }

    /// The learned predictor's schedule this policy names, `(install_after, label_horizon)`
    /// in requests (None: the predictor's default); the same keys as `recache sim`'s
    /// `--install-after` and `--label-horizon`, so a served policy can run the early model.
    pub fn model_schedule(&self) -> (Option<u64>, Option<u64>) {
        match self {
            Self::Fpb {
                install_after,
                label_horizon,
                ..
            }
            | Self::Hf {
                install_after,
                label_horizon,
                ..
            }
            | Self::Laru {
                install_after,
                label_horizon,
                ..
            } => (*install_after, *label_horizon),
            _ => (None, None),
        }
    }

    /// The predictor this learned policy names (None: LightGBM).
    pub fn predictor(&self) -> Option<PredictorChoice> {
        match self {
            Self::Fpb { predictor, .. }
            | Self::Hf { predictor, .. }
            | Self::Laru { predictor, .. } => *predictor,
            _ => None,
        }
    }

    /// Whether this policy needs the LightGBM predictor (learned, and not given another).
    pub fn needs_lightgbm(&self) -> bool {
        self.uses_predictor() && self.predictor() != Some(PredictorChoice::Reuse)
    }

    pub fn needs_future(&self) -> bool {
        matches!(self, Self::Opt {})
    }
}

/// What a policy may need besides its parameters.
#[derive(Default)]
pub struct PolicyEnv {
    /// Cache capacity in blocks (LARU's k).
    pub capacity: usize,
    pub predictor: Option<Box<dyn Predictor>>,
    pub future: Option<Arc<FutureIndex>>,
}

/// The factory: the only place a config becomes a policy.
pub fn build(cfg: &PolicyConfig, env: PolicyEnv) -> Result<Box<dyn EvictionPolicy>, PolicyError> {
    let name = cfg.name();
    let predictor = || env.predictor.ok_or(PolicyError::NeedsPredictor(name));
    Ok(match cfg {
        PolicyConfig::Lru {} => Box::new(Lru),
        PolicyConfig::Lfu {} => Box::new(Lfu::default()),
        PolicyConfig::Sieve {} => Box::new(Sieve::default()),
        PolicyConfig::Fpb { .. } => Box::new(Fpb::new(predictor()?)),
        PolicyConfig::Hf { candidates, .. } => Box::new(Hf::new(predictor()?, *candidates)),
        PolicyConfig::Laru {
            lambda_min_misses,
            guard,
            guard_window,
            guard_span,
            guard_margin,
            lambda_over,
            base,
            fallback,
            ..
        } => {
            let capacity = env.capacity;
            Box::new(
                Laru::new(predictor()?, capacity, *lambda_min_misses)
                    .guarded(*guard)
                    .guard_window(
                        guard_window.unwrap_or(laru::GUARD_WINDOW),
                        guard_span.unwrap_or(laru::GUARD_SPAN),
                    )
                    .guard_margin(guard_margin.unwrap_or_default())
                    .lambda_over(lambda_over.unwrap_or(LambdaOver::Leaves))
                    .dead_first_base(*base == Some(LaruBase::DeadFirst))
                    .fallback(fallback.unwrap_or_default()),
            )
        }
        PolicyConfig::Opt {} => Box::new(Opt::new(env.future.ok_or(PolicyError::NeedsFuture)?)),
        PolicyConfig::DeadFirst {} => Box::new(DeadFirst::default()),
    })
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
