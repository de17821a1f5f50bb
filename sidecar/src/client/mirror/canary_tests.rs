//! Unit tests of `canary`.

use super::*;

#[test]
fn canaries_share_two_blocks_and_differ_after() {
    let (a, b) = (prompt(7, 1), prompt(7, 2));
    assert_eq!(a.len(), 3 * TOKENS_PER_KEY + 1);
    let (ka, kb) = (
        prompt_ids(&a, TOKENS_PER_KEY),
        prompt_ids(&b, TOKENS_PER_KEY),
    );
    assert_eq!(ka[..2], kb[..2]);
    assert_ne!(ka[2], kb[2]);
    assert_ne!(prompt(8, 1)[..32], a[..32], "another process, other blocks");
    assert!(a.iter().all(|&t| (256..2304).contains(&t)));
}
