//! Eviction steering of a real SGLang through request priorities (`recache serve
//! --sglang-priority`, SGLang with `--radix-eviction-policy priority`), no engine patch.
//!
//! recache runs LFU: prefix A is asked three times, then prefix B once, then a larger prompt C
//! that does not fit beside both. SGLang's LRU (every request at the same priority) evicts A,
//! the least recent; with recache setting priorities A's repeats carry a high one (LFU kept A)
//! and B a low one, so SGLang evicts B and keeps A. Evidence: `meta_info.cached_tokens` of
//! `/generate` when A and B are asked again. One SGLang instance, flushed between the runs.

use std::time::Duration;

use recache::config::ServeArgs;
use recache::kvloop::config::KvLoopArgs;
use recache_integration::{Proxy, Testbed, engine_tests_enabled};
use serde_json::{Value, json};

/// SGLang's token pool: 40 x 32 tokens (the testbed's --kv-blocks unit).
const KV_TOKENS: usize = 40 * 32;
const A: usize = 400;
const B: usize = 400;
const C: usize = 600;

/// Distinct, deterministic token ids (clear of the tokenizer's special ids).
fn prompt(seed: u64, len: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            100 + (x % 3900) as u32
        })
        .collect()
}

/// One `/generate` through `base`; the prompt tokens SGLang found cached.
async fn generate(base: &str, ids: &[u32]) -> u64 {
    let resp = reqwest::Client::new()
        .post(format!("{base}/generate"))
        .json(
            &json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.expect("json");
    v["meta_info"]["cached_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("no meta_info.cached_tokens: {v}"))
}

/// Runs A x3, B, C through `proxy`, then asks A and B again: (A cached, B cached).
async fn scenario(proxy: &Proxy, tb: &Testbed) -> (u64, u64) {
    let (a, b, c) = (prompt(1, A), prompt(2, B), prompt(3, C));
    // SGLang refuses to flush (400) while a request runs, and its /health (recache's probe)
    // is a one-token generation: retry.
    let mut flushed = 0;
    for _ in 0..50 {
        let resp = reqwest::Client::new()
            .post(format!("{}/flush_cache", tb.upstream))
            .send()
            .await
            .expect("flush");
        flushed = resp.status().as_u16();
        if flushed == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(flushed, 200, "SGLang did not flush its cache");
    for _ in 0..3 {
        generate(&proxy.base, &a).await;
        // Arrivals reach the shadow on the engine-loop thread; give it a moment.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    generate(&proxy.base, &b).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    generate(&proxy.base, &c).await;
    // B first: whichever of A and B is gone comes back at the cost of the other's room, so
    // the survivor must be probed first. Evicting for B when B is gone (steered) takes C (the
    // lowest priority) before A; when B is there (native) asking it evicts nothing.
    let got_b = generate(&tb.upstream, &b).await;
    let got_a = generate(&tb.upstream, &a).await;
    (got_a, got_b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_evicts_what_recache_ranks_low_when_priorities_are_steered() {
    if !engine_tests_enabled("sglang_evicts_what_recache_ranks_low_when_priorities_are_steered") {
        return;
    }
    let kv_blocks = (KV_TOKENS / 32).to_string();
    let tb = Testbed::up(
        "it-sglsteer-prio",
        &[
            "--engine",
            "sglang",
            "--kv-blocks",
            &kv_blocks,
            "--max-model-len",
            "1024",
            "--",
            "--radix-eviction-policy",
            "priority",
        ],
    );
    assert!(A + B + C > KV_TOKENS && A + C < KV_TOKENS && B + C < KV_TOKENS);
    let args = |steer: bool| ServeArgs {
        upstream: vec![tb.upstream.clone()],
        engine: "sglang".parse().ok(),
        // SGLang's /health is a generation: on a loaded 2-core machine it can take seconds
        // behind a prefill, and two late probes would take the only replica out.
        health_interval: Some(Duration::from_secs(10)),
        eviction_policy: Some("lfu".into()),
        kvloop: KvLoopArgs {
            kv_events: Some(tb.kv_events.clone()),
            kv_engine_blocks: Some(KV_TOKENS),
            sglang_priority: steer,
            ..Default::default()
        },
        ..Default::default()
    };

    let native = Proxy::start_with(&args(false)).await;
    let (na, nb) = scenario(&native, &tb).await;
    drop(native);
    let steered = Proxy::start_with(&args(true)).await;
    let (sa, sb) = scenario(&steered, &tb).await;
    eprintln!("cached tokens (A, B): native LRU ({na}, {nb}), steered by recache LFU ({sa}, {sb})");
    tb.down();

    // Native: the least recent prefix (A) went, B stayed.
    assert!(na < A as u64 / 2, "native LRU kept A: {na}");
    assert!(nb + 1 >= B as u64, "native LRU lost B: {nb}");
    // Steered: recache's LFU keeps A, so SGLang evicts B instead.
    assert!(sa + 1 >= A as u64, "steered SGLang lost A: {sa}");
    assert!(sb < B as u64 / 2, "steered SGLang kept B: {sb}");
}
