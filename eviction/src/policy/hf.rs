//! HF (heuristic filter): LRU pre-selects a fixed number of the oldest
//! evictable leaves (4 by default) and the prediction picks among them.
//! Robust-ish by construction, but cannot use a good predictor fully.

use super::scored::Scored;
use super::{AccessEvent, EvictCtx, EvictionPolicy, PolicyStats};
use crate::BlockId;
use crate::index::{LeafEvent, RadixIndex};
use crate::predict::Predictor;

pub struct Hf {
    scored: Scored,
    candidates: usize,
    lru_fallbacks: u64,
}

impl Hf {
    pub fn new(predictor: Box<dyn Predictor>, candidates: usize) -> Self {
        Self {
            scored: Scored::new(predictor),
            candidates: candidates.max(1),
            lru_fallbacks: 0,
        }
    }
}

impl EvictionPolicy for Hf {
    fn name(&self) -> &'static str {
        "hf"
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
            self.scored
                .furthest_of(idx, ctx.now, self.candidates)
                .or_else(|| idx.lru_first())
        } else {
            self.lru_fallbacks += 1;
            idx.lru_first()
        }
    }

    fn stats(&self) -> PolicyStats {
        PolicyStats {
            lru_fallbacks: self.lru_fallbacks,
            predictor: Some(self.scored.stats()),
            ..PolicyStats::default()
        }
    }
}
