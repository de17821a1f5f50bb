//! One KV budget split by BAT's rule ([`super::budget`]) from a past period's requests: the
//! items to pool and what stays with the engine's cache. `bench gr --kv-bytes` and `bench
//! peers --workloads gr` both size their pooled engines with it.
//!
//! What an object is worth is how often it is *read*. A cached user prefix is read on the
//! user's repeat visits. A pooled item is read only by item-first prompts: a user whose prefix
//! the engine keeps goes user-first on its later visits and reads no pooled item then. So the
//! split is taken to a fixed point: the users the last split kept ask for items on their
//! first visit only (nothing of theirs is cached yet), every other user on each visit; item
//! frequencies are counted again and the split redone until the kept users stop changing.
//! It starts from every user with a repeat visit kept and can only drop users (fewer kept
//! users raise item values, which push more users out), so a few rounds settle it, at the
//! largest set of users the split keeps when their requests read no pooled items. Starting
//! from none kept would stop at the first split's answer whenever the regulars' own requests
//! make the items look hotter than the regulars (every request names the hot items). On a
//! stream of one-off users nothing changes.
//!
//! An item the past period read only once is not pooled: its fill computes it once, which
//! that one read only pays back (on a stream of four regulars, the items their four first
//! visits named took 231 of 1,024 blocks and gave back fewer tokens than their fills cost).
//!
//! With `after_user` (recache's `--rank-pool-after-user`) a user-first prompt loads the pooled
//! items after the user's cached profile, so every visit reads the pool: items count on every
//! visit and no fixed point is needed.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::budget::{self, Demand, Split, SplitError, SplitInput};
use super::workload::{Data, Planned};

/// Rounds at most (the kept users shrink each round; this only bounds a pathological input).
const MAX_ROUNDS: usize = 16;

/// Reads in the past period below which an item is not worth a pool slot: its fill costs
/// one computation of the item, which a single read only pays back.
const MIN_READS: u64 = 2;

/// What the split is decided from.
#[derive(Clone, Copy)]
pub struct PastBudget<'a> {
    /// KV bytes in all (engine cache + pool).
    pub kv_bytes: u64,
    /// KV bytes of one token.
    pub token_bytes: u64,
    /// Bytes of one token in the item pool (less than `token_bytes` with `--pool-codec int8|int4`).
    pub pool_token_bytes: u64,
    /// Tokens the engine needs for the requests in flight, whatever it caches.
    pub working_tokens: u64,
    /// Tokens an item takes in the pool (its label included).
    pub item_tokens: u64,
    pub data: &'a Data,
    pub past: &'a [Planned],
    /// Every visit reads the pool (`--rank-pool-after-user`).
    pub after_user: bool,
}

/// Item and user frequencies of `past` per request: items counted on the visits that read
/// the pool (a `kept` user's first visit only, every visit of the others; 0 below
/// [`MIN_READS`]), users by repeat visits. Users come back sorted by id, with their ids.
pub fn demands(
    data: &Data,
    past: &[Planned],
    item_tokens: u64,
    kept: &HashSet<u64>,
) -> (Vec<Demand>, Vec<u64>, Vec<Demand>) {
    let n = past.len().max(1) as f64;
    let mut item_seen: HashMap<u64, u64> = HashMap::new();
    let mut user_seen: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for p in past {
        let e = user_seen
            .entry(p.user)
            .or_insert((0, p.profile_tokens as u64));
        e.0 += 1;
        if e.0 == 1 || !kept.contains(&p.user) {
            for i in &p.items {
                *item_seen.entry(*i).or_default() += 1;
            }
        }
    }
    let items = data
        .items
        .iter()
        .map(|i| Demand {
            // A fill computes the item once, so one read only pays for its fill.
            freq: match item_seen.get(i).copied().unwrap_or(0) {
                c if c >= MIN_READS => c as f64 / n,
                _ => 0.0,
            },
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

/// BAT's split of `b.kv_bytes` at the fixed point: `pool` indexes `b.data.items`.
pub fn split(b: &PastBudget<'_>) -> Result<Split, SplitError> {
    let (_, ids, users) = demands(b.data, b.past, b.item_tokens, &HashSet::new());
    // Kept users read no pooled item on later visits, unless the pool serves after them.
    let mut kept: HashSet<u64> = (ids.iter().zip(&users))
        .filter(|(_, u)| u.freq > 0.0 && !b.after_user)
        .map(|(id, _)| *id)
        .collect();
    let mut last = None;
    for _ in 0..MAX_ROUNDS {
        let (items, ids, users) = demands(b.data, b.past, b.item_tokens, &kept);
        let s = budget::split(&SplitInput {
            kv_bytes: b.kv_bytes,
            token_bytes: b.token_bytes,
            pool_token_bytes: b.pool_token_bytes,
            working_tokens: b.working_tokens,
            items: &items,
            users: &users,
        })?;
        let now: HashSet<u64> = match b.after_user {
            true => HashSet::new(),
            false => s.users.iter().map(|&i| ids[i]).collect(),
        };
        let settled = now == kept;
        (kept, last) = (now, Some(s));
        if settled {
            break;
        }
    }
    // MAX_ROUNDS >= 1: the loop ran.
    last.ok_or(SplitError::NoTokenBytes)
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
    fn items_count_on_the_visits_that_read_the_pool() {
        let d = data(vec![10, 20, 30]);
        let past = [
            p(1, 100, &[10, 20]),
            p(1, 100, &[10, 20]),
            p(2, 100, &[30, 10]),
            p(3, 100, &[20]),
        ];
        let (items, ids, users) = demands(&d, &past, 19, &HashSet::new());
        let f: Vec<f64> = items.iter().map(|d| d.freq).collect();
        assert_eq!(f, [0.75, 0.75, 0.0], "30, read once, only repays its fill");
        assert_eq!(ids, [1, 2, 3]);
        let u: Vec<f64> = users.iter().map(|d| d.freq).collect();
        assert_eq!(u, [0.25, 0.0, 0.0]);
        // User 1 kept: its second visit goes user-first and reads no pooled item.
        let (items, _, _) = demands(&d, &past, 19, &HashSet::from([1]));
        let f: Vec<f64> = items.iter().map(|d| d.freq).collect();
        assert_eq!(f, [0.5, 0.5, 0.0]);
    }

    /// Two regulars whose every request names the same 20 hot items and one of 40 others.
    fn regulars() -> (Data, Vec<Planned>) {
        let past = (0..100u64)
            .map(|r| {
                let mut items: Vec<u64> = (0..20).collect();
                items.push(20 + r % 40);
                p(r % 2, 400, &items)
            })
            .collect();
        (data((0..60).collect()), past)
    }

    fn past_budget<'a>(d: &'a Data, past: &'a [Planned], after_user: bool) -> PastBudget<'a> {
        PastBudget {
            kv_bytes: 900,
            token_bytes: 1,
            pool_token_bytes: 1,
            working_tokens: 0,
            item_tokens: 10,
            data: d,
            past,
            after_user,
        }
    }

    /// The first split pools the hot items ahead of the second user, the fixed point sees
    /// that kept users read none of them and leaves the engine both profiles.
    #[test]
    fn regulars_keep_their_profiles_ahead_of_the_items_they_name() {
        let (d, past) = regulars();
        let (items, _, users) = demands(&d, &past, 10, &HashSet::new());
        let first = budget::split(&SplitInput {
            kv_bytes: 900,
            token_bytes: 1,
            pool_token_bytes: 1,
            working_tokens: 0,
            items: &items,
            users: &users,
        })
        .expect("split");
        assert_eq!(first.users.len(), 1, "without the fixed point: {first:?}");
        let s = split(&past_budget(&d, &past, false)).expect("split");
        assert_eq!(s.users.len(), 2, "{s:?}");
        assert_eq!(s.user_tokens, 800);
        assert_eq!(s.pool.len(), 10, "the rest of the budget: {s:?}");
    }

    #[test]
    fn with_the_pool_after_the_profile_items_count_on_every_visit() {
        let (d, past) = regulars();
        // The first split's answer: the hot items read on every visit come before a profile.
        let s = split(&past_budget(&d, &past, true)).expect("split");
        assert_eq!(s.users.len(), 1, "{s:?}");
    }

    #[test]
    fn one_off_users_leave_the_split_as_it_was() {
        let d = data((0..20).collect());
        let past: Vec<Planned> = (0..50u64).map(|r| p(r, 200, &[r % 19 + 1, 0])).collect();
        let b = PastBudget {
            kv_bytes: 150,
            token_bytes: 1,
            pool_token_bytes: 1,
            working_tokens: 20,
            item_tokens: 10,
            data: &d,
            past: &past,
            after_user: false,
        };
        let s = split(&b).expect("split");
        assert!(s.users.is_empty());
        assert_eq!(s.pool.len(), 13);
        assert_eq!(s.pool[0], 0, "the hottest first");
    }
}
