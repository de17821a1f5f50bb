//! Ranking quality from where the held-out item landed: Recall@k (hit within the top k),
//! MRR@k (1/rank within the top k, else 0) and NDCG@k (1/log2(rank+1) within the top k: one
//! relevant item, so the ideal DCG is 1), averaged over requests. Ranks are 1-based; a request
//! whose answer lacks the item (an error) counts as a miss.

use serde::Serialize;

/// Averages over one layout's (or baseline's) requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Quality {
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub mrr_at_10: f64,
    pub ndcg_at_5: f64,
    pub ndcg_at_10: f64,
}

fn ndcg(rank: usize, k: usize) -> f64 {
    if rank <= k {
        1.0 / ((rank + 1) as f64).log2()
    } else {
        0.0
    }
}

impl Quality {
    /// One request's contribution: 1-based `rank` (`None` or 0: the item was not ranked).
    pub fn of_rank(rank: Option<usize>) -> Self {
        match rank.filter(|&r| r >= 1) {
            None => Self::default(),
            Some(r) => Self {
                recall_at_5: f64::from(u8::from(r <= 5)),
                recall_at_10: f64::from(u8::from(r <= 10)),
                mrr_at_10: if r <= 10 { 1.0 / r as f64 } else { 0.0 },
                ndcg_at_5: ndcg(r, 5),
                ndcg_at_10: ndcg(r, 10),
            },
        }
    }

    /// The five measures in a fixed order (the order of [`Quality::from_array`]).
    pub fn to_array(self) -> [f64; 5] {
        [
            self.recall_at_5,
            self.recall_at_10,
            self.mrr_at_10,
            self.ndcg_at_5,
            self.ndcg_at_10,
        ]
    }

    pub fn from_array(a: [f64; 5]) -> Self {
        Self {
            recall_at_5: a[0],
            recall_at_10: a[1],
            mrr_at_10: a[2],
            ndcg_at_5: a[3],
            ndcg_at_10: a[4],
        }
    }

    /// Each measure of `self` minus `other`'s.
    pub fn minus(self, other: Self) -> Self {
        let (a, b) = (self.to_array(), other.to_array());
        Self::from_array(std::array::from_fn(|i| a[i] - b[i]))
    }
}

/// Quality of 1-based ranks (`None`: the item was not ranked).
pub fn quality(ranks: &[Option<usize>]) -> Quality {
    let n = ranks.len().max(1) as f64;
    let mut sum = [0.0; 5];
    for &r in ranks {
        for (s, v) in sum.iter_mut().zip(Quality::of_rank(r).to_array()) {
            *s += v;
        }
    }
    Quality::from_array(sum.map(|s| s / n))
}

/// 1-based rank of `target` when candidates are ordered by `score`, best first; ties keep the
/// given order (as recache's ranking does), so a baseline's ties follow the shuffled request.
pub fn rank_by<T: PartialEq>(candidates: &[T], target: &T, score: impl Fn(&T) -> f64) -> usize {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| score(&candidates[b]).total_cmp(&score(&candidates[a])));
    order
        .iter()
        .position(|&i| candidates[i] == *target)
        .map_or(candidates.len() + 1, |p| p + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn hand_made_rankings() {
        // Ranks 1, 3, 7, 12 and a missing answer.
        let q = quality(&[Some(1), Some(3), Some(7), Some(12), None]);
        assert!(close(q.recall_at_5, 2.0 / 5.0));
        assert!(close(q.recall_at_10, 3.0 / 5.0));
        assert!(close(q.mrr_at_10, (1.0 + 1.0 / 3.0 + 1.0 / 7.0) / 5.0));
        assert!(close(q.ndcg_at_5, (1.0 + 0.5) / 5.0));
        assert!(close(q.ndcg_at_10, (1.0 + 0.5 + 1.0 / 8f64.log2()) / 5.0));
    }

    #[test]
    fn perfect_and_empty() {
        let q = quality(&[Some(1); 4]);
        assert_eq!((q.recall_at_10, q.mrr_at_10, q.ndcg_at_10), (1.0, 1.0, 1.0));
        assert_eq!(quality(&[]), Quality::default());
        // Rank 10 is in, rank 11 out.
        let q = quality(&[Some(10), Some(11)]);
        assert!(close(q.recall_at_10, 0.5) && close(q.recall_at_5, 0.0));
        assert!(close(q.ndcg_at_10, 0.5 / 11f64.log2()));
    }

    #[test]
    fn one_request_at_a_time() {
        // Rank 4: in the top 5 and 10, MRR 1/4, NDCG 1/log2(5) at both cuts.
        let q = Quality::of_rank(Some(4));
        let g = 1.0 / 5f64.log2();
        assert_eq!(q.to_array(), [1.0, 1.0, 0.25, g, g]);
        // Rank 7: out of the top 5 only.
        let q7 = Quality::of_rank(Some(7));
        assert_eq!(
            (q7.recall_at_5, q7.ndcg_at_5, q7.recall_at_10),
            (0.0, 0.0, 1.0)
        );
        assert!(close(q7.mrr_at_10, 1.0 / 7.0));
        assert_eq!(Quality::of_rank(None), Quality::default());
        assert_eq!(Quality::of_rank(Some(0)), Quality::default());
        assert_eq!(Quality::from_array(q.to_array()), q);
        let d = q.minus(q7);
        assert_eq!((d.recall_at_5, d.recall_at_10), (1.0, 0.0));
        // The mean of the requests' contributions is `quality`.
        let mean = quality(&[Some(4), Some(7)]);
        assert!(close(mean.mrr_at_10, (0.25 + 1.0 / 7.0) / 2.0));
    }

    #[test]
    fn rank_by_score_keeps_order_on_ties() {
        let items = [10u64, 20, 30, 40];
        let score = |i: &u64| if *i == 10 { 1.0 } else { 5.0 };
        assert_eq!(rank_by(&items, &10, score), 4);
        assert_eq!(rank_by(&items, &30, score), 2); // tied with 20, which comes first
        assert_eq!(rank_by(&items, &99, score), 5);
    }
}
