//! What an item-as-prefix prompt can expect to reuse on a causal prefix cache (an unmodified
//! engine): the leading run of its hot-first item order that an earlier item-as-prefix prompt
//! already began with. Anything after the first differing item sits at a different position
//! with different predecessors, so a causal cache cannot reuse it.
//!
//! BAT §5.3 compares τ_u with τ_i assuming every item's KV is reusable wherever it sits (its
//! item KV pool). Without such a pool that overstates the item side: BAT then puts short-profile
//! users item-first and loses their repeat-visit reuse for almost no item reuse (measured: UP
//! 0.230 hit rate vs BAT 0.209 on the testbed). `--rank-item-reuse prefix` feeds the selector
//! this model's estimate instead; `pool` keeps the paper's full τ_i.

use std::collections::{HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

/// Item-id prefixes of recent item-as-prefix prompts, as chained hashes, bounded FIFO.
pub struct ItemPrefixModel {
    capacity: usize,
    state: Mutex<(HashSet<u64>, VecDeque<u64>)>,
}

impl Default for ItemPrefixModel {
    fn default() -> Self {
        // 100 prefixes per prompt: room for the last ~2000 item-first prompts.
        Self::new(200_000)
    }
}

/// Hashes of `keys[..1]`, `keys[..2]`, ... (each chained on the previous one).
fn prefix_hashes<'a>(keys: &'a [&'a str]) -> impl Iterator<Item = u64> + 'a {
    keys.iter().scan(0u64, |acc, k| {
        let mut h = DefaultHasher::new();
        (*acc, *k).hash(&mut h);
        *acc = h.finish();
        Some(*acc)
    })
}

impl ItemPrefixModel {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            state: Mutex::new(Default::default()),
        }
    }

    /// How many leading items of `ordered` an earlier item-first prompt also began with.
    pub fn reusable_items(&self, ordered: &[&str]) -> usize {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        prefix_hashes(ordered)
            .take_while(|h| state.0.contains(h))
            .count()
    }

    /// Remembers an item-first prompt's order.
    pub fn record(&self, ordered: &[&str]) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, fifo) = &mut *state;
        for h in prefix_hashes(ordered) {
            if seen.insert(h) {
                fifo.push_back(h);
            }
        }
        while fifo.len() > self.capacity {
            if let Some(old) = fifo.pop_front() {
                seen.remove(&old);
            }
        }
    }
}

#[cfg(test)]
#[path = "item_prefix_tests.rs"]
mod tests;
