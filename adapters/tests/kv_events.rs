//! Decoding of vLLM KV-event frames (well-formed, malformed, unknown types) and sequence
//! tracking (gaps, restarts, duplicates). Frames are built with rmpv the way vLLM's msgspec
//! encoder lays them out: `[ts, [ {type: ..., ...}, ... ], dp_rank]`.

use recache_adapters::kv_events::{DecodeError, KvEvent, SeqCheck, SeqTracker, decode_frames};
use rmpv::Value;

fn map(kv: Vec<(&str, Value)>) -> Value {
    Value::Map(kv.into_iter().map(|(k, v)| (Value::from(k), v)).collect())
}

fn stored(hashes: &[u64], parent: Option<u64>, tokens: usize) -> Value {
    map(vec![
        ("type", "BlockStored".into()),
        (
            "block_hashes",
            Value::Array(hashes.iter().map(|&h| h.into()).collect()),
        ),
        ("parent_block_hash", parent.map_or(Value::Nil, Value::from)),
        (
            "token_ids",
            Value::Array((0..tokens as u64).map(Value::from).collect()),
        ),
        ("block_size", 32u64.into()),
        ("lora_id", Value::Nil),
        ("medium", "GPU".into()),
    ])
}

fn frames(seq: u64, events: Vec<Value>) -> Vec<Vec<u8>> {
    let batch = Value::Array(vec![1.5f64.into(), Value::Array(events), 0u64.into()]);
    let mut payload = Vec::new();
    rmpv::encode::write_value(&mut payload, &batch).expect("encode");
    vec![b"kv".to_vec(), seq.to_be_bytes().to_vec(), payload]
}

#[test]
fn decodes_stored_removed_cleared_and_skips_unknown_types() {
    let f = frames(
        7,
        vec![
            stored(&[u64::MAX, 2], Some(9), 64),
            map(vec![
                ("type", "BlockRemoved".into()),
                ("block_hashes", Value::Array(vec![2u64.into()])),
                ("medium", "GPU".into()),
            ]),
            map(vec![("type", "SomethingNew".into())]),
            map(vec![("type", "AllBlocksCleared".into())]),
        ],
    );
    let b = decode_frames(&f).expect("decodes");
    assert_eq!(b.seq, 7);
    assert_eq!(b.ts, 1.5);
    assert_eq!(b.events.len(), 3);
    assert!(
        matches!(&b.events[0], KvEvent::BlockStored { block_hashes, parent: Some(9), token_ids, block_size: 32 }
        if block_hashes == &[u64::MAX, 2] && token_ids.len() == 64)
    );
    assert_eq!(
        b.events[1],
        KvEvent::BlockRemoved {
            block_hashes: vec![2]
        }
    );
    assert_eq!(b.events[2], KvEvent::AllBlocksCleared);
}

#[test]
fn byte_hashes_fold_like_vllm_int_mode() {
    let mut ev = stored(&[], None, 32);
    if let Value::Map(m) = &mut ev {
        m[1].1 = Value::Array(vec![Value::Binary(
            vec![0xAA; 24]
                .into_iter()
                .chain([0, 0, 0, 0, 0, 0, 1, 2])
                .collect(),
        )]);
    }
    let b = decode_frames(&frames(0, vec![ev])).expect("decodes");
    assert!(
        matches!(&b.events[0], KvEvent::BlockStored { block_hashes, .. } if block_hashes == &[0x0102])
    );
}

#[test]
fn malformed_frames_are_typed_errors() {
    let good = frames(1, vec![stored(&[1], None, 32)]);
    assert!(matches!(
        decode_frames(&good[..2]),
        Err(DecodeError::Frames(2))
    ));
    let mut bad_seq = good.clone();
    bad_seq[1] = vec![1, 2, 3];
    assert!(matches!(
        decode_frames(&bad_seq),
        Err(DecodeError::SeqLen(3))
    ));
    let mut not_msgpack = good.clone();
    not_msgpack[2] = vec![];
    assert!(matches!(
        decode_frames(&not_msgpack),
        Err(DecodeError::Msgpack(_))
    ));
    let mut truncated = good.clone();
    truncated[2].truncate(5);
    assert!(decode_frames(&truncated).is_err());
    assert!(matches!(
        decode_frames(&frames(1, vec![Value::from(3)])),
        Err(DecodeError::Shape(_))
    ));
    let no_tokens = map(vec![
        ("type", "BlockStored".into()),
        ("block_hashes", Value::Array(vec![1u64.into()])),
        ("block_size", 32u64.into()),
    ]);
    assert!(matches!(
        decode_frames(&frames(1, vec![no_tokens])),
        Err(DecodeError::Shape(_))
    ));
    let bad_hash = map(vec![
        ("type", "BlockRemoved".into()),
        ("block_hashes", Value::Array(vec!["x".into()])),
    ]);
    assert!(matches!(
        decode_frames(&frames(1, vec![bad_hash])),
        Err(DecodeError::Shape(_))
    ));
}

#[test]
fn sequence_tracker_sees_gaps_restarts_and_duplicates() {
    let mut t = SeqTracker::new();
    assert_eq!(t.check(5), SeqCheck::InOrder);
    assert_eq!(t.check(6), SeqCheck::InOrder);
    assert_eq!(t.check(6), SeqCheck::Duplicate);
    assert_eq!(
        t.check(9),
        SeqCheck::Gap {
            expected: 7,
            got: 9
        }
    );
    assert_eq!(t.check(10), SeqCheck::InOrder);
    assert_eq!(t.check(0), SeqCheck::Restart { last: 10, got: 0 });
    assert_eq!(t.check(1), SeqCheck::InOrder);
    t.reset();
    assert_eq!(t.check(40), SeqCheck::InOrder);
    assert_eq!(t.last(), Some(40));
}
