//! How far two rankings of the same candidates agree: the share of one's top k found in the
//! other's top k, and Spearman's rank correlation over every candidate. The guard compares a
//! pool-served ranking with the same request scored user-first.

/// Agreement of two rankings of one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agreement {
    /// |top-k(a) ∩ top-k(b)| / k, with k = min(10, candidates).
    pub top_k_overlap: f64,
    /// Spearman's rho of the two score vectors (1: same order; 0: unrelated).
    pub spearman: f64,
}

/// The k of the top-k overlap.
pub const TOP_K: usize = 10;

/// Agreement of two score vectors over the same candidates (index i = candidate i in both).
/// Ties rank by index, as `/v1/rank` answers them. None when they differ in length or are
/// empty.
pub fn agreement(a: &[f64], b: &[f64]) -> Option<Agreement> {
    if a.is_empty() || a.len() != b.len() {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let k = TOP_K.min(a.len());
    let top = |r: &[usize]| (0..r.len()).filter(|&i| r[i] < k).collect::<Vec<_>>();
    let tb = top(&rb);
    let common = top(&ra).iter().filter(|i| tb.contains(i)).count();
    let n = a.len() as f64;
    let spearman = if a.len() < 2 {
        1.0
    } else {
        let d2: f64 = (ra.iter().zip(&rb))
            .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
            .sum();
        1.0 - 6.0 * d2 / (n * (n * n - 1.0))
    };
    Some(Agreement {
        top_k_overlap: common as f64 / k as f64,
        spearman,
    })
}

/// Rank of each candidate, 0 = best (highest score); equal scores keep index order.
fn ranks(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]).then(i.cmp(&j)));
    let mut rank = vec![0; scores.len()];
    for (r, i) in order.into_iter().enumerate() {
        rank[i] = r;
    }
    rank
}

#[cfg(test)]
#[path = "agreement_tests.rs"]
mod tests;
