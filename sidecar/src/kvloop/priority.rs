//! Eviction steering through SGLang's request `priority` (`--sglang-priority`), no engine
//! patch: with `--radix-eviction-policy priority` SGLang evicts the radix leaves of the
//! lowest priority first (LRU among equals), where a node's priority is the highest of the
//! requests that inserted or reused it. recache sets every forwarded request's `priority`
//! from the active policy's view of its prompt, so what the policy keeps SGLang keeps.
//!
//! The mapping, `epoch * LEVELS + level`:
//! - `level`: how many leading full blocks of the prompt the shadow cache (the active policy
//!   at the engine's capacity) holds right now, i.e. how much of this prefix the policy chose
//!   to keep, on a log scale (bit length of the count: 0, 1, 2-3, 4-7, ... blocks; capped at
//!   `LEVELS - 1`) so it means the same at SGLang's token granularity and at 32-token blocks;
//!   0 for prompts recache cannot see as token ids.
//! - `epoch`: blocks the shadow has admitted so far / its capacity (one epoch = one cache's
//!   worth of new blocks). SGLang only ever raises a node's priority, so without it a prefix
//!   that was kept once would outrank every newer one for good; with it, a node older than
//!   a cache turnover yields to anything newer, and within an epoch the policy's level decides.
//!
//! The request path does one lock-free load ([`ArcSwap`]) and one hash per prompt block; the
//! engine-loop worker rebuilds the view after arrivals. Which routes take a priority is the
//! engine's dialect (`Engine::priority_paths`); the proxy's pipeline sets the field, only when
//! the flag is on.

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;

/// Priority levels per epoch (a level is the bit length of the kept leading blocks, capped).
pub const LEVELS: u64 = 16;

/// What the policy holds, as the request path reads it.
#[derive(Debug, Default)]
pub struct View {
    /// Content ids of the blocks in the shadow cache.
    pub kept: HashSet<u64>,
    /// Cache turnovers so far.
    pub epoch: u64,
}

/// Shared between the worker (writes) and the proxy (reads).
pub struct PrioritySource {
    view: ArcSwap<View>,
    block_size: usize,
}

impl PrioritySource {
    pub fn new(block_size: usize) -> Arc<Self> {
        Arc::new(Self {
            view: ArcSwap::from_pointee(View::default()),
            block_size: block_size.max(1),
        })
    }

    /// Publishes a new view (worker thread).
    pub fn publish(&self, view: View) {
        self.view.store(Arc::new(view));
    }

    /// The priority of a request with these token-id prompts (the highest over them).
    pub fn priority(&self, prompts: &[Vec<u32>]) -> i64 {
        let view = self.view.load();
        let kept = prompts
            .iter()
            .map(|t| {
                kept_prefix(
                    &view.kept,
                    &recache_hash::blocks::prompt_ids(t, self.block_size),
                )
            })
            .max()
            .unwrap_or(0);
        mapping(view.epoch, kept)
    }
}

/// Leading blocks of `ids` held in `kept`.
pub fn kept_prefix(kept: &HashSet<u64>, ids: &[u64]) -> usize {
    ids.iter().take_while(|id| kept.contains(id)).count()
}

/// `epoch * LEVELS + level(kept)`, saturating (SGLang takes a signed 64-bit int).
pub fn mapping(epoch: u64, kept: usize) -> i64 {
    let level = u64::from(usize::BITS - kept.leading_zeros()).min(LEVELS - 1);
    let p = epoch.saturating_mul(LEVELS).saturating_add(level);
    i64::try_from(p).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "priority_tests.rs"]
mod tests;
