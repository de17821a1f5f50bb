//! The item pool's quality guard and recompute setting against the real vLLM testbed with the
//! connector (`examples/testbed/up --item-pool`), on the tiny random-weight model. The guard's
//! verdicts on real rankers (one trained pooled keeps the pool, one never trained pooled loses
//! it) are `ranker_pool_guard.rs`; here, what the guard does with any model:
//!
//! 1. With `--rank-quality-sample 1`, pool-served rankings are scored again user-first (in
//!    the request's order and reversed) in the background, off the request path: every answer
//!    is served, the shadows are counted (`recache_rank_quality_samples_total`, tokens) and
//!    `/ready` shows the pair's window (samples, relative agreement, pool on or off).
//! 2. `PUT /admin/rank-pool-recompute` swaps the setting off the request path: its prompts
//!    carry one link token per pooled item (`usage.link_tokens`), every item still comes from
//!    the pool (`usage.pool_tokens`), and the new setting is judged on its own; a bad spec is
//!    refused with 400 naming the field, and so is a request's own `pool_recompute`.

use std::time::Duration;

use recache::config::ServeArgs;
use recache::itempool::config::PoolArgs;
use recache::rank::config::RankArgs;
use recache::rank::guard::{MIN_SAMPLES, QualityGuard};
use recache_integration::{Proxy, Testbed, pool, wait_for};
use serde_json::{Value, json};

const ITEMS: usize = 30;
const ITEM_TOKENS: usize = 6;

fn request(model: &str, user: usize) -> Value {
    let items = pool::items(ITEMS, ITEM_TOKENS, 500, 37, |i| json!(i));
    let profile = pool::profile(120, 13 * user as u32);
    pool::item_prefix_request(model, &format!("u{user}"), profile, items, None)
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
async fn guard_scores_pooled_rankings_again_and_the_setting_swaps() {
    let tb = Testbed::up("it-guard", &["--item-pool"]);
    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        admin_token: Some("t".into()),
        rank: RankArgs {
            pool: PoolArgs {
                rank_item_pool: Some(64),
                rank_item_pool_refresh: Some(0.0),
                ..Default::default()
            },
            rank_quality_sample: Some(1.0),
            ..Default::default()
        },
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    let rank = &proxy.state.ranker.rank;
    let pool = proxy.pool();
    let guard = rank.guard.as_ref().expect("quality guard on").clone();
    proxy.rank(&request(&tb.model, 0)).await;
    wait_for(
        "every item filled",
        Duration::from_secs(120),
        async || match pool.counts() {
            c if c == (ITEMS, 0) => Ok(()),
            c => Err(format!("{c:?}")),
        },
    )
    .await;

    // Pool-served rankings; their shadows run in the background (two at a time at most, so
    // some samples are skipped while the requests come back to back).
    let region = (ITEMS * (ITEM_TOKENS + 1)) as u64;
    // The pooled run's full blocks also land in vLLM's own prefix cache: a repeat finds most
    // of them there (cached_tokens), and the connector supplies the rest (pool_tokens).
    let mut plain = Value::Null;
    let mut pooled = 0;
    for user in 1..=MIN_SAMPLES * 2 {
        plain = proxy.rank(&request(&tb.model, user)).await;
        assert_eq!(plain["ranking"].as_array().map(Vec::len), Some(ITEMS));
        assert_eq!(plain["usage"]["link_tokens"], 0, "{plain}");
        pooled += usize::from(plain["usage"]["pool_tokens"].as_u64().unwrap_or(0) > 0);
    }
    assert!(
        pooled > 0,
        "no request was served from the pool: {}",
        guard.detail()
    );
    let samples = |g: &QualityGuard| g.detail()["pairs"][0]["samples"].as_u64().unwrap_or(0);
    wait_for(
        "two shadow scorings finished",
        Duration::from_secs(120),
        async || {
            if samples(&guard) >= 2 {
                Ok(())
            } else {
                Err(guard.detail())
            }
        },
    )
    .await;
    let ready = proxy.ready().await;
    let pair = &ready["quality"]["pairs"][0];
    assert_eq!(pair["model"], tb.model.as_str(), "/ready: {ready}");
    assert_eq!(pair["setting"], "none", "/ready: {ready}");
    assert!(pair["relative"].is_f64(), "/ready: {ready}");
    let metrics = proxy.metrics_text().await;
    let ok = format!(
        "recache_rank_quality_samples_total{{model=\"{}\",outcome=\"ok\"}}",
        tb.model
    );
    assert!(metrics.contains(&ok), "no `{ok}` in /metrics");
    assert!(
        metrics.contains("recache_rank_quality_tokens_total"),
        "{metrics}"
    );

    // A new setting: swapped off the request path, one link token per pooled item.
    let bad = put_recompute(&proxy, "t", json!({"pool_recompute": "link:k=0"})).await;
    assert_eq!(bad.status(), 400);
    let ok = put_recompute(&proxy, "t", json!({"pool_recompute": "link:k=1"})).await;
    assert_eq!(ok.status(), 200);
    let now: Value = ok.json().await.expect("json");
    assert_eq!(now["pool_recompute"], "link:k=1");
    assert!(
        guard.pool_allowed(&tb.model, "link:k=1"),
        "judged on its own"
    );
    let linked = proxy.rank(&request(&tb.model, 1000)).await;
    let tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert_eq!(
        tokens(&linked),
        tokens(&plain) + ITEMS as u64,
        "{plain} {linked}"
    );
    let cached = linked["usage"]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached >= region, "every item pooled: {linked}");
    assert_eq!(linked["usage"]["link_tokens"], ITEMS as u64, "{linked}");
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
