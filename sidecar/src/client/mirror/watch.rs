//! The canary's blocks under watch: did the engine evict them while a canary was in flight?
//!
//! A canary predicts its cached tokens from the published mirror and then waits for its
//! answer, behind whatever the engine is running. On a busy engine its two fixed blocks can be
//! evicted in that time (the events say so), and the engine then reports fewer cached tokens
//! than predicted although the mirror was right: that disagreement says nothing about the
//! mirror. So the feed counts each time a watched block leaves the mirror, and the mirror
//! publishes that count with its set; a canary whose watched blocks left after the set it
//! predicted from is inconclusive (`evicted`), not a disagreement.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Watched content ids and how often one of them left the mirror.
#[derive(Debug, Default)]
pub struct Watch {
    ids: OnceLock<Vec<u64>>,
    /// Departures counted by the feed.
    gone: AtomicU64,
    /// `gone` as of the last published set.
    published: AtomicU64,
}

impl Watch {
    /// Watches `ids` (the canary's fixed blocks; set once per process, later calls ignored).
    pub fn set(&self, ids: &[u64]) {
        let _ = self.ids.set(ids.to_vec());
    }

    /// How many watched ids `held` says are present (the feed, before and after a change).
    pub fn present(&self, held: impl Fn(u64) -> bool) -> usize {
        self.ids
            .get()
            .map_or(0, |ids| ids.iter().filter(|&&id| held(id)).count())
    }

    /// The feed saw watched blocks leave (`before` present, `after` present now).
    pub fn note(&self, before: usize, after: usize) {
        if after < before {
            self.gone.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The mirror published its set (the feed, after storing it).
    pub fn published(&self) {
        self.published
            .store(self.gone.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Departures as of the published set (taken before a prediction).
    pub fn as_published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Whether a watched block left after the published set `since` was taken from.
    pub fn left_since(&self, since: u64) -> bool {
        self.gone.load(Ordering::Relaxed) > since
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
