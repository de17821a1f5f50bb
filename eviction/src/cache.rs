//! The cache: a [`RadixIndex`] plus an [`EvictionPolicy`] under a capacity in
//! blocks. It runs the request protocol (prefix hits per chain, pin, insert with
//! eviction, unpin), forwards index events to the policy, and checks every
//! victim is an evictable leaf before deleting it.

use crate::BlockId;
use crate::index::{IndexError, RadixIndex};
use crate::policy::{AccessEvent, EntityCtx, EvictCtx, EvictionPolicy, PolicyStats, RequestCtx};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("index error")]
    Index(#[from] IndexError),
    #[error("policy {policy} chose block {block}, which is not an evictable leaf")]
    InvalidVictim {
        policy: &'static str,
        block: BlockId,
    },
    #[error("chain {start}..{end} is not within the request's {blocks} blocks")]
    BadChain {
        start: usize,
        end: usize,
        blocks: usize,
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

/// One request as the cache sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Access<'a> {
    pub blocks: &'a [BlockId],
    /// Chains as (start, end) ranges into `blocks`, each a path from the tree root; empty:
    /// one chain of all blocks (a plain prefix request).
    pub chains: &'a [(usize, usize)],
    /// Prompt length in tokens, when known.
    pub input_tokens: Option<u64>,
    /// Per-block GR context (same length as `blocks`), or empty.
    pub entities: &'a [EntityCtx],
}

pub struct Cache {
    idx: RadixIndex,
    policy: Box<dyn EvictionPolicy>,
    capacity: usize,
    evictions: u64,
    /// Scratch: blocks pinned by the request in progress.
    pinned: Vec<BlockId>,
    /// Requests served at once ([`Self::in_flight`]); 1: each is done before the next.
    in_flight: usize,
    /// The blocks of the last `in_flight - 1` requests, still pinned (oldest first).
    running: std::collections::VecDeque<Vec<BlockId>>,
}

impl Cache {
    pub fn new(capacity: usize, policy: Box<dyn EvictionPolicy>) -> Self {
        Self {
            idx: RadixIndex::new(),
            policy,
            capacity,
            evictions: 0,
            pinned: Vec::new(),
            in_flight: 1,
            running: std::collections::VecDeque::new(),
        }
    }

    /// Serves as an engine running `n` requests at once would (`n` ≥ 1): a request's blocks
    /// stay pinned until `n - 1` more requests have arrived, so a policy cannot evict what a
    /// running request holds. Under it, a policy that evicts what was just used (LARU on
    /// conversations, where a turn returns hundreds of requests later) loses what an engine's
    /// concurrency costs it; LRU, which evicts the oldest, barely notices.
    pub fn in_flight(mut self, n: usize) -> Self {
        self.in_flight = n.max(1);
        self
    }

    /// The requests served at once ([`Self::in_flight`]).
    pub fn concurrency(&self) -> usize {
        self.in_flight
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

    /// Serves one single-chain request at time `now` (a plain prefix request): see
    /// [`Self::serve`].
    pub fn access(
        &mut self,
        blocks: &[BlockId],
        now: u64,
        input_tokens: Option<u64>,
    ) -> Result<Outcome, CacheError> {
        let req = Access {
            blocks,
            input_tokens,
            ..Access::default()
        };
        self.serve(&req, now)
    }

    /// The resident leading run of one chain (its hits if it arrived now).
    pub fn resident_run(&self, chain: &[BlockId]) -> usize {
        let mut parent = None;
        chain
            .iter()
            .take_while(|&&b| {
                let ok = self.idx.parent(b) == Some(parent);
                parent = Some(b);
                ok
            })
            .count()
    }

    /// Serves one request at time `now`: hits are, summed over its chains, each chain's
    /// resident leading run on arrival; then every block becomes resident (evicting as
    /// needed). Every block of the request is pinned until the request is done, so no chain
    /// evicts another chain's blocks of the same request.
    pub fn serve(&mut self, req: &Access<'_>, now: u64) -> Result<Outcome, CacheError> {
        let whole = [(0, req.blocks.len())];
        let chains = if req.chains.is_empty() {
            &whole[..]
        } else {
            req.chains
        };
        if let Some(&(start, end)) = chains.iter().find(|(s, e)| s > e || *e > req.blocks.len()) {
            return Err(CacheError::BadChain {
                start,
                end,
                blocks: req.blocks.len(),
            });
        }
        let runs: Vec<usize> = chains
            .iter()
            .map(|&(s, e)| self.resident_run(&req.blocks[s..e]))
            .collect();
        let mut out = Outcome {
            hits: runs.iter().sum(),
            ..Outcome::default()
        };
        let single = chains.len() == 1;
        let ctx = |c: usize, pos: usize| {
            let (s, e) = chains[c];
            RequestCtx {
                req_len: (e - s) as u32,
                hit_len: runs[c] as u32,
                pos: pos as u32,
                input_tokens: req.input_tokens.filter(|_| single),
                anchor: runs[c].checked_sub(1).map(|i| req.blocks[s + i]),
                tip: e.checked_sub(1).filter(|&l| l >= s).map(|l| req.blocks[l]),
                entity: req.entities.get(s + pos).copied(),
            }
        };
        let mut pinned = std::mem::take(&mut self.pinned);
        pinned.clear();
        for (c, (&(s, _), &run)) in chains.iter().zip(&runs).enumerate() {
            for (pos, &b) in req.blocks[s..s + run].iter().enumerate() {
                self.idx.pin(b)?;
                pinned.push(b);
                self.idx.touch(b, now)?;
                self.notify_access(b, pos, now, ctx(c, pos));
            }
        }
        for (c, (&(s, e), &run)) in chains.iter().zip(&runs).enumerate() {
            let chain = &req.blocks[s..e];
            let mut parent = run.checked_sub(1).map(|i| chain[i]);
            'blocks: for (pos, &b) in chain.iter().enumerate().skip(run) {
                match self.idx.parent(b) {
                    // Inserted by an earlier chain of this request: same node, keep going.
                    Some(p) if p == parent => {
                        self.idx.pin(b)?;
                        pinned.push(b);
                        self.idx.touch(b, now)?;
                    }
                    // Resident under another parent (or repeated in this chain): the chain
                    // breaks, cache nothing past it.
                    Some(_) => {
                        out.dropped += chain.len() - pos;
                        break 'blocks;
                    }
                    None => {
                        if !self.make_room(b, now, &mut out)? {
                            out.dropped += chain.len() - pos;
                            break 'blocks;
                        }
                        self.idx.insert(b, parent, now)?;
                        self.idx.pin(b)?;
                        pinned.push(b);
                    }
                }
                self.notify_access(b, pos, now, ctx(c, pos));
                parent = Some(b);
            }
        }
        if self.in_flight > 1 {
            self.running.push_back(pinned);
            pinned = if self.running.len() >= self.in_flight {
                self.running.pop_front().unwrap_or_default()
            } else {
                Vec::new()
            };
        }
        for &b in &pinned {
            self.idx.unpin(b)?;
        }
        self.pinned = pinned;
        self.flush();
        Ok(out)
    }

    /// Evicts until one more block fits; false when no leaf is evictable.
    fn make_room(
        &mut self,
        incoming: BlockId,
        now: u64,
        out: &mut Outcome,
    ) -> Result<bool, CacheError> {
        while self.idx.len() >= self.capacity {
            let ectx = EvictCtx {
                now,
                incoming: Some(incoming),
            };
            let Some(v) = self.policy.select_victim(&self.idx, &ectx) else {
                return Ok(false);
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
        Ok(true)
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
        // The running requests' pins went with their blocks: nothing is left to unpin.
        self.running.clear();
        self.flush();
        for b in blocks {
            self.policy.on_remove(b);
        }
    }

    /// The evictable leaves the policy would take next at time `now`, at most `limit`,
    /// without evicting ([`EvictionPolicy::next_leaves`]; None when the policy cannot rank
    /// without deciding).
    pub fn next_leaves(&mut self, limit: usize, now: u64) -> Option<Vec<BlockId>> {
        self.flush();
        self.policy.next_leaves(&self.idx, limit, now)
    }

    /// [`Self::next_leaves`] with each leaf's chain behind it: the leaf, then the ancestors
    /// it alone keeps (one child, no pins), deepest first, at most `limit` blocks. An engine
    /// that must free more blocks than the policy has leaves (its running requests pin the
    /// policy's victims) then unwinds the policy's next chain whole instead of one block off
    /// the tip of every chain and its own order after that.
    pub fn next_chains(&mut self, limit: usize, now: u64) -> Option<Vec<BlockId>> {
        let leaves = self.next_leaves(limit, now)?;
        let mut out = Vec::with_capacity(limit.min(self.idx.len()));
        for leaf in leaves {
            let mut b = Some(leaf);
            while let Some(x) = b {
                if out.len() == limit {
                    return Some(out);
                }
                out.push(x);
                b =
                    self.idx.parent(x).flatten().filter(|p| {
                        self.idx.children(*p) == Some(1) && self.idx.pins(*p) == Some(0)
                    });
            }
        }
        Some(out)
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
