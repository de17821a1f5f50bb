//! The shadow cache: the active eviction policy run over the request stream the proxy sees,
//! at the engine's capacity (the eviction crate's `Cache`, keyed by content ids). What the
//! shadow has evicted but the engine still holds is what the engine should evict first: that
//! list, deepest blocks first, then what the shadow keeps, chain by chain, in its policy's eviction
//! order (where the policy can rank), is the order recache publishes to the shim.
//!
//! On a policy hot-swap the shadow is rebuilt under the new policy and warmed with the
//! recent requests, so the new order is sensible at once rather than empty.

use std::collections::VecDeque;

use recache_eviction::{Cache, CacheError, PolicyConfig, PolicyEnv, PolicyError, policy};
use std::collections::HashMap;

use super::mirror::Mirror;

/// Requests kept to warm a rebuilt shadow.
const RECENT: usize = 4096;

/// Builds the policy a live shadow runs over `block_tokens`-token blocks; learned policies
/// get the reuse predictor where they name it (`laru:predictor=reuse`), else the online
/// LightGBM predictor with the policy's feature set (`laru:features=...`) and
/// its deterministic install schedule (the simulator's default, or the policy's
/// `install_after`/`label_horizon` keys, so `recache sim` on the same stream with the same
/// spec makes the same choices).
pub fn build_policy(
    cfg: &PolicyConfig,
    capacity: usize,
    block_tokens: usize,
) -> Result<Box<dyn recache_eviction::EvictionPolicy>, PolicyError> {
    // Without the `lightgbm` feature, `policy_slot::check_servable` refuses policies that
    // need it before they get here.
    let predictor = recache_eviction::predict::for_serving(cfg, block_tokens);
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
    block_tokens: usize,
    recent: VecDeque<Vec<u64>>,
    now: u64,
    pub hits: u64,
    pub blocks: u64,
}

impl Shadow {
    pub fn new(
        cfg: &PolicyConfig,
        capacity: usize,
        block_tokens: usize,
    ) -> Result<Self, PolicyError> {
        Ok(Self {
            cache: Cache::new(capacity, build_policy(cfg, capacity, block_tokens)?),
            capacity,
            block_tokens,
            recent: VecDeque::new(),
            now: 0,
            hits: 0,
            blocks: 0,
        })
    }

    /// Models `n` requests in the engine at once (`--shadow-in-flight`, `Cache::in_flight`).
    pub fn in_flight(mut self, n: usize) -> Self {
        self.cache = self.cache.in_flight(n);
        self
    }

    /// Replaces the policy, replaying the recent requests into a fresh cache.
    pub fn rebuild(&mut self, cfg: &PolicyConfig) -> Result<(), PolicyError> {
        let (recent, n) = (std::mem::take(&mut self.recent), self.cache.concurrency());
        *self = Self::new(cfg, self.capacity, self.block_tokens)?.in_flight(n);
        for r in recent {
            let _ = self.request(r);
        }
        Ok(())
    }

    /// Forgets everything (the engine restarted or cleared its cache).
    pub fn reset(&mut self, cfg: &PolicyConfig) -> Result<(), PolicyError> {
        let n = self.cache.concurrency();
        *self = Self::new(cfg, self.capacity, self.block_tokens)?.in_flight(n);
        Ok(())
    }

    /// Requests seen since the shadow was built or reset (its clock).
    pub fn now(&self) -> u64 {
        self.now
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
    /// The active policy's statistics.
    pub fn policy_stats(&self) -> recache_eviction::policy::PolicyStats {
        self.cache.policy_stats()
    }

    pub fn kept(&self) -> std::collections::HashSet<u64> {
        self.cache.index().blocks().collect()
    }

    /// The order to publish: engine blocks the policy would not keep, deepest first (children
    /// before parents, so the engine unwinds chains from their tips like its own LRU does),
    /// then, for policies that can rank without deciding (LRU, LFU, FPB, LARU), the engine blocks
    /// of what the policy keeps, its next victim's chain first, each chain unwound from its tip
    /// (`Cache::next_chains`). The second part is what makes the
    /// engine follow the policy when it must make room for a request before the loop has seen
    /// that request (the order is republished after each arrival, never waited for), and when
    /// running requests pin the victims the policy chose.
    pub fn order(&mut self, mirror: &Mirror) -> Order {
        let idx = self.cache.index();
        let mut v: Vec<(u32, u64)> = mirror
            .iter()
            .filter(|(_, content, _)| content.is_some_and(|c| !idx.contains(c)))
            .map(|(h, _, depth)| (depth, h))
            .collect();
        v.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut hashes: Vec<u64> = v.into_iter().map(|(_, h)| h).collect();
        let victims = hashes.len();
        if let Some(next) = self.cache.next_chains(NEXT_RANKED, self.now) {
            let rank: HashMap<u64, usize> = next.iter().enumerate().map(|(i, &c)| (c, i)).collect();
            let mut tips: Vec<(usize, u64)> = mirror
                .iter()
                .filter_map(|(h, content, _)| Some((*rank.get(&content?)?, h)))
                .collect();
            tips.sort_unstable();
            hashes.extend(tips.into_iter().map(|(_, h)| h));
        }
        Order { hashes, victims }
    }
}

/// Kept blocks ranked after the victims: plenty for the engine's next few allocations.
const NEXT_RANKED: usize = 4096;

/// What [`Shadow::order`] publishes.
pub struct Order {
    /// Engine block hashes, evict-first first.
    pub hashes: Vec<u64>,
    /// How many of them the policy has evicted already (the rest it keeps, ranked).
    pub victims: usize,
}

#[cfg(test)]
#[path = "shadow_tests.rs"]
mod tests;
