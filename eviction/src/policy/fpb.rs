//! FPB (furthest predicted block): evict the evictable leaf with the largest
//! predicted next-access time among all of them. Fast when predictions are
//! good, unbounded when they are not.

use super::scored::Scored;
use super::{AccessEvent, EvictCtx, EvictionPolicy, PolicyStats};
use crate::BlockId;
use crate::index::{LeafEvent, RadixIndex};
use crate::predict::Predictor;

pub struct Fpb {
    scored: Scored,
    lru_fallbacks: u64,
}

impl Fpb {
    pub fn new(predictor: Box<dyn Predictor>) -> Self {
        Self {
            scored: Scored::new(predictor),
            lru_fallbacks: 0,
        }
    }
}

impl EvictionPolicy for Fpb {
    fn name(&self) -> &'static str {
        "fpb"
    }
    fn on_access(&mut self, idx: &RadixIndex, ev: &AccessEvent) {
        self.scored.on_access(idx, ev);
    }
    fn on_leaf(&mut self, _idx: &RadixIndex, ev: LeafEvent) {
        self.scored.on_leaf(ev);
    }
    fn on_remove(&mut self, block: BlockId) {
        self.scored.on_remove(block);
    }

    fn select_victim(&mut self, idx: &RadixIndex, ctx: &EvictCtx) -> Option<BlockId> {
        if self.scored.refresh(idx, ctx.now) {
            // None when no leaf has a prediction yet (async mode).
            self.scored
                .furthest(idx, ctx.now)
                .or_else(|| idx.lru_first())
        } else {
            self.lru_fallbacks += 1;
            idx.lru_first()
        }
    }

    fn next_leaves(&mut self, idx: &RadixIndex, limit: usize, now: u64) -> Option<Vec<BlockId>> {
        if !self.scored.refresh(idx, now) {
            return Some(idx.lru_iter().take(limit).collect());
        }
        let first = self.scored.furthest(idx, now).or_else(|| idx.lru_first());
        Some(
            self.scored
                .ranked(idx, now, idx.evictable_len(), limit, first),
        )
    }

    fn stats(&self) -> PolicyStats {
        PolicyStats {
            lru_fallbacks: self.lru_fallbacks,
            predictor: Some(self.scored.stats()),
            ..PolicyStats::default()
        }
    }
}
