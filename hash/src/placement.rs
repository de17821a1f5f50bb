//! Where a GR entity lives across replicas, as a pure function of its id and hotness, so that
//! several recache instances in front of the same replicas agree without talking to each
//! other (BAT §5.2, hot-replicated cold-sharded placement).
//!
//! - **Home** of an id: rendezvous (highest-random-weight) hashing over the replicas'
//!   labels. Every instance given the same upstream URLs, in any order, computes the same
//!   home; removing a replica moves only the ids homed there.
//! - **Hot** items are replicated (every replica may hold them), cold ones sharded (one home
//!   each). Which items are hot follows BAT Alg. 1 step 2: sort items by access frequency and
//!   take the most frequent until they cover `hot_share` of all accesses (`1 − R_max`, the
//!   share of item accesses that may go to an item not held where the request runs).

use crate::{fnv1a, mix64};

/// A stable 64-bit id of a text key (a user or item id).
pub fn id(key: &str) -> u64 {
    mix64(fnv1a(key.bytes()))
}

/// A replica's id in placement: a hash of its label (`host:port[/prefix]`).
pub fn replica_id(label: &str) -> u64 {
    fnv1a(label.bytes())
}

/// Index into `replicas` (their [`replica_id`]s) of `id`'s home among those `eligible` allows
/// (None when it allows none): the highest `mix64(id ^ replica)`. Ties (equal weights) go to
/// the lower replica id, so the answer does not depend on the order replicas were listed in.
pub fn home_of(id: u64, replicas: &[u64], eligible: impl Fn(usize) -> bool) -> Option<usize> {
    (0..replicas.len())
        .filter(|&i| eligible(i))
        .max_by_key(|&i| (mix64(id ^ replicas[i]), std::cmp::Reverse(replicas[i])))
}

/// [`home_of`] over replica labels.
pub fn home<'a>(
    id: u64,
    labels: impl Iterator<Item = &'a str>,
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    let ids: Vec<u64> = labels.map(replica_id).collect();
    home_of(id, &ids, eligible)
}

/// The access count an item needs to be hot: the smallest count among the most frequent items
/// that together cover `hot_share` of all accesses (BAT Alg. 1 step 2). `u64::MAX` (nothing
/// hot) when there are no counts or `hot_share` is 0.
pub fn hot_threshold(mut counts: Vec<u64>, hot_share: f64) -> u64 {
    let total: u64 = counts.iter().sum();
    if total == 0 || hot_share <= 0.0 {
        return u64::MAX;
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let goal = hot_share.min(1.0) * total as f64;
    let mut covered = 0u64;
    for c in counts {
        covered += c;
        if covered as f64 >= goal {
            return c.max(1);
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_order_free_stable_and_spread() {
        let ab = ["a:1", "b:2", "c:3"];
        let ba = ["c:3", "a:1", "b:2"];
        let mut per = [0usize; 3];
        for k in 0..3000u64 {
            let h1 = home(k, ab.iter().copied(), |_| true).expect("home");
            let h2 = home(k, ba.iter().copied(), |_| true).expect("home");
            assert_eq!(ab[h1], ba[h2], "id {k}: the home depends on listing order");
            per[h1] += 1;
            // Without its home, an id moves; others stay.
            let without = home(k, ab.iter().copied(), |i| i != 0).expect("home");
            if h1 != 0 {
                assert_eq!(without, h1);
            }
        }
        assert!(per.iter().all(|&n| n > 800), "{per:?}");
        assert_eq!(home(1, ab.iter().copied(), |_| false), None);
    }

    #[test]
    fn hot_items_cover_the_asked_share_of_accesses() {
        // 100 + 50 + 25 + 10 + 5×3 = 200 accesses.
        let counts = vec![5, 100, 25, 5, 50, 10, 5];
        assert_eq!(hot_threshold(counts.clone(), 0.5), 100);
        assert_eq!(hot_threshold(counts.clone(), 0.7), 50);
        assert_eq!(hot_threshold(counts.clone(), 0.9), 10);
        assert_eq!(hot_threshold(counts.clone(), 1.0), 5);
        assert_eq!(hot_threshold(counts, 0.0), u64::MAX);
        assert_eq!(hot_threshold(Vec::new(), 0.8), u64::MAX);
        assert_eq!(id("item-1"), id("item-1"));
        assert_ne!(id("item-1"), id("item-2"));
    }
}
