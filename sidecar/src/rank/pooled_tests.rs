//! Unit tests of `rank::pooled`.

use super::*;
use crate::itempool::PoolConfig;
use crate::itempool::metrics::PoolMetrics;
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
        costs_given: Default::default(),
    };
    let pool = ItemPool::new(config, 1000, m);
    let wanted = (keys.iter())
        .map(|k| crate::itempool::Wanted {
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
        user_first: false,
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
    let pools = crate::itempool::replicas::tests::test_pools(2, 8, Some("127.0.0.1:50051"));
    for (r, key) in [(0, "m/a"), (1, "m/b")] {
        let wanted = vec![crate::itempool::Wanted {
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
        user_first: false,
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

#[test]
fn user_first_puts_the_pooled_run_after_the_padded_profile() {
    let pool = pool_holding(&["m/b"]);
    let (a, b): (&[u32], &[u32]) = (&[10, 11], &[20, 21]);
    let items = [a, b];
    let hot_keys = vec!["m/a".to_string(), "m/b".to_string()];
    let parts = Parts {
        user: &[1, 2, 0, 0],
        items: &items,
        instruction: &[9],
        hot_first: &[0, 1],
        hot_keys: &hot_keys,
        label_base: 100,
        user_first: true,
    };
    let built = build_with(
        &pool,
        pool.held(&hot_keys),
        &parts,
        RecomputeSpec::default(),
    );
    let b_label = built.prompt.tokens[4];
    assert!(b_label >= 1000, "b is pooled and keeps its pool label");
    assert_eq!(
        built.prompt.tokens,
        vec![1, 2, 0, 0, b_label, 20, 21, 101, 10, 11, 9]
    );
    let segs = &built.pool.params["recache_pool"]["segments"];
    assert_eq!(
        segs[0],
        serde_json::json!(["m/b", 4, 3, 4]),
        "the run starts after the profile, its K at the shared start there"
    );
    assert_eq!(segs[1], serde_json::json!(["m/a", 7, 3, 4]));
    assert_eq!(built.resident, 1);
}
