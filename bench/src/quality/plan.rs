//! The requests `bench quality` sends: one per held-out user, built as `bench gr` builds its
//! own (`workload::Builder`: the last item held out, 99 others drawn by popularity), with the
//! profile the ranker was trained on (the last `--history-items` items, each as its title
//! tokens) and the candidates shuffled, so a request's order says nothing about the answer.

use super::split;
use crate::error::BenchError;
use crate::gr::workload::{Builder, Data, Planned, Shape};
use crate::rng::Rng;

/// A held-out user's request and the item it must find.
#[derive(Debug, Clone)]
pub struct Case {
    pub planned: Planned,
    pub target: u64,
}

/// The held-out users' requests, `limit` at most, in a fixed pseudo-random order of users.
pub fn cases(
    data: &Data,
    candidates: usize,
    item_tokens: usize,
    history_items: usize,
    limit: Option<usize>,
    seed: u64,
) -> Result<Vec<Case>, BenchError> {
    let shape = Shape {
        requests: 0,
        users: 0,
        candidates,
        item_tokens,
        // The profile is set below; these only have to pass the builder's length check.
        min_profile_tokens: 0,
        max_prompt_tokens: usize::MAX / 2,
        instruction_tokens: 0,
        rate: 0.0,
    };
    let builder = Builder::new(data, &shape)?;
    let mut held: Vec<usize> = (0..data.users.len())
        .filter(|&i| split::held_out(data.users[i].0))
        .collect();
    if held.is_empty() {
        return Err(BenchError::Setup(
            "no held-out user in --data (the split holds out ~5% of user ids)".into(),
        ));
    }
    held.sort_by_key(|&i| (recache_hash::mix64(data.users[i].0), i));
    held.truncate(limit.unwrap_or(usize::MAX));
    let mut rng = Rng::new(seed);
    Ok(held
        .into_iter()
        .map(|i| {
            let mut planned = builder.request(&mut rng, 0.0, i);
            let target = planned.items[0];
            rng.shuffle(&mut planned.items);
            let keep = planned.history.len().min(history_items);
            planned.history.drain(..planned.history.len() - keep);
            planned.profile_tokens = keep * item_tokens;
            Case { planned, target }
        })
        .collect())
}

/// Interaction counts a deployment would know before the held-out events: every interaction
/// but the held-out users' last items (the popularity baseline ranks by these).
pub fn train_counts(data: &Data) -> std::collections::HashMap<u64, u64> {
    let mut counts = std::collections::HashMap::new();
    for (user, items) in &data.users {
        let seen = if split::held_out(*user) {
            &items[..items.len() - 1]
        } else {
            &items[..]
        };
        for &i in seen {
            *counts.entry(i).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Data {
        // 400 users with 4 items each over 30 items; 20 of these ids are held out.
        let users = (1..=400u64)
            .map(|u| (u, (0..4).map(|k| (u * 7 + k * 3) % 30).collect()))
            .collect();
        let items: Vec<u64> = (0..30).collect();
        Data {
            users,
            item_counts: vec![1; items.len()],
            items,
            titles: vec!["t".into()],
        }
    }

    #[test]
    fn only_held_out_users_with_their_last_item_first_hidden() {
        let d = data();
        let cs = cases(&d, 10, 5, 2, None, 1).expect("cases");
        assert_eq!(cs.len(), 20);
        for c in &cs {
            assert!(split::held_out(c.planned.user));
            let hist = &d
                .users
                .iter()
                .find(|u| u.0 == c.planned.user)
                .expect("user")
                .1;
            assert_eq!(c.target, hist[3]);
            assert!(c.planned.items.contains(&c.target));
            assert_eq!(c.planned.items.len(), 10);
            assert_eq!(c.planned.history, hist[1..3].to_vec());
            assert_eq!(c.planned.profile_tokens, 10);
        }
        // Shuffled: the target is not always first.
        assert!(cs.iter().any(|c| c.planned.items[0] != c.target));
        // Deterministic per seed; --users takes a prefix of the same order.
        let again = cases(&d, 10, 5, 2, Some(5), 1).expect("cases");
        assert!(
            again
                .iter()
                .zip(&cs)
                .all(|(a, b)| a.planned.user == b.planned.user)
        );
    }

    #[test]
    fn training_counts_leave_out_held_out_targets() {
        let d = data();
        let counts = train_counts(&d);
        let total: u64 = counts.values().sum();
        assert_eq!(total, 400 * 4 - 20);
    }
}
