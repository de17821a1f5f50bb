//! The item pool's cold tier on recache's side (`--rank-pool-store`): which of a prompt's
//! items a replica reads from the store rather than computing them.
//!
//! Each replica's connector writes every fill through to the store (Mooncake Store,
//! docs/store.md), keyed by model, item, token ids (label included) and layout. So an item that
//! some replica's pool holds is, as far as recache can tell, in the store under that pool's
//! label: a prompt built for another replica may carry it in the pooled run with that label,
//! marked `cold`, and that replica's connector fetches it instead of computing it. The store
//! is the connector's to check: an entry that is missing, stale (other tokens) or late is a
//! load error vLLM recomputes (`kv_load_failure_policy: recompute`), never a wrong answer.
//!
//! Labels: one prompt's labels must be distinct. A pool's labels are distinct among its own
//! items, so with a store each replica's pool takes its own label range
//! ([`label_offset`]): labels from different pools never meet.
//!
//! Order: local items lead the pooled run and cold ones follow, because vLLM recomputes from
//! the first block that failed to load: a failed fetch then costs the cold tail only.

use super::replicas::Pools;
use super::{ItemPool, PoolConfig};

/// Where each of a prompt's items comes from, for the replica it is built for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    /// Supplied without computing: resident in this replica's pool or, with a store, in
    /// another's.
    pub resident: Vec<bool>,
    /// The label each item keeps (its pool slot's), None for positional labels.
    pub labels: Vec<Option<u32>>,
    /// Supplied from the store (another replica's pool holds it).
    pub cold: Vec<bool>,
}

/// Label ids the pools use in all: one range per replica with a store, one shared without.
pub fn label_span(config: &PoolConfig, replicas: usize) -> u64 {
    let ranges = if config.store.is_some() {
        replicas.max(1)
    } else {
        1
    };
    config.items as u64 * ranges as u64
}

/// Where replica `index`'s pool labels start, past the first pool label.
pub fn label_offset(config: &PoolConfig, replicas: usize, index: usize) -> u32 {
    if config.store.is_some() && replicas > 1 {
        (config.items * index) as u32
    } else {
        0
    }
}

impl ItemPool {
    /// What this pool alone holds of `keys` (nothing cold).
    pub fn held(&self, keys: &[String]) -> Held {
        let own = self.slots(keys);
        Held {
            resident: own.iter().map(|s| s.is_some_and(|(_, res)| res)).collect(),
            labels: own.iter().map(|s| s.map(|(l, _)| l)).collect(),
            cold: vec![false; keys.len()],
        }
    }
}

impl Pools {
    /// What replica `r`'s pool holds of `keys` and, with a store, what it reads from the
    /// store: keys its own pool does not hold resident but another replica's does.
    pub fn held_on(&self, r: usize, keys: &[String]) -> Held {
        let mut held = self.get(r).held(keys);
        if !self.has_store() || self.len() < 2 {
            return held;
        }
        for (_, pool) in self.iter().enumerate().filter(|(h, _)| *h != r) {
            let other = pool.slots(keys);
            for (j, slot) in other.into_iter().enumerate() {
                if let Some((label, true)) = slot
                    && !held.resident[j]
                {
                    held.resident[j] = true;
                    held.cold[j] = true;
                    held.labels[j] = Some(label);
                }
            }
        }
        held
    }

    /// Whether the replicas' connectors write through to a store (`--rank-pool-store`).
    pub fn has_store(&self) -> bool {
        self.get(0).config.store.is_some()
    }
}

#[cfg(test)]
#[path = "cold_tests.rs"]
mod tests;
