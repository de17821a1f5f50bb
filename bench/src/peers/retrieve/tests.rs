//! Tests of the retrieve workload's pure parts: validity, answers, tallies, rows, the flags,
//! per-width summaries and the width-32 goals, the bodies each system gets.

use serde_json::{Value, json};

use super::score::{Run, Tally, item_of, peer_items, recache_items};
use super::*;
use crate::peers::report;
use recache::harness::RetrieveIndex;

/// 4 items: two of 2 tokens, two sharing (10, 21) told apart by a third token.
fn index() -> RetrieveIndex {
    let file = json!({"format": 1, "method": "test", "levels": 2, "codebook": 4,
        "seed": 0, "token_base": 10, "items": [
            {"id": "a", "code": [10, 20]}, {"id": "b", "code": [11, 20]},
            {"id": "c", "code": [10, 21, 30]}, {"id": "d", "code": [10, 21, 31]}]});
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("index.json");
    std::fs::write(&path, file.to_string()).expect("write");
    RetrieveIndex::load(&path).expect("a valid index")
}

#[test]
fn a_code_is_an_item_when_a_prefix_is_a_whole_code() {
    let ix = index();
    assert_eq!(item_of(&ix, &[10, 20]), Some("a"));
    // A token generated past a complete code is ignored.
    assert_eq!(item_of(&ix, &[11, 20, 99]), Some("b"));
    assert_eq!(item_of(&ix, &[10, 21, 31]), Some("d"));
    // Too short, off the trie, or not starting at the root.
    assert_eq!(item_of(&ix, &[10, 21]), None);
    assert_eq!(item_of(&ix, &[12, 20]), None);
    assert_eq!(item_of(&ix, &[20, 10, 20]), None);
    assert_eq!(item_of(&ix, &[]), None);
}

#[test]
fn peer_answers_are_read_best_first_and_filtered() {
    let ix = index();
    let answer = json!({"choices": [
        {"index": 2, "token_ids": [10, 21, 30]},
        {"index": 0, "token_ids": [10, 20, 5]},
        {"index": 1, "token_ids": [7, 7, 7]},
        {"index": 3, "token_ids": [11, 20, 1]}]});
    let got = peer_items(&ix, &answer, 3).expect("readable");
    assert_eq!(got, vec![Some("a".into()), None, Some("c".into())]);
    let no_ids = json!({"choices": [{"index": 0, "text": "x"}]});
    let err = peer_items(&ix, &no_ids, 3).expect_err("no token ids");
    assert!(err.contains("return_token_ids"), "{err}");
}

#[test]
fn recache_answers_are_checked_against_the_index() {
    let ix = index();
    let answer = json!({"items": [{"id": "d"}, {"id": "zz"}, {"id": "a"}]});
    let got = recache_items(&ix, &answer, 10).expect("readable");
    assert_eq!(got, vec![Some("d".into()), None, Some("a".into())]);
    assert!(recache_items(&ix, &json!({"error": "x"}), 10).is_err());
}

#[test]
fn the_tally_counts_distinct_valid_items_and_the_invalid_share() {
    let mut t = Tally::default();
    t.add(&[Some("a".into()), Some("a".into()), None, Some("b".into())]);
    t.add(&[None, None]);
    assert_eq!((t.retrievals, t.returned, t.invalid, t.valid), (2, 6, 3, 2));
    assert_eq!(t.invalid_share(), Some(0.5));
    assert_eq!(Tally::default().invalid_share(), None);
}

#[test]
fn a_row_has_every_field() {
    let mut tally = Tally::default();
    tally.add(&[Some("a".into()), None]);
    let run = Run {
        system: "recache",
        round: 1,
        beam_width: 32,
        top_k: 10,
        requests: 2,
        tally,
        latencies_ms: vec![30.0, 10.0],
        errors: 1,
        wall_s: 2.0,
        prompt_tokens: 100.0,
        cached_tokens: 60.0,
        kv_bytes: 7,
        per_replica: Some(vec![3.0, 5.0]),
        ..Default::default()
    };
    let row = run.row();
    for f in [
        "system",
        "workload",
        "rps",
        "errors",
        "computed_tokens",
        "kv_bytes",
        "valid_items_per_s",
        "invalid_share",
        "beam_width",
        "latency_p50_ms",
        "latency_p99_ms",
        "engine_requests_per_retrieval",
    ] {
        assert!(row.get(f).is_some(), "{f} missing: {row}");
    }
    assert_eq!(row["valid_items_per_s"], 0.5);
    assert_eq!(row["engine_requests_per_retrieval"], 8.0);
    assert_eq!(row["invalid_share"], 0.5);
    assert_eq!(row["computed_tokens"], 40.0);
    assert_eq!(row["latency_p99_ms"], 30.0);
    assert_eq!(row["rps"], 0.5);
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: PeersArgs,
}

fn args(extra: &[&str]) -> PeersArgs {
    use clap::Parser;
    let mut argv = vec!["peers"];
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv).expect("parses").args
}

#[test]
fn widths_default_to_32_and_128_and_raise_max_logprobs_only_for_retrieve() {
    let a = args(&["--workloads", "retrieve"]);
    assert_eq!(a.widths, [32, 128]);
    assert_eq!(a.retrieve_concurrency, 4);
    assert_eq!(max_logprobs(&a), Some(256));
    assert_eq!(
        max_logprobs(&args(&["--workloads", "retrieve", "--widths", "8,32"])),
        None
    );
    assert_eq!(max_logprobs(&args(&["--widths", "512"])), None);
    assert!(check(&args(&["--widths", "0"])).is_err());
    assert!(check(&args(&["--retrieve-concurrency", "0"])).is_err());
    assert!(check(&a).is_ok());
}

fn row(s: &str, width: u64, valid: f64, invalid: f64) -> Value {
    json!({"system": s, "workload": "retrieve", "beam_width": width,
        "valid_items_per_s": valid, "invalid_share": invalid, "errors": 0})
}

/// One summary per system × width; the goals read width 32 only.
#[test]
fn summaries_split_by_width_and_goals_read_width_32() {
    let rows = vec![
        row("recache", 32, 30.0, 0.0),
        row("sglang-router", 32, 5.0, 0.9),
        row("vllm-router", 32, 8.0, 0.8),
        row("recache", 128, 10.0, 0.0),
        row("sglang-router", 128, 9.0, 0.9),
        row("vllm-router", 128, 9.5, 0.8),
        row("recache", 32, 40.0, 0.0),
    ];
    let sums = report::summaries("retrieve", &rows);
    assert_eq!(sums.len(), 6);
    assert_eq!(
        (sums[0]["system"].as_str(), sums[0]["beam_width"].as_u64()),
        (Some("recache"), Some(32))
    );
    assert_eq!(sums[0]["valid_items_per_s"], 35.0);
    assert_eq!(sums[0]["rounds"], 2);
    assert_eq!(sums[3]["beam_width"], 128);
    assert_eq!(sums[3]["rounds"], 1);
    let v = verdict(&sums).expect("goals");
    assert_eq!(v["beam_width"], 32);
    let goals = v["goals"].as_array().expect("goals");
    // 35 >= 3 x 8 (vllm-router, the best peer at 32); recache returned nothing invalid.
    assert_eq!(goals[0]["field"], "valid_items_per_s");
    assert_eq!(goals[0]["best_peer"], "vllm-router");
    assert_eq!(goals[0]["best_peer_value"], 8.0);
    assert_eq!(goals[0]["met"], true);
    assert_eq!(goals[1]["field"], "invalid_share");
    assert_eq!(goals[1]["met"], true);
    assert_eq!(v["all_met"], true);
    // Not 3x at width 32: missed, whatever width 128 reads.
    let mut rows = rows;
    rows.push(row("vllm-router", 32, 20.0, 0.0));
    let v = verdict(&report::summaries("retrieve", &rows)).expect("goals");
    assert_eq!(v["goals"][0]["met"], false);
    assert_eq!(v["goals"][1]["met"], true);
}

/// `--out` draws one bar per system × width.
#[test]
fn the_plot_draws_every_system_and_width() {
    let rows = vec![
        row("recache", 32, 30.0, 0.0),
        row("vllm-router", 128, 0.0, 1.0),
    ];
    let sums = report::summaries("retrieve", &rows);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = report::plot(&dir.path().join("p.png"), "retrieve", &sums).expect("plots");
    assert!(path.ends_with("p-retrieve.png"), "{}", path.display());
    assert!(std::fs::metadata(&path).expect("written").len() > 1000);
}

#[test]
fn peers_get_vllm_beam_search_and_recache_its_retrieve_body() {
    let ix = index();
    let load = RetrieveLoad::for_tests(ix, "u1", "text");
    let r = bodies(System::Recache, &load, "m", 128);
    assert_eq!(r[0]["beam_width"], 128);
    assert_eq!(r[0]["top_k"], 10);
    assert_eq!(r[0]["user"]["text"], "text");
    let p = bodies(
        System::Peer(super::super::args::Peer::VllmRouter),
        &load,
        "m",
        32,
    );
    assert_eq!(p[0]["use_beam_search"], true);
    assert_eq!(p[0]["n"], 32);
    assert_eq!(p[0]["max_tokens"], 3);
    assert_eq!(p[0]["return_token_ids"], true);
    assert_eq!(p[0]["prompt"], "padded text");
}

#[test]
fn recache_rows_carry_paired_ratios_against_vllm_direct() {
    let row = |s: &str, round: u64, p50: f64, rps: f64| {
        json!({"system": s, "workload": "retrieve", "beam_width": 32, "round": round,
               "latency_p50_ms": p50, "rps": rps, "computed_tokens": 100.0})
    };
    let rows = vec![
        row("recache", 1, 50.0, 20.0),
        row("vllm-direct", 1, 100.0, 10.0),
        row("recache", 2, 90.0, 10.0),
        row("vllm-direct", 2, 100.0, 10.0),
        row("recache", 3, 60.0, 30.0),
        row("vllm-direct", 3, 100.0, 10.0),
    ];
    let mut sums = report::summaries("retrieve", &rows);
    vs_direct(&rows, &mut sums);
    let ours = sums
        .iter()
        .find(|s| s["system"] == "recache")
        .expect("recache");
    assert_eq!(
        ours["vs_direct"]["latency_p50_ms"],
        json!({"median": 0.6, "min": 0.5, "max": 0.9})
    );
    assert_eq!(
        ours["vs_direct"]["rps"],
        json!({"median": 2.0, "min": 1.0, "max": 3.0})
    );
    let direct = sums
        .iter()
        .find(|s| s["system"] == "vllm-direct")
        .expect("direct");
    assert!(direct.get("vs_direct").is_none());
}
