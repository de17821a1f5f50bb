//! Unit tests of `slo::dispatch`.

use super::choose;

#[test]
fn keeps_the_rules_pick_unless_another_is_clearly_faster() {
    let p = |v: &[(usize, Option<f64>)]| v.to_vec();
    // Within the threshold: the cache-aware pick stands.
    assert_eq!(choose(0, &p(&[(0, Some(100.0)), (1, Some(80.0))]), 0.25), 0);
    // Past it: the fastest replica.
    assert_eq!(
        choose(
            0,
            &p(&[(0, Some(100.0)), (1, Some(60.0)), (2, Some(70.0))]),
            0.25
        ),
        1
    );
    // No prediction for the pick, or none for the others: the pick.
    assert_eq!(choose(0, &p(&[(0, None), (1, Some(1.0))]), 0.25), 0);
    assert_eq!(choose(1, &p(&[(0, None), (1, Some(50.0))]), 0.25), 1);
    // Threshold 0: shortest predicted completion always.
    assert_eq!(choose(0, &p(&[(0, Some(100.0)), (1, Some(99.0))]), 0.0), 1);
}
