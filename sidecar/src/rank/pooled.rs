//! The item-first prompt for one replica's item pool: resident items lead (each keeps its
//! pool label; their order does not matter, each was computed alone), then the pool
//! recompute setting's link tokens, then the other items hot-first, the user and the
//! instruction. Shared by the pipeline and the quality guard's shadow scoring, so both build
//! the same tokens for the same pool state; it records nothing (no hotness, no fills).

use super::layout::{self, Prompt};
use super::pool::{ItemPool, PoolUse};
use super::recompute::RecomputeSpec;
use super::select::PrefixKind;

/// A built pooled prompt.
pub struct Pooled {
    pub prompt: Prompt,
    pub pool: PoolUse,
    /// Request indices of the items in prompt order.
    pub order: Vec<usize>,
    /// Leading items recache takes as resident (the connector may supply fewer).
    pub resident: usize,
    /// Tokens sent again after the pooled run (`link:k=N`): computed by the engine.
    pub link_tokens: usize,
}

/// The pieces of a request a pooled prompt is made of.
pub struct Parts<'a> {
    pub user: &'a [u32],
    pub items: &'a [&'a [u32]],
    pub instruction: &'a [u32],
    /// Request indices in hot-first order, and each one's pool key in that order.
    pub hot_first: &'a [usize],
    pub hot_keys: &'a [String],
    pub label_base: u32,
}

/// Builds the prompt for `pool` with `spec`.
pub fn build(pool: &ItemPool, parts: &Parts<'_>, spec: RecomputeSpec) -> Pooled {
    let res = pool.resident(parts.hot_keys);
    let (first, rest): (Vec<usize>, Vec<usize>) = (0..res.len()).partition(|&j| res[j]);
    let resident = first.len();
    let perm: Vec<usize> = first.into_iter().chain(rest).collect();
    let order: Vec<usize> = perm.iter().map(|&j| parts.hot_first[j]).collect();
    let keys: Vec<String> = perm.iter().map(|&j| parts.hot_keys[j].clone()).collect();
    let labels = layout::labels(parts.label_base, &pool.labels(&keys));
    let mut prompt = layout::build_labeled(
        PrefixKind::Item,
        parts.user,
        parts.items,
        &order,
        parts.instruction,
        &labels,
    );
    let lens: Vec<usize> = order.iter().map(|&i| parts.items[i].len() + 1).collect();
    let run: usize = lens[..resident].iter().sum();
    let segments: Vec<&[u32]> = (lens[..resident].iter())
        .scan(0, |at, &n| {
            let s = *at;
            *at += n;
            Some(&prompt.tokens[s..s + n])
        })
        .collect();
    let link = spec.link_tokens(&segments);
    let link_tokens = link.len();
    prompt.tokens.splice(run..run, link);
    let pool = pool.request(keys, &lens, resident, link_tokens, spec);
    Pooled {
        prompt,
        pool,
        order,
        resident,
        link_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rank::pool::PoolConfig;
    use crate::rank::pool::metrics::PoolMetrics;
    use std::sync::Arc;

    fn pool_holding(keys: &[&str]) -> ItemPool {
        let registry = crate::metrics::Metrics::new().expect("registry");
        let m = Arc::new(PoolMetrics::new(&registry).expect("metrics"));
        let config = PoolConfig {
            items: 8,
            fills: 1,
            max_pending: 8,
            refresh_per_s: 0.0,
        };
        let pool = ItemPool::new(config, 1000, m);
        let wanted = (keys.iter())
            .map(|k| crate::rank::pool::Wanted {
                key: k.to_string(),
                count: 1,
                tokens: Arc::new(vec![1]),
            })
            .collect();
        for (key, label, _) in pool.admit(wanted) {
            pool.filled(&key, label, true, 2);
        }
        pool
    }

    #[test]
    fn link_tokens_follow_the_pooled_run_and_shift_later_segments() {
        let pool = pool_holding(&["m/b"]);
        let (a, b): (&[u32], &[u32]) = (&[10, 11], &[20, 21]);
        let items = [a, b];
        let hot_keys = vec!["m/a".to_string(), "m/b".to_string()];
        let parts = Parts {
            user: &[1, 2],
            items: &items,
            instruction: &[9],
            hot_first: &[0, 1],
            hot_keys: &hot_keys,
            label_base: 100,
        };
        let plain = build(&pool, &parts, RecomputeSpec::default());
        let b_label = plain.prompt.tokens[0];
        assert!(b_label >= 1000, "b is pooled and keeps its pool label");
        assert_eq!(
            plain.prompt.tokens,
            vec![b_label, 20, 21, 101, 10, 11, 1, 2, 9]
        );
        assert_eq!((plain.resident, plain.link_tokens), (1, 0));
        let link = build(&pool, &parts, "link:k=2:pos=true".parse().expect("spec"));
        assert_eq!(
            link.prompt.tokens,
            vec![b_label, 20, 21, b_label, 20, 101, 10, 11, 1, 2, 9]
        );
        assert_eq!(link.link_tokens, 2);
        let segs = &link.pool.params["recache_pool"]["segments"];
        assert_eq!(segs[0], serde_json::json!(["m/b", 0, 3, 0]));
        assert_eq!(
            segs[1],
            serde_json::json!(["m/a", 5, 3, 5]),
            "after the link tokens"
        );
        assert_eq!(
            link.prompt.labels, plain.prompt.labels,
            "labels are the items'"
        );
    }
}
