//! The mirror of the engine's prefix cache, built only from its KV events: which block
//! hashes are cached, their parents, depth and content id ([`super::blocks`]).
//!
//! A flat map, not the eviction crate's `RadixIndex`: vLLM evicts *inner* blocks too (a free
//! parent can go before its children, which stay cached but unreachable until the parent is
//! stored again), and one hash can be stored in two physical blocks (two requests computing
//! the same prefix at once; each copy is removed by its own `BlockRemoved`). The index allows
//! neither, so the mirror counts copies and keeps orphans, and stays exactly in step.

use std::collections::HashMap;

use recache_adapters::kv_events::{BlockHash, KvEvent};

use recache_hash::blocks;

#[derive(Debug, Clone)]
struct Entry {
    content: Option<u64>,
    depth: u32,
    copies: u32,
}

/// Events the mirror could not apply as the engine meant them (it applies what it can).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApplyIssues {
    /// `BlockRemoved` for a hash the mirror does not hold (events were lost).
    pub unknown_removed: u64,
    /// `BlockStored` under a parent the mirror does not hold (content id unknown).
    pub unknown_parent: u64,
    /// `token_ids` not matching `block_size` × blocks.
    pub bad_tokens: u64,
}

#[derive(Debug, Default)]
pub struct Mirror {
    blocks: HashMap<BlockHash, Entry>,
    by_content: HashMap<u64, BlockHash>,
    pub issues: ApplyIssues,
}

impl Mirror {
    pub fn new() -> Self {
        Self::default()
    }

    /// Distinct cached block hashes.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    pub fn contains(&self, hash: BlockHash) -> bool {
        self.blocks.contains_key(&hash)
    }

    pub fn clear(&mut self) {
        self.blocks.clear();
        self.by_content.clear();
    }

    /// The engine hash of the cached block with this content id.
    pub fn hash_of(&self, content: u64) -> Option<BlockHash> {
        self.by_content.get(&content).copied()
    }

    /// Every cached block: (engine hash, content id if known, depth).
    pub fn iter(&self) -> impl Iterator<Item = (BlockHash, Option<u64>, u32)> + '_ {
        self.blocks.iter().map(|(h, e)| (*h, e.content, e.depth))
    }

    /// Content ids of every cached block whose content is known.
    pub fn content_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_content.keys().copied()
    }

    /// Leading blocks of a prompt (content ids) the engine holds: its prefix hit.
    pub fn cached_prefix(&self, prompt: &[u64]) -> usize {
        prompt
            .iter()
            .take_while(|c| self.by_content.contains_key(c))
            .count()
    }

    pub fn apply(&mut self, ev: &KvEvent) {
        match ev {
            KvEvent::BlockStored {
                block_hashes,
                parent,
                token_ids,
                block_size,
            } => self.stored(block_hashes, *parent, token_ids, *block_size as usize),
            KvEvent::BlockRemoved { block_hashes } => {
                for h in block_hashes {
                    self.removed(*h);
                }
            }
            KvEvent::AllBlocksCleared => self.clear(),
        }
    }

    fn stored(
        &mut self,
        hashes: &[BlockHash],
        parent: Option<BlockHash>,
        tokens: &[u32],
        bs: usize,
    ) {
        let tokens_ok = bs > 0 && tokens.len() == bs * hashes.len();
        if !tokens_ok {
            self.issues.bad_tokens += 1;
        }
        let (mut content, mut depth) = match parent {
            None => (Some(blocks::ROOT), 0),
            Some(p) => match self.blocks.get(&p) {
                Some(e) => (e.content, e.depth),
                None => {
                    self.issues.unknown_parent += 1;
                    (None, 0)
                }
            },
        };
        for (i, &h) in hashes.iter().enumerate() {
            content = match (content, tokens_ok) {
                (Some(c), true) => Some(blocks::chain(c, &tokens[i * bs..(i + 1) * bs])),
                _ => None,
            };
            depth += 1;
            let e = self.blocks.entry(h).or_insert(Entry {
                content,
                depth,
                copies: 0,
            });
            e.copies += 1;
            if let Some(c) = content {
                // A hash stored again with other content (a collision, or a garbled event)
                // drops its old content id, which would otherwise outlive the block
                // (found by sidecar/tests/model_mirror.rs).
                if let Some(old) = e.content.replace(c)
                    && old != c
                    && self.by_content.get(&old) == Some(&h)
                {
                    self.by_content.remove(&old);
                }
                self.by_content.insert(c, h);
            }
        }
    }

    fn removed(&mut self, h: BlockHash) {
        let Some(e) = self.blocks.get_mut(&h) else {
            self.issues.unknown_removed += 1;
            return;
        };
        e.copies -= 1;
        if e.copies == 0 {
            // Only if the id still names this block: two hashes can share a content id
            // (e.g. the same tokens under two cache salts) and the other one stays cached.
            if let Some(c) = e.content
                && self.by_content.get(&c) == Some(&h)
            {
                self.by_content.remove(&c);
            }
            self.blocks.remove(&h);
        }
    }
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
