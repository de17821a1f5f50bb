//! Shared helpers for the integration tests: synthetic prefix workloads and
//! a runner that builds any policy with an oracle predictor.

#![allow(dead_code)]

use std::sync::Arc;

use recache_eviction::policy::{self, PolicyConfig, PolicyEnv};
use recache_eviction::predict::OracleNoise;
use recache_eviction::{Access, BlockId, Cache, CacheError, FutureIndex};

/// Builds a conversation-like prefix trace from (conversation, new blocks)
/// steps: each request is its conversation's whole chain after extending it,
/// all chains share root block 0 (a system prompt).
pub fn prefix_trace(steps: &[(u8, u8)], conversations: usize) -> Vec<Vec<BlockId>> {
    let mut chains: Vec<Vec<BlockId>> = vec![vec![0]; conversations.max(1)];
    let mut next = 1;
    steps
        .iter()
        .map(|&(c, add)| {
            let chain = &mut chains[c as usize % conversations.max(1)];
            for _ in 0..add {
                chain.push(next);
                next += 1;
            }
            chain.clone()
        })
        .collect()
}

/// A request split into chains ((start, end) ranges into its blocks, each from the root).
pub type Multi = (Vec<BlockId>, Vec<(usize, usize)>);

/// A GR-shaped multi-chain trace from (conversation, new blocks, items) steps: the
/// conversation's chain as in [`prefix_trace`], then `items % 4` pooled items (one-block
/// root chains drawn from 10 shared items, ids from 1,000,000) and, when `items` is odd, a
/// fresh one-block root chain (the unique rest of an item-first prompt).
pub fn multi_trace(steps: &[(u8, u8, u8)], conversations: usize) -> Vec<Multi> {
    let pairs: Vec<(u8, u8)> = steps.iter().map(|s| (s.0, s.1)).collect();
    let convs = prefix_trace(&pairs, conversations);
    let mut fresh = 2_000_000;
    convs
        .into_iter()
        .zip(steps)
        .map(|(mut blocks, &(_, _, items))| {
            let mut chains = vec![(0, blocks.len())];
            for j in 0..u64::from(items % 4) {
                let item = 1_000_000 + (u64::from(items / 4) + 3 * j) % 10;
                chains.push((blocks.len(), blocks.len() + 1));
                blocks.push(item);
            }
            if items % 2 == 1 {
                chains.push((blocks.len(), blocks.len() + 1));
                blocks.push(fresh);
                fresh += 1;
            }
            (blocks, chains)
        })
        .collect()
}

/// Replays a multi-chain trace like [`replay`].
pub fn replay_multi(
    trace: &[Multi],
    cfg: &PolicyConfig,
    capacity: usize,
    p: f64,
) -> Result<Replay, CacheError> {
    let blocks: Vec<Vec<BlockId>> = trace.iter().map(|r| r.0.clone()).collect();
    let mut cache = cache_for(&blocks, cfg, capacity, p);
    let mut hits = Vec::new();
    for (t, (blocks, chains)) in trace.iter().enumerate() {
        let req = Access {
            blocks,
            chains,
            ..Access::default()
        };
        hits.push(cache.serve(&req, t as u64)?.hits);
        assert!(
            cache.index().len() <= capacity,
            "{} exceeded capacity",
            cfg.name()
        );
    }
    let mut resident: Vec<BlockId> = cache.index().blocks().collect();
    resident.sort_unstable();
    Ok(Replay {
        hits,
        evictions: cache.evictions(),
        resident,
    })
}

/// Deterministic xorshift steps for non-proptest tests.
pub fn random_steps(n: usize, seed: u64) -> Vec<(u8, u8)> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x % 251) as u8, ((x >> 20) % 4) as u8)
        })
        .collect()
}

/// Per-request hits and the final resident set.
#[derive(Debug, PartialEq, Eq)]
pub struct Replay {
    pub hits: Vec<usize>,
    pub evictions: u64,
    pub resident: Vec<BlockId>,
}

impl Replay {
    pub fn total_hits(&self) -> usize {
        self.hits.iter().sum()
    }
}

/// An empty cache of `capacity` under `cfg` (oracle predictor over `trace`, noise `p`).
pub fn cache_for(trace: &[Vec<BlockId>], cfg: &PolicyConfig, capacity: usize, p: f64) -> Cache {
    let future = Arc::new(FutureIndex::new(trace.iter().map(Vec::as_slice)));
    let predictor = cfg
        .uses_predictor()
        .then(|| Box::new(OracleNoise::new(future.clone(), p, 7)) as _);
    let env = PolicyEnv {
        capacity,
        predictor,
        future: Some(future),
    };
    Cache::new(capacity, policy::build(cfg, env).expect("policy builds"))
}

/// Replays `trace` with `cfg` (oracle predictor with noise `p` for learned
/// policies), checking the capacity after every request.
pub fn replay(
    trace: &[Vec<BlockId>],
    cfg: &PolicyConfig,
    capacity: usize,
    p: f64,
) -> Result<Replay, CacheError> {
    let mut cache = cache_for(trace, cfg, capacity, p);
    let mut hits = Vec::new();
    for (t, req) in trace.iter().enumerate() {
        hits.push(cache.access(req, t as u64, None)?.hits);
        assert!(
            cache.index().len() <= capacity,
            "{} exceeded capacity",
            cfg.name()
        );
    }
    let mut resident: Vec<BlockId> = cache.index().blocks().collect();
    resident.sort_unstable();
    Ok(Replay {
        hits,
        evictions: cache.evictions(),
        resident,
    })
}

pub fn all_policies() -> Vec<PolicyConfig> {
    PolicyConfig::NAMES
        .iter()
        .map(|n| PolicyConfig::from_name(n).expect("name"))
        .collect()
}

/// LightGBM parameters for the small synthetic fits in the tests (20 trees of 15 leaves at
/// learning rate 0.1): fixed here so a change of the predictor's defaults does not move them.
#[cfg(feature = "lightgbm")]
pub fn small_lgbm_params() -> serde_json::Value {
    use recache_eviction::predict::lgbm::{LgbmConfig, params};
    params(&LgbmConfig {
        iterations: 20,
        learning_rate: 0.1,
        num_leaves: 15,
        ..LgbmConfig::default()
    })
}
