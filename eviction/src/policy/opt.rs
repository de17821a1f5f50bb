//! Belady's OPT: evict the evictable leaf whose true next use is furthest
//! (never-used-again first). Needs the future, so simulator only. In a prefix
//! trace a child is never used without its parent, so the furthest block can
//! always be taken among leaves.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{AccessEvent, EvictCtx, EvictionPolicy};
use crate::BlockId;
use crate::future::FutureIndex;
use crate::hash::FastMap;
use crate::index::{LeafEvent, RadixIndex};

type Key = (u64, u32, BlockId);

pub struct Opt {
    future: Arc<FutureIndex>,
    keys: FastMap<BlockId, Key>,
    order: BTreeSet<Key>,
}

impl Opt {
    pub fn new(future: Arc<FutureIndex>) -> Self {
        Self {
            future,
            keys: FastMap::default(),
            order: BTreeSet::new(),
        }
    }

    fn unlist(&mut self, block: BlockId) {
        if let Some(k) = self.keys.remove(&block) {
            self.order.remove(&k);
        }
    }

    fn list(&mut self, idx: &RadixIndex, block: BlockId) {
        let (Some(last), Some(depth)) = (idx.last_access(block), idx.depth(block)) else {
            return;
        };
        let next = self.future.next_after(block, last).unwrap_or(u64::MAX);
        let key = (next, depth, block);
        self.order.insert(key);
        self.keys.insert(block, key);
    }
}

impl EvictionPolicy for Opt {
    fn name(&self) -> &'static str {
        "opt"
    }

    fn on_access(&mut self, idx: &RadixIndex, ev: &AccessEvent) {
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
    }

    fn select_victim(&mut self, _idx: &RadixIndex, _ctx: &EvictCtx) -> Option<BlockId> {
        self.order.last().map(|k| k.2)
    }
}
