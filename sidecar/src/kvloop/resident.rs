//! What the engine's prefix cache holds right now, for readers on the request path (the GR
//! prefix selector): a snapshot of the mirror's content ids, republished by the engine-loop
//! thread after the events it applied, read through `ArcSwap` so readers never lock or wait.
//!
//! The snapshot is only as complete as the event stream: a recache that subscribes after the
//! engine has cached blocks does not know those until the engine stores them again (or resets),
//! so until then it underestimates what is cached. While the publisher is unreachable the view
//! reports itself not live and callers fall back to their own models.

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;

use recache_hash::blocks;

/// One published state of the engine cache.
#[derive(Debug, Default)]
pub struct Snapshot {
    ids: HashSet<u64>,
    block_size: usize,
}

impl Snapshot {
    /// Tokens per KV block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Cached blocks.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether the block with this content id ([`blocks::chain`]) is cached.
    pub fn holds(&self, id: u64) -> bool {
        self.ids.contains(&id)
    }

    /// Tokens at the start of a prompt beginning with `tokens` that the engine would reuse: the
    /// leading run of cached full blocks, in tokens.
    pub fn cached_prefix_tokens(&self, tokens: &[u32]) -> usize {
        let bs = self.block_size.max(1);
        let mut parent = blocks::ROOT;
        let mut n = 0;
        for b in tokens.chunks_exact(bs) {
            parent = blocks::chain(parent, b);
            if !self.ids.contains(&parent) {
                break;
            }
            n += bs;
        }
        n
    }

    /// Content id of the first full block of a prompt beginning with `tokens`.
    pub fn first_block(&self, tokens: &[u32]) -> Option<u64> {
        let bs = self.block_size.max(1);
        tokens.get(..bs).map(|b| blocks::chain(blocks::ROOT, b))
    }
}

/// The shared, atomically replaced view.
pub struct Resident {
    snapshot: ArcSwap<Snapshot>,
    live: std::sync::atomic::AtomicBool,
}

impl Resident {
    pub fn new(block_size: usize) -> Self {
        Self {
            snapshot: ArcSwap::from_pointee(Snapshot {
                ids: HashSet::new(),
                block_size,
            }),
            live: Default::default(),
        }
    }

    /// Replaces the snapshot (engine-loop thread only).
    pub fn publish(&self, ids: impl Iterator<Item = u64>) {
        let block_size = self.snapshot.load().block_size;
        self.snapshot.store(Arc::new(Snapshot {
            ids: ids.collect(),
            block_size,
        }));
    }

    /// Whether events are flowing (connected to the publisher).
    pub fn set_live(&self, live: bool) {
        self.live.store(live, std::sync::atomic::Ordering::Relaxed);
    }

    /// The current snapshot, or None while the engine's events are not being received.
    pub fn view(&self) -> Option<Arc<Snapshot>> {
        self.live
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| self.snapshot.load_full())
    }
}

#[cfg(test)]
#[path = "resident_tests.rs"]
mod tests;
