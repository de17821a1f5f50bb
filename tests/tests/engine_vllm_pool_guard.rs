//! The item pool's quality guard and recompute setting against the real vLLM testbed with the
//! connector (`examples/testbed/up --item-pool`), on the tiny random-weight model: a model
//! never trained on pooled layouts, whose pooled rankings have nothing to do with its
//! user-first ones.
//!
//! 1. With `--rank-quality-sample 1`, every pool-served ranking is scored again user-first in
//!    the background; the agreement falls below `--rank-quality-min`, the guard turns the pool
//!    off for the model (metrics, `/ready`), and the next item-first request is served without
//!    the pool (no pooled tokens loaded) while the guard keeps probing (pooled shadows).
//! 2. `PUT /admin/rank-pool-recompute` swaps the setting off the request path: the new
//!    setting is judged on its own (pool on again until measured), its prompts carry one link
//!    token per pooled item, and a bad spec is refused with 400 naming the field; a request's
//!    own `pool_recompute` is checked the same way.

use std::time::Duration;

use recache::config::ServeArgs;
use recache::rank::config::RankArgs;
use recache_integration::{Proxy, Testbed};
use serde_json::{Value, json};

const ITEMS: usize = 30;
const ITEM_TOKENS: usize = 6;

fn request(model: &str, user: usize) -> Value {
    let items: Vec<Value> = (0..ITEMS)
        .map(|i| {
            let tokens: Vec<u32> = (0..ITEM_TOKENS as u32)
                .map(|t| 500 + 37 * i as u32 + t)
                .collect();
            json!({"id": i, "tokens": tokens})
        })
        .collect();
    let profile: Vec<u32> = (0..120)
        .map(|t| 3000 + (t * 7 + 13 * user as u32) % 900)
        .collect();
    json!({"model": model, "user": {"id": format!("u{user}"), "tokens": profile},
           "items": items, "mode": "item_prefix"})
}

async fn put_recompute(proxy: &Proxy, token: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .put(proxy.url("/admin/rank-pool-recompute"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("admin PUT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn guard_turns_the_pool_off_for_a_model_never_trained_pooled() {
    let tb = Testbed::up("it-guard", &["--item-pool"]);
    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        admin_token: Some("t".into()),
        rank: RankArgs {
            rank_item_pool: Some(64),
            rank_item_pool_refresh: Some(0.0),
            rank_quality_sample: Some(1.0),
            rank_quality_min: Some(0.5),
            ..Default::default()
        },
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    let rank = &proxy.state.ranker.rank;
    let pool = rank.pool.as_ref().expect("item pool on").get(0).clone();
    let guard = rank.guard.as_ref().expect("quality guard on").clone();
    proxy.rank(&request(&tb.model, 0)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while pool.counts() != (ITEMS, 0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fills never finished: {:?}",
            pool.counts()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Pool-served rankings, each scored again user-first in the background, until the guard
    // has its verdict.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let mut user = 1;
    while guard.pool_allowed(&tb.model, "none") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the guard never turned the pool off: {}",
            guard.detail()
        );
        proxy.rank(&request(&tb.model, user)).await;
        user += 1;
    }
    let ready: Value = reqwest::get(proxy.url("/ready"))
        .await
        .expect("ready")
        .json()
        .await
        .expect("json");
    let pair = &ready["quality"]["pairs"][0];
    assert_eq!(pair["pool"], "off", "/ready: {ready}");
    assert_eq!(pair["model"], tb.model.as_str(), "/ready: {ready}");
    let metrics = reqwest::get(proxy.url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let line = format!(
        "recache_rank_quality_pool_on{{model=\"{}\",setting=\"none\"}} 0",
        tb.model
    );
    assert!(metrics.contains(&line), "no `{line}` in /metrics");

    // Off: an item-first request loads nothing from the pool, and the guard probes pooled.
    let loaded = pool.metrics.loaded_tokens.get();
    let probes =
        |g: &recache::rank::guard::QualityGuard| g.detail()["pairs"][0]["samples"].as_u64();
    let answer = proxy.rank(&request(&tb.model, 1000)).await;
    assert_eq!(answer["ranking"].as_array().map(Vec::len), Some(ITEMS));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while probes(&guard) == Some(0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pooled probe was scored: {}",
            guard.detail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        pool.metrics.loaded_tokens.get(),
        loaded,
        "the served request used no pool"
    );
    assert!(
        !guard.pool_allowed(&tb.model, "none"),
        "one probe does not turn it back on"
    );

    // A new setting is judged on its own: pooled again, with one link token per pooled item.
    let bad = put_recompute(&proxy, "t", json!({"pool_recompute": "link:k=0"})).await;
    assert_eq!(bad.status(), 400);
    let ok = put_recompute(&proxy, "t", json!({"pool_recompute": "link:k=1"})).await;
    assert_eq!(ok.status(), 200);
    let now: Value = ok.json().await.expect("json");
    assert_eq!(now["pool_recompute"], "link:k=1");
    let loaded = pool.metrics.loaded_tokens.get();
    let linked = proxy.rank(&request(&tb.model, 2001)).await;
    let tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    // `answer` (served while the pool was off) has the same items, user length and instruction.
    assert_eq!(
        tokens(&linked),
        tokens(&answer) + ITEMS as u64,
        "{answer} {linked}"
    );
    let region = (ITEMS * (ITEM_TOKENS + 1)) as u64;
    assert_eq!(
        pool.metrics.loaded_tokens.get() - loaded,
        region,
        "every item pooled again"
    );
    let resp = reqwest::Client::new()
        .post(proxy.url("/v1/rank"))
        .json(
            &json!({"model": tb.model, "user": {"id": "x", "tokens": [1, 2]},
                      "items": [{"id": 1, "tokens": [3]}], "pool_recompute": "blend"}),
        )
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.expect("json");
    assert_eq!(e["error"]["param"], "pool_recompute", "{e}");
    tb.down();
}
