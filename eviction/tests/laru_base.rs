//! LARU's `base=dead-first`: a request-unique block goes before any prediction is asked.

mod common;

use common::cache_for;
use recache_eviction::cache::Access;
use recache_eviction::trace::{Request, Segment, SegmentKind};
use recache_eviction::{BlockId, PolicyConfig};

fn seg(len: usize, kind: SegmentKind, entity: Option<u64>, root: bool) -> Segment {
    Segment {
        len,
        kind,
        entity,
        root,
    }
}

fn request(hash_ids: Vec<BlockId>, segments: Vec<Segment>) -> Request {
    Request {
        timestamp: None,
        input_length: None,
        output_length: None,
        hash_ids,
        segments: Some(segments),
    }
}

/// The block evicted when a third request arrives at a cache of 3 holding a pooled item (100,
/// oldest, never read again) and a user's profile (200) with its candidate run (201, dead by its
/// segment, but read again later, so an exact oracle keeps it).
fn victim(spec: &str) -> BlockId {
    use SegmentKind::{Item, Items, User};
    let trace = [
        request(vec![100], vec![seg(1, Item, Some(7), true)]),
        request(
            vec![200, 201],
            vec![seg(1, User, Some(1), true), seg(1, Items, None, false)],
        ),
        request(vec![300], vec![seg(1, User, Some(2), true)]),
        request(
            vec![200, 201],
            vec![seg(1, User, Some(1), true), seg(1, Items, None, false)],
        ),
    ];
    let blocks: Vec<Vec<BlockId>> = trace.iter().map(|r| r.hash_ids.clone()).collect();
    let cfg = PolicyConfig::from_spec(spec).expect("spec");
    let mut cache = cache_for(&blocks, &cfg, 3, 0.0);
    let mut evicted = Vec::new();
    for (t, r) in trace.iter().take(3).enumerate() {
        let (chains, entities) = (r.chains(), r.entities());
        let access = Access {
            blocks: &r.hash_ids,
            chains: &chains,
            input_tokens: None,
            entities: &entities,
        };
        let before: Vec<BlockId> = cache.index().blocks().collect();
        cache.serve(&access, t as u64).expect("serve");
        evicted.extend(before.into_iter().filter(|b| !cache.index().contains(*b)));
    }
    assert_eq!(evicted.len(), 1, "{spec}: {evicted:?}");
    evicted[0]
}

#[test]
fn dead_first_base_evicts_the_dead_run_before_asking_a_prediction() {
    // Plain LARU (an exact oracle, LRU agreeing) drops the pooled item no one reads again.
    assert_eq!(victim("laru"), 100);
    // On the dead-first base the candidate run goes first, whatever the prediction says.
    assert_eq!(victim("laru:base=dead-first"), 201);
    assert_eq!(victim("dead-first"), 201);
}

#[test]
fn the_base_parses_and_names_its_values() {
    assert!(PolicyConfig::from_spec("laru:base=lru").is_ok());
    let err = PolicyConfig::from_spec("laru:base=opt").expect_err("bad base");
    assert!(format!("{err:#}").contains("base"), "{err:#}");
}
