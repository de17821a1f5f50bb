//! Unit tests of `itempool::cold`.

use std::sync::Arc;

use super::super::Wanted;
use super::*;

fn pools(n: usize, store: bool) -> Pools {
    super::super::replicas::tests::test_pools(n, 4, store.then_some("127.0.0.1:50051"))
}

fn fill(p: &Pools, r: usize, keys: &[&str]) {
    let wanted = (keys.iter())
        .map(|k| Wanted {
            key: k.to_string(),
            count: 1,
            tokens: Arc::new(vec![1]),
        })
        .collect();
    for (key, label, _) in p.get(r).admit(wanted) {
        p.get(r).filled(&key, label, true, 2);
    }
}

fn keys(ks: &[&str]) -> Vec<String> {
    ks.iter().map(|k| k.to_string()).collect()
}

#[test]
fn with_a_store_another_pools_items_are_cold_with_its_labels() {
    let p = pools(2, true);
    fill(&p, 0, &["m/a", "m/b"]);
    fill(&p, 1, &["m/b", "m/c"]);
    let h = p.held_on(1, &keys(&["m/a", "m/b", "m/c", "m/d"]));
    assert_eq!(h.resident, [true, true, true, false]);
    assert_eq!(
        h.cold,
        [true, false, false, false],
        "b and c are local on 1"
    );
    let a0 = p.get(0).slots(&keys(&["m/a"]))[0].map(|s| s.0);
    assert_eq!(
        h.labels[0], a0,
        "a keeps the label replica 0 filled it with"
    );
    let labels: Vec<u32> = h.labels.iter().flatten().copied().collect();
    let mut distinct = labels.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        labels.len(),
        "labels stay distinct: {labels:?}"
    );
    assert!(
        (h.labels[1..3].iter().flatten()).all(|&l| l >= 1004),
        "replica 1's range starts past replica 0's 4 slots: {:?}",
        h.labels
    );
}

#[test]
fn without_a_store_only_the_own_pool_counts_and_labels_are_shared() {
    let p = pools(2, false);
    fill(&p, 0, &["m/a"]);
    fill(&p, 1, &["m/c"]);
    let h = p.held_on(1, &keys(&["m/a", "m/c"]));
    assert_eq!(h.resident, [false, true]);
    assert_eq!(h.cold, [false, false]);
    assert_eq!(
        h.labels[1],
        Some(1000),
        "both pools start at the first pool label"
    );
    assert_eq!(label_span(&p.get(0).config, 2), 4);
}

#[test]
fn pending_fills_elsewhere_are_not_cold() {
    let p = pools(2, true);
    p.get(0).admit(vec![Wanted {
        key: "m/a".into(),
        count: 1,
        tokens: Arc::new(vec![1]),
    }]);
    let h = p.held_on(1, &keys(&["m/a"]));
    assert_eq!((h.resident[0], h.cold[0]), (false, false));
    assert_eq!(label_span(&p.get(0).config, 2), 8);
}
