//! Unit tests of `kvloop::mirror`.

use super::*;

fn stored(hashes: &[u64], parent: Option<u64>, tokens: Vec<u32>) -> KvEvent {
    KvEvent::BlockStored {
        block_hashes: hashes.to_vec(),
        parent,
        token_ids: tokens,
        block_size: 2,
    }
}

#[test]
fn follows_chained_stores_inner_removals_and_copies() {
    let mut m = Mirror::new();
    m.apply(&stored(&[10, 11], None, vec![1, 2, 3, 4]));
    m.apply(&stored(&[12], Some(11), vec![5, 6]));
    let prompt = blocks::prompt_ids(&[1, 2, 3, 4, 5, 6, 7], 2);
    assert_eq!(m.cached_prefix(&prompt), 3);
    assert_eq!(m.hash_of(prompt[2]), Some(12));
    // vLLM may evict an inner block: the child stays, unreachable.
    m.apply(&KvEvent::BlockRemoved {
        block_hashes: vec![11],
    });
    assert_eq!((m.len(), m.cached_prefix(&prompt)), (2, 1));
    m.apply(&stored(&[11], Some(10), vec![3, 4]));
    assert_eq!(m.cached_prefix(&prompt), 3);
    // A second physical copy needs its own removal.
    m.apply(&stored(&[10], None, vec![1, 2]));
    m.apply(&KvEvent::BlockRemoved {
        block_hashes: vec![10],
    });
    assert!(m.contains(10));
    m.apply(&KvEvent::BlockRemoved {
        block_hashes: vec![10, 99],
    });
    assert!(!m.contains(10));
    assert_eq!(m.issues.unknown_removed, 1);
    m.apply(&stored(&[20], Some(77), vec![1, 2]));
    assert_eq!(m.issues.unknown_parent, 1);
    m.apply(&KvEvent::AllBlocksCleared);
    assert!(m.is_empty());
}
