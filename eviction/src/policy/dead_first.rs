//! Dead-first: evict request-unique blocks first (oldest first), then by LRU.
//!
//! In GR traffic a user-first prompt's candidate run and instruction, and an item-first
//! prompt's rest, are unique to the request: dead on arrival (AUC 0.93–0.997 for "OPT drops
//! it" on recache's GR traces, docs/eviction.md). A block is *dead* when its latest access
//! came with a segment that names no entity (kind `items` or `other`); user profiles and
//! pooled items are live. Without entity context (plain chat traces, the engine's KV events)
//! nothing is dead and this is LRU. The baseline a learned policy must beat on GR traffic.
//!
//! Cost: O(log k) per change, a B-tree of the dead evictable leaves keyed as the index's LRU
//! order (last access, deepest first, id).

use std::cmp::Reverse;
use std::collections::BTreeSet;

use super::{AccessEvent, EvictCtx, EvictionPolicy};
use crate::BlockId;
use crate::hash::{FastMap, FastSet};
use crate::index::{LeafEvent, RadixIndex};
use crate::trace::SegmentKind;

type Key = (u64, Reverse<u32>, BlockId);

#[derive(Debug, Default)]
pub struct DeadFirst {
    /// Resident blocks whose latest access was request-unique.
    dead: FastSet<BlockId>,
    /// Dead evictable leaves, oldest first, and each one's key.
    queue: BTreeSet<Key>,
    keys: FastMap<BlockId, Key>,
}

/// Whether an access's context marks its block as unique to the request.
fn is_dead(ev: &AccessEvent) -> bool {
    ev.ctx.entity.is_some_and(|e| {
        e.entity.is_none() && matches!(e.kind, SegmentKind::Items | SegmentKind::Other)
    })
}

impl DeadFirst {
    fn unlist(&mut self, block: BlockId) {
        if let Some(k) = self.keys.remove(&block) {
            self.queue.remove(&k);
        }
    }

    /// Queues `block` if it is a dead evictable leaf.
    fn list(&mut self, idx: &RadixIndex, block: BlockId) {
        if !self.dead.contains(&block) || !idx.is_evictable_leaf(block) {
            return;
        }
        let (Some(last), Some(depth)) = (idx.last_access(block), idx.depth(block)) else {
            return;
        };
        let key = (last, Reverse(depth), block);
        self.queue.insert(key);
        self.keys.insert(block, key);
    }

    /// The oldest dead evictable leaf, if any (LARU's `base=dead-first` takes it first).
    pub(super) fn first_dead(&self) -> Option<BlockId> {
        self.queue.first().map(|k| k.2)
    }

    /// Whether `block` is a dead evictable leaf.
    pub(super) fn is_dead_leaf(&self, block: BlockId) -> bool {
        self.keys.contains_key(&block)
    }

    /// The dead evictable leaves, oldest first.
    pub(super) fn dead_leaves(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.queue.iter().map(|k| k.2)
    }
}

impl EvictionPolicy for DeadFirst {
    fn name(&self) -> &'static str {
        "dead-first"
    }

    fn on_access(&mut self, idx: &RadixIndex, ev: &AccessEvent) {
        self.unlist(ev.block);
        if is_dead(ev) {
            self.dead.insert(ev.block);
        } else {
            self.dead.remove(&ev.block);
        }
        self.list(idx, ev.block);
    }

    fn on_leaf(&mut self, idx: &RadixIndex, ev: LeafEvent) {
        self.unlist(ev.block);
        if ev.evictable {
            self.list(idx, ev.block);
        }
    }

    fn on_remove(&mut self, block: BlockId) {
        self.unlist(block);
        self.dead.remove(&block);
    }

    fn select_victim(&mut self, idx: &RadixIndex, _ctx: &EvictCtx) -> Option<BlockId> {
        self.first_dead().or_else(|| idx.lru_first())
    }

    fn next_leaves(&mut self, idx: &RadixIndex, limit: usize, _now: u64) -> Option<Vec<BlockId>> {
        let live = idx.lru_iter().filter(|b| !self.is_dead_leaf(*b));
        Some(self.dead_leaves().chain(live).take(limit).collect())
    }
}
