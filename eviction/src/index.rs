//! The radix-tree block index: which KV blocks are resident, their parent/child
//! links, pin counts, and an O(log k) LRU ordering over *evictable leaves only*.
//!
//! A node is one block (an engine block hash); its parent is the block before
//! it in the prompt. Only a leaf with no pins may be evicted, because removing
//! an inner block would orphan the blocks that extend it. The index never
//! decides what to evict: policies read it and return victims (see
//! [`crate::policy`]). Every change of a block's evictable-leaf status is
//! queued as a [`LeafEvent`] so a policy can keep its own ordering in step.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::BlockId;
use crate::hash::FastMap;

/// Typed errors for index mutations (the KV-event feed relies on these).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IndexError {
    #[error("unknown parent block {parent} for block {block}")]
    UnknownParent { block: BlockId, parent: BlockId },
    #[error("block {0} is already in the index")]
    Duplicate(BlockId),
    #[error("unknown block {0}")]
    Unknown(BlockId),
    #[error("block {0} has children; only leaves can be removed")]
    HasChildren(BlockId),
    #[error("block {0} is pinned (in use)")]
    Pinned(BlockId),
    #[error("block {0} is not pinned")]
    NotPinned(BlockId),
}

/// A change of evictable-leaf status, drained by the cache into the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafEvent {
    pub block: BlockId,
    pub evictable: bool,
}

#[derive(Debug, Clone)]
struct Node {
    parent: Option<BlockId>,
    children: u32,
    depth: u32,
    last_access: u64,
    pins: u32,
}

impl Node {
    fn evictable(&self) -> bool {
        self.children == 0 && self.pins == 0
    }
}

/// LRU key: oldest access first, deepest first among equal times (so a chain
/// accessed by one request is unwound from its tip), then id for determinism.
type LruKey = (u64, Reverse<u32>, BlockId);

/// The index. All operations are O(log k) (hash map + one B-tree update).
#[derive(Debug, Default)]
pub struct RadixIndex {
    nodes: FastMap<BlockId, Node>,
    lru: BTreeSet<LruKey>,
    events: Vec<LeafEvent>,
}

impl RadixIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of resident blocks.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn contains(&self, block: BlockId) -> bool {
        self.nodes.contains_key(&block)
    }

    pub fn parent(&self, block: BlockId) -> Option<Option<BlockId>> {
        self.nodes.get(&block).map(|n| n.parent)
    }

    /// Depth from the root: 1 for a block without parent.
    pub fn depth(&self, block: BlockId) -> Option<u32> {
        self.nodes.get(&block).map(|n| n.depth)
    }

    pub fn last_access(&self, block: BlockId) -> Option<u64> {
        self.nodes.get(&block).map(|n| n.last_access)
    }

    pub fn children(&self, block: BlockId) -> Option<u32> {
        self.nodes.get(&block).map(|n| n.children)
    }

    pub fn pins(&self, block: BlockId) -> Option<u32> {
        self.nodes.get(&block).map(|n| n.pins)
    }

    /// True when `block` is resident, has no children and no pins.
    pub fn is_evictable_leaf(&self, block: BlockId) -> bool {
        self.nodes.get(&block).is_some_and(Node::evictable)
    }

    /// Number of evictable leaves.
    pub fn evictable_len(&self) -> usize {
        self.lru.len()
    }

    /// Every resident block, in no particular (but deterministic) order.
    pub fn blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.nodes.keys().copied()
    }

    /// Evictable leaves, least recently used first.
    pub fn lru_iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.lru.iter().map(|k| k.2)
    }

    /// Evictable leaves with their last access time, least recently used first: the time
    /// comes from the LRU key, so scoring a candidate needs no second lookup of its node.
    pub fn lru_entries(&self) -> impl Iterator<Item = (BlockId, u64)> + '_ {
        self.lru.iter().map(|k| (k.2, k.0))
    }

    /// The LRU victim, if any leaf is evictable.
    pub fn lru_first(&self) -> Option<BlockId> {
        self.lru.first().map(|k| k.2)
    }

    /// Takes the queued evictable-status changes.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, LeafEvent> {
        self.events.drain(..)
    }

    /// Inserts `block` under `parent` (None = a root block) at time `now`.
    pub fn insert(
        &mut self,
        block: BlockId,
        parent: Option<BlockId>,
        now: u64,
    ) -> Result<(), IndexError> {
        if self.nodes.contains_key(&block) {
            return Err(IndexError::Duplicate(block));
        }
        let depth = match parent {
            None => 1,
            Some(p) => {
                let pn = self
                    .nodes
                    .get(&p)
                    .ok_or(IndexError::UnknownParent { block, parent: p })?;
                let depth = pn.depth + 1;
                self.update(p, |n| n.children += 1);
                depth
            }
        };
        let node = Node {
            parent,
            children: 0,
            depth,
            last_access: now,
            pins: 0,
        };
        self.nodes.insert(block, node);
        self.lru.insert((now, Reverse(depth), block));
        self.events.push(LeafEvent {
            block,
            evictable: true,
        });
        Ok(())
    }

    /// Records an access at time `now`.
    pub fn touch(&mut self, block: BlockId, now: u64) -> Result<(), IndexError> {
        self.known(block)?;
        self.update(block, |n| n.last_access = now.max(n.last_access));
        Ok(())
    }

    /// Pins a block (in use by a running request): it cannot be evicted.
    pub fn pin(&mut self, block: BlockId) -> Result<(), IndexError> {
        self.known(block)?;
        self.update(block, |n| n.pins += 1);
        Ok(())
    }

    pub fn unpin(&mut self, block: BlockId) -> Result<(), IndexError> {
        if self.known(block)?.pins == 0 {
            return Err(IndexError::NotPinned(block));
        }
        self.update(block, |n| n.pins -= 1);
        Ok(())
    }

    /// Removes an unpinned leaf.
    pub fn remove(&mut self, block: BlockId) -> Result<(), IndexError> {
        let n = self.known(block)?;
        if n.children > 0 {
            return Err(IndexError::HasChildren(block));
        }
        if n.pins > 0 {
            return Err(IndexError::Pinned(block));
        }
        let parent = n.parent;
        if let Some(n) = self.nodes.remove(&block) {
            self.lru.remove(&(n.last_access, Reverse(n.depth), block));
            self.events.push(LeafEvent {
                block,
                evictable: false,
            });
        }
        if let Some(p) = parent {
            self.update(p, |n| n.children -= 1);
        }
        Ok(())
    }

    /// Drops every block (the engine's "all blocks cleared" event). Policies
    /// are told through one `evictable: false` event per evictable leaf.
    pub fn clear(&mut self) {
        let evictable: Vec<BlockId> = self.lru_iter().collect();
        self.events
            .extend(evictable.into_iter().map(|block| LeafEvent {
                block,
                evictable: false,
            }));
        self.nodes.clear();
        self.lru.clear();
    }

    fn known(&self, block: BlockId) -> Result<&Node, IndexError> {
        self.nodes.get(&block).ok_or(IndexError::Unknown(block))
    }

    /// Applies `f` to a node and keeps the LRU set and event queue in step
    /// with any change of its key or evictable status.
    fn update(&mut self, block: BlockId, f: impl FnOnce(&mut Node)) {
        let Some(n) = self.nodes.get_mut(&block) else {
            return;
        };
        let (was, old_key) = (n.evictable(), (n.last_access, Reverse(n.depth), block));
        f(n);
        let (is, new_key) = (n.evictable(), (n.last_access, Reverse(n.depth), block));
        if was && (!is || old_key != new_key) {
            self.lru.remove(&old_key);
        }
        if is && (!was || old_key != new_key) {
            self.lru.insert(new_key);
        }
        if was != is {
            self.events.push(LeafEvent {
                block,
                evictable: is,
            });
        }
    }
}
