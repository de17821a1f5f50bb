//! Load-aware dispatch, composed with the routing rule (RecOS's shortest-completion dispatch
//! with a switching threshold): the rule's pick stands — it knows where the prompt's prefix is
//! cached — unless another replica's predicted completion is shorter by more than a share of
//! the pick's. Predictions already count the prefix each replica holds (uncached tokens) and
//! its queue, so a cache hit is only given up for a real wait.

/// The replica to send to: `picked` (the routing rule's choice) or, when some candidate's
/// predicted completion beats the pick's by more than `threshold` of it, the fastest one.
/// `predicted` holds (replica index, predicted completion ms) for each candidate; a replica
/// without a prediction never wins or loses a comparison.
pub fn choose(picked: usize, predicted: &[(usize, Option<f64>)], threshold: f64) -> usize {
    let Some(mine) = predicted
        .iter()
        .find(|(i, _)| *i == picked)
        .and_then(|(_, p)| *p)
    else {
        return picked;
    };
    let best = predicted
        .iter()
        .filter_map(|(i, p)| p.map(|p| (*i, p)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((i, p)) if i != picked && p < mine * (1.0 - threshold) => i,
        _ => picked,
    }
}

#[cfg(test)]
mod tests {
    use super::choose;

    #[test]
    fn keeps_the_rules_pick_unless_another_is_clearly_faster() {
        let p = |v: &[(usize, Option<f64>)]| v.to_vec();
        // Within the threshold: the cache-aware pick stands.
        assert_eq!(choose(0, &p(&[(0, Some(100.0)), (1, Some(80.0))]), 0.25), 0);
        // Past it: the fastest replica.
        assert_eq!(
            choose(
                0,
                &p(&[(0, Some(100.0)), (1, Some(60.0)), (2, Some(70.0))]),
                0.25
            ),
            1
        );
        // No prediction for the pick, or none for the others: the pick.
        assert_eq!(choose(0, &p(&[(0, None), (1, Some(1.0))]), 0.25), 0);
        assert_eq!(choose(1, &p(&[(0, None), (1, Some(50.0))]), 0.25), 1);
        // Threshold 0: shortest predicted completion always.
        assert_eq!(choose(0, &p(&[(0, Some(100.0)), (1, Some(99.0))]), 0.0), 1);
    }
}
