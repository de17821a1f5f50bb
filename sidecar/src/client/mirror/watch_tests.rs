//! Unit tests of `client::mirror::watch`.

use super::*;

#[test]
fn departures_after_the_published_set_make_a_canary_inconclusive() {
    let w = Watch::default();
    assert_eq!(w.present(|_| true), 0, "nothing watched yet");
    w.set(&[1, 2]);
    w.set(&[3]);
    assert_eq!(w.present(|id| id == 2), 1, "the first set stands");
    let since = w.as_published();
    assert!(!w.left_since(since));
    w.note(2, 2);
    assert!(!w.left_since(since), "nothing left");
    // Evicted after the prediction's set: inconclusive.
    w.note(2, 0);
    assert!(w.left_since(since));
    // Published afterwards: a later prediction sees the eviction in the set.
    w.published();
    assert!(!w.left_since(w.as_published()));
}
