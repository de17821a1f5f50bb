//! SIEVE (Zhang et al., NSDI'24) restricted to evictable leaves, our
//! lightweight FIFO-family baseline in place of S3-FIFO.
//!
//! A leaf joins the queue when it becomes evictable and leaves it when it is
//! pinned or gains a child, keeping its visited bit; so the hand only ever
//! scans candidates and a victim is always an evictable leaf.

use std::collections::BTreeMap;

use super::{AccessEvent, EvictCtx, EvictionPolicy};
use crate::BlockId;
use crate::hash::FastMap;
use crate::index::{LeafEvent, RadixIndex};

#[derive(Debug, Default)]
pub struct Sieve {
    /// Queue position (older = smaller) of each queued leaf.
    pos: FastMap<BlockId, u64>,
    queue: BTreeMap<u64, BlockId>,
    visited: FastMap<BlockId, bool>,
    next_seq: u64,
    /// The hand: the next position to inspect, moving from old to new.
    hand: u64,
}

impl EvictionPolicy for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }

    fn on_access(&mut self, _idx: &RadixIndex, ev: &AccessEvent) {
        // A fresh insert starts unvisited; a hit marks it visited.
        let v = self.visited.entry(ev.block).or_insert(false);
        if ev.ctx.pos < ev.ctx.hit_len {
            *v = true;
        }
    }

    fn on_leaf(&mut self, _idx: &RadixIndex, ev: LeafEvent) {
        if let Some(p) = self.pos.remove(&ev.block) {
            self.queue.remove(&p);
        }
        if ev.evictable {
            self.pos.insert(ev.block, self.next_seq);
            self.queue.insert(self.next_seq, ev.block);
            self.next_seq += 1;
        }
    }

    fn on_remove(&mut self, block: BlockId) {
        if let Some(p) = self.pos.remove(&block) {
            self.queue.remove(&p);
        }
        self.visited.remove(&block);
    }

    fn select_victim(&mut self, _idx: &RadixIndex, _ctx: &EvictCtx) -> Option<BlockId> {
        // At most two sweeps: the first clears every visited bit it passes.
        for _ in 0..=self.queue.len() * 2 {
            let (&p, &b) = match self.queue.range(self.hand..).next() {
                Some(e) => e,
                None => self.queue.iter().next()?,
            };
            self.hand = p + 1;
            match self.visited.get_mut(&b) {
                Some(v) if *v => *v = false,
                _ => return Some(b),
            }
        }
        self.queue.values().next().copied()
    }
}
