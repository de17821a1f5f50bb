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
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::args::{PeersArgs, Workload};
use super::replicas::Replicas;
use super::system::{self, RecacheSetup, System};
use crate::error::BenchError;
use crate::http;
use load::RetrieveLoad;
use score::{Run, Tally};
pub use score::{table, verdict, vs_direct};

/// Items asked for per retrieval (capped at the width).
pub const TOP_K: usize = 10;
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
        return Err(BenchError::Setup(
            "--widths: give widths of at least 1".into(),
        ));
    }
    if args.retrieve_concurrency == 0 {
        return Err(BenchError::Setup(
            "--retrieve-concurrency must be at least 1".into(),
        ));
    }
    Ok(())
}

/// recache's serve flags for the load: the index, and the trace workload's `prefix` routing
/// (fed by the replicas' KV events), so a retrieval's beams find the replica that holds
/// their shared prompt instead of computing it on each (least-loaded, the default, spreads
/// them).
fn setup(args: &PeersArgs, replicas: &Replicas, load: &RetrieveLoad) -> RecacheSetup {
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
        routing: Some(format!("prefix:blocks={}", args.kv_blocks)),
        kv_events: replicas.kv_events.clone(),
        extra,
    }
}

/// The request bodies `s` gets, one per user.
fn bodies(s: System, load: &RetrieveLoad, model: &str, width: usize) -> Vec<Arc<Value>> {
    let k = TOP_K.min(width);
    match s {
        System::Recache | System::RecacheLoop => (load.users.iter())
            .map(|u| {
                let (user, instruction) = u.request();
                let mut b = json!({"model": model, "user": user, "beam_width": width,
                    "top_k": k});
                if let Some(i) = instruction {
                    b["instruction"] = i;
                }
                Arc::new(b)
            })
            .collect(),
        System::Peer(_) | System::Direct => (load.prompts.iter())
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
    let running = system::start(s, venv, &replicas.urls, &setup(args, replicas, load)).await?;
    let path = match s {
        System::Recache | System::RecacheLoop => "/v1/retrieve",
        System::Peer(_) | System::Direct => "/v1/completions",
    };
    ready(&client, &running.url(), &replicas.model).await;
    let url = format!("{}{path}", running.url());
    let bodies = bodies(s, load, &replicas.model, width);
    let k = TOP_K.min(width);
    let ours = matches!(s, System::Recache | System::RecacheLoop).then(|| running.url());
    let before = replicas.snapshot(&client, ours.as_deref()).await?;
    let progress = crate::progress::Progress::new(
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
            (
                i,
                t.elapsed().as_secs_f64() * 1e3,
                got.map_err(|e| e.to_string()),
            )
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
        let (i, ms, got) = joined.map_err(|e| BenchError::Setup(format!("a retrieval: {e}")))?;
        let read = match got {
            Ok((200, v)) => match s {
                System::Recache | System::RecacheLoop => score::recache_items(&load.index, &v, k),
                System::Peer(_) | System::Direct => score::peer_items(&load.index, &v, k),
            },
            Ok((status, v)) => Err(format!("status {status}: {}", cut(&v.to_string()))),
            Err(e) => Err(e),
        };
        match read {
            Ok(items) => {
                tally.add(&items);
                if let Some(t) = load.users.get(i).and_then(|u| u.target.as_deref()) {
                    tally.score(&items, t);
                }
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
    // The engines' counters trail their answers a little (a beam search is many engine
    // requests: no count to wait for, only the counters to stop moving).
    let after = (replicas.settled(&client, ours.as_deref(), &before, None)).await?;
    drop(running);
    let counted = replicas.counted(&before, &after);
    let (prompt_tokens, cached_tokens) = (counted.queries, counted.hits);
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
        per_replica: counted.requests_per_replica.clone(),
        kv_bytes: replicas.kv_bytes,
    }
    .row();
    row["model"] = json!(replicas.model);
    row["concurrency"] = json!(args.retrieve_concurrency);
    row["routing"] = match s {
        System::Recache | System::RecacheLoop => {
            json!(format!("prefix:blocks={}", args.kv_blocks))
        }
        System::Peer(_) => json!("cache_aware"),
        System::Direct => json!("none"),
    };
    row["align"] = json!(load.align);
    row["mean_prompt_tokens"] = json!(load.mean_prompt_tokens);
    row["index_items"] = json!(load.index.file.items.len());
    row["max_tokens"] = json!(load.index.depth);
    row["own_traffic"] = crate::own_traffic::json(&counted.own);
    if let Some((r, g)) = load.popularity {
        row["popularity_recall_at_10"] = json!(r);
        row["popularity_ndcg_at_10"] = json!(g);
    }
    row["model"] = json!(replicas.model);
    Ok(row)
}

/// Waits (up to 30 s) until the system answers a one-token completion: a gateway that
/// answers its own health route before it has found its workers healthy (sglang-router
/// answered 503 `no_available_workers` to a whole first loop) is not measured starting.
/// Past 30 s the loop runs anyway and its rows count what fails.
async fn ready(client: &http::HttpClient, base: &str, model: &str) {
    let body = json!({"model": model, "prompt": "ready?", "max_tokens": 1});
    let url = format!("{base}/v1/completions");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let last = match http::post(client, &url, &body).await {
            Ok((200, _)) => return,
            Ok((status, v)) => format!("status {status}: {}", cut(&v.to_string())),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            eprintln!("[peers] retrieve: {base} answered no completion within 30 s: {last}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn cut(s: &str) -> &str {
    let mut end = s.len().min(300);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
