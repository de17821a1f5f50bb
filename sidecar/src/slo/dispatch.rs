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
#[path = "dispatch_tests.rs"]
mod tests;
