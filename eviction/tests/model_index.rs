//! Model-based test of [`RadixIndex`] (issue 20 item 2): random sequences of inserts, touches,
//! pins, unpins, removals and clears against a plain map of blocks, with the index's documented
//! invariants checked after every step: the same blocks with the same parent, depth, children,
//! pins and last access; the same typed error for every refused operation; the LRU set holds
//! exactly the evictable leaves (no children, no pins), ordered oldest first, deepest first
//! among equal times, then by id; and the drained [`LeafEvent`]s, applied in order, each flip a
//! block's evictable status and rebuild exactly that set.
//!
//! Longer: `PROPTEST_CASES=5000 cargo test -p recache-eviction --test model_index`.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;
use recache_eviction::{BlockId, IndexError, RadixIndex};

#[derive(Debug, Clone)]
enum Op {
    Insert {
        block: BlockId,
        parent: Option<BlockId>,
        now: u64,
    },
    Touch {
        block: BlockId,
        now: u64,
    },
    Pin(BlockId),
    Unpin(BlockId),
    Remove(BlockId),
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    let block = 0u64..24;
    prop_oneof![
        6 => (block.clone(), prop::option::weighted(0.7, 0u64..24), 0u64..40)
            .prop_map(|(block, parent, now)| Op::Insert { block, parent, now }),
        2 => (block.clone(), 0u64..40).prop_map(|(block, now)| Op::Touch { block, now }),
        2 => block.clone().prop_map(Op::Pin),
        2 => block.clone().prop_map(Op::Unpin),
        4 => block.prop_map(Op::Remove),
        1 => prop::strategy::Just(Op::Clear),
    ]
}

#[derive(Debug, Clone)]
struct M {
    parent: Option<BlockId>,
    depth: u32,
    last: u64,
    pins: u32,
}

#[derive(Default)]
struct Model {
    nodes: HashMap<BlockId, M>,
}

impl Model {
    fn children(&self, b: BlockId) -> u32 {
        self.nodes.values().filter(|m| m.parent == Some(b)).count() as u32
    }

    fn known(&mut self, b: BlockId) -> Result<&mut M, IndexError> {
        self.nodes.get_mut(&b).ok_or(IndexError::Unknown(b))
    }

    fn apply(&mut self, op: &Op) -> Result<(), IndexError> {
        match *op {
            Op::Insert { block, parent, now } => {
                if self.nodes.contains_key(&block) {
                    return Err(IndexError::Duplicate(block));
                }
                let depth = match parent {
                    None => 1,
                    Some(p) => match self.nodes.get(&p) {
                        Some(pm) => pm.depth + 1,
                        None => return Err(IndexError::UnknownParent { block, parent: p }),
                    },
                };
                self.nodes.insert(
                    block,
                    M {
                        parent,
                        depth,
                        last: now,
                        pins: 0,
                    },
                );
            }
            Op::Touch { block, now } => {
                let m = self.known(block)?;
                m.last = m.last.max(now);
            }
            Op::Pin(b) => self.known(b)?.pins += 1,
            Op::Unpin(b) => {
                let m = self.known(b)?;
                if m.pins == 0 {
                    return Err(IndexError::NotPinned(b));
                }
                m.pins -= 1;
            }
            Op::Remove(b) => {
                let pins = self.known(b)?.pins;
                if self.children(b) > 0 {
                    return Err(IndexError::HasChildren(b));
                }
                if pins > 0 {
                    return Err(IndexError::Pinned(b));
                }
                self.nodes.remove(&b);
            }
            Op::Clear => self.nodes.clear(),
        }
        Ok(())
    }

    /// Evictable leaves in the documented LRU order.
    fn lru(&self) -> Vec<BlockId> {
        let mut keys: Vec<(u64, Reverse<u32>, BlockId)> = self
            .nodes
            .iter()
            .filter(|(b, m)| m.pins == 0 && self.children(**b) == 0)
            .map(|(b, m)| (m.last, Reverse(m.depth), *b))
            .collect();
        keys.sort();
        keys.into_iter().map(|k| k.2).collect()
    }
}

fn apply(ix: &mut RadixIndex, op: &Op) -> Result<(), IndexError> {
    match *op {
        Op::Insert { block, parent, now } => ix.insert(block, parent, now),
        Op::Touch { block, now } => ix.touch(block, now),
        Op::Pin(b) => ix.pin(b),
        Op::Unpin(b) => ix.unpin(b),
        Op::Remove(b) => ix.remove(b),
        Op::Clear => {
            ix.clear();
            Ok(())
        }
    }
}

fn check(ix: &mut RadixIndex, model: &Model, shadow: &mut BTreeSet<BlockId>) {
    assert_eq!(ix.len(), model.nodes.len());
    assert_eq!(ix.is_empty(), model.nodes.is_empty());
    let mut blocks: Vec<BlockId> = ix.blocks().collect();
    blocks.sort_unstable();
    let mut want: Vec<BlockId> = model.nodes.keys().copied().collect();
    want.sort_unstable();
    assert_eq!(blocks, want);
    for (&b, m) in &model.nodes {
        assert_eq!(ix.parent(b), Some(m.parent), "parent of {b}");
        assert_eq!(ix.depth(b), Some(m.depth), "depth of {b}");
        if let Some(p) = m.parent {
            assert_eq!(
                ix.depth(p).map(|d| d + 1),
                Some(m.depth),
                "depth chain at {b}"
            );
        }
        assert_eq!(ix.children(b), Some(model.children(b)), "children of {b}");
        assert_eq!(ix.pins(b), Some(m.pins), "pins of {b}");
        assert_eq!(ix.last_access(b), Some(m.last), "last access of {b}");
        let leaf = m.pins == 0 && model.children(b) == 0;
        assert_eq!(ix.is_evictable_leaf(b), leaf, "evictable {b}");
    }
    let lru = model.lru();
    assert_eq!(ix.lru_iter().collect::<Vec<_>>(), lru, "LRU order");
    assert_eq!(ix.evictable_len(), lru.len());
    assert_eq!(ix.lru_first(), lru.first().copied());
    for e in ix.drain_events() {
        // Each event is a change of status, never a repeat.
        let changed = if e.evictable {
            shadow.insert(e.block)
        } else {
            shadow.remove(&e.block)
        };
        assert!(changed, "event {e:?} does not change the block's status");
    }
    assert_eq!(
        shadow.iter().copied().collect::<BTreeSet<_>>(),
        lru.iter().copied().collect()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn index_matches_the_model_after_every_step(ops in prop::collection::vec(op(), 1..200)) {
        let mut ix = RadixIndex::new();
        let mut model = Model::default();
        let mut shadow = BTreeSet::new();
        for op in &ops {
            let got = apply(&mut ix, op);
            let want = model.apply(op);
            prop_assert_eq!(got, want, "{:?}", op);
            check(&mut ix, &model, &mut shadow);
        }
    }
}
