//! Unit tests of `kvloop::resident`.

use super::*;

#[test]
fn prefix_tokens_follow_the_chain_and_liveness_gates_the_view() {
    let r = Resident::new(2);
    assert!(r.view().is_none());
    r.set_live(true);
    let prompt = [1, 2, 3, 4, 5, 6, 7];
    let ids = blocks::prompt_ids(&prompt, 2);
    r.publish(ids[..2].iter().copied());
    let v = r.view().expect("live");
    assert_eq!(v.cached_prefix_tokens(&prompt), 4);
    assert_eq!(v.cached_prefix_tokens(&[9, 9, 3, 4]), 0);
    assert_eq!(v.first_block(&prompt), Some(ids[0]));
    assert!(v.holds(ids[1]) && !v.holds(ids[2]));
    assert_eq!(v.first_block(&[1]), None);
    r.set_live(false);
    assert!(r.view().is_none());
}
