//! Unit tests of `itempool::sync`.

use std::sync::Arc;

use super::*;

#[test]
fn adopts_free_labels_and_evicts_the_rest() {
    let p = super::super::tests::pool(3); // labels 1000..1003
    let report = json!({"list": [
        ["a", 1001, 19], ["b", 5, 19], ["c", 1001, 19], ["d", 1000, 7], "junk"]});
    let listed = read_list(&report).expect("list");
    assert_eq!(listed.len(), 4, "malformed entries are skipped");
    assert_eq!(p.adopt(&listed), (2, 2));
    let keys: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
    assert_eq!(p.resident(&keys), [true, false, false, true]);
    assert_eq!(p.labels(&keys), [Some(1001), None, None, Some(1000)]);
    assert_eq!(p.take_evictions(), ["b", "c"]);
    // One slot is left, and it is 1002.
    let fills = p.admit(vec![super::super::Wanted {
        key: "e".into(),
        count: 1,
        tokens: Arc::new(vec![1]),
    }]);
    assert_eq!(fills[0].1, 1002);
    assert!(read_list(&serde_json::Value::Null).is_none());
    // SGLang's answer: the report is the last element of `meta_info.recache_pool`.
    let sglang = json!({"meta_info": {"recache_pool": [{"list": [["a", 1001, 19]]}]}});
    let listed = read_list(recache_adapters::Engine::Sglang.pool_report(&sglang));
    assert_eq!(listed, Some(vec![("a".to_string(), 1001, 19)]));
    let keep: HashSet<String> = ["a".to_string()].into();
    assert_eq!(p.retain_only(&keep), 1, "d goes, a stays, e is pending");
    assert_eq!(p.take_evictions(), ["d"]);
    assert_eq!(p.resident(&keys), [true, false, false, false]);
}

#[test]
fn reconcile_forgets_what_a_restarted_engine_lost_and_keeps_the_rest() {
    let p = super::super::tests::pool(4); // labels 1000..1004
    let listed: Vec<Listed> = vec![
        ("a".into(), 1000, 5),
        ("b".into(), 1001, 5),
        ("c".into(), 1002, 5),
    ];
    assert_eq!(p.adopt(&listed), (3, 0));
    let asked = Instant::now();
    // A fill that answered after the list was asked for: the list may predate it.
    let late = p.admit(vec![super::super::Wanted {
        key: "late".into(),
        count: 1,
        tokens: Arc::new(vec![1]),
    }]);
    p.filled("late", late[0].1, true, 1);
    // The engine came back holding a (same label), c under another label, and x.
    let now: Vec<Listed> = vec![
        ("a".into(), 1000, 5),
        ("c".into(), 1001, 5),
        ("x".into(), 1002, 5),
    ];
    let r = p.reconcile(&now, asked);
    assert_eq!(
        r,
        Reconciled {
            kept: 2,      // a, late
            forgotten: 2, // b (gone), c (other label)
            adopted: 2,   // c under 1001, x under 1002
            evicted: 0,
        }
    );
    let keys: Vec<String> = ["a", "b", "c", "x", "late"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(p.resident(&keys), [true, false, true, true, true]);
    assert_eq!(p.labels(&keys)[2], Some(1001));
    assert_eq!(p.metrics.evictions.with_label_values(&["engine"]).get(), 2);
    // An engine that restarted empty: everything resident before the list goes.
    let r = p.reconcile(&[], Instant::now());
    assert_eq!((r.kept, r.forgotten), (0, 4));
    assert_eq!(p.counts(), (0, 0));
}

#[test]
fn detail_says_whether_the_engine_runs_the_pool() {
    let p = super::super::tests::pool(2);
    assert_eq!(p.detail()["engine_pool"], "unknown");
    let err = p
        .read_engine_list(&serde_json::Value::Null)
        .expect_err("no list");
    let d = p.detail();
    assert_eq!(d["engine_pool"], "missing");
    assert_eq!(d["why"], json!(err.to_string()));
    assert!(err.to_string().contains("connector"), "{err}");
    let listed = p.read_engine_list(&json!({"list": [["a", 1000, 9]]}));
    assert_eq!(listed.expect("list").len(), 1);
    let d = p.detail();
    assert_eq!(
        (d["engine_pool"].as_str(), d["engine_entries"].as_u64()),
        (Some("loaded"), Some(1))
    );
    assert_eq!(
        (d["resident"].as_u64(), d["pending"].as_u64()),
        (Some(0), Some(0))
    );
}
