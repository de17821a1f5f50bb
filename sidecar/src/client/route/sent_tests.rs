//! Unit tests of `client::route::sent`.

use super::*;

#[test]
fn matches_the_sent_prefix_within_ttl() {
    let mut s = Sent::default();
    s.touch(&[1, 2, 3], 0, 100);
    assert_eq!(s.matched(&[1, 2, 3, 4], 10, 1000), 3);
    assert_eq!(s.matched(&[1, 2, 9], 10, 1000), 2);
    assert_eq!(
        s.matched(&[7, 8, 9], 10, 1000),
        0,
        "chained keys: a new first block changes all"
    );
    assert_eq!(s.matched(&[1, 2, 3], 2000, 1000), 0, "expired");
    assert_eq!(s.matched(&[], 0, 1000), 0);
}

#[test]
fn keeps_the_most_recently_sent_within_capacity() {
    let mut s = Sent::default();
    for i in 0..10_000u64 {
        s.touch(&[i, i + 1_000_000], i, 64);
        // Retouching one key keeps it alive across the whole run.
        s.touch(&[42], i, 64);
    }
    assert!(s.len() <= 64 + 64 / 4, "{}", s.len());
    assert_eq!(s.matched(&[42], 10_000, u64::MAX), 1);
    assert_eq!(s.matched(&[9_999], 10_000, u64::MAX), 1);
    assert_eq!(s.matched(&[5], 10_000, u64::MAX), 0);
    // Keys sent in the same millisecond past the bound: the record keeps `capacity`.
    s.touch(
        &(0..200).map(|k| k + 5_000_000).collect::<Vec<u64>>(),
        20_000,
        64,
    );
    assert_eq!(s.len(), 64);
    s.clear();
    assert!(s.is_empty());
}
