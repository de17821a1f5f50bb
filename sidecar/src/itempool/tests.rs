//! The pool's meta service without an engine: labels, hotness admission and eviction, the
//! connector's segments, and reconciling with what the connector reports.

use std::sync::Arc;

use serde_json::json;

use super::*;

pub(super) fn pool(items: usize) -> ItemPool {
    let registry = crate::metrics::Metrics::new().expect("registry");
    let m = metrics::PoolMetrics::new(&registry).expect("metrics");
    let config = PoolConfig {
        items,
        fills: 1,
        max_pending: 8,
        refresh_per_s: 0.0,
        store: None,
        costs: Default::default(),
        costs_given: Default::default(),
    };
    ItemPool::new(config, 1000, Arc::new(m))
}

fn want(key: &str, count: u64) -> Wanted {
    Wanted {
        key: key.into(),
        count,
        tokens: Arc::new(vec![5, 6]),
    }
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| s.to_string()).collect()
}

#[test]
fn admits_hottest_first_with_own_labels_then_evicts_only_colder() {
    let p = pool(2);
    let fills = p.admit(vec![want("a", 1), want("b", 5), want("c", 3)]);
    let got: Vec<(&str, u32)> = fills.iter().map(|f| (f.0.as_str(), f.1)).collect();
    assert_eq!(
        got,
        [("b", 1000), ("c", 1001)],
        "hottest first, one label per slot"
    );
    assert_eq!(
        p.labels(&keys(&["a", "b", "c"])),
        [None, Some(1000), Some(1001)]
    );
    // Pending items are never evicted; once resident, a hotter item displaces the coldest.
    assert!(p.admit(vec![want("d", 9)]).is_empty());
    p.filled("b", 1000, true, 3);
    p.filled("c", 1001, true, 3);
    assert!(
        p.admit(vec![want("e", 2)]).is_empty(),
        "not hotter than c (3)"
    );
    let fills = p.admit(vec![want("d", 9)]);
    assert_eq!(
        (fills[0].0.as_str(), fills[0].1),
        ("d", 1001),
        "c's label is reused"
    );
    assert_eq!(p.take_evictions(), ["c"]);
    assert!(p.take_evictions().is_empty());
}

#[test]
fn a_failed_fill_gives_its_slot_back() {
    let p = pool(1);
    let f = p.admit(vec![want("a", 1)]);
    p.filled("a", f[0].1, false, 3);
    assert_eq!(p.labels(&keys(&["a"])), [None]);
    assert_eq!(p.admit(vec![want("b", 1)])[0].1, 1000);
}

#[test]
fn segments_tile_the_item_region_and_carry_evictions() {
    let p = pool(1);
    p.requeue_evictions(vec!["old".into()]);
    let used = p.request(
        keys(&["m/1", "m/2"]),
        &[3, 4],
        0,
        2,
        0,
        Default::default(),
        Vec::new(),
    );
    assert_eq!(
        used.params,
        json!({"recache_pool": {"segments": [["m/1", 0, 3], ["m/2", 3, 4]], "evict": ["old"]}})
    );
    assert!(p.take_evictions().is_empty());
}

#[test]
fn residency_and_forgetting_what_the_engine_lacks() {
    let p = pool(3);
    for f in p.admit(vec![want("a", 3), want("b", 2), want("c", 1)]) {
        p.filled(&f.0, f.1, true, 3);
    }
    assert_eq!(
        p.resident(&keys(&["a", "b", "x", "c"])),
        [true, true, false, true]
    );
    let used = p.request(
        keys(&["a", "b", "c"]),
        &[2, 2, 2],
        0,
        3,
        0,
        Default::default(),
        Vec::new(),
    );
    let report = json!({"present": ["a", "c"], "loaded_tokens": 2, "entries": 2, "bytes": 64});
    p.observe(&used, &report);
    assert_eq!(
        p.labels(&keys(&["a", "b", "c"])),
        [Some(1000), None, Some(1002)]
    );
    assert_eq!(p.metrics.loaded_tokens.get(), 2);
    assert_eq!(p.metrics.engine_bytes.get(), 64);
    // No report at all (engine without the connector) changes nothing.
    p.observe(&used, &serde_json::Value::Null);
    assert_eq!(p.metrics.unreported.get(), 1);
    assert_eq!(p.resident(&keys(&["a"])), [true]);
}
