//! Radix index: KV-event API errors, leaf-only eviction order, pins.

use recache_eviction::{IndexError, LeafEvent, RadixIndex};

#[test]
fn typed_errors() {
    let mut idx = RadixIndex::new();
    assert_eq!(
        idx.insert(2, Some(1), 0),
        Err(IndexError::UnknownParent {
            block: 2,
            parent: 1
        })
    );
    idx.insert(1, None, 0).expect("root");
    idx.insert(2, Some(1), 0).expect("child");
    assert_eq!(idx.insert(2, Some(1), 1), Err(IndexError::Duplicate(2)));
    assert_eq!(idx.remove(1), Err(IndexError::HasChildren(1)));
    idx.pin(2).expect("pin");
    assert_eq!(idx.remove(2), Err(IndexError::Pinned(2)));
    idx.unpin(2).expect("unpin");
    assert_eq!(idx.unpin(2), Err(IndexError::NotPinned(2)));
    assert_eq!(idx.touch(9, 0), Err(IndexError::Unknown(9)));
    idx.remove(2).expect("leaf");
    idx.remove(1).expect("now a leaf");
    assert!(idx.is_empty());
}

#[test]
fn lru_order_is_oldest_then_deepest_over_evictable_leaves() {
    let mut idx = RadixIndex::new();
    for (b, p) in [(1, None), (2, Some(1)), (3, Some(2))] {
        idx.insert(b, p, 5).expect("chain at t=5");
    }
    idx.insert(10, None, 7).expect("root at t=7");
    idx.insert(11, Some(10), 3).expect("older leaf");
    // Only leaves are listed; 11 is older than 3.
    assert_eq!(idx.lru_iter().collect::<Vec<_>>(), vec![11, 3]);
    idx.remove(11).expect("leaf");
    // 10 became a leaf (t=7); the chain unwinds deepest first.
    assert_eq!(idx.lru_iter().collect::<Vec<_>>(), vec![3, 10]);
    idx.remove(3).expect("leaf");
    assert_eq!(idx.lru_first(), Some(2));
    idx.pin(2).expect("pin");
    assert_eq!(idx.lru_first(), Some(10));
    idx.touch(10, 9).expect("touch");
    assert_eq!(idx.lru_iter().collect::<Vec<_>>(), vec![10]);
}

#[test]
fn events_track_evictable_status_and_clear() {
    let mut idx = RadixIndex::new();
    idx.insert(1, None, 0).expect("root");
    idx.insert(2, Some(1), 0).expect("child");
    let ev: Vec<LeafEvent> = idx.drain_events().collect();
    assert_eq!(
        ev,
        vec![
            LeafEvent {
                block: 1,
                evictable: true
            },
            LeafEvent {
                block: 1,
                evictable: false
            },
            LeafEvent {
                block: 2,
                evictable: true
            },
        ]
    );
    idx.clear();
    assert_eq!(
        idx.drain_events().collect::<Vec<_>>(),
        vec![LeafEvent {
            block: 2,
            evictable: false
        }]
    );
    assert_eq!((idx.len(), idx.evictable_len()), (0, 0));
}
