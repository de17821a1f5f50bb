//! The mirror fed with SGLang's real KV events (frames captured on the testbed, shared with
//! `adapters/tests/sglang_events.rs`): token-granular stores give a token-granular mirror
//! whose leading-token answer matches what SGLang reported (`cached_tokens` 4 for
//! [5, 6, 7, 8, 11, 12, 13] after [5..=10]), a radix split chains under the branching token,
//! eviction removes them token by token, and `AllBlocksCleared` empties the mirror. The
//! capture's other batches (seq 8..=15) are not in the file, so the evicting batch meets
//! hashes the mirror never saw: counted, not fatal.

use recache::kvloop::mirror::Mirror;
use recache_adapters::kv_events::{KvBatch, decode_frames};
use recache_hash::blocks::prompt_ids;

fn batches() -> Vec<KvBatch> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        head
    }
    fn u32_le(rest: &mut &[u8]) -> usize {
        u32::from_le_bytes(take(rest, 4).try_into().expect("4 bytes")) as usize
    }
    let mut rest: &[u8] = include_bytes!("../../adapters/tests/data/sglang_kv_events.bin");
    let mut out = Vec::new();
    while !rest.is_empty() {
        let count = u32_le(&mut rest);
        let frames: Vec<Vec<u8>> = (0..count)
            .map(|_| {
                let len = u32_le(&mut rest);
                take(&mut rest, len).to_vec()
            })
            .collect();
        out.push(decode_frames(&frames).expect("captured frames decode"));
    }
    out
}

#[test]
fn sglang_events_build_a_token_granular_mirror() {
    let b = batches();
    let mut m = Mirror::new();
    let leading = |m: &Mirror, tokens: &[u32]| m.cached_prefix(&prompt_ids(tokens, 1));
    for ev in &b[0].events {
        m.apply(ev);
    }
    assert_eq!(m.len(), 6);
    // SGLang answered cached_tokens 4 for this prompt right after the first one.
    assert_eq!(leading(&m, &[5, 6, 7, 8, 11, 12, 13]), 4);
    for ev in &b[1].events {
        m.apply(ev);
    }
    assert_eq!(m.len(), 9);
    assert_eq!(leading(&m, &[5, 6, 7, 8, 11, 12, 13, 99]), 7);
    assert_eq!(leading(&m, &[5, 6, 7, 8, 9, 10, 99]), 6);
    assert_eq!(m.issues.unknown_parent + m.issues.bad_tokens, 0);
    for ev in &b[2].events {
        m.apply(ev);
    }
    // SGLang's LRU evicted the two small prompts first: the batch's first removal is their 9
    // tokens plus 3904 of an 8000-token prompt the file does not hold (counted as unknown).
    assert_eq!(leading(&m, &[5, 6, 7, 8, 11, 12, 13, 99]), 0);
    assert_eq!(m.issues.unknown_removed, 3904 + 4096, "{:?}", m.issues);
    for ev in &b[3].events {
        m.apply(ev);
    }
    assert!(m.is_empty());
}
