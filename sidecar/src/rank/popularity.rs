//! Global item popularity: how many ranking requests each item has appeared in, and the
//! canonical hot-first order item-as-prefix prompts use.
//!
//! Putting candidates in one global order (most requested first, ties by id) makes requests that
//! share hot items share a token prefix on an unmodified engine. Orders are computed from the
//! counts *before* the request is counted, so a request's tokens depend only on the request and
//! the state it found.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct Popularity {
    counts: Mutex<HashMap<String, u64>>,
    /// The hot thresholds last computed, one per share asked for (the `gr` rule's routing
    /// share and its pool share): (hot_share, requests counted then, threshold).
    hot: Mutex<Vec<(f64, u64, u64)>>,
    requests: std::sync::atomic::AtomicU64,
}

/// Requests between two computations of the hot threshold (a sort of every count).
const HOT_EVERY: u64 = 256;

/// Ids compare as numbers when both are unsigned integers, else as text.
fn cmp_ids(a: &str, b: &str) -> Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

impl Popularity {
    /// Indices into `ids` in canonical order: higher count first, then by id.
    pub fn order(&self, ids: &[&str]) -> Vec<usize> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let count = |i: usize| counts.get(ids[i]).copied().unwrap_or(0);
        let mut idx: Vec<usize> = (0..ids.len()).collect();
        idx.sort_by(|&a, &b| {
            count(b)
                .cmp(&count(a))
                .then_with(|| cmp_ids(ids[a], ids[b]))
        });
        idx
    }

    /// How many requests each of `ids` appeared in so far.
    pub fn counts(&self, ids: &[&str]) -> Vec<u64> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter()
            .map(|id| counts.get(*id).copied().unwrap_or(0))
            .collect()
    }

    /// Which of `ids` are hot: in the most requested items that together cover `hot_share`
    /// of all item accesses so far (`recache_hash::placement::hot_threshold`; recomputed
    /// every [`HOT_EVERY`] requests).
    pub fn hot(&self, ids: &[&str], hot_share: f64) -> Vec<bool> {
        let n = self.requests.load(std::sync::atomic::Ordering::Relaxed);
        let mut hot = self.hot.lock().unwrap_or_else(|e| e.into_inner());
        let cached = hot.iter().position(|&(share, _, _)| share == hot_share);
        let threshold = match cached.map(|i| hot[i]) {
            Some((_, at, t)) if n < at + HOT_EVERY => t,
            _ => {
                let counts: Vec<u64> = {
                    let c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                    c.values().copied().collect()
                };
                let t = recache_hash::placement::hot_threshold(counts, hot_share);
                match cached {
                    Some(i) => hot[i] = (hot_share, n, t),
                    None => {
                        // Two shares at most are in use; a third (a rule swap) replaces one.
                        if hot.len() >= 2 {
                            hot.remove(0);
                        }
                        hot.push((hot_share, n, t));
                    }
                }
                t
            }
        };
        drop(hot);
        self.counts(ids)
            .into_iter()
            .map(|c| c >= threshold)
            .collect()
    }

    /// Counts one request's candidates.
    pub fn record(&self, ids: &[&str]) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            *counts.entry((*id).to_string()).or_default() += 1;
        }
    }
}

#[cfg(test)]
#[path = "popularity_tests.rs"]
mod tests;
