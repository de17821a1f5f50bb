//! The engine loop's KV-event mirror against the real vLLM and SGLang testbeds: after an
//! evicting workload (12 conversations x 4 growing turns, far more than the engine's cache),
//! each probe's `usage.prompt_tokens_details.cached_tokens` equals the mirror's leading cached
//! prefix, newest conversation first. One mirror check, run once per engine; each engine's
//! test goes on with what only it has, on the same instance (a start costs about a minute on
//! CI machines):
//! - vLLM, with the shim installed (`up --shim`): a policy hot-swap under load loses no request,
//!   and vLLM keeps serving after recache stops (the order goes stale, the shim falls back to
//!   vLLM's LRU);
//! - SGLang, whose events are token-granular (`BlockStored` runs with block_size 1,
//!   `BlockRemoved` per evicted radix node, `AllBlocksCleared` on `/flush_cache`): a flush
//!   empties the mirror.

use std::time::Duration;

use recache::config::ServeArgs;
use recache::kvloop::config::KvLoopArgs;
use recache_integration::{Engine, Proxy, Testbed};
use serde_json::{Value, json};

/// vLLM's cache: 200 testbed blocks of 32 tokens; the mirror counts blocks.
const VLLM_KV_BLOCKS: usize = 200;
/// SGLang's cache: 100 testbed blocks = `--max-total-tokens 3200`; the mirror counts tokens.
const SGLANG_KV_BLOCKS: usize = 100;
const SGLANG_KV_TOKENS: usize = SGLANG_KV_BLOCKS * 32;
const TOKEN: &str = "loop-test-token";

/// recache with the engine loop in front of the vLLM testbed, publishing the order to `order`.
async fn start_vllm(tb: &Testbed, order: &str) -> Proxy {
    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        admin_token: Some(TOKEN.into()),
        health_interval: Some(Duration::from_millis(500)),
        kvloop: KvLoopArgs {
            kv_events: vec![tb.kv_events.clone()],
            publish: Some(order.into()),
            kv_engine_blocks: Some(VLLM_KV_BLOCKS),
            ..Default::default()
        },
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    // ZMQ subscriptions take a moment to reach the publisher.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy
}

/// Deterministic prompt: `blocks` 32-token runs of conversation `conv` (turns of one
/// conversation share prefixes), plus one tail token.
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

/// The evicting workload, then one probe per conversation compared with the mirror. `unit`:
/// tokens per mirror entry (vLLM 32, SGLang 1); `capacity`: the engine's cache in those units.
async fn mirror_equals_the_engines_cache(engine: Engine, tb: &Testbed, local: &Proxy) {
    let kv = local.state.kvloop.as_ref().expect("engine loop on");
    let (unit, capacity) = match engine {
        Engine::Vllm => (32u64, VLLM_KV_BLOCKS),
        Engine::Sglang => (1u64, SGLANG_KV_TOKENS),
    };
    // 12 conversations x 4 growing turns of up to 24 blocks (768 tokens) each.
    for turn in 1..=4u32 {
        for conv in 0..12u32 {
            let (s, _) = complete(&local.base, &tb.model, &prompt(conv, turn * 6, turn)).await;
            assert_eq!(s, 200);
        }
    }
    let (mut hits, mut misses) = (0, 0);
    // Newest conversation first: full hits, then partial ones, then evicted conversations.
    for conv in (0..12u32).rev() {
        let p = prompt(conv, 24, 999);
        tokio::time::sleep(Duration::from_millis(300)).await; // let the events land
        let (mirrored, size) = kv.cached_prefix(p.clone()).expect("mirror answers");
        let (s, cached) = complete(&local.base, &tb.model, &p).await;
        assert_eq!(s, 200);
        assert_eq!(
            cached,
            mirrored as u64 * unit,
            "{engine:?} conversation {conv}: engine cached {cached} tokens, mirror says {mirrored} x {unit} (mirror size {size})"
        );
        // vLLM reserves one block (its null block); SGLang's radix cache may fill its pool.
        let fits = match engine {
            Engine::Vllm => size < capacity,
            Engine::Sglang => size <= capacity,
        };
        assert!(
            fits,
            "mirror holds {size}, more than the engine's {capacity}"
        );
        eprintln!("probe conversation {conv}: {mirrored} x {unit} tokens cached (mirror {size})");
        if mirrored > 0 {
            hits += 1;
        } else {
            misses += 1;
        }
    }
    let metrics = String::from_utf8_lossy(&local.state.metrics.render()).into_owned();
    match engine {
        Engine::Vllm => {
            assert!(
                hits >= 2,
                "only {hits} probes hit: the workload did not exercise the cache"
            );
            assert!(
                metrics.contains("recache_kv_events_batches_total"),
                "{metrics}"
            );
        }
        // SGLang's token pool is smaller: eviction must show as misses too, and every event
        // batch in its dialect must decode.
        Engine::Sglang => {
            assert!(
                hits >= 2 && misses >= 1,
                "{hits} hits, {misses} misses: the workload did not exercise eviction"
            );
            let decode_errors = metrics
                .lines()
                .find(|l| l.starts_with("recache_kv_events_decode_errors_total"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0);
            assert_eq!(decode_errors, 0.0, "{metrics}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn vllm_mirror_policy_swap_and_fallback() {
    let order = std::env::temp_dir().join(format!("recache-it-loop-{}.order", std::process::id()));
    let order_s = order.display().to_string();
    let _ = std::fs::remove_file(&order);
    let tb = Engine::Vllm.testbed(
        "loop",
        &[
            "--kv-blocks",
            &VLLM_KV_BLOCKS.to_string(),
            "--max-model-len",
            "2048",
            "--shim",
            &order_s,
        ],
    );
    let local = start_vllm(&tb, &order_s).await;

    // 1. The mirror after an evicting workload.
    mirror_equals_the_engines_cache(Engine::Vllm, &tb, &local).await;
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

    // While recache runs, the engine's shim says in recache's metrics that it follows the
    // order (it checked a fresh order while evicting in step 1).
    let metrics = String::from_utf8_lossy(&local.state.metrics.render()).into_owned();
    assert!(
        metrics.contains("recache_kv_shim_state{state=\"fresh\"} 1"),
        "shim state in recache's metrics:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("kv_shim"))
            .collect::<Vec<_>>()
            .join("\n")
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
    // The shim said so: the first eviction after the order went stale logs it (and counts it
    // in its went_stale counter).
    let log = tb.log_tail(3000);
    assert!(
        log.contains("recache eviction order went stale"),
        "the engine's log does not say steering fell back:\n{}",
        tb.log_tail(40)
    );
    // ... and so does its status beside the order (what a running recache would export).
    let status = std::fs::read_to_string(format!("{order_s}.status")).expect("shim status");
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    assert_eq!(status["fresh"], false, "{status}");
    assert!(status["went_stale"].as_u64() >= Some(1), "{status}");
    tb.down();
    let _ = std::fs::remove_file(format!("{order_s}.status"));
    let _ = std::fs::remove_file(&order);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_mirror_and_flush() {
    let tb = Engine::Sglang.testbed(
        "events",
        &[
            "--kv-blocks",
            &SGLANG_KV_BLOCKS.to_string(),
            "--max-model-len",
            "2048",
        ],
    );
    let args = ServeArgs {
        kvloop: KvLoopArgs {
            kv_events: vec![tb.kv_events.clone()],
            // Token-granular: the engine's capacity in tokens (block size 1 comes with
            // --engine sglang).
            kv_engine_blocks: Some(SGLANG_KV_TOKENS),
            ..Default::default()
        },
        ..Engine::Sglang.serve_args(&[&tb.upstream])
    };
    let local = Proxy::start_with(&args).await;
    assert_eq!(
        local.state.config.kvloop.as_ref().map(|k| k.block_size),
        Some(1)
    );
    tokio::time::sleep(Duration::from_millis(1500)).await; // ZMQ subscription

    mirror_equals_the_engines_cache(Engine::Sglang, &tb, &local).await;

    let kv = local.state.kvloop.as_ref().expect("engine loop on");
    // /flush_cache (through recache) publishes AllBlocksCleared: the mirror empties.
    let flushed = reqwest::Client::new()
        .post(local.url("/flush_cache"))
        .send()
        .await
        .expect("flush");
    assert_eq!(flushed.status(), 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mirror_tokens, size) = kv.cached_prefix(prompt(11, 24, 999)).expect("mirror");
    assert_eq!((mirror_tokens, size), (0, 0));
    tb.down();
}
