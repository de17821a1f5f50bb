//! Unit tests of `client::route::keys`.

use super::*;

#[test]
fn keys_chain_so_equal_keys_mean_equal_prefixes() {
    let a: Vec<u32> = (0..100).collect();
    let mut b = a.clone();
    b[40] = 9999; // second block differs
    let ka = RouteKeys::from_tokens(&[a]);
    let kb = RouteKeys::from_tokens(&[b]);
    assert_eq!(ka.keys.len(), 3, "three full blocks of 32 in 100 tokens");
    assert_eq!(ka.tokens, 100);
    assert_eq!(ka.keys[0], kb.keys[0]);
    assert_ne!(ka.keys[1], kb.keys[1]);
    assert_ne!(
        ka.keys[2], kb.keys[2],
        "a later block differs once an earlier one does"
    );
    // The same block after a different prefix gets a different key.
    let c: Vec<u32> = (32..64).chain(32..64).collect();
    let kc = RouteKeys::from_tokens(&[c]);
    assert_ne!(kc.keys[0], kc.keys[1]);
}

#[test]
fn text_keys_cover_full_chunks_only() {
    let k = RouteKeys::from_text(&[b'x'; 300]);
    assert_eq!(k.keys.len(), 2);
    assert_eq!(k.tokens, 75);
    assert!(RouteKeys::from_tokens(&[]).keys.is_empty());
    assert!(RouteKeys::from_text(b"short").keys.is_empty());
}
