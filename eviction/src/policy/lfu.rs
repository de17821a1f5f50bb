//! LFU over evictable leaves: fewest accesses since the block became
//! resident, then oldest, then deepest. Counts are forgotten on eviction
//! (in-cache LFU), which is the classic baseline.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use super::{AccessEvent, EvictCtx, EvictionPolicy};
use crate::BlockId;
use crate::hash::FastMap;
use crate::index::{LeafEvent, RadixIndex};

type Key = (u64, u64, Reverse<u32>, BlockId);

#[derive(Debug, Default)]
pub struct Lfu {
    counts: FastMap<BlockId, u64>,
    /// Keys of the evictable leaves currently in `order`.
    keys: FastMap<BlockId, Key>,
    order: BTreeSet<Key>,
}

impl Lfu {
    fn unlist(&mut self, block: BlockId) {
        if let Some(k) = self.keys.remove(&block) {
            self.order.remove(&k);
        }
    }

    fn list(&mut self, idx: &RadixIndex, block: BlockId) {
        let (Some(last), Some(depth)) = (idx.last_access(block), idx.depth(block)) else {
            return;
        };
        let count = self.counts.get(&block).copied().unwrap_or(0);
        let key = (count, last, Reverse(depth), block);
        self.order.insert(key);
        self.keys.insert(block, key);
    }
}

impl EvictionPolicy for Lfu {
    fn name(&self) -> &'static str {
        "lfu"
    }

    fn on_access(&mut self, idx: &RadixIndex, ev: &AccessEvent) {
        *self.counts.entry(ev.block).or_insert(0) += 1;
        if self.keys.contains_key(&ev.block) {
            self.unlist(ev.block);
            self.list(idx, ev.block);
        }
    }

    fn on_leaf(&mut self, idx: &RadixIndex, ev: LeafEvent) {
        self.unlist(ev.block);
        if ev.evictable {
            self.list(idx, ev.block);
        }
    }

    fn on_remove(&mut self, block: BlockId) {
        self.unlist(block);
        self.counts.remove(&block);
    }

    fn select_victim(&mut self, _idx: &RadixIndex, _ctx: &EvictCtx) -> Option<BlockId> {
        self.order.first().map(|k| k.3)
    }

    fn next_leaves(&mut self, _idx: &RadixIndex, limit: usize, _now: u64) -> Option<Vec<BlockId>> {
        Some(self.order.iter().take(limit).map(|k| k.3).collect())
    }
}
