//! SGLang's KV events, decoded from frames captured on the testbed (SGLang 0.5.23, CPU engine,
//! `examples/testbed/kv_events_probe.py --raw`): `/generate` of [5..=10], then of
//! [5, 6, 7, 8, 11, 12, 13] (a radix split: only the new run is stored, chained to token 8's
//! hash), then five 8000-token prompts into a 32768-token cache (one batch with node
//! evictions), then `/flush_cache`. File format: per message a u32 LE frame count, then per
//! frame a u32 LE length and the bytes.

use recache_adapters::kv_events::{KvBatch, KvEvent, SeqCheck, SeqTracker, decode_frames};

fn messages() -> Vec<Vec<Vec<u8>>> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        head
    }
    fn u32_le(rest: &mut &[u8]) -> usize {
        u32::from_le_bytes(take(rest, 4).try_into().expect("4 bytes")) as usize
    }
    let mut rest: &[u8] = include_bytes!("data/sglang_kv_events.bin");
    let mut out = Vec::new();
    while !rest.is_empty() {
        let count = u32_le(&mut rest);
        let frames = (0..count)
            .map(|_| {
                let len = u32_le(&mut rest);
                take(&mut rest, len).to_vec()
            })
            .collect();
        out.push(frames);
    }
    out
}

fn decoded() -> Vec<KvBatch> {
    messages()
        .iter()
        .map(|m| decode_frames(m).expect("a captured SGLang message decodes"))
        .collect()
}

#[test]
fn token_granular_stores_chain_across_a_radix_split() {
    let msgs = messages();
    assert_eq!(msgs.len(), 4);
    assert!(
        msgs.iter().all(|m| m.len() == 3 && m[0].is_empty()),
        "topic \"\""
    );
    let b = decoded();
    assert_eq!(b[0].seq, 6);
    let KvEvent::BlockStored {
        block_hashes,
        parent,
        token_ids,
        block_size,
    } = &b[0].events[0]
    else {
        panic!("expected BlockStored, got {:?}", b[0].events);
    };
    assert_eq!((*parent, *block_size), (None, 1));
    assert_eq!(token_ids, &[5, 6, 7, 8, 9, 10]);
    // SGLang's hashes are signed int64: folded to the same u64 bits.
    assert_eq!(block_hashes[0], 2707990113706553795);
    assert_eq!(block_hashes[1], (-7784140002525171642i64) as u64);
    let token_8 = block_hashes[3];
    let KvEvent::BlockStored {
        block_hashes,
        parent,
        token_ids,
        ..
    } = &b[1].events[0]
    else {
        panic!("expected BlockStored, got {:?}", b[1].events);
    };
    assert_eq!(*parent, Some(token_8));
    assert_eq!(
        (token_ids.as_slice(), block_hashes.len()),
        (&[11, 12, 13][..], 3)
    );
}

#[test]
fn evictions_flush_and_sequence_numbers() {
    let b = decoded();
    let kinds: Vec<(&str, usize)> = b[2]
        .events
        .iter()
        .map(|e| match e {
            KvEvent::BlockStored { block_hashes, .. } => ("stored", block_hashes.len()),
            KvEvent::BlockRemoved { block_hashes } => ("removed", block_hashes.len()),
            KvEvent::AllBlocksCleared => ("cleared", 0),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![("removed", 3913), ("stored", 4096), ("removed", 4096)]
    );
    assert_eq!(b[3].events, vec![KvEvent::AllBlocksCleared]);
    let mut seq = SeqTracker::new();
    let checks: Vec<SeqCheck> = b.iter().map(|x| seq.check(x.seq)).collect();
    assert_eq!(checks[1], SeqCheck::InOrder);
    assert_eq!(
        checks[2],
        SeqCheck::Gap {
            expected: 8,
            got: 16
        }
    );
}
