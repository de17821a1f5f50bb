//! Unit tests of `itempool::replicas`.

use super::*;

fn pools(n: usize) -> Pools {
    test_pools(n, 4, None)
}

#[test]
fn hot_items_everywhere_cold_items_at_one_home() {
    let p = pools(3);
    assert_eq!(p.len(), 3);
    let mut per = [0usize; 3];
    for k in 0..300 {
        let id = id_of(&format!("m/item-{k}"));
        assert!((0..3).all(|r| p.placed(r, id, true)), "hot goes everywhere");
        let homes: Vec<usize> = (0..3).filter(|&r| p.placed(r, id, false)).collect();
        assert_eq!(homes.len(), 1, "a cold item has one home");
        per[homes[0]] += 1;
    }
    assert!(per.iter().all(|&n| n > 60), "{per:?}");
    // One replica: everything is placed there.
    let one = pools(1);
    assert!(one.placed(0, 7, false));
    assert_eq!(
        one.get(0).target,
        None,
        "one replica: routed calls, as before"
    );
    assert_eq!(
        p.get(2).target,
        Some(2),
        "several: each pool's calls go to its replica"
    );
}

#[test]
fn with_a_store_spare_slots_take_the_next_hottest_items() {
    let with = test_pools(2, 4, Some("redis://127.0.0.1:6379"));
    let items: Vec<Wanted> = (0..12u64)
        .map(|k| Wanted {
            key: format!("m/item-{k}"),
            count: 100 - k,
            tokens: Arc::new(vec![1]),
        })
        .collect();
    let shares = with.shares(&items, 0.0);
    let mut union: Vec<&str> = (shares.iter().flatten()).map(|w| w.key.as_str()).collect();
    assert!(
        shares.iter().all(|s| s.len() <= 4),
        "each pool fits its slots"
    );
    union.sort_unstable();
    union.dedup();
    let mut top8: Vec<String> = (0..8).map(|k| format!("m/item-{k}")).collect();
    top8.sort_unstable();
    assert_eq!(
        union, top8,
        "together the pools take the 8 hottest items, once each"
    );
    // Without a store: homes only (the coldest homed items of a fuller home are left out).
    let without = test_pools(2, 4, None);
    for (r, share) in without.shares(&items, 0.0).iter().enumerate() {
        assert!(
            share
                .iter()
                .all(|w| without.placed(r, id_of(&w.key), false))
        );
    }
}

#[test]
fn the_replicated_share_is_the_rules_else_alg_1s_with_a_store_else_all() {
    let store = test_pools(2, 4, Some("redis://127.0.0.1:6379"));
    assert_eq!(
        store.hot_share(Some(0.4), 19.0),
        0.4,
        "the rule's share wins"
    );
    // The testbed's costs: a fetch ~355x faster than computing, so nothing replicated.
    assert_eq!(store.hot_share(None, 19.0), 0.0);
    assert_eq!(store.metrics.hot_share.get(), 0.0);
    assert_eq!(
        test_pools(2, 4, None).hot_share(None, 19.0),
        1.0,
        "no store"
    );
    assert_eq!(
        test_pools(1, 4, Some("redis://h:1")).hot_share(None, 19.0),
        1.0
    );
}

#[test]
fn the_item_id_not_the_model_decides_the_home() {
    assert_eq!(id_of("model-a/42"), id_of("model-b/42"));
    assert_eq!(id_of("42"), placement::id("42"));
}

#[test]
fn gauges_add_up_over_the_pools() {
    let p = pools(2);
    let w = |k: &str| Wanted {
        key: k.into(),
        count: 1,
        tokens: Arc::new(vec![1]),
    };
    p.get(0).admit(vec![w("a"), w("b")]);
    p.get(1).admit(vec![w("c")]);
    let pending = p.metrics.items.with_label_values(&["pending"]).get();
    assert_eq!(pending, 3);
    p.get(1).filled("c", 1000, true, 2);
    assert_eq!(p.metrics.items.with_label_values(&["resident"]).get(), 1);
    // Each pool counts its own fills (a precompute reports what it computed itself).
    assert_eq!(p.get(1).fills_done(), (1, 0, 2));
    assert_eq!(p.get(0).fills_done(), (0, 0, 0));
    p.metrics
        .observe_report(0, &serde_json::json!({"entries": 2, "bytes": 10}));
    p.metrics
        .observe_report(1, &serde_json::json!({"entries": 1, "bytes": 5}));
    assert_eq!(p.metrics.engine_items.get(), 3);
    assert_eq!(p.metrics.engine_bytes.get(), 15);
}

/// Pools over `n` replicas of `items` slots each, optionally with a store (other modules' tests use it too).
pub(crate) fn test_pools(n: usize, items: usize, store: Option<&str>) -> Pools {
    let registry = crate::metrics::Metrics::new().expect("registry");
    let m = PoolMetrics::new(&registry).expect("metrics");
    let config = PoolConfig {
        items,
        fills: 1,
        max_pending: 8,
        refresh_per_s: 0.0,
        store: store.map(str::to_string),
        costs: hrcs::Costs::default(),
        costs_given: Default::default(),
    };
    let labels: Vec<String> = (0..n).map(|i| format!("127.0.0.1:{}", 9000 + i)).collect();
    Pools::new(&config, 1000, m, &labels)
}
