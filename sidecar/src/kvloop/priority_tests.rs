//! Unit tests of `kvloop::priority`.

use super::*;

fn source_keeping(tokens: &[u32], epoch: u64) -> Arc<PrioritySource> {
    let s = PrioritySource::new(4);
    let kept = recache_hash::blocks::prompt_ids(tokens, 4)
        .into_iter()
        .collect();
    s.publish(View { kept, epoch });
    s
}

#[test]
fn mapping_orders_epochs_before_levels_and_caps_levels() {
    assert_eq!(mapping(0, 0), 0);
    assert_eq!(mapping(0, 1), 1);
    assert_eq!((mapping(0, 2), mapping(0, 3), mapping(0, 4)), (2, 2, 3));
    assert_eq!(mapping(0, 1000), 10);
    assert_eq!(mapping(0, usize::MAX), 15);
    assert_eq!(mapping(1, 0), 16);
    assert!(mapping(1, 0) > mapping(0, usize::MAX));
    assert_eq!(mapping(u64::MAX, 5), i64::MAX);
}

#[test]
fn priority_counts_the_kept_leading_blocks() {
    let hot: Vec<u32> = (0..12).collect();
    let s = source_keeping(&hot, 2);
    assert_eq!(s.priority(std::slice::from_ref(&hot)), 2 * 16 + 2); // 3 kept blocks: level 2
    let mut other = hot.clone();
    other[5] = 999; // second block differs: only the first is kept
    assert_eq!(s.priority(&[other.clone()]), 2 * 16 + 1);
    assert_eq!(s.priority(&[vec![7; 12]]), 2 * 16);
    assert_eq!(s.priority(&[other, hot]), 2 * 16 + 2); // a batch: the highest
    assert_eq!(s.priority(&[]), 2 * 16);
}
