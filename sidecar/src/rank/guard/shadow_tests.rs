//! Unit tests of `shadow`.

use super::*;

/// The reversed shadow really reverses (it once scored the request order twice, and
/// every model looked perfectly order-stable).
#[test]
fn the_reversed_shadow_reverses_the_candidates() {
    assert_eq!(user_first_order(4, false), vec![0, 1, 2, 3]);
    assert_eq!(user_first_order(4, true), vec![3, 2, 1, 0]);
}
