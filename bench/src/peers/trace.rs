//! The `trace` workload: the start of a Mooncake conversation trace, rendered as text
//! ([`super::text`]), sent open-loop at the trace's own gaps scaled to `--rate` requests/s to
//! each system in front of the same replicas (caches emptied before each system), streamed
//! with `max_tokens` 1 so the first body bytes are the first token. TTFT counts from the
//! planned arrival (queueing included); hit rate and computed tokens come from the engines'
//! own counters (recache's own calls, its canaries, taken out and reported apart as
//! `own_traffic`), each replica's share from its finished-requests counter. recache routes with
//! `prefix` sized to the replicas' caches, its mirrors fed by their KV events when it has
//! them; the peers run `cache_aware` with their defaults.

use std::sync::Arc;

use serde_json::{Value, json};

use super::args::PeersArgs;
use super::replicas::{Replicas, max_share};
use super::system::{self, RecacheSetup, System};
use super::text;
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::open_loop;
use crate::own_traffic;
use crate::replay::trace::BLOCK;
use crate::stats::pct;

/// What every system gets: the prompts and their planned arrivals.
pub struct TraceLoad {
    bodies: Vec<Arc<Value>>,
    arrivals_s: Vec<f64>,
    mean_prompt_tokens: f64,
}

/// Reads the first `--requests` lines: timestamps (ms) and hash ids, ids cut to what fits.
fn read(args: &PeersArgs) -> Result<Vec<(f64, Vec<u64>)>, BenchError> {
    let text = std::fs::read_to_string(&args.trace).map_err(BenchError::io(format!(
        "reading the trace {}",
        args.trace.display()
    )))?;
    let max_ids = args.max_model_len.saturating_sub(2) / BLOCK;
    (text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(args.requests))
    .enumerate()
    .map(|(i, l)| {
        let v: Value = serde_json::from_str(l)
            .map_err(|e| BenchError::Setup(format!("trace line {}: {e}", i + 1)))?;
        let ids = (v["hash_ids"].as_array())
            .ok_or_else(|| BenchError::Setup(format!("trace line {}: no hash_ids", i + 1)))?;
        let ts = v["timestamp"].as_f64().unwrap_or(i as f64);
        Ok((
            ts,
            ids.iter().filter_map(Value::as_u64).take(max_ids).collect(),
        ))
    })
    .collect()
}

pub async fn build(
    args: &PeersArgs,
    client: &HttpClient,
    replicas: &Replicas,
) -> Result<TraceLoad, BenchError> {
    let reqs = read(args)?;
    if reqs.len() < 2 {
        return Err(BenchError::Setup(format!(
            "{}: fewer than 2 requests",
            args.trace.display()
        )));
    }
    let words = text::one_token_words(client, &replicas.urls[0], &replicas.model).await?;
    let t0 = reqs[0].0;
    let span_s = ((reqs[reqs.len() - 1].0 - t0) / 1e3).max(1e-9);
    // The trace's own gaps, scaled so the mean rate is --rate.
    let scale = (reqs.len() - 1) as f64 / args.rate / span_s;
    let arrivals_s = reqs.iter().map(|(t, _)| (t - t0) / 1e3 * scale).collect();
    let bodies = (reqs.iter().enumerate())
        .map(|(i, (_, ids))| {
            Arc::new(
                json!({"model": replicas.model, "prompt": text::render(&words, ids, i as u64),
                "max_tokens": 1, "temperature": 0, "stream": true}),
            )
        })
        .collect();
    let mean_prompt_tokens = reqs
        .iter()
        .map(|(_, ids)| (ids.len() * BLOCK + 1) as f64)
        .sum::<f64>()
        / reqs.len() as f64;
    eprintln!(
        "[peers] trace: {} requests over {:.0} s (--rate {}), {:.0} prompt tokens on average, \
         {} one-token words",
        reqs.len(),
        args.requests as f64 / args.rate,
        args.rate,
        mean_prompt_tokens,
        words.len()
    );
    Ok(TraceLoad {
        bodies,
        arrivals_s,
        mean_prompt_tokens,
    })
}

/// One system's run of the load: one row.
pub async fn one(
    args: &PeersArgs,
    venv: &std::path::Path,
    replicas: &Replicas,
    load: &TraceLoad,
    s: System,
    round: u32,
) -> Result<Value, BenchError> {
    let client = http::client();
    replicas.reset(&client).await?;
    let setup = RecacheSetup {
        routing: Some(format!("prefix:blocks={}", args.kv_blocks)),
        kv_events: replicas.kv_events.clone(),
        ..Default::default()
    };
    let running = system::start(s, venv, &replicas.urls, &setup).await?;
    let url = format!("{}/v1/completions", running.url());
    // recache's own calls (canaries) are read with the engines' counters and taken out.
    let ours = (s == System::Recache).then(|| running.url());
    let before = replicas.snapshot(&client, ours.as_deref()).await?;
    let progress = crate::progress::Progress::new(
        load.bodies.len() as u64,
        format!("trace {} round {round}", s.name()),
    );
    let out = open_loop::run(
        &load.arrivals_s,
        None,
        |i| {
            let (client, url, body) = (client.clone(), url.clone(), load.bodies[i].clone());
            async move { http::post_stream_timed_full(&client, &url, &body).await }
        },
        || progress.inc(1),
    )
    .await;
    progress.finish();
    let (mut ttft, mut errors, mut why) = (Vec::new(), 0usize, None);
    for a in out.answers {
        match a {
            Ok(t) => match t.value {
                Ok(a) if a.status == 200 => ttft.push(t.latency_ms - t.service_ms + a.first_ms),
                Ok(a) => {
                    errors += 1;
                    let body = a.error_body.unwrap_or_default();
                    why.get_or_insert(format!("status {}: {body}", a.status));
                }
                Err(e) => {
                    errors += 1;
                    why.get_or_insert(e.to_string());
                }
            },
            Err(e) => {
                errors += 1;
                why.get_or_insert(e);
            }
        }
    }
    let ok = ttft.len();
    // The engines count a request when it finishes: wait until they have counted them all.
    let after = (replicas.settled(&client, ours.as_deref(), &before, Some(ok))).await?;
    drop(running);
    let counted = replicas.counted(&before, &after);
    let (queries, hits) = (counted.queries, counted.hits);
    let per_replica = counted.requests_per_replica;
    ttft.sort_by(f64::total_cmp);
    Ok(json!({
        "system": s.name(), "workload": "trace", "round": round, "model": replicas.model,
        "rps": ok as f64 / out.wall_s, "offered_rps": args.rate,
        "hit_rate": hits / queries.max(1.0),
        "ttft_p50_ms": pct(&ttft, 0.5), "ttft_p99_ms": pct(&ttft, 0.99),
        "max_share": per_replica.as_deref().map(max_share),
        "requests_per_replica": per_replica,
        "errors": errors, "first_error": why,
        "computed_tokens": queries - hits, "prompt_tokens": queries,
        "kv_bytes": replicas.kv_bytes, "replicas": replicas.urls.len(),
        "requests": load.bodies.len(), "mean_prompt_tokens": load.mean_prompt_tokens,
        "routing": match s { System::Recache => setup.routing.clone(), _ => Some("cache_aware".into()) },
        "own_traffic": own_traffic::json(&counted.own), "model": replicas.model,
    }))
}
