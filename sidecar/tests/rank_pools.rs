//! The item KV pool with several replicas, on loopback: each replica's pool is its own.
//! Two stand-in engines (vLLM, or SGLang with the plan as a JSON string in `custom_params`
//! and the report in `meta_info`) keep a pool the way recache's connector does (a fill stores
//! its key; a scoring request's segments are answered `present` when stored) and record what
//! they were sent. Checked: fills go to the replica whose pool they fill (every candidate on
//! both by default), `gr` sends an item-first prompt where most of its candidates are pooled
//! with that pool's items leading, and with `pool_hot_share=0` (cold items sharded) each
//! item is pooled on exactly one replica.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use recache_adapters::Engine;
use serde_json::{Value, json};
use support::{FakeUpstream, TestProxy, body, wait_for};

/// What one stand-in engine saw.
#[derive(Default)]
struct Seen {
    /// Pool keys filled here.
    filled: HashSet<String>,
    /// Per scoring request: its pooled segments' keys.
    scored: Vec<Vec<String>>,
}

/// A stand-in engine of `dialect` with a stand-in item pool connector.
async fn engine(dialect: Engine) -> (FakeUpstream, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let state = seen.clone();
    let up = FakeUpstream::start(move |req| {
        let state = state.clone();
        async move {
            let bytes = req.into_body().collect().await.expect("body").to_bytes();
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (pool, labels) = match dialect {
                Engine::Vllm => {
                    let plan = v["kv_transfer_params"]["recache_pool"].clone();
                    (plan, &v["logprob_token_ids"])
                }
                Engine::Sglang => {
                    let plan = v["sampling_params"]["custom_params"]["recache_pool"].as_str();
                    let plan = plan.map(|p| serde_json::from_str(p).expect("a JSON plan"));
                    (plan.unwrap_or(Value::Null), &v["token_ids_logprob"])
                }
            };
            let report = |r: Value| match dialect {
                Engine::Vllm => {
                    json!({"choices": [{"text": ""}], "kv_transfer_params": {"recache_pool": r}})
                }
                Engine::Sglang => json!({"text": "", "meta_info": {"recache_pool": [r]}}),
            };
            let mut s = state.lock().expect("lock");
            let answer = if let Some(key) = pool["fill"].as_str() {
                s.filled.insert(key.to_string());
                report(json!({"entries": s.filled.len()}))
            } else if pool["list"].as_bool() == Some(true) {
                report(json!({"list": []}))
            } else if let Some(labels) = labels.as_array() {
                let keys: Vec<String> = (pool["segments"].as_array().into_iter().flatten())
                    .filter_map(|seg| seg[0].as_str().map(str::to_string))
                    .collect();
                let present: Vec<&String> = keys.iter().filter(|k| s.filled.contains(*k)).collect();
                let mut answer = report(json!({"present": present}));
                match dialect {
                    Engine::Vllm => {
                        let top: serde_json::Map<_, _> = (labels.iter())
                            .map(|l| (format!("token_id:{l}"), json!(-1.0)))
                            .collect();
                        answer["choices"][0]["logprobs"]["top_logprobs"] = json!([top]);
                        answer["usage"] = json!({"prompt_tokens": 10,
                            "prompt_tokens_details": {"cached_tokens": 0}});
                    }
                    Engine::Sglang => {
                        let m = &mut answer["meta_info"];
                        let each: Vec<Value> =
                            labels.iter().map(|l| json!([-1.0, l, ""])).collect();
                        m["output_token_ids_logprobs"] = json!([each]);
                        m["prompt_tokens"] = json!(10);
                        m["cached_tokens"] = json!(0);
                    }
                }
                s.scored.push(keys);
                answer
            } else {
                json!({"ok": true}) // health probes
            };
            http::Response::builder()
                .header("content-type", "application/json")
                .body(body(answer.to_string()))
                .expect("response")
        }
    })
    .await;
    (up, seen)
}

/// A ranking request: user `u`, candidates `items`, all token ids (no tokenizing).
fn request(u: u32, items: &[u32]) -> Value {
    json!({
        "model": "m",
        "user": {"id": format!("user-{u}"), "tokens": (0..40).map(|t| 50_000 + u * 100 + t).collect::<Vec<_>>()},
        "items": items.iter().map(|&i| json!({"id": i, "tokens": [1000 + i, 2000 + i, 3000 + i]})).collect::<Vec<_>>(),
        "instruction": [7, 8, 9],
        "mode": "item_prefix",
    })
}

async fn rank(proxy: &TestProxy, req: &Value) {
    let r = reqwest::Client::new()
        .post(proxy.url("/v1/rank"))
        .json(req)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

async fn start(
    dialect: Engine,
    routing: &str,
) -> (TestProxy, [(FakeUpstream, Arc<Mutex<Seen>>); 2]) {
    let (a, b) = (engine(dialect).await, engine(dialect).await);
    let proxy = TestProxy::start(&[a.0.url(), b.0.url()], |s| {
        s.engine = Some(dialect);
        s.routing = Some(routing.into());
        s.rank.pool.rank_item_pool = Some(64);
        s.rank.pool.rank_item_pool_refresh = Some(0.0);
    })
    .await;
    proxy.wait_ready().await;
    (proxy, [a, b])
}

/// Waits until no fill is pending in any replica's pool.
async fn settled(proxy: &TestProxy) {
    let pools = proxy.state.ranker.rank.pool.as_ref().expect("pools");
    wait_for(
        "every pool's fills finishing",
        Duration::from_secs(10),
        async || {
            let pending: Vec<usize> = pools.iter().map(|p| p.counts().1).collect();
            if pending.iter().all(|&n| n == 0) {
                Ok(())
            } else {
                Err(format!("pending fills per replica {pending:?}"))
            }
        },
    )
    .await
}

fn key(i: u32) -> String {
    format!("m/{i}")
}

#[tokio::test]
async fn each_replica_pools_its_own_and_is_asked_only_for_those() {
    pools_per_replica(Engine::Vllm).await
}

#[tokio::test]
async fn sglang_pools_per_replica_through_generate() {
    pools_per_replica(Engine::Sglang).await
}

async fn pools_per_replica(dialect: Engine) {
    let (proxy, engines) = start(dialect, "gr").await;
    assert_eq!(
        proxy.state.ranker.rank.pool.as_ref().expect("pools").len(),
        2
    );
    let items: Vec<u32> = (0..20).collect();
    rank(&proxy, &request(1, &items)).await;
    settled(&proxy).await;
    // Replicated by default: each replica filled every candidate, once, into its own pool.
    for (_, seen) in &engines {
        let s = seen.lock().expect("lock");
        let want: HashSet<String> = items.iter().map(|&i| key(i)).collect();
        assert_eq!(s.filled, want);
    }
    for u in 2..8 {
        rank(&proxy, &request(u, &items)).await;
    }
    let per: Vec<usize> = (engines.iter())
        .map(|(_, s)| s.lock().expect("lock").scored.len())
        .collect();
    assert_eq!(per.iter().sum::<usize>(), 7, "{per:?}");
}

#[tokio::test]
async fn sharded_pools_hold_each_item_once_and_prompts_go_where_theirs_are() {
    let (proxy, engines) = start(Engine::Vllm, "gr:pool_hot_share=0").await;
    let items: Vec<u32> = (0..40).collect();
    rank(&proxy, &request(1, &items)).await;
    settled(&proxy).await;
    let (fa, fb) = {
        let a = engines[0].1.lock().expect("lock").filled.clone();
        let b = engines[1].1.lock().expect("lock").filled.clone();
        (a, b)
    };
    assert_eq!(
        fa.len() + fb.len(),
        40,
        "each item filled once: {fa:?} {fb:?}"
    );
    assert!(fa.is_disjoint(&fb));
    assert!(
        !fa.is_empty() && !fb.is_empty(),
        "both replicas hold a shard"
    );
    // A request whose candidates are mostly pooled on one replica goes there, and that
    // replica is asked for exactly its pooled candidates.
    for (r, held) in [(0usize, &fa), (1, &fb)] {
        let mine: Vec<u32> = items
            .iter()
            .copied()
            .filter(|&i| held.contains(&key(i)))
            .collect();
        let other: Vec<u32> = items
            .iter()
            .copied()
            .filter(|&i| !held.contains(&key(i)))
            .collect();
        let mut cands: Vec<u32> = mine.iter().copied().take(6).collect();
        cands.extend(other.iter().copied().take(2));
        let before = engines[r].1.lock().expect("lock").scored.len();
        rank(&proxy, &request(10 + r as u32, &cands)).await;
        let s = engines[r].1.lock().expect("lock");
        assert_eq!(s.scored.len(), before + 1, "replica {r} got the prompt");
        // The prompt was built for this replica's pool: its pooled candidates lead.
        let leading: HashSet<&String> = s.scored[before].iter().take(6).collect();
        let expect: Vec<String> = mine.iter().take(6).map(|&i| key(i)).collect();
        assert_eq!(
            leading,
            expect.iter().collect(),
            "replica {r}'s own shard leads"
        );
    }
}
