//! The `retrieve` workload: generative retrieval at each of `--widths`, recache's
//! `/v1/retrieve` (constrained beam search over the index's codes, top-k 10) against what a
//! team has without it: vLLM's own beam search (`use_beam_search`, `n` = width, `max_tokens`
//! = the deepest code) through each peer, its 10 best sequences post-filtered to catalog
//! items. Every system × width runs on emptied replica caches, the same users' prompts in the
//! same order (the same tokens on both sides: [`load`]), `--retrieve-concurrency` retrievals
//! in flight (a closed loop); rows carry valid items per second, the invalid share and
//! latency per retrieval ([`score`]). Owns: the load, the run of one system × width, the
//! width-32 goals and the workload's table.

pub mod load;
pub mod score;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::args::{PeersArgs, Workload};
use super::replicas::Replicas;
use super::report;
use super::system::{self, RecacheSetup, System};
use crate::error::BenchError;
use crate::http;
use load::RetrieveLoad;
use score::{Run, Tally};

/// Items asked for per retrieval (capped at the width).
pub const TOP_K: usize = 10;
/// The width the goals are checked at.
pub const GOAL_WIDTH: u64 = 32;
/// The testbed's `--max-logprobs` default.
const TESTBED_MAX_LOGPROBS: u64 = 200;

/// The replicas' `--max-logprobs` when the retrieve workload runs: vLLM's beam search asks
/// for 2 × width logprobs per step; None keeps the testbed's default.
pub fn max_logprobs(args: &PeersArgs) -> Option<u64> {
    if !args.workloads.contains(&Workload::Retrieve) {
        return None;
    }
    let need = 2 * args.widths.iter().copied().max().unwrap_or(0) as u64;
    (need > TESTBED_MAX_LOGPROBS).then_some(need)
}

/// Refuses what cannot run, before anything starts (recache itself refuses widths above its
/// `--retrieve-max-beam-width` limit when it starts).
pub fn check(args: &PeersArgs) -> Result<(), BenchError> {
    if args.widths.is_empty() || args.widths.contains(&0) {
        return Err(BenchError::Setup("--widths: give widths of at least 1".into()));
    }
    if args.retrieve_concurrency == 0 {
        return Err(BenchError::Setup(
            "--retrieve-concurrency must be at least 1".into(),
        ));
    }
    Ok(())
}

/// recache's serve flags for the load.
fn setup(args: &PeersArgs, load: &RetrieveLoad) -> RecacheSetup {
    let max = args.widths.iter().copied().max().unwrap_or(1);
    let mut extra = vec![
        "--retrieve-index".to_string(),
        load.index_path.display().to_string(),
        "--retrieve-max-beam-width".to_string(),
        max.to_string(),
    ];
    if load.align > 1 {
        extra.extend([
            "--retrieve-align".to_string(),
            load.align.to_string(),
            "--retrieve-pad-token".to_string(),
            load.pad.to_string(),
        ]);
    }
    RecacheSetup {
        extra,
        ..Default::default()
    }
}

/// The request bodies `s` gets, one per user.
fn bodies(s: System, load: &RetrieveLoad, model: &str, width: usize) -> Vec<Arc<Value>> {
    let k = TOP_K.min(width);
    match s {
        System::Recache => (load.users.iter())
            .map(|u| {
                Arc::new(json!({"model": model, "user": {"id": u.id, "text": u.text},
                    "beam_width": width, "top_k": k}))
            })
            .collect(),
        System::Peer(_) => (load.texts.iter())
            .map(|t| {
                Arc::new(json!({"model": model, "prompt": t, "use_beam_search": true,
                    "n": width, "max_tokens": load.index.depth, "temperature": 0,
                    "ignore_eos": true, "return_token_ids": true}))
            })
            .collect(),
    }
}

type Answer = (usize, f64, Result<(u16, Value), String>);

/// One system × width × round: one row.
#[allow(clippy::too_many_arguments)]
pub async fn one(
    args: &PeersArgs,
    venv: &std::path::Path,
    replicas: &Replicas,
    load: &RetrieveLoad,
    s: System,
    width: usize,
    round: u32,
) -> Result<Value, BenchError> {
    let client = http::client();
    replicas.reset(&client).await?;
    let running = system::start(s, venv, &replicas.urls, &setup(args, load)).await?;
    let path = match s {
        System::Recache => "/v1/retrieve",
        System::Peer(_) => "/v1/completions",
    };
    let url = format!("{}{path}", running.url());
    let bodies = bodies(s, load, &replicas.model, width);
    let k = TOP_K.min(width);
    let before = replicas.scrape(&client).await?;
    let progress = recache::harness::Progress::new(
        bodies.len() as u64,
        format!("retrieve {} width {width} round {round}", s.name()),
    );
    let (mut tally, mut lat, mut errors, mut why) = (Tally::default(), Vec::new(), 0, None);
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let spawn = |set: &mut tokio::task::JoinSet<Answer>, i: usize| {
        let (client, url, body) = (client.clone(), url.clone(), bodies[i].clone());
        set.spawn(async move {
            let t = Instant::now();
            let got = http::post(&client, &url, &body).await;
            (i, t.elapsed().as_secs_f64() * 1e3, got.map_err(|e| e.to_string()))
        });
    };
    let mut next = 0;
    while next < bodies.len() && next < args.retrieve_concurrency {
        spawn(&mut set, next);
        next += 1;
    }
    while let Some(joined) = set.join_next().await {
        if next < bodies.len() {
            spawn(&mut set, next);
            next += 1;
        }
        progress.inc(1);
        let (_, ms, got) = joined.map_err(|e| BenchError::Setup(format!("a retrieval: {e}")))?;
        let read = match got {
            Ok((200, v)) => match s {
                System::Recache => score::recache_items(&load.index, &v, k),
                System::Peer(_) => score::peer_items(&load.index, &v, k),
            },
            Ok((status, v)) => Err(format!("status {status}: {}", cut(&v.to_string()))),
            Err(e) => Err(e),
        };
        match read {
            Ok(items) => {
                tally.add(&items);
                lat.push(ms);
            }
            Err(e) => {
                errors += 1;
                why.get_or_insert(e);
            }
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    progress.finish();
    drop(running);
    // The engines' counters trail their answers a little.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = replicas.scrape(&client).await?;
    let (prompt_tokens, cached_tokens) = replicas.cache(&before, &after);
    let mut row = Run {
        system: s.name(),
        round,
        beam_width: width,
        top_k: k,
        requests: bodies.len(),
        tally,
        latencies_ms: lat,
        errors,
        first_error: why,
        wall_s,
        prompt_tokens,
        cached_tokens,
        per_replica: replicas.requests(&before, &after),
        kv_bytes: replicas.kv_bytes,
    }
    .row();
    row["concurrency"] = json!(args.retrieve_concurrency);
    row["align"] = json!(load.align);
    row["mean_prompt_tokens"] = json!(load.mean_prompt_tokens);
    row["index_items"] = json!(load.index.file.items.len());
    row["max_tokens"] = json!(load.index.depth);
    Ok(row)
}

fn cut(s: &str) -> &str {
    let mut end = s.len().min(300);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The goals row: recache against the best peer at width [`GOAL_WIDTH`] only.
pub fn verdict(sums: &[Value]) -> Option<Value> {
    let at: Vec<Value> = (sums.iter())
        .filter(|r| r["beam_width"].as_u64() == Some(GOAL_WIDTH))
        .cloned()
        .collect();
    let mut v = report::verdict("retrieve", &at)?;
    v["beam_width"] = json!(GOAL_WIDTH);
    Some(v)
}

/// The summary rows as a table, on stderr.
pub fn table(sums: &[Value]) {
    eprintln!(
        "{:<14} {:>5} {:>13} {:>9} {:>11} {:>11} {:>7} {:>12}",
        "system", "width", "valid items/s", "invalid", "p50 ms", "p99 ms", "errors", "computed"
    );
    let f = |v: &Value, k: &str, p: usize| match v[k].as_f64() {
        Some(x) => format!("{x:.p$}"),
        None => "-".into(),
    };
    for r in sums.iter().filter(|r| r.get("goals").is_none()) {
        eprintln!(
            "{:<14} {:>5} {:>13} {:>9} {:>11} {:>11} {:>7} {:>12}",
            r["system"].as_str().unwrap_or("?"),
            f(r, "beam_width", 0),
            f(r, "valid_items_per_s", 2),
            f(r, "invalid_share", 3),
            f(r, "latency_p50_ms", 0),
            f(r, "latency_p99_ms", 0),
            f(r, "errors", 0),
            f(r, "computed_tokens", 0),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(max_logprobs(&args(&["--workloads", "retrieve", "--widths", "8,32"])), None);
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
        assert_eq!((sums[0]["system"].as_str(), sums[0]["beam_width"].as_u64()), (Some("recache"), Some(32)));
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

    #[test]
    fn peers_get_vllm_beam_search_and_recache_its_retrieve_body() {
        let ix = score::tests::index();
        let load = RetrieveLoad::for_tests(ix, "u1", "text");
        let r = bodies(System::Recache, &load, "m", 128);
        assert_eq!(r[0]["beam_width"], 128);
        assert_eq!(r[0]["top_k"], 10);
        assert_eq!(r[0]["user"]["text"], "text");
        let p = bodies(System::Peer(super::super::args::Peer::VllmRouter), &load, "m", 32);
        assert_eq!(p[0]["use_beam_search"], true);
        assert_eq!(p[0]["n"], 32);
        assert_eq!(p[0]["max_tokens"], 3);
        assert_eq!(p[0]["return_token_ids"], true);
        assert_eq!(p[0]["prompt"], "padded text");
    }
}
