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

/// Quality of 1-based ranks (`None`: the item was not ranked).
pub fn quality(ranks: &[Option<usize>]) -> Quality {
    let n = ranks.len().max(1) as f64;
    let mut q = Quality::default();
    for r in ranks.iter().flatten().copied().filter(|&r| r >= 1) {
        q.recall_at_5 += f64::from(u8::from(r <= 5));
        q.recall_at_10 += f64::from(u8::from(r <= 10));
        q.mrr_at_10 += if r <= 10 { 1.0 / r as f64 } else { 0.0 };
        q.ndcg_at_5 += ndcg(r, 5);
        q.ndcg_at_10 += ndcg(r, 10);
    }
    Quality {
        recall_at_5: q.recall_at_5 / n,
        recall_at_10: q.recall_at_10 / n,
        mrr_at_10: q.mrr_at_10 / n,
        ndcg_at_5: q.ndcg_at_5 / n,
        ndcg_at_10: q.ndcg_at_10 / n,
    }
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
    fn rank_by_score_keeps_order_on_ties() {
        let items = [10u64, 20, 30, 40];
        let score = |i: &u64| if *i == 10 { 1.0 } else { 5.0 };
        assert_eq!(rank_by(&items, &10, score), 4);
        assert_eq!(rank_by(&items, &30, score), 2); // tied with 20, which comes first
        assert_eq!(rank_by(&items, &99, score), 5);
    }
}
