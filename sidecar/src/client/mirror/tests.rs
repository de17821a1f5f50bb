//! Unit tests of `client::mirror`.

use super::*;

#[test]
fn only_an_exact_mirror_is_read_and_prefixes_count_from_the_start() {
    let m = ReplicaMirror::default();
    m.publish([1, 2, 3].into_iter().collect());
    assert!(m.exact().is_none(), "approximate until told otherwise");
    assert_eq!(m.held_prefix(&[1, 2, 3, 4]), 3);
    assert_eq!(m.held_prefix(&[9, 1]), 0);
    m.set_state(MirrorState::Exact, "canary agreed", "a:1");
    let v = m.exact().expect("exact");
    assert_eq!(held_prefix(&v, &[1, 2, 5]), 2);
    m.set_state(MirrorState::Degraded, "canary disagreed", "a:1");
    assert!(m.exact().is_none());
    assert_eq!(m.why(), "canary disagreed");
}

#[test]
fn delivered_zero_against_predicted_hits_raises_the_warning_after_a_streak() {
    let m = ReplicaMirror::default();
    assert!(!m.observe(64, 0, "a:1") && !m.observe(64, 0, "a:1"));
    assert!(!m.observe(0, 0, "a:1"), "nothing predicted: no evidence");
    assert!(
        m.observe(64, 0, "a:1"),
        "third call with hits predicted and none delivered"
    );
    assert!(m.observe(64, 0, "a:1"), "stays raised");
    assert!(!m.observe(64, 32, "a:1"), "a delivered hit clears it");
    m.set_silent_zero(true, "a:1");
    assert!(m.silent_zero());
}
