//! The item-first prompt for one replica's item pool: resident items lead (each keeps its
//! pool label; their order does not matter, each was computed alone), then the pool
//! recompute setting's link tokens, then the other items hot-first, the user and the
//! instruction. With a store, items another replica's pool holds follow the local ones in the
//! pooled run, with that pool's labels, marked cold ([`super::pool::cold`]). Shared by the
//! pipeline and the quality guard's shadow scoring, so both build the same tokens for the
//! same pool state; it records nothing (no hotness, no fills).

use super::layout::{self, Prompt};
use super::pool::cold::Held;
use super::pool::replicas::Pools;
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

/// Builds the prompt for replica `r`'s pool (and, with a store, what it reads from it).
pub fn build(pools: &Pools, r: usize, parts: &Parts<'_>, spec: RecomputeSpec) -> Pooled {
    build_with(pools.get(r), pools.held_on(r, parts.hot_keys), parts, spec)
}

/// Builds the prompt for `pool` holding `held` of the parts' items with `spec`.
pub fn build_with(pool: &ItemPool, held: Held, parts: &Parts<'_>, spec: RecomputeSpec) -> Pooled {
    let n = held.resident.len();
    // Local items lead, cold ones follow (a failed fetch is recomputed from its block on),
    // then the rest; each group keeps its hot-first order.
    let group = |j: usize| match (held.resident[j], held.cold[j]) {
        (true, false) => 0,
        (true, true) => 1,
        _ => 2,
    };
    let mut perm: Vec<usize> = (0..n).collect();
    perm.sort_by_key(|&j| group(j));
    let resident = perm.iter().filter(|&&j| held.resident[j]).count();
    let order: Vec<usize> = perm.iter().map(|&j| parts.hot_first[j]).collect();
    let keys: Vec<String> = perm.iter().map(|&j| parts.hot_keys[j].clone()).collect();
    let cold: Vec<String> = (perm.iter())
        .filter(|&&j| held.cold[j])
        .map(|&j| parts.hot_keys[j].clone())
        .collect();
    let slot_labels: Vec<Option<u32>> = perm.iter().map(|&j| held.labels[j]).collect();
    let labels = layout::labels(parts.label_base, &slot_labels);
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
    let pool = pool.request(keys, &lens, resident, link_tokens, spec, cold);
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
            store: None,
            costs: Default::default(),
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
        let held = || pool.held(&hot_keys);
        let plain = build_with(&pool, held(), &parts, RecomputeSpec::default());
        let b_label = plain.prompt.tokens[0];
        assert!(b_label >= 1000, "b is pooled and keeps its pool label");
        assert_eq!(
            plain.prompt.tokens,
            vec![b_label, 20, 21, 101, 10, 11, 1, 2, 9]
        );
        assert_eq!((plain.resident, plain.link_tokens), (1, 0));
        let link = build_with(
            &pool,
            held(),
            &parts,
            "link:k=2:pos=true".parse().expect("spec"),
        );
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

    #[test]
    fn cold_items_follow_the_local_ones_with_their_pools_labels() {
        let pools = crate::rank::pool::replicas::test_pools(2, 8, Some("127.0.0.1:50051"));
        for (r, key) in [(0, "m/a"), (1, "m/b")] {
            let wanted = vec![crate::rank::pool::Wanted {
                key: key.into(),
                count: 1,
                tokens: Arc::new(vec![1]),
            }];
            for (k, label, _) in pools.get(r).admit(wanted) {
                pools.get(r).filled(&k, label, true, 2);
            }
        }
        let (a, b, c): (&[u32], &[u32], &[u32]) = (&[10], &[20], &[30]);
        let items = [a, b, c];
        let hot_keys = vec!["m/a".to_string(), "m/b".to_string(), "m/c".to_string()];
        let parts = Parts {
            user: &[1],
            items: &items,
            instruction: &[9],
            hot_first: &[0, 1, 2],
            hot_keys: &hot_keys,
            label_base: 100,
        };
        let built = build(&pools, 1, &parts, RecomputeSpec::default());
        assert_eq!(built.order, [1, 0, 2], "local b, cold a, then c");
        assert_eq!(built.resident, 2);
        let a_label = pools.get(0).held(&hot_keys[..1]).labels[0].expect("a's label");
        let b_label = pools.get(1).held(&hot_keys[1..2]).labels[0].expect("b's label");
        assert_ne!(a_label, b_label, "the pools' label ranges differ");
        assert_eq!(built.prompt.tokens[..4], [b_label, 20, a_label, 10]);
        let p = &built.pool.params["recache_pool"];
        assert_eq!(p["cold"], serde_json::json!(["m/a"]));
        assert_eq!(p["segments"][1], serde_json::json!(["m/a", 2, 2]));
        // On replica 0, a is local and b is cold.
        let other = build(&pools, 0, &parts, RecomputeSpec::default());
        assert_eq!(other.order, [0, 1, 2]);
        assert_eq!(
            other.pool.params["recache_pool"]["cold"],
            serde_json::json!(["m/b"])
        );
        assert_eq!(pools.metrics.cold_items.get(), 2);
    }
}
