//! The cache: a [`RadixIndex`] plus an [`EvictionPolicy`] under a capacity in
//! blocks. It runs the request protocol (prefix hits, pin, insert with
//! eviction, unpin), forwards index events to the policy, and checks every
//! victim is an evictable leaf before deleting it.

use crate::BlockId;
use crate::index::{IndexError, RadixIndex};
use crate::policy::{AccessEvent, EvictCtx, EvictionPolicy, PolicyStats, RequestCtx};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("index error")]
    Index(#[from] IndexError),
    #[error("policy {policy} chose block {block}, which is not an evictable leaf")]
    InvalidVictim {
        policy: &'static str,
        block: BlockId,
    },
}

/// Outcome of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Leading blocks resident on arrival.
    pub hits: usize,
    /// Blocks evicted to make room.
    pub evicted: usize,
    /// Blocks that could not be cached (no evictable leaf left).
    pub dropped: usize,
}

pub struct Cache {
    idx: RadixIndex,
    policy: Box<dyn EvictionPolicy>,
    capacity: usize,
    evictions: u64,
}

impl Cache {
    pub fn new(capacity: usize, policy: Box<dyn EvictionPolicy>) -> Self {
        Self {
            idx: RadixIndex::new(),
            policy,
            capacity,
            evictions: 0,
        }
    }

    pub fn index(&self) -> &RadixIndex {
        &self.idx
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    pub fn policy_stats(&self) -> PolicyStats {
        self.policy.stats()
    }

    /// Delivers pending leaf events, then tells the policy `block` was accessed at depth
    /// `pos + 1` (hit or insert alike).
    fn notify_access(&mut self, block: BlockId, pos: usize, now: u64, ctx: RequestCtx) {
        self.flush();
        let ev = AccessEvent {
            block,
            depth: pos as u32 + 1,
            time: now,
            ctx,
        };
        self.policy.on_access(&self.idx, &ev);
    }

    fn flush(&mut self) {
        let events: Vec<_> = self.idx.drain_events().collect();
        for ev in events {
            self.policy.on_leaf(&self.idx, ev);
        }
    }

    /// Serves one request at time `now`: counts the resident leading run,
    /// makes every block resident (evicting as needed; the request's own
    /// blocks are pinned, so never victims), and returns the outcome.
    pub fn access(
        &mut self,
        blocks: &[BlockId],
        now: u64,
        input_tokens: Option<u64>,
    ) -> Result<Outcome, CacheError> {
        let mut parent = None;
        let hits = blocks
            .iter()
            .take_while(|&&b| {
                let ok = self.idx.parent(b) == Some(parent);
                parent = Some(b);
                ok
            })
            .count();
        let mut out = Outcome {
            hits,
            ..Outcome::default()
        };
        let ctx = |pos: usize| RequestCtx {
            req_len: blocks.len() as u32,
            hit_len: hits as u32,
            pos: pos as u32,
            input_tokens,
            anchor: hits.checked_sub(1).map(|i| blocks[i]),
        };
        let mut pinned = 0;
        for (pos, &b) in blocks.iter().enumerate().take(hits) {
            self.idx.pin(b)?;
            self.idx.touch(b, now)?;
            self.notify_access(b, pos, now, ctx(pos));
            pinned += 1;
        }
        let mut parent = hits.checked_sub(1).map(|i| blocks[i]);
        'insert: for (pos, &b) in blocks.iter().enumerate().skip(hits) {
            // A block already resident under another parent (or repeated in
            // this request) breaks the chain: cache nothing past it.
            if self.idx.contains(b) {
                out.dropped = blocks.len() - pos;
                break;
            }
            while self.idx.len() >= self.capacity {
                let ectx = EvictCtx {
                    now,
                    incoming: Some(b),
                };
                let Some(v) = self.policy.select_victim(&self.idx, &ectx) else {
                    out.dropped = blocks.len() - pos;
                    break 'insert;
                };
                if !self.idx.is_evictable_leaf(v) {
                    return Err(CacheError::InvalidVictim {
                        policy: self.policy.name(),
                        block: v,
                    });
                }
                self.idx.remove(v)?;
                self.evictions += 1;
                out.evicted += 1;
                self.policy.on_remove(v);
                self.flush();
            }
            self.idx.insert(b, parent, now)?;
            self.idx.pin(b)?;
            self.notify_access(b, pos, now, ctx(pos));
            pinned += 1;
            parent = Some(b);
        }
        for &b in &blocks[..pinned] {
            self.idx.unpin(b)?;
        }
        self.flush();
        Ok(out)
    }

    /// KV-event feed: the engine stored `block` under `parent` at `now`.
    /// The block is not pinned; a duplicate store is a touch.
    pub fn block_stored(
        &mut self,
        block: BlockId,
        parent: Option<BlockId>,
        now: u64,
    ) -> Result<(), CacheError> {
        match self.idx.parent(block) {
            Some(p) if p == parent => self.idx.touch(block, now)?,
            Some(_) => return Err(IndexError::Duplicate(block).into()),
            None => self.idx.insert(block, parent, now)?,
        }
        self.flush();
        let depth = self.idx.depth(block).unwrap_or(1);
        let ctx = RequestCtx {
            req_len: depth,
            pos: depth - 1,
            ..RequestCtx::default()
        };
        let ev = AccessEvent {
            block,
            depth,
            time: now,
            ctx,
        };
        self.policy.on_access(&self.idx, &ev);
        self.flush();
        Ok(())
    }

    /// KV-event feed: the engine removed `block` (must be an unpinned leaf).
    pub fn block_removed(&mut self, block: BlockId) -> Result<(), CacheError> {
        self.idx.remove(block)?;
        self.policy.on_remove(block);
        self.flush();
        Ok(())
    }

    /// KV-event feed: the engine cleared every block.
    pub fn all_cleared(&mut self) {
        let blocks: Vec<BlockId> = self.idx.blocks().collect();
        self.idx.clear();
        self.flush();
        for b in blocks {
            self.policy.on_remove(b);
        }
    }

    /// The evictable leaves the policy would take next, at most `limit`, without evicting
    /// ([`EvictionPolicy::next_leaves`]; None when the policy cannot rank without deciding).
    pub fn next_leaves(&mut self, limit: usize) -> Option<Vec<BlockId>> {
        self.flush();
        self.policy.next_leaves(&self.idx, limit)
    }

    /// Asks the policy for up to `n` victims and removes them; the caller
    /// tells the engine. Stops early when no leaf is evictable.
    pub fn evict(&mut self, n: usize, now: u64) -> Result<Vec<BlockId>, CacheError> {
        let mut out = Vec::new();
        while out.len() < n {
            let ctx = EvictCtx {
                now,
                incoming: None,
            };
            let Some(v) = self.policy.select_victim(&self.idx, &ctx) else {
                break;
            };
            if !self.idx.is_evictable_leaf(v) {
                return Err(CacheError::InvalidVictim {
                    policy: self.policy.name(),
                    block: v,
                });
            }
            self.idx.remove(v)?;
            self.evictions += 1;
            self.policy.on_remove(v);
            self.flush();
            out.push(v);
        }
        Ok(out)
    }
}
