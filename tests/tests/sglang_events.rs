//! The engine loop's mirror against the real SGLang testbed: SGLang's token-granular KV events
//! (`BlockStored` runs with block_size 1, `BlockRemoved` per evicted radix node,
//! `AllBlocksCleared` on `/flush_cache`) keep recache's mirror equal to SGLang's radix cache.
//! After an evicting workload, each probe's `usage.prompt_tokens_details.cached_tokens` equals
//! the mirror's leading cached tokens; a flush empties the mirror.

use std::time::Duration;

use recache::config::ServeArgs;
use recache::kvloop::config::KvLoopArgs;
use recache_integration::{Proxy, Testbed};
use serde_json::{Value, json};

/// 100 testbed blocks = `--max-total-tokens 3200` on SGLang.
const KV_BLOCKS: usize = 100;
const KV_TOKENS: usize = KV_BLOCKS * 32;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_kv_events_keep_the_mirror_equal_to_the_radix_cache() {
    let tb = Testbed::up(
        "it-sgl-events",
        &[
            "--engine",
            "sglang",
            "--kv-blocks",
            &KV_BLOCKS.to_string(),
            "--max-model-len",
            "2048",
        ],
    );
    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        engine: "sglang".parse().ok(),
        health_interval: Some(recache_integration::SGLANG_HEALTH_INTERVAL),
        kvloop: KvLoopArgs {
            kv_events: Some(tb.kv_events.clone()),
            // Token-granular: the engine's capacity in tokens (block size 1 comes with
            // --engine sglang).
            kv_engine_blocks: Some(KV_TOKENS),
            ..Default::default()
        },
        ..Default::default()
    };
    let local = Proxy::start_with(&args).await;
    assert_eq!(
        local.state.config.kvloop.as_ref().map(|k| k.block_size),
        Some(1)
    );
    tokio::time::sleep(Duration::from_millis(1500)).await; // ZMQ subscription
    let kv = local.state.kvloop.as_ref().expect("engine loop on");

    // 12 conversations x 4 growing turns of up to 768 tokens: far more than 3200 tokens.
    for turn in 1..=4u32 {
        for conv in 0..12u32 {
            let (s, _) = complete(&local.base, &tb.model, &prompt(conv, turn * 6, turn)).await;
            assert_eq!(s, 200);
        }
    }
    let (mut hits, mut misses) = (0, 0);
    // Newest conversation first: the recent ones are cached, the older ones evicted.
    for conv in (0..12u32).rev() {
        let p = prompt(conv, 24, 999);
        tokio::time::sleep(Duration::from_millis(300)).await; // let the events land
        let (mirror_tokens, size) = kv.cached_prefix(p.clone()).expect("mirror answers");
        let (s, cached) = complete(&local.base, &tb.model, &p).await;
        assert_eq!(s, 200);
        assert_eq!(
            cached, mirror_tokens as u64,
            "conversation {conv}: SGLang cached {cached} tokens, the mirror {mirror_tokens} (mirror size {size})"
        );
        assert!(
            size <= KV_TOKENS,
            "mirror holds {size} tokens, more than the engine's {KV_TOKENS}"
        );
        eprintln!("probe conversation {conv}: {mirror_tokens} tokens cached (mirror {size})");
        if mirror_tokens > 0 {
            hits += 1;
        } else {
            misses += 1;
        }
    }
    assert!(
        hits >= 2 && misses >= 1,
        "{hits} hits, {misses} misses: the workload did not exercise eviction"
    );
    let metrics = String::from_utf8_lossy(&local.state.metrics.render()).into_owned();
    let decode_errors = metrics
        .lines()
        .find(|l| l.starts_with("recache_kv_events_decode_errors_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert_eq!(decode_errors, 0.0, "{metrics}");

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
