//! Unit tests of `rank::item_prefix`.

use super::*;

#[test]
fn counts_the_leading_run_shared_with_earlier_prompts() {
    let m = ItemPrefixModel::new(100);
    assert_eq!(m.reusable_items(&["a", "b", "c"]), 0);
    m.record(&["a", "b", "c"]);
    assert_eq!(m.reusable_items(&["a", "b", "x"]), 2);
    assert_eq!(
        m.reusable_items(&["b", "a"]),
        0,
        "order matters on a causal cache"
    );
    assert_eq!(m.reusable_items(&["a", "b", "c", "d"]), 3);
}

#[test]
fn forgets_oldest_prefixes_beyond_capacity() {
    let m = ItemPrefixModel::new(3);
    m.record(&["a", "b", "c"]);
    m.record(&["x"]);
    assert_eq!(m.reusable_items(&["a", "b", "c"]), 0);
    assert_eq!(m.reusable_items(&["x"]), 1);
}
