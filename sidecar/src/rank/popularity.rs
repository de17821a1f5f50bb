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
}

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

    /// Counts one request's candidates.
    pub fn record(&self, ids: &[&str]) {
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
}
