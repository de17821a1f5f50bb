//! `--workload bat`: BAT §6.1's request stream. "We randomly sample the users with replacement
//! from the history log ... take their history access frequency as the basis for ad-hoc
//! frequency and randomly sample the intervals between consecutive accesses."
//!
//! - Who: every user of the data is eligible (`--users` is ignored), so the long tail of
//!   one-off users is there, as in BAT; requests draw users with replacement by activity
//!   (history length).
//! - When: user `i` arrives as a Poisson process of rate `rate · a_i / Σa`; the stream is the
//!   first `requests` arrivals of all users' processes merged.
//! - What: profile and candidates as `--workload default` ([`super::workload::Builder`]).

use super::workload::{Builder, Data, Planned, Shape};
use crate::error::BenchError;
use crate::rng::Rng;

/// The merge of independent Poisson processes of rates `λ_i` is a Poisson process of rate
/// `Σλ_i = rate`, and each of its arrivals belongs to user `i` with probability `λ_i / Σλ`,
/// independently of the times and of the other arrivals (superposition and thinning). So
/// drawing exponential gaps of mean `1 / rate` and, per arrival, a user by activity gives
/// exactly the law of "merge the per-user processes, keep the first N arrivals", without
/// simulating one process per user (millions of users in BAT's data sets).
///
/// `rate <= 0` (closed loop) plans at a nominal 1 request/s and zeroes every `at_s`, so the
/// users and candidates drawn are those of any open-loop rate with the same seed.
pub fn plan_bat(data: &Data, shape: &Shape, seed: u64) -> Result<Vec<Planned>, BenchError> {
    let builder = Builder::new(data, shape)?;
    let mut rng = Rng::new(seed);
    let cum = Rng::cumulative(&builder.activity());
    let (rate, closed) = if shape.rate > 0.0 {
        (shape.rate, false)
    } else {
        (1.0, true)
    };
    let mut at = 0.0;
    let mut out = Vec::with_capacity(shape.requests);
    for _ in 0..shape.requests {
        at += rng.exponential(rate);
        let idx = rng.weighted(&cum);
        out.push(builder.request(&mut rng, if closed { 0.0 } else { at }, idx));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::workload::{Population, plan, population};
    use super::*;

    /// `n` users with histories of 3 to 12 items over 50 items, and 50 titles.
    fn data(n: usize) -> Data {
        let users: Vec<(u64, Vec<u64>)> = (0..n)
            .map(|u| {
                (
                    u as u64,
                    (0..3 + u % 10).map(|k| ((u + 7 * k) % 50) as u64).collect(),
                )
            })
            .collect();
        let mut counts = std::collections::HashMap::<u64, u64>::new();
        for (_, h) in &users {
            for i in h {
                *counts.entry(*i).or_default() += 1;
            }
        }
        let mut ranked: Vec<(u64, u64)> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Data {
            users,
            items: ranked.iter().map(|r| r.0).collect(),
            item_counts: ranked.iter().map(|r| r.1).collect(),
            titles: (0..50).map(|i| format!("item {i}")).collect(),
        }
    }

    fn shape(rate: f64) -> Shape {
        Shape {
            requests: 2000,
            users: 16,
            candidates: 5,
            item_tokens: 4,
            min_profile_tokens: 32,
            max_prompt_tokens: 512,
            instruction_tokens: 8,
            rate,
        }
    }

    #[test]
    fn draws_from_the_whole_population() -> Result<(), BenchError> {
        let d = data(5000);
        let s = shape(10.0);
        let bat = population(&plan_bat(&d, &s, 3)?);
        let default = population(&plan(&d, &s, 3)?);
        assert_eq!(default.distinct_users, 16);
        assert!(bat.distinct_users > 10 * s.users, "{bat:?}");
        assert!(bat.returning_share < default.returning_share, "{bat:?}");
        Ok(())
    }

    #[test]
    fn deterministic_per_seed() -> Result<(), BenchError> {
        let (d, s) = (data(500), shape(5.0));
        let key = |p: &[Planned]| -> Vec<(u64, u64, Vec<u64>)> {
            p.iter()
                .map(|r| (r.at_s.to_bits(), r.user, r.items.clone()))
                .collect()
        };
        let a = plan_bat(&d, &s, 9)?;
        assert_eq!(key(&a), key(&plan_bat(&d, &s, 9)?));
        assert_ne!(key(&a), key(&plan_bat(&d, &s, 10)?));
        // Poisson arrivals at 5/s: increasing, mean gap near 1/5 s.
        assert!(a.windows(2).all(|w| w[1].at_s >= w[0].at_s));
        let mean_gap = a[a.len() - 1].at_s / a.len() as f64;
        assert!((mean_gap - 0.2).abs() < 0.02, "{mean_gap}");
        Ok(())
    }

    #[test]
    fn closed_loop_is_all_at_once_with_the_same_draws() -> Result<(), BenchError> {
        let d = data(500);
        let closed = plan_bat(&d, &shape(0.0), 4)?;
        assert!(closed.iter().all(|p| p.at_s == 0.0));
        let open = plan_bat(&d, &shape(1.0), 4)?;
        let users = |p: &[Planned]| p.iter().map(|r| r.user).collect::<Vec<_>>();
        assert_eq!(users(&closed), users(&open));
        Ok(())
    }

    #[test]
    fn returning_share_of_a_hand_made_plan() {
        let req = |user| Planned {
            at_s: 0.0,
            user,
            history: vec![],
            profile_tokens: 0,
            items: vec![],
        };
        // 7, 8, 7, 9, 7, 8: the 3rd, 5th and 6th requests come from users seen before.
        let plan: Vec<Planned> = [7, 8, 7, 9, 7, 8].into_iter().map(req).collect();
        let expect = Population {
            distinct_users: 3,
            returning_share: 0.5,
        };
        assert_eq!(population(&plan), expect);
        let empty = population(&[]);
        assert_eq!((empty.distinct_users, empty.returning_share), (0, 0.0));
    }
}
