//! Fuzz targets for the parsers in `recache-adapters` (harness: `tests/fuzzkit`): OpenAI
//! request bodies (`openai_body`: the verdict of `validate_body` agrees with
//! `validate_object` and the `stream` flag), SGLang's `/generate` score answer
//! (`sglang_score`) and the eviction-order file (`order_file`: what decodes re-encodes to the
//! same bytes). KV event frames are in `fuzz_kv.rs`. Properties: no panic, no execution over
//! 1 s, and the per-target check.
//!
//! 2 s per target by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache-adapters --test fuzz -- --nocapture`.

#[path = "fuzzkit/json.rs"]
mod fuzzjson;
mod fuzzkit;

use fuzzkit::{mutate, run};
use recache_adapters::openai::{self, CHAT_COMPLETIONS, COMPLETIONS, token_prompts, validate_body};
use recache_adapters::order::Order;
use recache_adapters::sglang;
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
