//! One KV budget split by BAT's rule ([`super::budget`]) from a past period's requests: the
//! items to pool and what stays with the engine's cache. `bench gr --kv-bytes` and `bench
//! peers --workloads gr` both size their pooled engines with it.
//!
//! What an object is worth is how often it is *read*. A cached user prefix is read on the
//! user's repeat visits. A pooled item is read on every visit that names it: an item-first
//! prompt leads with the pooled items, and a user-first one loads them after the user's
//! cached profile (`rank::pooled`), so a regular's repeat visits read the pool too. (Before
//! recache pooled items after a user prefix, a kept user's later visits read no pooled item
//! and the split was taken to a fixed point over the kept users; git keeps it.)

use std::collections::{BTreeMap, HashMap};

use super::budget::{self, Demand, Split, SplitError, SplitInput};
use super::workload::{Data, Planned};

/// What the split is decided from.
#[derive(Clone, Copy)]
pub struct PastBudget<'a> {
    /// KV bytes in all (engine cache + pool).
    pub kv_bytes: u64,
    /// KV bytes of one token.
    pub token_bytes: u64,
    /// Tokens the engine needs for the requests in flight, whatever it caches.
    pub working_tokens: u64,
    /// Tokens an item takes in the pool (its label included).
    pub item_tokens: u64,
    pub data: &'a Data,
    pub past: &'a [Planned],
}

/// Item and user frequencies of `past` per request: items on every visit, users by repeat
/// visits. Users come back sorted by id, with their ids.
pub fn demands(
    data: &Data,
    past: &[Planned],
    item_tokens: u64,
) -> (Vec<Demand>, Vec<u64>, Vec<Demand>) {
    let n = past.len().max(1) as f64;
    let mut item_seen: HashMap<u64, u64> = HashMap::new();
    let mut user_seen: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for p in past {
        let e = user_seen
            .entry(p.user)
            .or_insert((0, p.profile_tokens as u64));
        e.0 += 1;
        for i in &p.items {
            *item_seen.entry(*i).or_default() += 1;
        }
    }
    let items = data
        .items
        .iter()
        .map(|i| Demand {
            freq: item_seen.get(i).copied().unwrap_or(0) as f64 / n,
            tokens: item_tokens,
        })
        .collect();
    // A user prefix pays off on repeat visits only (the first one computes it).
    let ids = user_seen.keys().copied().collect();
    let users = user_seen
        .values()
        .map(|&(visits, tokens)| Demand {
            freq: visits.saturating_sub(1) as f64 / n,
            tokens,
        })
        .collect();
    (items, ids, users)
}

/// BAT's split of `b.kv_bytes`: `pool` indexes `b.data.items`.
pub fn split(b: &PastBudget<'_>) -> Result<Split, SplitError> {
    let (items, _, users) = demands(b.data, b.past, b.item_tokens);
    budget::split(&SplitInput {
        kv_bytes: b.kv_bytes,
        token_bytes: b.token_bytes,
        working_tokens: b.working_tokens,
        items: &items,
        users: &users,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(items: Vec<u64>) -> Data {
        Data {
            users: vec![],
            item_counts: vec![1; items.len()],
            items,
            titles: vec!["t".into()],
        }
    }

    fn p(user: u64, profile_tokens: usize, items: &[u64]) -> Planned {
        Planned {
            at_s: 0.0,
            user,
            history: vec![],
            profile_tokens,
            items: items.to_vec(),
        }
    }

    #[test]
    fn items_count_on_every_visit_users_on_repeat_ones() {
        let d = data(vec![10, 20, 30]);
        let past = [p(1, 100, &[10, 20]), p(1, 100, &[10]), p(2, 100, &[30, 10])];
        let (items, ids, users) = demands(&d, &past, 19);
        let f: Vec<f64> = items.iter().map(|d| d.freq).collect();
        assert_eq!(f, [1.0, 1.0 / 3.0, 1.0 / 3.0]);
        assert_eq!(ids, [1, 2]);
        let u: Vec<f64> = users.iter().map(|d| d.freq).collect();
        assert_eq!(u, [1.0 / 3.0, 0.0]);
    }

    #[test]
    fn one_off_users_leave_the_split_as_it_was() {
        let d = data((0..20).collect());
        let past: Vec<Planned> = (0..50u64).map(|r| p(r, 200, &[r % 19 + 1, 0])).collect();
        let b = PastBudget {
            kv_bytes: 150,
            token_bytes: 1,
            working_tokens: 20,
            item_tokens: 10,
            data: &d,
            past: &past,
        };
        let s = split(&b).expect("split");
        assert!(s.users.is_empty());
        assert_eq!(s.pool.len(), 13);
        assert_eq!(s.pool[0], 0, "the hottest first");
    }
}
