//! Multi-chain requests (GR traces): hits are summed over chains, every block of a request
//! stays pinned until the request is done (no chain evicts another's), a block two chains
//! share is one node, and a plain request served as one chain is `access` exactly.

mod common;

use common::{cache_for, prefix_trace, random_steps};
use recache_eviction::{Access, CacheError, PolicyConfig};

fn lru() -> PolicyConfig {
    PolicyConfig::Lru {}
}

#[test]
fn hits_sum_over_chains() {
    let trace = vec![vec![1, 2, 3, 10, 20]];
    let mut cache = cache_for(&trace, &lru(), 100, 0.0);
    // One user chain (1, 2, 3) and two pooled items, each its own root chain.
    let chains = [(0, 3), (3, 4), (4, 5)];
    let req = |blocks: &'static [u64]| Access {
        blocks,
        chains: &chains,
        ..Access::default()
    };
    let first = cache.serve(&req(&[1, 2, 3, 10, 20]), 0).expect("serve");
    assert_eq!((first.hits, first.evicted, first.dropped), (0, 0, 0));
    assert_eq!(
        cache.index().depth(10),
        Some(1),
        "a pooled item hangs off the root"
    );
    // The user chain is resident up to 2; item 10 is resident, item 30 is new.
    let again = cache.serve(&req(&[1, 2, 9, 10, 30]), 1).expect("serve");
    assert_eq!(again.hits, 2 + 1);
}

#[test]
fn no_chain_evicts_another_chain_of_the_same_request() {
    let trace = vec![vec![1, 2, 3, 4]];
    let mut cache = cache_for(&trace, &lru(), 3, 0.0);
    cache.access(&[7, 8], 0, None).expect("warm");
    // Capacity 3: the old chain 7-8 goes, then chain (1, 2) fills the cache and chain
    // (3, 4) finds every leaf pinned by this request: it is dropped, not evicting 1-2.
    let req = Access {
        blocks: &[1, 2, 3, 4],
        chains: &[(0, 2), (2, 4)],
        ..Access::default()
    };
    let out = cache.serve(&req, 1).expect("serve");
    assert_eq!((out.evicted, out.dropped), (2, 1));
    let mut resident: Vec<u64> = cache.index().blocks().collect();
    resident.sort_unstable();
    assert_eq!(resident, vec![1, 2, 3]);
    assert!(
        cache.index().pins(1) == Some(0),
        "pins released after the request"
    );
}

#[test]
fn a_block_shared_by_two_chains_is_one_node() {
    let trace = vec![vec![5, 5]];
    let mut cache = cache_for(&trace, &lru(), 10, 0.0);
    let req = Access {
        blocks: &[5, 5],
        chains: &[(0, 1), (1, 2)],
        ..Access::default()
    };
    let out = cache.serve(&req, 0).expect("serve");
    assert_eq!((out.hits, out.dropped, cache.index().len()), (0, 0, 1));
    assert_eq!(cache.serve(&req, 1).expect("again").hits, 2);
}

#[test]
fn chains_outside_the_request_are_refused() {
    let trace = vec![vec![1]];
    let mut cache = cache_for(&trace, &lru(), 10, 0.0);
    let req = Access {
        blocks: &[1, 2],
        chains: &[(0, 3)],
        ..Access::default()
    };
    assert!(matches!(
        cache.serve(&req, 0),
        Err(CacheError::BadChain { end: 3, .. })
    ));
}

#[test]
fn one_chain_is_plain_access() {
    let trace = prefix_trace(&random_steps(600, 4), 25);
    for name in ["lru", "laru", "opt"] {
        let cfg = PolicyConfig::from_name(name).expect("name");
        let mut a = cache_for(&trace, &cfg, 50, 0.5);
        let mut b = cache_for(&trace, &cfg, 50, 0.5);
        for (t, r) in trace.iter().enumerate() {
            let x = a.access(r, t as u64, None).expect("access");
            let whole = [(0, r.len())];
            let req = Access {
                blocks: r,
                chains: &whole,
                ..Access::default()
            };
            assert_eq!(x, b.serve(&req, t as u64).expect("serve"), "{name} at {t}");
        }
    }
}

#[test]
fn in_flight_requests_keep_their_blocks_until_enough_others_arrive() {
    // LRU, capacity 3; the third request is stamped oldest, so serially it is the victim when
    // the fourth needs room. With two in flight it is still running then: the next oldest goes.
    let trace = vec![vec![1, 2, 3, 4]];
    let run = |in_flight: usize| {
        let mut cache = cache_for(&trace, &lru(), 3, 0.0).in_flight(in_flight);
        for (b, now) in [(1, 5), (2, 6), (3, 0), (4, 7)] {
            cache.access(&[b], now, None).expect("access");
        }
        let mut resident: Vec<u64> = cache.index().blocks().collect();
        resident.sort_unstable();
        (resident, cache.index().pins(4))
    };
    assert_eq!(run(1), (vec![1, 2, 4], Some(0)), "serially the oldest goes");
    assert_eq!(
        run(2),
        (vec![2, 3, 4], Some(1)),
        "3 runs while 4 arrives; 4 runs after"
    );
}

#[test]
fn clearing_the_cache_forgets_the_running_requests() {
    // The engine cleared its cache while requests ran: the next requests must not try to
    // unpin blocks that are gone.
    let trace = vec![vec![1, 2, 3]];
    let mut cache = cache_for(&trace, &lru(), 4, 0.0).in_flight(3);
    cache.access(&[1, 2], 0, None).expect("a");
    cache.access(&[3], 1, None).expect("b");
    cache.all_cleared();
    for (t, b) in [4u64, 5, 6, 7].into_iter().enumerate() {
        cache
            .access(&[b], t as u64 + 2, None)
            .expect("after the clear");
    }
    assert_eq!(cache.index().len(), 4);
}
