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

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use recache::config::ServeArgs;
use recache::kvloop::KvLoopHandle;
use recache::kvloop::config::KvLoopArgs;
use recache_adapters::order::Order;
use recache_integration::{Engine, Proxy, Testbed, wait_for};
use serde_json::{Value, json};

/// The shim's default age limit: an order published longer ago than this is stale
/// (`recache_shim.order_reader.DEFAULT_MAX_AGE_MS`).
const SHIM_ORDER_MAX_AGE_MS: u64 = 2000;

/// The order file as the shim reads it.
fn read_order(path: &std::path::Path) -> Result<Order, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Order::decode(&bytes).map_err(|e| format!("undecodable order: {e}"))
}

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
    wait_subscribed(tb, &proxy).await;
    proxy
}

/// Waits until the engine loop receives the engine's KV events: one-block pings through
/// recache (conversations 1000 and up: no block shared with the test's prompts).
async fn wait_subscribed(tb: &Testbed, local: &Proxy) {
    local
        .wait_kv_events(async |k| {
            let ping = prompt(1000 + k, 1, 0);
            let (s, _) = complete(&local.base, &tb.model, &ping).await;
            assert_eq!(s, 200, "ping");
            ping
        })
        .await
}

/// Waits until the mirror holds every full 32-token block of `last`, the prompt of the last
/// request sent: its blocks' `BlockStored` left the engine after every event that request
/// caused before (a removal to make room comes first), so the mirror has caught up with the
/// engine. `last` must have stored a block of its own (a prompt that was a full hit causes
/// no event to wait for).
async fn wait_caught_up(kv: &KvLoopHandle, unit: u64, last: &[u32], what: &str) {
    let want = (last.len() / 32 * 32) as u64;
    wait_for(
        format_args!("the engine's KV events for {what} reaching the mirror ({want} tokens)"),
        Duration::from_secs(30),
        async || match kv.cached_prefix(last.to_vec()) {
            Some((n, _)) if n as u64 * unit >= want => Ok(()),
            Some((n, size)) => Err(format!("{n} x {unit} tokens held (mirror size {size})")),
            None => Err("the engine loop did not answer".to_string()),
        },
    )
    .await
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
    // 12 conversations x 4 growing turns of up to 24 blocks (768 tokens) each; every turn
    // stores the 6 blocks it grew by.
    let mut last = Vec::new();
    for turn in 1..=4u32 {
        for conv in 0..12u32 {
            last = prompt(conv, turn * 6, turn);
            let (s, _) = complete(&local.base, &tb.model, &last).await;
            assert_eq!(s, 200);
        }
    }
    wait_caught_up(kv, unit, &last, "the workload").await;
    let (mut hits, mut misses) = (0, 0);
    // Newest conversation first: full hits, then partial ones, then evicted conversations.
    // Each probe is 25 blocks: the 24 the workload may have left cached, and a 25th never
    // sent before, which the engine stores, so the next probe can wait for its events.
    for conv in (0..12u32).rev() {
        let p = prompt(conv, 25, 999);
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
        wait_caught_up(kv, unit, &p, &format!("conversation {conv}'s probe")).await;
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

    // 2. Policy hot-swap under load: every request answers 200. After each swap the test
    // waits for a few more answers, so every swap lands while requests are being served.
    let answered = Arc::new(AtomicUsize::new(0));
    let load = {
        let (base, model, answered) = (local.base.clone(), tb.model.clone(), answered.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for i in 0..40u32 {
                statuses.push(complete(&base, &model, &prompt(100 + i % 5, 8, i)).await.0);
                answered.fetch_add(1, Ordering::SeqCst);
            }
            statuses
        })
    };
    let client = reqwest::Client::new();
    for policy in ["laru", "lru", "sieve", "laru"] {
        let before = answered.load(Ordering::SeqCst);
        assert!(before < 40, "the load ended before the switch to {policy}");
        let r = client
            .put(format!("{}/admin/eviction-policy", local.base))
            .bearer_auth(TOKEN)
            .json(&json!({"policy": policy}))
            .send()
            .await
            .expect("admin");
        assert_eq!(r.status(), 200, "switch to {policy}");
        wait_for(
            format_args!("3 more requests answered after the switch to {policy}"),
            Duration::from_secs(60),
            async || match answered.load(Ordering::SeqCst) {
                n if n >= before + 3 => Ok(()),
                n => Err(format!("{n} of 40 answered")),
            },
        )
        .await;
    }
    let statuses = load.await.expect("load task");
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    // The swap reached the engine side: the published order carries the new generation.
    wait_for(
        "an order published from policy generation 4",
        Duration::from_secs(10),
        async || match read_order(&order) {
            Ok(o) if o.generation == 4 => Ok(()),
            Ok(o) => Err(format!("generation {}", o.generation)),
            Err(e) => Err(e),
        },
    )
    .await;

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
    // Stale is what the shim calls an order published more than its age limit ago (2 s by
    // default): wait until the order left behind is that old.
    wait_for(
        "the order left behind going stale (published over 2 s ago)",
        Duration::from_secs(20),
        async || {
            let o = read_order(&order)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64;
            match now.saturating_sub(o.publish_unix_ms) {
                age if age > SHIM_ORDER_MAX_AGE_MS => Ok(()),
                age => Err(format!("published {age} ms ago: recache still publishing?")),
            }
        },
    )
    .await;
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
    wait_subscribed(&tb, &local).await;

    mirror_equals_the_engines_cache(Engine::Sglang, &tb, &local).await;

    let kv = local.state.kvloop.as_ref().expect("engine loop on");
    // /flush_cache (through recache) publishes AllBlocksCleared: the mirror empties.
    let flushed = reqwest::Client::new()
        .post(local.url("/flush_cache"))
        .send()
        .await
        .expect("flush");
    assert_eq!(flushed.status(), 200);
    wait_for(
        "the mirror emptying after /flush_cache (AllBlocksCleared)",
        Duration::from_secs(30),
        async || match kv.cached_prefix(prompt(11, 24, 999)) {
            Some((0, 0)) => Ok(()),
            other => Err(format!("(prefix, size) {other:?}")),
        },
    )
    .await;
    tb.down();
}
