//! The item KV pool against the real vLLM testbed started with the connector
//! (`examples/testbed/up --item-pool`):
//!
//! 1. correctness: `shim/python/tests/item_pool_check.py` compares vLLM's label log-probs
//!    with every item loaded from the pool against the tiny HF Qwen2 (float32) computing the
//!    same tokens under the pool's layout (items at a shared start position, no attention
//!    across items, user and instruction after them at their token index); tolerance 0.05 nats
//!    (measured: ~0.003, the same as vLLM bf16 vs float32 on the plain causal prompt); the
//!    same with the pool kept as int4 (`--item-pool-codec int4`);
//! 2. through recache (`--rank-item-pool`): an item-first request fills the pool in the
//!    background; the next one with the same items (another user, another salt) gets every
//!    item from the pool (vLLM's external hits), answers every candidate, and a repeat scores
//!    identically;
//! 3. ahead of time and across restarts: a recache precomputes a catalog into the pool
//!    (`rank::startup::prepare`), a second recache adopts it from the connector's list without
//!    computing anything and serves every item from it; a recache whose labels exceed the
//!    model's vocabulary is told so by the engine and answers 500 naming the flag;
//! 4. the engine SIGKILLed and restarted on the same ports (its pool empty): once health
//!    probes take it back, recache's residency is reconciled with the connector's list (0
//!    resident, no request needed), nothing stays counted in flight, and ranking serves again.

use std::process::Command;
use std::time::Duration;

use recache::config::ServeArgs;
use recache::itempool::config::PoolArgs;
use recache::rank::config::RankArgs;
use recache_integration::{Proxy, Testbed, pool, testbed_home, wait_for};
use serde_json::{Value, json};

const ITEMS: usize = 30;
const ITEM_TOKENS: usize = 12;

fn request(model: &str, user: &str, salt: &str) -> Value {
    let items = pool::items(ITEMS, ITEM_TOKENS, 500, 37, |i| json!(i));
    let profile = pool::profile(400, user.len() as u32);
    pool::item_prefix_request(model, user, profile, items, Some(salt))
}

/// `item_pool_check.py` against `tb`: pooled scores against the HF reference of each layout.
fn layout_check(tb: &Testbed) {
    let home = testbed_home();
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let check = Command::new(home.join("venv-vllm/bin/python"))
        .arg(repo.join("shim/python/tests/item_pool_check.py"))
        .args([
            "--upstream",
            &tb.upstream,
            "--model",
            &tb.model,
            "--model-dir",
        ])
        .arg(home.join("models/tiny-qwen2"))
        .output()
        .expect("run item_pool_check.py");
    let out = String::from_utf8_lossy(&check.stdout);
    println!("item_pool_check: {out}");
    assert!(
        check.status.success(),
        "item_pool_check failed: {out}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// The pool kept as int4, the coarsest codec (`up --item-pool-codec int4`): every layout
/// still matches its reference within the same tolerance (measured: 0.022 nats).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn int4_pool_matches_the_layout_reference() {
    let tb = Testbed::up(
        "it-pool-int4",
        &["--item-pool", "--item-pool-codec", "int4"],
    );
    layout_check(&tb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn item_pool_matches_the_layout_reference_and_serves_external_hits() {
    let tb = Testbed::up("it-pool", &["--item-pool"]);
    layout_check(&tb);

    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        rank: RankArgs {
            pool: PoolArgs {
                rank_item_pool: Some(256),
                // The test waits for every fill of one request: no refresh rate bound.
                rank_item_pool_refresh: Some(0.0),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    let pool = proxy.pool();
    let first = proxy.rank(&request(&tb.model, "u-a", "s1")).await;
    assert_eq!(first["ranking"].as_array().map(Vec::len), Some(ITEMS));
    // Fills run in the background; the request above did not wait for them.
    wait_for(
        format_args!("every item filled ({ITEMS} resident, 0 pending)"),
        Duration::from_secs(120),
        async || match pool.counts() {
            (ITEMS, 0) => Ok(()),
            counts => Err(format!("(resident, pending) {counts:?}")),
        },
    )
    .await;
    let ext0 = tb.metric("vllm:external_prefix_cache_hits_total").await;
    let second = proxy.rank(&request(&tb.model, "u-b", "s2")).await;
    let region = (ITEMS * (ITEM_TOKENS + 1)) as f64;
    let ext1 = external_hits_reach(&tb, ext0, region).await;
    assert_eq!(ext1 - ext0, region, "every item token came from the pool");
    assert_eq!(pool.metrics.loaded_tokens.get() as f64, region);
    assert_eq!(second["ranking"].as_array().map(Vec::len), Some(ITEMS));
    let again = proxy.rank(&request(&tb.model, "u-b", "s3")).await;
    assert_eq!(
        pool::scores(&second),
        pool::scores(&again),
        "pool loads are deterministic"
    );
    tb.down();
}

/// Waits until vLLM's external prefix-cache hits counter has grown by `region` tokens from
/// `before` (vLLM updates its counters as it processes outputs, a moment after the answer),
/// and returns it.
async fn external_hits_reach(tb: &Testbed, before: f64, region: f64) -> f64 {
    wait_for(
        format_args!("vLLM counting {region} external prefix-cache hit tokens"),
        Duration::from_secs(30),
        async || match tb.metric("vllm:external_prefix_cache_hits_total").await {
            now if now - before >= region => Ok(now),
            now => Err(format!("{} counted", now - before)),
        },
    )
    .await
}

fn pool_args(upstream: &str, items: usize) -> ServeArgs {
    ServeArgs {
        upstream: vec![upstream.to_string()],
        health_interval: Some(Duration::from_millis(500)),
        rank: RankArgs {
            pool: PoolArgs {
                rank_item_pool: Some(items),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn item_pool_is_precomputed_adopted_after_a_restart_and_labels_are_checked() {
    let tb = Testbed::up("it-pool-sync", &["--item-pool"]);
    let body = request(&tb.model, "u-a", "s1");
    let catalog = pool::catalog_of(&body);
    {
        let first = Proxy::start_with(&pool_args(&tb.upstream, 64)).await;
        let none = |_: usize, _: usize| {};
        let done =
            recache::rank::startup::prepare(&first.state.ranker, Some(&tb.model), catalog, &none)
                .await
                .expect("precompute");
        let pre = done.precomputed.expect("a catalog was given");
        assert_eq!((pre.filled, pre.resident), (ITEMS, ITEMS));
        assert_eq!(pre.tokens as usize, ITEMS * (ITEM_TOKENS + 1));
    }
    // A new recache: nothing resident until it reads the engine's pool.
    let second = Proxy::start_with(&pool_args(&tb.upstream, 64)).await;
    let pool = second.pool();
    assert_eq!(pool.counts(), (0, 0));
    let none = |_: usize, _: usize| {};
    let done =
        recache::rank::startup::prepare(&second.state.ranker, Some(&tb.model), vec![], &none)
            .await
            .expect("adopt");
    assert_eq!((done.adopted, done.evicted), (ITEMS, 0));
    let ready = second.ready().await;
    assert_eq!(ready["item_pool"][0]["engine_pool"], "loaded", "{ready}");
    assert_eq!(ready["item_pool"][0]["engine_entries"], ITEMS, "{ready}");
    let ext0 = tb.metric("vllm:external_prefix_cache_hits_total").await;
    let answer = second.rank(&body).await;
    let ext1 = external_hits_reach(&tb, ext0, (ITEMS * (ITEM_TOKENS + 1)) as f64).await;
    assert_eq!(answer["ranking"].as_array().map(Vec::len), Some(ITEMS));
    assert_eq!(
        ext1 - ext0,
        (ITEMS * (ITEM_TOKENS + 1)) as f64,
        "every item from the adopted pool"
    );
    assert_eq!(
        pool.metrics.fills.with_label_values(&["ok"]).get(),
        0,
        "nothing recomputed"
    );

    // The engine dies and comes back on the same ports with an empty pool: recache hears the
    // replica return and reconciles at once (before any ranking answer could tell it).
    assert_eq!(pool.counts().0, ITEMS);
    let tb = tb.kill_and_restart(&["--item-pool"]);
    pool::wait_reconciled(&pool, Duration::from_secs(10)).await;
    assert!(
        pool.metrics.evictions.with_label_values(&["engine"]).get() >= ITEMS as u64,
        "forgotten items count as engine evictions"
    );
    let replica = &second.state.client.replicas()[0];
    assert!(replica.is_healthy());
    assert_eq!(replica.in_flight(), 0, "nothing stuck in flight");
    let answer = second.rank(&body).await;
    assert_eq!(answer["ranking"].as_array().map(Vec::len), Some(ITEMS));
    // The answer started background refills of the forgotten items (in flight for a moment):
    // they finish, the count returns to 0, and the pool holds items again.
    pool::wait_refilled(replica, &pool).await;

    // Labels beyond the model's vocabulary: the engine refuses the highest, recache says which
    // flag to change and refuses ranking requests instead of scoring the wrong tokens.
    let huge = Proxy::start_with(&pool_args(&tb.upstream, 1 << 20)).await;
    let verdict = recache::rank::startup::check_labels(&huge.state.ranker).await;
    let recache::rank::vocab::Verdict::TooSmall(msg) = verdict else {
        panic!(
            "the engine accepted label {}: {verdict:?}",
            huge.state.ranker.rank.vocab.highest
        );
    };
    assert!(msg.contains("--rank-item-pool"), "{msg}");
    let resp = reqwest::Client::new()
        .post(huge.url("/v1/rank"))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 500);
    let err: Value = resp.json().await.expect("json");
    assert_eq!(err["error"]["code"], "invalid_configuration");
    tb.down();
}
