//! How far a quality number could move with other users: a percentile bootstrap over the
//! ranked users (resample users with replacement, recompute every measure, take the 2.5th and
//! 97.5th percentiles), for one row ([`interval`]) and for a row's difference from another
//! row on the same users ([`paired`]: each resample takes the same users from both, so what the
//! two rows share cancels).
//!
//! Deterministic: the resamples come from a seeded [`Rng`], and every row resampled with the
//! same seed draws the same users, so intervals of rows ranked on the same users are comparable.

use serde::Serialize;

use super::metrics::Quality;
use crate::rng::Rng;
use crate::stats::quantile;

/// A 95% interval for each measure: `lo` and `hi` hold the five lower and upper bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Interval {
    pub lo: Quality,
    pub hi: Quality,
}

/// A difference between two rows on the same users, with its paired 95% interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Delta {
    pub delta: Quality,
    pub lo: Quality,
    pub hi: Quality,
}

/// The bootstrap's settings: how many resamples, and the seed of their draws.
#[derive(Debug, Clone, Copy)]
pub struct Resampling {
    pub resamples: usize,
    pub seed: u64,
}

/// The 95% interval of each measure of `ranks` (1-based, `None`: a miss) over users.
pub fn interval(ranks: &[Option<usize>], how: Resampling) -> Interval {
    let per_user: Vec<[f64; 5]> = ranks
        .iter()
        .map(|&r| Quality::of_rank(r).to_array())
        .collect();
    let (lo, hi) = percentiles(&per_user, how);
    Interval { lo, hi }
}

/// `ranks` minus `base` (the same users in the same order), with the 95% interval of the
/// difference. `None` when the two do not cover the same number of users.
pub fn paired(ranks: &[Option<usize>], base: &[Option<usize>], how: Resampling) -> Option<Delta> {
    if ranks.len() != base.len() {
        return None;
    }
    let per_user: Vec<[f64; 5]> = ranks
        .iter()
        .zip(base)
        .map(|(&r, &b)| Quality::of_rank(r).minus(Quality::of_rank(b)).to_array())
        .collect();
    let (lo, hi) = percentiles(&per_user, how);
    let delta = super::metrics::quality(ranks).minus(super::metrics::quality(base));
    Some(Delta { delta, lo, hi })
}

/// 2.5th and 97.5th percentiles of each column's mean over `how.resamples` resamples of the
/// rows (both zero for no rows or no resamples).
fn percentiles(per_user: &[[f64; 5]], how: Resampling) -> (Quality, Quality) {
    let n = per_user.len();
    if n == 0 || how.resamples == 0 {
        return (Quality::default(), Quality::default());
    }
    let mut rng = Rng::new(how.seed);
    let mut means: [Vec<f64>; 5] = std::array::from_fn(|_| Vec::with_capacity(how.resamples));
    for _ in 0..how.resamples {
        let mut sum = [0.0; 5];
        for _ in 0..n {
            let row = &per_user[rng.below(n)];
            for (s, v) in sum.iter_mut().zip(row) {
                *s += v;
            }
        }
        for (m, s) in means.iter_mut().zip(sum) {
            m.push(s / n as f64);
        }
    }
    let mut lo = [0.0; 5];
    let mut hi = [0.0; 5];
    for (k, m) in means.iter_mut().enumerate() {
        m.sort_by(f64::total_cmp);
        lo[k] = quantile(m, 0.025);
        hi[k] = quantile(m, 0.975);
    }
    (Quality::from_array(lo), Quality::from_array(hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::metrics::quality;

    const HOW: Resampling = Resampling {
        resamples: 1000,
        seed: 7,
    };

    /// Ranks 1..=20 cycled over 200 users: half in the top 10.
    fn ranks() -> Vec<Option<usize>> {
        (0..200).map(|i| Some(i % 20 + 1)).collect()
    }

    #[test]
    fn interval_is_deterministic_and_holds_the_estimate() {
        let r = ranks();
        let a = interval(&r, HOW);
        assert_eq!(a, interval(&r, HOW), "same seed, same interval");
        let q = quality(&r).to_array();
        let (lo, hi) = (a.lo.to_array(), a.hi.to_array());
        for k in 0..5 {
            assert!(
                lo[k] <= q[k] && q[k] <= hi[k],
                "measure {k}: {lo:?} {q:?} {hi:?}"
            );
            assert!(
                hi[k] > lo[k],
                "measure {k}: a spread of users gives a width"
            );
        }
        // Recall@10 is 0.5 over 200 users: one standard error is about 0.035, so the 95%
        // interval is about ±0.07.
        let width = a.hi.recall_at_10 - a.lo.recall_at_10;
        assert!((0.10..0.18).contains(&width), "{width}");
        assert_ne!(a, interval(&r, Resampling { seed: 8, ..HOW }));
    }

    #[test]
    fn identical_users_give_no_width() {
        let r = vec![Some(3); 50];
        let a = interval(&r, HOW);
        assert_eq!(a.lo, quality(&r));
        assert_eq!(a.hi, quality(&r));
        assert_eq!(interval(&[], HOW), Interval::default());
    }

    #[test]
    fn paired_difference_cancels_what_rows_share() {
        let base = ranks();
        // The same ranking: a difference of exactly zero, with no width.
        let same = paired(&base, &base, HOW).expect("same users");
        assert_eq!(same.delta, Quality::default());
        assert_eq!((same.lo, same.hi), (Quality::default(), Quality::default()));
        // Ten users move from rank 11 into rank 1: +0.05 Recall@10, and every resample
        // agrees on the sign.
        let mut better = base.clone();
        for r in better.iter_mut().filter(|r| **r == Some(11)) {
            *r = Some(1);
        }
        let d = paired(&better, &base, HOW).expect("same users");
        assert!((d.delta.recall_at_10 - 0.05).abs() < 1e-12);
        assert!(d.lo.recall_at_10 > 0.0 && d.lo.recall_at_10 <= 0.05);
        assert!(d.hi.recall_at_10 >= 0.05);
        assert!(paired(&base[..10], &base, HOW).is_none());
    }
}
