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
    // yet, but B's chain comes before A's, so an engine that must make room for the next
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
    assert_eq!(
        order.hashes,
        vec![23, 22, 21, 20, 13, 12, 11, 10],
        "B's chain from its tip, then A's"
    );

    // Under pressure the evicted blocks lead, deepest first, then the kept chains.
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

#[test]
fn in_flight_the_shadow_keeps_a_running_requests_blocks() {
    // LFU, room for 6 blocks: A (4 blocks) asked three times, then B (2 blocks) once; C's 2
    // new blocks need room. Serially LFU evicts B, the least used. With two in flight B is
    // still running in the engine when C arrives, so the shadow (and the order it publishes)
    // must evict from A instead, as the engine will.
    let (a, b, c): (Vec<u32>, Vec<u32>, Vec<u32>) =
        ((0..8).collect(), (100..104).collect(), (200..204).collect());
    let cfg = PolicyConfig::from_name("lfu").expect("lfu");
    let run = |in_flight: usize| {
        let mut s = Shadow::new(&cfg, 6, 32)
            .expect("shadow")
            .in_flight(in_flight);
        for _ in 0..3 {
            s.request(blocks::prompt_ids(&a, 2)).expect("a");
        }
        s.request(blocks::prompt_ids(&b, 2)).expect("b");
        s.request(blocks::prompt_ids(&c, 2)).expect("c");
        let kept = s.kept();
        blocks::prompt_ids(&b, 2).iter().all(|id| kept.contains(id))
    };
    assert!(!run(1), "serially LFU evicts B");
    assert!(run(2), "B runs while C arrives");
}
