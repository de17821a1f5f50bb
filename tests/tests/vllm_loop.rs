//! The engine loop against the real vLLM testbed, with the shim installed (`up --shim`):
//! the KV-event mirror equals the engine's cache after an evicting workload (checked against
//! `usage.prompt_tokens_details.cached_tokens` of probe requests), a policy hot-swap under
//! load loses no request, and vLLM keeps serving after recache stops (the order goes stale,
//! the shim falls back to vLLM's LRU).
//!
//! One testbed for all three phases: a vLLM start costs about a minute on CI machines.

use std::time::Duration;

use recache::config::ServeArgs;
use recache::kvloop::config::KvLoopArgs;
use recache_integration::{Proxy, Testbed};
use serde_json::{Value, json};

const KV_BLOCKS: usize = 200;
const TOKEN: &str = "loop-test-token";

async fn start(tb: &Testbed, order: &str) -> Proxy {
    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        admin_token: Some(TOKEN.into()),
        health_interval: Some(Duration::from_millis(500)),
        kvloop: KvLoopArgs {
            kv_events: Some(tb.kv_events.clone()),
            publish: Some(order.into()),
            kv_engine_blocks: Some(KV_BLOCKS),
            ..Default::default()
        },
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    // ZMQ subscriptions take a moment to reach the publisher.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy
}

/// Deterministic prompt: `blocks` full 32-token blocks of conversation `conv` (shared
/// prefixes between turns of one conversation), plus one tail token.
fn prompt(conv: u32, blocks: u32, tail: u32) -> Vec<u32> {
    let mut t: Vec<u32> = (0..blocks * 32)
        .map(|i| 3 + (conv * 7919 + i * 104_729) % 4000)
        .collect();
    t.push(3 + tail % 4000);
    t
}

async fn complete(base: &str, model: &str, tokens: &[u32]) -> (u16, u64) {
    let body = json!({"model": model, "prompt": tokens, "max_tokens": 1, "temperature": 0});
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    (status, cached)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn engine_loop_mirror_policy_swap_and_fallback() {
    let order = std::env::temp_dir().join(format!("recache-it-loop-{}.order", std::process::id()));
    let order_s = order.display().to_string();
    let _ = std::fs::remove_file(&order);
    let tb = Testbed::up(
        "it-loop",
        &[
            "--kv-blocks",
            &KV_BLOCKS.to_string(),
            "--max-model-len",
            "2048",
            "--shim",
            &order_s,
        ],
    );
    let local = start(&tb, &order_s).await;
    let kv = local.state.kvloop.as_ref().expect("engine loop on");

    // 1. An evicting workload: 12 conversations x 4 growing turns of up to 24 blocks each
    // (far more than 200 blocks), then probes compared with the mirror.
    for turn in 1..=4u32 {
        for conv in 0..12u32 {
            let (s, _) = complete(&local.base, &tb.model, &prompt(conv, turn * 6, turn)).await;
            assert_eq!(s, 200);
        }
    }
    let mut checked = 0;
    // Newest conversation first: full hits, then partial ones, then evicted conversations.
    for conv in (0..12u32).rev() {
        let p = prompt(conv, 24, 999);
        tokio::time::sleep(Duration::from_millis(300)).await; // let the events land
        let (mirror_blocks, size) = kv.cached_prefix(p.clone()).expect("mirror answers");
        let (s, cached) = complete(&local.base, &tb.model, &p).await;
        assert_eq!(s, 200);
        assert_eq!(
            cached,
            mirror_blocks as u64 * 32,
            "conversation {conv}: engine cached {cached} tokens, mirror says {mirror_blocks} blocks (mirror size {size})"
        );
        assert!(
            size < KV_BLOCKS,
            "mirror holds {size} blocks, more than the engine's {KV_BLOCKS}"
        );
        eprintln!(
            "probe conversation {conv}: {mirror_blocks} blocks cached (mirror {size} blocks)"
        );
        checked += usize::from(mirror_blocks > 0);
    }
    assert!(
        checked >= 2,
        "only {checked} probes hit: the workload did not exercise the cache"
    );
    let metrics = String::from_utf8_lossy(&local.state.metrics.render()).into_owned();
    assert!(
        metrics.contains("recache_kv_events_batches_total"),
        "{metrics}"
    );
    assert!(order.exists(), "recache published no order");

    // 2. Policy hot-swap under load: every request answers 200.
    let load = {
        let (base, model) = (local.base.clone(), tb.model.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for i in 0..40u32 {
                statuses.push(complete(&base, &model, &prompt(100 + i % 5, 8, i)).await.0);
            }
            statuses
        })
    };
    let client = reqwest::Client::new();
    for policy in ["laru", "lru", "sieve", "laru"] {
        let r = client
            .put(format!("{}/admin/eviction-policy", local.base))
            .bearer_auth(TOKEN)
            .json(&json!({"policy": policy}))
            .send()
            .await
            .expect("admin");
        assert_eq!(r.status(), 200, "switch to {policy}");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let statuses = load.await.expect("load task");
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    // The swap reached the engine side: the published order carries the new generation.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let bytes = std::fs::read(&order).expect("order file");
    let generation = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    assert_eq!(
        generation, 4,
        "order still from policy generation {generation}"
    );

    // 3. recache stops: the order file stays behind and goes stale; vLLM keeps serving (and
    // keeps caching) with its own LRU.
    drop(local);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let age = std::fs::metadata(&order)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default();
    assert!(
        age > Duration::from_secs(2),
        "order still refreshed {age:?} ago after recache stopped"
    );
    for i in 0..10u32 {
        let p = prompt(200 + i % 2, 10, i);
        let (s, cached) = complete(&tb.upstream, &tb.model, &p).await;
        assert_eq!(s, 200);
        if i >= 2 {
            assert_eq!(cached, 320, "turn {i}: prefix not served from cache");
        }
    }
    tb.down();
    let _ = std::fs::remove_file(&order);
}
