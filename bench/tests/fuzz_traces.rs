//! Fuzz targets for the trace and data readers of `recache bench`: `replay_trace`
//! (`bench::replay::load_trace`, Mooncake JSONL) and `gr_data` (`bench::gr::workload::load`, a
//! `user item item ...` interaction file plus a `{"<idx>": {"title": ...}}` item file), on valid
//! files damaged by byte flips, truncation, JSON type swaps, huge numbers, deep nesting and
//! invalid UTF-8. Properties: no panic, no execution over 1 s, and what loads keeps its
//! promises (at most `requests` requests of at most `(max_model_len - 2) / 32` ids; users with
//! at least two items, titles non-empty, one count per ranked item).
//!
//! 2 s per target by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache-bench --test fuzz_traces -- --nocapture`.

#[path = "../../adapters/tests/fuzzkit/json.rs"]
mod fuzzjson;
#[path = "../../adapters/tests/fuzzkit/mod.rs"]
mod fuzzkit;

use std::path::PathBuf;

use fuzzkit::{mutate, run};
use recache_bench::gr::workload;
use recache_bench::replay::load_trace;
use serde_json::json;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("recache-fuzz-{name}-{}", std::process::id()))
}

#[test]
fn replay_trace() {
    let seeds = vec![
        json!({"timestamp": 0, "input_length": 512, "output_length": 8, "hash_ids": [0, 1, 2]}),
        json!({"hash_ids": [5, 18446744073709551615u64, -1, "x"]}),
    ];
    let raw: Vec<Vec<u8>> = seeds.iter().map(|v| v.to_string().into_bytes()).collect();
    let path = temp("replay.jsonl");
    run(
        "replay_trace",
        |rng| {
            let mut file = vec![rng.below(8) as u8, rng.below(200) as u8];
            for _ in 0..1 + rng.below(6) {
                file.extend(fuzzjson::input(rng, &seeds, &raw));
                file.push(b'\n');
            }
            if rng.one_in(4) {
                mutate(rng, &file, &raw)
            } else {
                file
            }
        },
        |input| {
            let (requests, max_len) = match input {
                [r, m, ..] => (usize::from(*r), usize::from(*m)),
                _ => (0, 0),
            };
            std::fs::write(&path, input.get(2..).unwrap_or_default()).expect("write trace");
            if let Ok(reqs) = load_trace(&path, requests, max_len) {
                assert!(reqs.len() <= requests);
                let max_ids = max_len.saturating_sub(2) / 32;
                assert!(reqs.iter().all(|r| r.len() <= max_ids));
            }
        },
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn gr_data() {
    let items = vec![json!({"0": {"title": "a b"}, "1": {"title": "c"}, "7": {"title": "d"}})];
    let items_raw: Vec<Vec<u8>> = items.iter().map(|v| v.to_string().into_bytes()).collect();
    let lines: Vec<Vec<u8>> = ["1 2 3 4", "2 7 7", "3 1 0 2 9", "18446744073709551615 1 2"]
        .iter()
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let (data_path, items_path) = (temp("gr-data.txt"), temp("gr-items.json"));
    run(
        "gr_data",
        |rng| {
            let mut data: Vec<u8> = Vec::new();
            for _ in 0..1 + rng.below(6) {
                let line: &Vec<u8> = rng.pick(lines.as_slice());
                data.extend_from_slice(line);
                data.push(b'\n');
            }
            if rng.one_in(3) {
                data = mutate(rng, &data, &lines);
            }
            let items = fuzzjson::input(rng, &items, &items_raw);
            // Split marker: a u16 LE length of the interaction file first.
            let mut out = (data.len().min(u16::MAX as usize) as u16)
                .to_le_bytes()
                .to_vec();
            out.extend_from_slice(&data[..data.len().min(u16::MAX as usize)]);
            out.extend(items);
            out
        },
        |input| {
            let n = input
                .get(..2)
                .map_or(0, |b| usize::from(u16::from_le_bytes([b[0], b[1]])));
            let rest = input.get(2..).unwrap_or_default();
            let (data, items) = rest.split_at(n.min(rest.len()));
            std::fs::write(&data_path, data).expect("write data");
            std::fs::write(&items_path, items).expect("write items");
            if let Ok(d) = workload::load(&data_path, &items_path) {
                assert!(!d.users.is_empty() && !d.titles.is_empty());
                assert!(d.users.iter().all(|(_, h)| h.len() >= 2));
                assert_eq!(d.items.len(), d.item_counts.len());
                for &i in d.items.iter().take(4) {
                    assert!(d.title_of(i) < d.titles.len());
                }
            }
        },
    );
    let _ = std::fs::remove_file(&data_path);
    let _ = std::fs::remove_file(&items_path);
}
