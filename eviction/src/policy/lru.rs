//! LRU: the index already orders evictable leaves by (last access, deepest
//! first), so LRU is just its first entry.

use super::{EvictCtx, EvictionPolicy};
use crate::BlockId;
use crate::index::RadixIndex;

#[derive(Debug, Default, Clone, Copy)]
pub struct Lru;

impl EvictionPolicy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn select_victim(&mut self, idx: &RadixIndex, _ctx: &EvictCtx) -> Option<BlockId> {
        idx.lru_first()
    }

    fn next_leaves(&mut self, idx: &RadixIndex, limit: usize, _now: u64) -> Option<Vec<BlockId>> {
        Some(idx.lru_iter().take(limit).collect())
    }
}
