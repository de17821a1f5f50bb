//! The rankings a model must beat, on the same candidates as the layouts, each from what a
//! deployment knows before the held-out events (every interaction but the held-out users'
//! last items):
//!
//! - `popularity`: interaction counts. The negatives are drawn by the same counts, and a
//!   user's last item is on average less popular than an interaction drawn by count, so this
//!   ranks below random by construction; kept as the yardstick the earlier tables used.
//! - `popularity-recent`: how often the item was another user's most recent interaction, the
//!   period the held-out item comes from: popularity without the construction's bias.
//! - `transition`: how often the item followed the user's last profile item in anyone's
//!   sequence (a first-order Markov chain), ties by `popularity-recent`: the simplest
//!   sequential recommender, and what the ranker adds to it.
//! - `random`: a uniformly random place.

use std::collections::HashMap;

use super::metrics::rank_by;
use super::plan::{self, Case};
use super::split;
use crate::gr::workload::Data;
use crate::rng::Rng;

/// The baselines' names (their rows' `layout`), in the order [`ranks`] returns them.
pub const NAMES: [&str; 4] = ["popularity", "popularity-recent", "transition", "random"];

/// (name, 1-based rank of each case's target) for every baseline, in the order above.
pub fn ranks(data: &Data, cases: &[Case], seed: u64) -> Vec<(&'static str, Vec<Option<usize>>)> {
    let counts = plan::train_counts(data);
    let recent = recent_counts(data);
    let next = transitions(data);
    let by = |score: &dyn Fn(&Case, &u64) -> f64| -> Vec<Option<usize>> {
        cases
            .iter()
            .map(|c| Some(rank_by(&c.planned.items, &c.target, |i| score(c, i))))
            .collect()
    };
    let count = |m: &HashMap<u64, u64>, i: &u64| m.get(i).copied().unwrap_or(0) as f64;
    // Recent popularity as a fraction below 1 breaks the transition counts' ties only.
    let scale = 1.0 + recent.values().copied().max().unwrap_or(0) as f64;
    let transition = |c: &Case, i: &u64| {
        let after = c.planned.history.last().and_then(|l| next.get(&(*l, *i)));
        after.copied().unwrap_or(0) as f64 + count(&recent, i) / scale
    };
    let mut rng = Rng::new(seed ^ 0x7261_6e64);
    let random = cases
        .iter()
        .map(|c| Some(rng.below(c.planned.items.len()) + 1))
        .collect();
    let [popularity, popularity_recent, transition_name, random_name] = NAMES;
    vec![
        (popularity, by(&|_, i| count(&counts, i))),
        (popularity_recent, by(&|_, i| count(&recent, i))),
        (transition_name, by(&transition)),
        (random_name, random),
    ]
}

/// How often each item was a user's last interaction, held-out users left out (their last
/// item is what is being predicted).
pub fn recent_counts(data: &Data) -> HashMap<u64, u64> {
    let mut counts = HashMap::new();
    for (user, items) in &data.users {
        if let Some(&last) = items.last().filter(|_| !split::held_out(*user)) {
            *counts.entry(last).or_default() += 1;
        }
    }
    counts
}

/// How often item b directly followed item a, over every user's sequence (held-out users'
/// without their last item).
pub fn transitions(data: &Data) -> HashMap<(u64, u64), u64> {
    let mut next = HashMap::new();
    for (user, items) in &data.users {
        let seen = if split::held_out(*user) {
            &items[..items.len() - 1]
        } else {
            &items[..]
        };
        for pair in seen.windows(2) {
            *next.entry((pair[0], pair[1])).or_default() += 1;
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Users 15 and 24 are held out (`split` tests list them), 1 and 2 are not.
    fn data() -> Data {
        let users = vec![
            (1, vec![5, 6, 7]),
            (2, vec![5, 6, 8]),
            (15, vec![9, 5, 7]),
            (24, vec![6, 7, 9]),
        ];
        Data {
            users,
            items: vec![5, 6, 7, 8, 9],
            item_counts: vec![3, 3, 3, 1, 2],
            titles: vec!["t".into()],
        }
    }

    #[test]
    fn recent_and_transition_counts_leave_the_held_out_items_out() {
        let d = data();
        let recent = recent_counts(&d);
        assert_eq!(recent.get(&7), Some(&1));
        assert_eq!(recent.get(&8), Some(&1));
        assert_eq!(recent.get(&9), None, "user 24's last item is held out");
        let next = transitions(&d);
        assert_eq!(next.get(&(5, 6)), Some(&2));
        assert_eq!(next.get(&(9, 5)), Some(&1));
        assert_eq!(next.get(&(5, 7)), None, "user 15's last step is held out");
        assert_eq!(next.get(&(6, 7)), Some(&2));
    }

    #[test]
    fn transition_ranks_what_followed_the_last_item_first() {
        let d = data();
        let case = |history: Vec<u64>, target: u64| Case {
            planned: crate::gr::workload::Planned {
                at_s: 0.0,
                user: 24,
                history,
                profile_tokens: 0,
                items: vec![9, 8, 7, 6],
            },
            target,
        };
        // After 6 came 7 twice and 8 once: 7 first, 8 second.
        let cases = [case(vec![6], 7), case(vec![6], 8), case(vec![], 8)];
        let all = ranks(&d, &cases, 1);
        let names: Vec<&str> = all.iter().map(|r| r.0).collect();
        assert_eq!(
            names,
            ["popularity", "popularity-recent", "transition", "random"]
        );
        assert_eq!(all[2].1[..2], [Some(1), Some(2)]);
        // No profile: recent popularity alone (7 and 8 once each; ties keep the request order).
        assert_eq!(all[2].1[2], Some(1));
    }
}
