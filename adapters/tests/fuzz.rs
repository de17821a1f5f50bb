//! Fuzz targets for the parsers in `recache-adapters` (harness: `tests/fuzzkit`): OpenAI
//! request bodies (`openai_body`), vLLM/SGLang KV event frames (`kv_frames`, seeded with
//! structure-aware msgpack batches and SGLang's captured frames), SGLang's `/generate` score
//! answer (`sglang_score`) and the eviction-order file (`order_file`). Properties: no panic,
//! no execution over 1 s, and per target a consistency check on what parses.
//!
//! 2 s per target by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache-adapters --test fuzz -- --nocapture`.

mod fuzzkit;
#[path = "fuzzkit/json.rs"]
mod fuzzjson;

use fuzzkit::{Rng, mutate, run};
use recache_adapters::kv_events::{KvEvent, SeqTracker, decode_frames};
use recache_adapters::openai::{self, CHAT_COMPLETIONS, COMPLETIONS, token_prompts, validate_body};
use recache_adapters::order::Order;
use recache_adapters::sglang;
use rmpv::Value as Mp;
use serde_json::{Value, json};

fn openai_seeds() -> Vec<Value> {
    vec![
        json!({"model": "m", "prompt": "hello", "max_tokens": 4, "stream": true, "n": 1}),
        json!({"model": "m", "prompt": [[1, 2], [3]], "temperature": 0.5, "stop": ["a"]}),
        json!({"model": "m", "prompt": [1, 2, 3], "seed": -3, "top_p": 1}),
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false}),
        json!({"messages": [{"role": "system", "content": [{"type": "text"}]}], "max_completion_tokens": 9}),
    ]
}

#[test]
fn openai_body() {
    let seeds = openai_seeds();
    let raw: Vec<Vec<u8>> = seeds.iter().map(|v| v.to_string().into_bytes()).collect();
    let paths = [COMPLETIONS, CHAT_COMPLETIONS, "/tokenize"];
    run(
        "openai_body",
        |rng| {
            let mut b = vec![rng.below(paths.len()) as u8];
            b.extend(fuzzjson::input(rng, &seeds, &raw));
            b
        },
        |input| {
            let path = paths[usize::from(input[0]) % paths.len()];
            let body = &input[1..];
            let verdict = validate_body(path, body);
            let parsed = serde_json::from_slice::<Value>(body);
            if let Ok(v) = &parsed {
                let _ = token_prompts(v);
                let _ = token_prompts(&v["prompt"]);
            }
            match (&verdict, parsed) {
                (Ok(info), Ok(Value::Object(o))) if openai::is_parsed_route(path) => {
                    assert_eq!(openai::validate_object(path, &o), Ok(info.clone()));
                    assert_eq!(info.stream, o.get("stream") == Some(&json!(true)));
                }
                (Ok(_), _) => assert!(!openai::is_parsed_route(path), "accepted a non-object"),
                (Err(e), _) => assert!(!e.message.is_empty() && openai::is_parsed_route(path)),
            }
        },
    );
}

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
                (s("block_hashes"), Mp::Array((0..n).map(|_| hash(rng)).collect())),
                (s("parent_block_hash"), if rng.one_in(3) { Mp::Nil } else { hash(rng) }),
                (s("token_ids"), Mp::Array(tokens)),
                (s("block_size"), Mp::from(bs)),
                (s("lora_id"), Mp::Nil),
            ];
            if rng.one_in(4) {
                m.remove(1 + rng.below(4));
            }
            Mp::Map(m)
        }
        2 => Mp::Map(vec![(s("type"), s("BlockRemoved")), (s("block_hashes"), hashes(rng))]),
        3 => Mp::Map(vec![(s("type"), s("AllBlocksCleared"))]),
        4 => Mp::Map(vec![(s("type"), s("SomethingNew")), (s("x"), Mp::from(1))]),
        _ => rng.pick(&[Mp::Nil, Mp::from(3), Mp::Array(vec![s("BlockStored")])]).clone(),
    }
}

fn batch_bytes(rng: &mut Rng) -> Vec<u8> {
    let events = Mp::Array((0..rng.below(6)).map(|_| random_event(rng)).collect());
    let ts = if rng.one_in(5) { Mp::from("t") } else { Mp::F64(1.5) };
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
    let Some((&n, rest)) = b.split_first() else { return Vec::new() };
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
        let Ok(count) = <[u8; 4]>::try_from(count.as_slice()) else { break };
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
    assert!(!captured.is_empty(), "the SGLang capture has small payloads");
    let mut tracker = SeqTracker::new();
    run(
        "kv_frames",
        |rng| {
            let payload = if rng.one_in(3) { rng.pick(&captured).clone() } else { batch_bytes(rng) };
            let payload = if rng.one_in(2) { mutate(rng, &payload, &captured) } else { payload };
            let seq = rng.int().to_be_bytes();
            let seq = if rng.one_in(10) { seq[..rng.below(9)].to_vec() } else { seq.to_vec() };
            let n = if rng.one_in(10) { rng.below(5) } else { 3 };
            let frames: Vec<Vec<u8>> = [b"kv".to_vec(), seq, payload].into_iter().cycle().take(n).collect();
            pack(&frames)
        },
        |input| {
            let frames = unpack(input);
            let Ok(batch) = decode_frames(&frames) else { return };
            let _ = tracker.check(batch.seq);
            for ev in &batch.events {
                if let KvEvent::BlockStored { block_size, .. } = ev {
                    assert!(*block_size > 0, "a decoded store has a block size");
                }
            }
            // What decoded re-encodes (ints for hashes) to the same events.
            let again = decode_frames(&[b"kv".to_vec(), batch.seq.to_be_bytes().to_vec(), encode(&batch.events)])
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
    assert_eq!(t.check(0), recache_adapters::kv_events::SeqCheck::Restart { last: u64::MAX, got: 0 });
    assert_eq!(t.check(u64::MAX), recache_adapters::kv_events::SeqCheck::Gap { expected: 1, got: u64::MAX });
    assert_eq!(t.check(u64::MAX), recache_adapters::kv_events::SeqCheck::Duplicate);
}

fn encode(events: &[KvEvent]) -> Vec<u8> {
    let s = |x: &str| Mp::from(x);
    let ints = |h: &[u64]| Mp::Array(h.iter().map(|&x| Mp::from(x)).collect());
    let evs = events.iter().map(|e| match e {
        KvEvent::BlockStored { block_hashes, parent, token_ids, block_size } => Mp::Map(vec![
            (s("type"), s("BlockStored")),
            (s("block_hashes"), ints(block_hashes)),
            (s("parent_block_hash"), parent.map_or(Mp::Nil, Mp::from)),
            (s("token_ids"), Mp::Array(token_ids.iter().map(|&t| Mp::from(t)).collect())),
            (s("block_size"), Mp::from(*block_size)),
        ]),
        KvEvent::BlockRemoved { block_hashes } => {
            Mp::Map(vec![(s("type"), s("BlockRemoved")), (s("block_hashes"), ints(block_hashes))])
        }
        KvEvent::AllBlocksCleared => Mp::Map(vec![(s("type"), s("AllBlocksCleared"))]),
    });
    let mut out = Vec::new();
    let batch = Mp::Array(vec![Mp::F64(0.0), Mp::Array(evs.collect())]);
    rmpv::encode::write_value(&mut out, &batch).expect("encode to a Vec");
    out
}

#[test]
fn sglang_score() {
    let seed = json!({"text": "x", "meta_info": {"prompt_tokens": 11, "cached_tokens": 8,
        "output_token_ids_logprobs": [[[-8.0, 300, null], [-8.7, 301, null]]]}});
    let raw = vec![seed.to_string().into_bytes()];
    run(
        "sglang_score",
        |rng| fuzzjson::input(rng, std::slice::from_ref(&seed), &raw),
        |input| {
            if let Ok(v) = serde_json::from_slice::<Value>(input)
                && let Ok(s) = sglang::read_score(&v, &[300, 301])
            {
                assert_eq!(s.logprobs.len(), 2);
            }
        },
    );
}

#[test]
fn order_file() {
    run(
        "order_file",
        |rng| {
            let o = Order {
                publish_unix_ms: rng.int(),
                generation: rng.int(),
                seq: rng.int(),
                victims: (0..rng.below(40)).map(|_| rng.int()).collect(),
            };
            let mut b = mutate(rng, &o.encode(), &[]);
            if rng.one_in(2) && b.len() >= 8 {
                // Re-seal the checksum so the length and count checks get exercised.
                let n = b.len() - 8;
                let sum = recache_hash::fnv1a(b[..n].iter().copied());
                b[n..].copy_from_slice(&sum.to_le_bytes());
            }
            b
        },
        |input| {
            if let Ok(o) = Order::decode(input) {
                assert_eq!(o.encode(), input, "a decoded order re-encodes to its bytes");
            }
        },
    );
}
