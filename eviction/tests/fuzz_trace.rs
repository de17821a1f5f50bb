//! Fuzz target `mooncake_trace`: [`load_mooncake`] on Mooncake JSONL files built from valid
//! requests and then damaged (byte flips, truncation, JSON type swaps, huge numbers, deep
//! nesting, invalid UTF-8, blank lines). Properties: no panic, no execution over 1 s, and the
//! loader agrees with a line-by-line reference: `Ok` with one request per non-blank line when
//! every line parses, else the error names the first bad line (or `Empty` / an I/O error for
//! invalid UTF-8).
//!
//! 2 s by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache-eviction --test fuzz_trace -- --nocapture`.

#[path = "../../adapters/tests/fuzzkit/json.rs"]
mod fuzzjson;
#[path = "../../adapters/tests/fuzzkit/mod.rs"]
mod fuzzkit;

use fuzzkit::{mutate, run};
use recache_eviction::trace::{Request, TraceError, load_mooncake};
use serde_json::{Value, json};

#[test]
fn mooncake_trace() {
    let seeds = vec![
        json!({"timestamp": 0, "input_length": 512, "output_length": 8, "hash_ids": [0, 1, 2]}),
        json!({"timestamp": 27, "hash_ids": [0, 5]}),
        json!({"hash_ids": []}),
        json!({"timestamp": 3, "hash_ids": [7, 8, 9], "segments": [
            {"len": 2, "kind": "user", "entity": 4}, {"len": 1, "kind": "item", "entity": 9, "root": true}]}),
    ];
    let raw: Vec<Vec<u8>> = seeds.iter().map(|v| v.to_string().into_bytes()).collect();
    let path =
        std::env::temp_dir().join(format!("recache-fuzz-trace-{}.jsonl", std::process::id()));
    run(
        "mooncake_trace",
        |rng| {
            let mut file = Vec::new();
            for _ in 0..1 + rng.below(6) {
                let line = if rng.one_in(3) {
                    fuzzjson::input(rng, &seeds, &raw)
                } else {
                    rng.pick(&raw).clone()
                };
                file.extend(line);
                file.extend_from_slice(if rng.one_in(4) { b"\n  \n" } else { b"\n" });
            }
            if rng.one_in(4) {
                mutate(rng, &file, &raw)
            } else {
                file
            }
        },
        |input| {
            std::fs::write(&path, input).expect("write trace");
            let got = load_mooncake(&path);
            let Ok(text) = std::str::from_utf8(input) else {
                assert!(got.is_err(), "invalid UTF-8 is an error");
                return;
            };
            // Reference: `lines()` as BufRead splits them (\n, then one trailing \r dropped).
            let mut want = Vec::new();
            let mut first_bad = None;
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let seg_sum = |r: &Request| {
                    r.segments
                        .as_ref()
                        .map(|s| s.iter().fold(0usize, |a, s| a.saturating_add(s.len)))
                };
                match serde_json::from_str::<Request>(line) {
                    Ok(r) if seg_sum(&r).is_none_or(|n| n == r.hash_ids.len()) => want.push(r),
                    _ => {
                        first_bad = Some(i + 1);
                        break;
                    }
                }
            }
            match (got, first_bad) {
                (Ok(reqs), None) => assert_eq!(reqs, want),
                (Err(TraceError::Parse { line, .. }), Some(bad)) => assert_eq!(line, bad),
                (Err(TraceError::Segments { line, .. }), Some(bad)) => assert_eq!(line, bad),
                (Err(TraceError::Empty(_)), None) => assert!(want.is_empty()),
                (got, bad) => panic!("loader {got:?}, reference first bad line {bad:?}"),
            }
            let _ = serde_json::from_slice::<Value>(input);
        },
    );
    let _ = std::fs::remove_file(&path);
}
