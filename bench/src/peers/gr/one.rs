//! One system's run of one `gr` stream: its replica set's caches emptied (item pool too),
//! the system started in front of it (recache with its GR defaults and the stream's item
//! catalog, waited for until the catalog is in the pools), the stream sent open-loop at its
//! planned arrivals (latency from the planned arrival, queueing included; each answer is
//! whole at one token, so the rows' TTFT is the answer time), and one row: the engines' own
//! counters (hit rate with the item pool's supplied tokens, computed tokens, each replica's
//! finished requests; recache's own calls taken out and reported apart as `own_traffic`,
//! its pool fills and quality-guard shadows kept in as the work they are, the shadows
//! reported as `quality_shadows`), the CPU seconds each role spent while the stream ran
//! (`cpu_s`: engines' compute and API processes, the system's own, idle; `crate::cpu`) and
//! Recall@10 / NDCG@10 of the held-out item.

use std::time::Duration;

use serde_json::{Value, json};

use super::load::Stream;
use super::{pool, prompt};
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::open_loop;
use crate::own_traffic;
use crate::peers::args::PeersArgs;
use crate::peers::replicas::{Replicas, max_share};
use crate::peers::system::{self, System};
use crate::quality::metrics::quality;
use crate::stats::pct;

/// Longest one request may take before it counts as failed.
const REQUEST_LIMIT: Duration = Duration::from_secs(900);

/// What one answered request gave: the held-out item's rank, the engine's prompt tokens,
/// and (recache) whether the profile went first.
struct Answer {
    rank: usize,
    prompt_tokens: Option<f64>,
    user_first: Option<bool>,
}

async fn send(
    client: HttpClient,
    url: String,
    body: std::sync::Arc<Value>,
    check: impl FnOnce(&Value) -> Result<usize, String>,
) -> Result<Answer, String> {
    let call = http::post(&client, &url, &body);
    let (status, v) = match tokio::time::timeout(REQUEST_LIMIT, call).await {
        Err(_) => return Err(format!("no answer within {} s", REQUEST_LIMIT.as_secs())),
        Ok(r) => r.map_err(|e| e.to_string())?,
    };
    if status != 200 {
        return Err(format!("status {status}: {}", prompt::short(&v)));
    }
    Ok(Answer {
        rank: check(&v)?,
        // vLLM's (and recache's) usage; SGLang's /generate says it in meta_info.
        prompt_tokens: (v["usage"]["prompt_tokens"].as_f64())
            .or(v["meta_info"]["prompt_tokens"].as_f64()),
        user_first: v["prefix"].as_str().map(|p| p == "user"),
    })
}

/// The stream through `s`: one row.
pub async fn one(
    args: &PeersArgs,
    venv: &std::path::Path,
    replicas: &Replicas,
    stream: &Stream,
    s: System,
    round: u32,
) -> Result<Value, BenchError> {
    let client = http::client();
    replicas.reset(&client).await?;
    let layout = match s {
        System::Recache | System::RecacheLoop => stream.sets.recache,
        System::Peer(_) | System::Direct => stream.sets.peers,
    };
    let setup = pool::recache_setup(args, replicas, stream);
    let running = system::start(s, venv, &replicas.urls, &setup).await?;
    let mut pool_fields = Value::Null;
    if s == System::Recache {
        let want = stream.catalog_items.min(stream.pool_items) * replicas.urls.len();
        pool_fields = pool::wait_precompute(&client, &running.url(), want, stream.stream).await?;
    }
    // recache's own calls (canaries, the label check) are read with the engines' counters and
    // taken out; its `/metrics` also says what the pool did.
    let ours = (s == System::Recache).then(|| running.url());
    let before = replicas.snapshot(&client, ours.as_deref()).await?;
    let mine_before = before.recache.first().cloned().unwrap_or_default();
    let progress = crate::progress::Progress::new(
        stream.rank_bodies.len() as u64,
        format!("{} {} round {round}", stream.workload, s.name()),
    );
    let cpu_before = crate::cpu::sample();
    let out = open_loop::run(
        &stream.arrivals_s,
        None,
        |i| {
            let client = client.clone();
            let (target, pos) = (stream.targets[i].clone(), stream.target_pos[i]);
            let labels = stream.labels[i].clone();
            let n = labels.len();
            let rank_body = stream.rank_bodies[i].clone();
            let peer_body = stream.peer_bodies[i].clone();
            let base = running.url();
            let engine = replicas.engine;
            async move {
                match s {
                    System::Recache | System::RecacheLoop => {
                        let check = move |v: &Value| prompt::rank_answer_rank(v, &target, n);
                        send(client, format!("{base}/v1/rank"), rank_body, check).await
                    }
                    System::Peer(_) | System::Direct => {
                        let check = move |v: &Value| prompt::peer_rank(engine, v, &labels, pos);
                        let url = format!("{base}{}", engine.scoring_path());
                        send(client, url, peer_body, check).await
                    }
                }
            }
        },
        || progress.inc(1),
    )
    .await;
    progress.finish();
    let mut cpu_s = crate::cpu::delta(&cpu_before, &crate::cpu::sample(), running.pid());
    cpu_s["wall_s"] = json!(out.wall_s);
    let (mut lat, mut service, mut ranks, mut tokens, mut ups) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut errors, mut why) = (0usize, None);
    for a in out.answers {
        match a.map(|t| (t.latency_ms, t.service_ms, t.value)) {
            Ok((l, sv, Ok(ans))) => {
                lat.push(l);
                service.push(sv);
                ranks.push(Some(ans.rank));
                tokens.extend(ans.prompt_tokens);
                ups.extend(ans.user_first);
            }
            Ok((_, _, Err(e))) | Err(e) => {
                errors += 1;
                ranks.push(None);
                why.get_or_insert(e);
            }
        }
    }
    let ok = lat.len();
    if s == System::Recache {
        // Fills the stream started are its work: let them end before the counters.
        pool::settle(&client, &running.url()).await;
    }
    let after = (replicas.settled(&client, ours.as_deref(), &before, Some(ok))).await?;
    drop(running);
    let mine_after = after.recache.first().cloned().unwrap_or_default();
    let counted = replicas.counted(&before, &after);
    let (queries, local_hits) = (counted.queries, counted.hits);
    // Tokens the item pool supplied: vLLM counts them apart from its prefix hits (added
    // here), SGLang among them (its `host` hits, already in `local_hits`).
    let sel = recache_adapters::prom::selected_sum;
    let pool = replicas.engine.pool_hits_counter();
    let pool_hits: f64 = (before.engines.iter().zip(&after.engines))
        .map(|(b, a)| sel(a, pool) - sel(b, pool))
        .sum();
    let external = replicas
        .engine
        .external_hits_counter()
        .map_or(0.0, |_| pool_hits);
    let hits = local_hits + external;
    let per_replica = counted.requests_per_replica;
    lat.sort_by(f64::total_cmp);
    service.sort_by(f64::total_cmp);
    let q = quality(&ranks);
    let n = replicas.urls.len() as u64;
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let mut row = json!({
        "system": s.name(), "workload": stream.workload, "stream": stream.stream,
        "round": round, "rps": ok as f64 / out.wall_s.max(1e-9), "offered_rps": args.rate,
        "hit_rate": hits / queries.max(1.0),
        "ttft_p50_ms": pct(&lat, 0.5), "ttft_p99_ms": pct(&lat, 0.99),
        "service_p50_ms": pct(&service, 0.5), "service_p99_ms": pct(&service, 0.99),
        "max_share": per_replica.as_deref().map(max_share),
        "requests_per_replica": per_replica,
        "errors": errors, "first_error": why,
        "computed_tokens": (queries - hits).max(0.0), "prompt_tokens": queries,
        "pool_hit_tokens": pool_hits + 0.0,
        "kv_bytes": replicas.kv_bytes, "replicas": n, "kv_blocks_per_replica": layout.kv_blocks,
        "pool_bytes_per_replica": layout.pool_bytes,
        "memory_split": (s == System::Recache).then(|| stream.split.clone()),
        "requests": stream.rank_bodies.len(),
        "mean_prompt_tokens": mean(&tokens), "user_first_tokens": stream.user_first_tokens,
        "user_first_share": mean(&ups.iter().map(|&u| f64::from(u8::from(u))).collect::<Vec<_>>()),
        "recall_at_10": q.recall_at_10, "ndcg_at_10": q.ndcg_at_10,
        "quality_note": quality_note(&replicas.model, stream.labels.first().map_or(0, Vec::len)),
        "model": replicas.model, "distinct_users": stream.distinct_users,
        "returning_share": stream.returning_share,
        "routing": match s { System::Recache => setup.routing.clone(), _ => Some("cache_aware".into()) },
        "recache_flags": (s == System::Recache).then(|| setup.extra.join(" ")),
        "own_traffic": own_traffic::json(&counted.own),
        "engine_cpu_ms_per_request": cpu_s["engine_compute"].as_f64()
            .map(|c| 1e3 * c / ok.max(1) as f64),
        "cpu_s": cpu_s,
    });
    if s == System::Recache
        && let Some(o) = row.as_object_mut()
    {
        o.insert(
            "pool".into(),
            pool::fields(pool_fields, &mine_before, &mine_after),
        );
        o.insert(
            "quality_shadows".into(),
            quality_shadows(&mine_before, &mine_after),
        );
    }
    Ok(row)
}

/// The quality guard's shadow scorings over the run, from recache's `/metrics`: engine work
/// the guard costs, so (unlike `own_traffic`) they stay in `computed_tokens` and `hit_rate`;
/// reported apart so a reader sees their share.
fn quality_shadows(before: &str, after: &str) -> Value {
    const SAMPLES: &str = "recache_rank_quality_samples_total";
    // Skipped samples (both slots busy) were never sent.
    let sent = |t: &str| {
        (t.lines())
            .filter(|l| l.starts_with(SAMPLES) && !l.contains("outcome=\"skipped\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let tokens = |t: &str| http::counter(t, "recache_rank_quality_tokens_total");
    json!({
        "requests": sent(after) - sent(before),
        "computed_tokens": tokens(after) - tokens(before),
        "counted": "in computed_tokens and hit_rate (engine work the quality guard costs)",
    })
}

/// What the quality numbers can say with this model.
pub fn quality_note(model: &str, candidates: usize) -> String {
    let chance = 10.0 / candidates.max(10) as f64;
    // The testbed's random-weight models (tiny-qwen2, qwen2-1.5b-shape) rank at chance.
    if model.contains("tiny-qwen2") || model.contains("-shape") {
        format!(
            "model {model} has random weights: Recall@10 is chance (about {chance:.2} of \
             {candidates} candidates) for every system; it shows errors and broken rankings, \
             not ranking skill (the trained ranker reads another prompt shape: docs/quality.md)"
        )
    } else {
        format!("model {model}; chance Recall@10 is about {chance:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadows_count_what_was_sent() {
        let before = "recache_rank_quality_samples_total{model=\"m\",outcome=\"ok\"} 1\n\
                      recache_rank_quality_tokens_total{model=\"m\"} 100\n";
        let after = "recache_rank_quality_samples_total{model=\"m\",outcome=\"ok\"} 3\n\
                     recache_rank_quality_samples_total{model=\"m\",outcome=\"skipped\"} 9\n\
                     recache_rank_quality_tokens_total{model=\"m\"} 350\n";
        let v = quality_shadows(before, after);
        assert_eq!(
            (v["requests"].clone(), v["computed_tokens"].clone()),
            (json!(2.0), json!(250.0))
        );
    }
}
