//! A policy wrapper that records every access event the cache reports, so the quality
//! report can build feature rows exactly as a live predictor would see them (same order, same
//! chain context), under any policy.

use std::sync::{Arc, Mutex};

use recache_eviction::BlockId;
use recache_eviction::index::{LeafEvent, RadixIndex};
use recache_eviction::policy::{AccessEvent, EvictCtx, EvictionPolicy, PolicyStats};

pub struct Recording {
    inner: Box<dyn EvictionPolicy>,
    log: Arc<Mutex<Vec<AccessEvent>>>,
}

impl Recording {
    /// Wraps `inner`; the events land in the returned log.
    pub fn new(inner: Box<dyn EvictionPolicy>) -> (Self, Arc<Mutex<Vec<AccessEvent>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        (
            Self {
                inner,
                log: log.clone(),
            },
            log,
        )
    }
}

impl EvictionPolicy for Recording {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn on_access(&mut self, idx: &RadixIndex, ev: &AccessEvent) {
        if let Ok(mut log) = self.log.lock() {
            log.push(*ev);
        }
        self.inner.on_access(idx, ev);
    }
    fn on_leaf(&mut self, idx: &RadixIndex, ev: LeafEvent) {
        self.inner.on_leaf(idx, ev);
    }
    fn on_remove(&mut self, block: BlockId) {
        self.inner.on_remove(block);
    }
    fn select_victim(&mut self, idx: &RadixIndex, ctx: &EvictCtx) -> Option<BlockId> {
        self.inner.select_victim(idx, ctx)
    }
    fn next_leaves(&mut self, idx: &RadixIndex, limit: usize, now: u64) -> Option<Vec<BlockId>> {
        self.inner.next_leaves(idx, limit, now)
    }
    fn stats(&self) -> PolicyStats {
        self.inner.stats()
    }
}
