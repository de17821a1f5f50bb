//! Fuzz target `kv_frames`: vLLM/SGLang KV event messages (`decode_frames`) from
//! structure-aware msgpack batches (well-formed events, wrong field types, missing fields,
//! unknown event types, byte-string and negative hashes, zero or huge block sizes) and from
//! SGLang's captured frames, then damaged byte-wise; wrong frame counts and sequence frames of
//! the wrong length. Properties: no panic, no execution over 1 s, [`SeqTracker`] takes any
//! sequence number, and what decodes re-encodes (hashes as ints) to the same events.
//!
//! 2 s by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache-adapters --test fuzz_kv -- --nocapture`.

mod fuzzkit;

use fuzzkit::{Rng, mutate, run};
use recache_adapters::kv_events::{KvEvent, SeqTracker, decode_frames};
use rmpv::Value as Mp;

/// A random KV event: mostly well-formed, sometimes with a field of the wrong type.
fn random_event(rng: &mut Rng) -> Mp {
    let s = |x: &str| Mp::from(x);
    let hash = |rng: &mut Rng| match rng.below(5) {
        0 => Mp::Binary((0..rng.below(40)).map(|_| rng.next_u64() as u8).collect()),
        1 => Mp::from(-(rng.below(100) as i64) - 1),
        2 => Mp::from("h"),
        _ => Mp::from(rng.int()),
    };
    let hashes = |rng: &mut Rng| Mp::Array((0..rng.below(5)).map(|_| hash(rng)).collect());
    match rng.below(6) {
        0 | 1 => {
            let n = 1 + rng.below(3);
            let bs = *rng.pick(&[1u64, 2, 16, 0, u64::MAX]);
            let tokens = (0..(n as u64 * bs.min(16)) + rng.below(2) as u64)
                .map(|_| Mp::from(rng.int()))
                .collect();
            let mut m = vec![
                (s("type"), s("BlockStored")),
                (
                    s("block_hashes"),
                    Mp::Array((0..n).map(|_| hash(rng)).collect()),
                ),
                (
                    s("parent_block_hash"),
                    if rng.one_in(3) { Mp::Nil } else { hash(rng) },
                ),
                (s("token_ids"), Mp::Array(tokens)),
                (s("block_size"), Mp::from(bs)),
                (s("lora_id"), Mp::Nil),
            ];
            if rng.one_in(4) {
                m.remove(1 + rng.below(4));
            }
            Mp::Map(m)
        }
        2 => Mp::Map(vec![
            (s("type"), s("BlockRemoved")),
            (s("block_hashes"), hashes(rng)),
        ]),
        3 => Mp::Map(vec![(s("type"), s("AllBlocksCleared"))]),
        4 => Mp::Map(vec![(s("type"), s("SomethingNew")), (s("x"), Mp::from(1))]),
        _ => rng
            .pick(&[Mp::Nil, Mp::from(3), Mp::Array(vec![s("BlockStored")])])
            .clone(),
    }
}

fn batch_bytes(rng: &mut Rng) -> Vec<u8> {
    let events = Mp::Array((0..rng.below(6)).map(|_| random_event(rng)).collect());
    let ts = if rng.one_in(5) {
        Mp::from("t")
    } else {
        Mp::F64(1.5)
    };
    let mut items = vec![ts, events];
    if rng.one_in(2) {
        items.push(Mp::from(rng.below(4)));
    }
    let mut out = Vec::new();
    let _ = rmpv::encode::write_value(&mut out, &Mp::Array(items));
    out
}

/// Frames as one byte string: count, then per frame a u16 LE length and the bytes.
fn pack(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![frames.len() as u8];
    for f in frames {
        out.extend_from_slice(&(f.len().min(u16::MAX as usize) as u16).to_le_bytes());
        out.extend_from_slice(&f[..f.len().min(u16::MAX as usize)]);
    }
    out
}

fn unpack(mut b: &[u8]) -> Vec<Vec<u8>> {
    let Some((&n, rest)) = b.split_first() else {
        return Vec::new();
    };
    b = rest;
    let mut frames = Vec::new();
    for _ in 0..n {
        let len = match b {
            [a, c, ..] => usize::from(u16::from_le_bytes([*a, *c])),
            _ => break,
        };
        let end = (2 + len).min(b.len());
        frames.push(b[2..end].to_vec());
        b = &b[end..];
    }
    frames
}

fn captured_payloads() -> Vec<Vec<u8>> {
    let mut rest: &[u8] = include_bytes!("data/sglang_kv_events.bin");
    let mut take = |n: usize| {
        let (head, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        head.to_vec()
    };
    let mut out = Vec::new();
    loop {
        let count = take(4);
        let Ok(count) = <[u8; 4]>::try_from(count.as_slice()) else {
            break;
        };
        for i in 0..u32::from_le_bytes(count) {
            let len = take(4).try_into().map(u32::from_le_bytes).unwrap_or(0);
            let frame = take(len as usize);
            if i == 2 && frame.len() < 4096 {
                out.push(frame);
            }
        }
    }
    out
}

#[test]
fn kv_frames() {
    let captured = captured_payloads();
    assert!(
        !captured.is_empty(),
        "the SGLang capture has small payloads"
    );
    let mut tracker = SeqTracker::new();
    run(
        "kv_frames",
        |rng| {
            let payload = if rng.one_in(3) {
                rng.pick(&captured).clone()
            } else {
                batch_bytes(rng)
            };
            let payload = if rng.one_in(2) {
                mutate(rng, &payload, &captured)
            } else {
                payload
            };
            let seq = rng.int().to_be_bytes();
            let seq = if rng.one_in(10) {
                seq[..rng.below(9)].to_vec()
            } else {
                seq.to_vec()
            };
            let n = if rng.one_in(10) { rng.below(5) } else { 3 };
            let frames: Vec<Vec<u8>> = [b"kv".to_vec(), seq, payload]
                .into_iter()
                .cycle()
                .take(n)
                .collect();
            pack(&frames)
        },
        |input| {
            let frames = unpack(input);
            let Ok(batch) = decode_frames(&frames) else {
                return;
            };
            let _ = tracker.check(batch.seq);
            for ev in &batch.events {
                if let KvEvent::BlockStored { block_size, .. } = ev {
                    assert!(*block_size > 0, "a decoded store has a block size");
                }
            }
            // What decoded re-encodes (ints for hashes) to the same events.
            let again = decode_frames(&[
                b"kv".to_vec(),
                batch.seq.to_be_bytes().to_vec(),
                encode(&batch.events),
            ])
            .expect("re-encoded batch decodes");
            assert_eq!(again.events, batch.events);
        },
    );
}

#[test]
fn seq_tracker_takes_the_largest_sequence_number() {
    // Regression: `last + 1` overflowed once a frame had claimed seq u64::MAX.
    let mut t = SeqTracker::new();
    t.check(u64::MAX);
    assert_eq!(
        t.check(0),
        recache_adapters::kv_events::SeqCheck::Restart {
            last: u64::MAX,
            got: 0
        }
    );
    assert_eq!(
        t.check(u64::MAX),
        recache_adapters::kv_events::SeqCheck::Gap {
            expected: 1,
            got: u64::MAX
        }
    );
    assert_eq!(
        t.check(u64::MAX),
        recache_adapters::kv_events::SeqCheck::Duplicate
    );
}

fn encode(events: &[KvEvent]) -> Vec<u8> {
    let s = |x: &str| Mp::from(x);
    let ints = |h: &[u64]| Mp::Array(h.iter().map(|&x| Mp::from(x)).collect());
    let evs = events.iter().map(|e| match e {
        KvEvent::BlockStored {
            block_hashes,
            parent,
            token_ids,
            block_size,
        } => Mp::Map(vec![
            (s("type"), s("BlockStored")),
            (s("block_hashes"), ints(block_hashes)),
            (s("parent_block_hash"), parent.map_or(Mp::Nil, Mp::from)),
            (
                s("token_ids"),
                Mp::Array(token_ids.iter().map(|&t| Mp::from(t)).collect()),
            ),
            (s("block_size"), Mp::from(*block_size)),
        ]),
        KvEvent::BlockRemoved { block_hashes } => Mp::Map(vec![
            (s("type"), s("BlockRemoved")),
            (s("block_hashes"), ints(block_hashes)),
        ]),
        KvEvent::AllBlocksCleared => Mp::Map(vec![(s("type"), s("AllBlocksCleared"))]),
    });
    let mut out = Vec::new();
    let batch = Mp::Array(vec![Mp::F64(0.0), Mp::Array(evs.collect())]);
    rmpv::encode::write_value(&mut out, &batch).expect("encode to a Vec");
    out
}
