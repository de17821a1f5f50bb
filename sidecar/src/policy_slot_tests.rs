//! Unit tests of `policy_slot`.

use super::*;

#[test]
fn swaps_publish_new_generations_and_reject_offline_policies() {
    let m = crate::metrics::Metrics::new().expect("metrics");
    let slot = PolicySlot::new(PolicyConfig::from_name("lru").expect("lru"), &m).expect("slot");
    assert_eq!(slot.load().generation, 0);
    let cfg = parse_body(br#"{"policy":"lfu"}"#).expect("lfu");
    assert_eq!(slot.swap(cfg).expect("swap").generation, 1);
    assert_eq!(slot.load().config.name(), "lfu");
    let err = slot
        .swap(PolicyConfig::from_name("opt").expect("opt"))
        .expect_err("opt is offline");
    assert!(err.to_string().contains("valid: lru, lfu, sieve"), "{err}");
    let err = parse_body(br#"{"policy":"arc"}"#).expect_err("unknown");
    assert!(err.to_string().contains("one of: lru, lfu"), "{err}");
    let text = String::from_utf8(m.render()).expect("utf8");
    assert!(
        text.contains(r#"recache_eviction_policy_active{policy="lfu"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"recache_eviction_policy_active{policy="lru"} 0"#),
        "{text}"
    );
}

/// The learned policy runs when the predictor is built in, and is refused by name when not.
#[test]
fn laru_needs_the_lightgbm_feature() {
    let m = crate::metrics::Metrics::new().expect("metrics");
    let slot = PolicySlot::new(PolicyConfig::from_name("lru").expect("lru"), &m).expect("slot");
    let cfg = parse_body(br#"{"policy":"laru","lambda_min_misses":4}"#).expect("laru");
    if cfg!(feature = "lightgbm") {
        assert_eq!(slot.swap(cfg).expect("swap").config.name(), "laru");
        assert!(servable_names().contains(&"laru"));
    } else {
        let err = slot.swap(cfg).expect_err("no predictor in this build");
        assert!(err.to_string().contains("`lightgbm` feature"), "{err}");
        assert!(!servable_names().contains(&"laru"));
    }
}
