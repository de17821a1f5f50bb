//! Unit tests of `kvloop::shadow`.

use recache_adapters::kv_events::KvEvent;

use super::*;
use recache_hash::blocks;

/// The engine stores `tokens` as one chain of 2-token blocks hashed `base + i`.
fn store(m: &mut Mirror, tokens: &[u32], base: u64) {
    m.apply(&KvEvent::BlockStored {
        block_hashes: (0..tokens.len() as u64 / 2).map(|i| base + i).collect(),
        parent: None,
        token_ids: tokens.to_vec(),
        block_size: 2,
    });
}

#[test]
fn order_ranks_what_lfu_keeps_before_the_engine_needs_room() {
    // LFU, room for everything so far: A asked three times, B once. Nothing is a victim
    // yet, but B's tip comes before A's, so an engine that must make room for the next
    // request before recache has seen it takes B, as LFU will.
    let (a, b): (Vec<u32>, Vec<u32>) = ((0..8).collect(), (100..108).collect());
    let cfg = PolicyConfig::from_name("lfu").expect("lfu");
    let mut shadow = Shadow::new(&cfg, 100, 32).expect("shadow");
    for _ in 0..3 {
        shadow.request(blocks::prompt_ids(&a, 2)).expect("a");
    }
    shadow.request(blocks::prompt_ids(&b, 2)).expect("b");
    let mut mirror = Mirror::new();
    store(&mut mirror, &a, 10);
    store(&mut mirror, &b, 20);
    let order = shadow.order(&mirror);
    assert_eq!(order.victims, 0);
    assert_eq!(order.hashes, vec![23, 13], "B's tip, then A's");

    // Under pressure the evicted blocks lead, deepest first, then the kept tips.
    let mut small = Shadow::new(&cfg, 6, 32).expect("shadow");
    for _ in 0..3 {
        small.request(blocks::prompt_ids(&a, 2)).expect("a");
    }
    small.request(blocks::prompt_ids(&b, 2)).expect("b");
    let order = small.order(&mirror);
    assert_eq!(order.victims, 2);
    assert!(order.hashes.len() > 2);
}

#[test]
fn policies_that_cannot_rank_publish_only_victims() {
    let cfg = PolicyConfig::from_name("sieve").expect("sieve");
    let mut shadow = Shadow::new(&cfg, 100, 32).expect("shadow");
    let a: Vec<u32> = (0..8).collect();
    shadow.request(blocks::prompt_ids(&a, 2)).expect("a");
    let mut mirror = Mirror::new();
    store(&mut mirror, &a, 10);
    let order = shadow.order(&mirror);
    assert_eq!((order.victims, order.hashes.len()), (0, 0));
}
