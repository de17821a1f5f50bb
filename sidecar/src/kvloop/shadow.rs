//! The shadow cache: the active eviction policy run over the request stream the proxy sees,
//! at the engine's capacity (the eviction crate's `Cache`, keyed by content ids). What the
//! shadow has evicted but the engine still holds is what the engine should evict first: that
//! list, deepest blocks first, is the order recache publishes to the shim.
//!
//! On a policy hot-swap the shadow is rebuilt under the new policy and warmed with the
//! recent requests, so the new order is sensible at once rather than empty.

use std::collections::VecDeque;

use recache_eviction::{Cache, CacheError, PolicyConfig, PolicyEnv, PolicyError, policy};

use super::mirror::Mirror;

/// Requests kept to warm a rebuilt shadow.
const RECENT: usize = 4096;

/// Builds the policy a live shadow runs; learned policies get the online LightGBM predictor
/// with its deterministic install schedule (the simulator's default, so `recache sim` on the
/// same stream makes the same choices).
pub fn build_policy(
    cfg: &PolicyConfig,
    capacity: usize,
) -> Result<Box<dyn recache_eviction::EvictionPolicy>, PolicyError> {
    // Without the `lightgbm` feature, `policy_slot::check_servable` refuses learned
    // policies before they get here.
    #[cfg(feature = "lightgbm")]
    let predictor: Option<Box<dyn recache_eviction::Predictor>> = if cfg.uses_predictor() {
        Some(Box::new(recache_eviction::predict::lgbm::LightGbm::new(
            recache_eviction::predict::lgbm::LgbmConfig::default(),
        )))
    } else {
        None
    };
    #[cfg(not(feature = "lightgbm"))]
    let predictor: Option<Box<dyn recache_eviction::Predictor>> = None;
    policy::build(
        cfg,
        PolicyEnv {
            capacity,
            predictor,
            future: None,
        },
    )
}

pub struct Shadow {
    cache: Cache,
    capacity: usize,
    recent: VecDeque<Vec<u64>>,
    now: u64,
    pub hits: u64,
    pub blocks: u64,
}

impl Shadow {
    pub fn new(cfg: &PolicyConfig, capacity: usize) -> Result<Self, PolicyError> {
        Ok(Self {
            cache: Cache::new(capacity, build_policy(cfg, capacity)?),
            capacity,
            recent: VecDeque::new(),
            now: 0,
            hits: 0,
            blocks: 0,
        })
    }

    /// Replaces the policy, replaying the recent requests into a fresh cache.
    pub fn rebuild(&mut self, cfg: &PolicyConfig) -> Result<(), PolicyError> {
        let recent = std::mem::take(&mut self.recent);
        *self = Self::new(cfg, self.capacity)?;
        for r in recent {
            let _ = self.request(r);
        }
        Ok(())
    }

    /// Forgets everything (the engine restarted or cleared its cache).
    pub fn reset(&mut self, cfg: &PolicyConfig) -> Result<(), PolicyError> {
        *self = Self::new(cfg, self.capacity)?;
        Ok(())
    }

    /// One request arrival (its prompt's content ids).
    pub fn request(&mut self, ids: Vec<u64>) -> Result<usize, CacheError> {
        self.now += 1;
        let out = self.cache.access(&ids, self.now, None)?;
        self.hits += out.hits as u64;
        self.blocks += ids.len() as u64;
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(ids);
        Ok(out.hits)
    }

    /// Content ids of every block the policy holds now (the `--sglang-priority` view).
    pub fn kept(&self) -> std::collections::HashSet<u64> {
        self.cache.index().blocks().collect()
    }

    /// Engine blocks the policy would not keep, deepest first (children before parents, so
    /// the engine unwinds chains from their tips like its own LRU does).
    pub fn victims(&self, mirror: &Mirror) -> Vec<u64> {
        let idx = self.cache.index();
        let mut v: Vec<(u32, u64)> = mirror
            .iter()
            .filter(|(_, content, _)| content.is_some_and(|c| !idx.contains(c)))
            .map(|(h, _, depth)| (depth, h))
            .collect();
        v.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v.into_iter().map(|(_, h)| h).collect()
    }
}
