//! Unit tests of `rank::popularity`.

use super::*;

#[test]
fn hot_first_ties_by_id_and_deterministic() {
    let p = Popularity::default();
    p.record(&["7", "b"]);
    p.record(&["7"]);
    let ids = ["a", "10", "b", "9", "7"];
    // 7 (2) > b (1) > unseen, ties: numbers numerically, then text.
    assert_eq!(p.order(&ids), vec![4, 2, 3, 1, 0]);
    assert_eq!(p.order(&ids), p.order(&ids));
    let shuffled = ["9", "7", "a", "b", "10"];
    let names = |ids: &[&str]| -> Vec<String> {
        p.order(ids).iter().map(|&i| ids[i].to_string()).collect()
    };
    assert_eq!(names(&ids), names(&shuffled));
}

#[test]
fn hot_items_follow_the_access_share() {
    let p = Popularity::default();
    for _ in 0..6 {
        p.record(&["a"]);
    }
    p.record(&["b", "c"]);
    p.record(&["b"]);
    // a: 6, b: 2, c: 1 of 9 accesses; half of them is covered by a alone.
    assert_eq!(
        p.hot(&["a", "b", "c", "new"], 0.5),
        [true, false, false, false]
    );
    assert_eq!(p.hot(&["a", "b", "c"], 0.85), [true, true, false]);
    assert_eq!(p.hot(&["a", "c"], 0.0), [false, false]);
}
