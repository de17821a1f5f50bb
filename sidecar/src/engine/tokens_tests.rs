//! Unit tests of `tokens`.

use super::*;

#[test]
fn keys_separate_model_kind_id_and_text_and_the_cache_is_bounded() {
    let a = key(Some("m"), "item", "1", "red");
    assert_eq!(a, key(Some("m"), "item", "1", "red"));
    assert_ne!(a, key(Some("m"), "item", "1", "blue"));
    assert_ne!(a, key(Some("n"), "item", "1", "red"));
    assert_ne!(a, key(Some("m"), "user", "1", "red"));
    let c = TokenCache::default();
    c.put("a".into(), Arc::new(vec![1; MAX_CACHED_TOKENS - 1]));
    assert!(c.get("a").is_some());
    c.put("b".into(), Arc::new(vec![2; 2]));
    assert!(c.get("a").is_none() && c.get("b").is_some());
}
