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
    /// of all item accesses so far (`client::route::placement::hot_threshold`; recomputed
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
                let t = crate::client::route::placement::hot_threshold(counts, hot_share);
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
mod tests {
    use super::*;

    #[test]
    fn hot_first_ties_by_id_and_deterministic() {
        let p = Popularity::default();
        p.record(&["7", "b"]);
        p.record(&["7"]);
        let ids = ["a", "10", "b", "9", "7"];
        // 7 (2) > b (1) > unseen, ties: numbers numerically, then text.
        assert_eq!(p.order(&ids), vec![4, 2, 3, 1, 0]);
        assert_eq!(p.order(&ids), p.order(&ids));
        let shuffled = ["9", "7", "a", "b", "10"];
        let names = |ids: &[&str]| -> Vec<String> {
            p.order(ids).iter().map(|&i| ids[i].to_string()).collect()
        };
        assert_eq!(names(&ids), names(&shuffled));
    }

    #[test]
    fn hot_items_follow_the_access_share() {
        let p = Popularity::default();
        for _ in 0..6 {
            p.record(&["a"]);
        }
        p.record(&["b", "c"]);
        p.record(&["b"]);
        // a: 6, b: 2, c: 1 of 9 accesses; half of them is covered by a alone.
        assert_eq!(
            p.hot(&["a", "b", "c", "new"], 0.5),
            [true, false, false, false]
        );
        assert_eq!(p.hot(&["a", "b", "c"], 0.85), [true, true, false]);
        assert_eq!(p.hot(&["a", "c"], 0.0), [false, false]);
    }
}
