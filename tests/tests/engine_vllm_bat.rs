//! BAT's prefix selection reading the real vLLM's cache through its KV events (`--kv-events`):
//! a cold user is refused while the engine holds another user's prefix and the cache is full,
//! and admitted once the engine has dropped it — what the selector's own model could not know.

use std::time::Duration;

use recache::config::ServeArgs;
use recache::kvloop::config::KvLoopArgs;
use recache::rank::config::{Admission, RankArgs, SelectorKind};
use recache_adapters::order::Order;
use recache_integration::{Proxy, Testbed, wait_for};
use serde_json::{Value, json};

/// Profile length in tokens; the bat budget holds one such profile and no more.
const PROFILE: usize = 1000;

fn request(model: &str, user: &str, first_token: u32) -> Value {
    let profile: Vec<u32> = (0..PROFILE as u32).map(|i| first_token + i % 97).collect();
    let items: Vec<Value> = (0..20u32)
        .map(|i| json!({"id": i, "tokens": [2000 + i, 2100 + i, 2200 + i]}))
        .collect();
    json!({"model": model, "user": {"id": user, "tokens": profile}, "items": items})
}

/// recache in front of `tb` with the bat rule, BAT's admission test on and a budget of one
/// profile, following the engine as `kvloop` says.
fn bat_args(tb: &Testbed, kvloop: KvLoopArgs) -> ServeArgs {
    ServeArgs {
        upstream: vec![tb.upstream.clone()],
        kvloop,
        rank: RankArgs {
            rank_selector: Some(SelectorKind::Bat),
            rank_admission: Some(Admission::On),
            rank_user_cache_tokens: Some(PROFILE as u64 + 100),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Polls the engine-cache snapshot until `ok` holds for its size in blocks.
async fn wait_snapshot(proxy: &Proxy, ok: impl Fn(usize) -> bool, what: &str) {
    let kvloop = proxy.state.kvloop.as_ref().expect("engine loop on");
    for _ in 0..250 {
        if kvloop.resident().is_some_and(|s| ok(s.len())) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("engine-cache snapshot never {what}");
}

/// Empties vLLM's prefix cache, retrying while the last request still holds blocks.
async fn reset(tb: &Testbed) {
    for _ in 0..40 {
        let resp = reqwest::Client::new()
            .post(format!("{}/reset_prefix_cache", tb.upstream))
            .send()
            .await
            .expect("reset");
        assert!(resp.status().is_success());
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if v["success"] != Value::Bool(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("/reset_prefix_cache kept answering success=false");
}

/// vLLM publishes `AllBlocksCleared` with the events of its next scheduler step, not at the
/// reset: one short request straight to the engine makes it go out.
async fn flush_events(tb: &Testbed) {
    let body = json!({"model": tb.model, "prompt": [5, 6, 7], "max_tokens": 1});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", tb.upstream))
        .json(&body)
        .send()
        .await
        .expect("flush request");
    assert!(resp.status().is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn bat_admission_follows_the_engines_cache() {
    let tb = Testbed::up("it-bat", &[]);
    let args = bat_args(
        &tb,
        KvLoopArgs {
            kv_events: vec![tb.kv_events.clone()],
            ..Default::default()
        },
    );
    let proxy = Proxy::start_with(&args).await;
    wait_snapshot(&proxy, |_| true, "became live").await;
    reset(&tb).await;
    wait_snapshot(&proxy, |n| n == 0, "emptied after the reset").await;

    // Room in the engine: the first user goes first and its prefix is cached.
    let a = proxy.rank(&request(&tb.model, "a", 300)).await;
    assert_eq!(a["prefix"], "user", "{a}");
    let blocks = PROFILE / 32;
    wait_snapshot(&proxy, |n| n >= blocks, "held a's prefix").await;
    // The engine holds a (as frequent as b) and has no room for b: refused, item-first.
    let b = proxy.rank(&request(&tb.model, "b", 600)).await;
    assert_eq!(b["prefix"], "item", "{b}");
    // a returns: its prefix is in the engine, reused.
    let a2 = proxy.rank(&request(&tb.model, "a", 300)).await;
    assert_eq!(a2["prefix"], "user", "{a2}");
    assert!(a2["usage"]["cached_tokens"].as_u64().unwrap_or(0) >= (blocks * 32) as u64);

    // The engine drops everything: c is admitted although the selector saw a before it.
    reset(&tb).await;
    flush_events(&tb).await;
    wait_snapshot(&proxy, |n| n < blocks, "dropped a after the second reset").await;
    let c = proxy.rank(&request(&tb.model, "c", 900)).await;
    assert_eq!(c["prefix"], "user", "{c}");
    tb.down();
}

/// The order file's publish counter (0 while it is missing or unreadable).
fn order_seq(order: &str) -> u64 {
    std::fs::read(order)
        .ok()
        .and_then(|b| Order::decode(&b).ok())
        .map_or(0, |o| o.seq)
}

/// Waits until the engine's events for the request just answered reached the mirror (the
/// snapshot is no longer `before`) and an order was published after them. Steering follows
/// the engine's events, so a request sent sooner can be placed by an order that does not list
/// the previous user's blocks yet, and the engine falls back to its own LRU for the rest (CI
/// once lost 3 of a's blocks that way).
async fn order_caught_up(
    proxy: &Proxy,
    order: &str,
    before: &std::sync::Arc<recache::kvloop::resident::Snapshot>,
) {
    let kvloop = proxy.state.kvloop.as_ref().expect("engine loop on");
    let seq = wait_for(
        "the mirror to apply the request's events",
        Duration::from_secs(10),
        async || match kvloop.resident() {
            Some(now) if !std::sync::Arc::ptr_eq(&now, before) => Ok(order_seq(order)),
            _ => Err("snapshot unchanged"),
        },
    )
    .await;
    wait_for(
        "an order published after those events",
        Duration::from_secs(10),
        async || {
            let now = order_seq(order);
            if now > seq {
                Ok(())
            } else {
                Err(format!("seq {now}"))
            }
        },
    )
    .await;
}

/// Ranks user `a`, then five others (each refused: a holds the one-profile budget), and asks how
/// many of `a`'s tokens the engine still had when `a` came back.
/// `order` (steered): every one of them must be refused (with native eviction the engine may drop a
/// early, and then the next user is admitted, rightly).
async fn a_survives(tb: &Testbed, proxy: &Proxy, order: Option<&str>) -> u64 {
    let a = proxy.rank(&request(&tb.model, "a", 300)).await;
    assert_eq!(a["prefix"], "user", "{a}");
    wait_snapshot(proxy, |n| n >= PROFILE / 32, "held a's prefix").await;
    for (user, first) in [
        ("b", 600),
        ("c", 900),
        ("d", 1200),
        ("e", 1500),
        ("f", 1800),
    ] {
        let before = proxy.state.kvloop.as_ref().and_then(|k| k.resident());
        let v = proxy.rank(&request(&tb.model, user, first)).await;
        if let (Some(order), Some(before)) = (order, before) {
            assert_eq!(v["prefix"], "item", "{user}: {v}");
            order_caught_up(proxy, order, &before).await;
        }
    }
    let again = proxy.rank(&request(&tb.model, "a", 300)).await;
    assert_eq!(again["prefix"], "user", "{again}");
    again["usage"]["cached_tokens"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn refused_users_are_evicted_first_when_recache_steers_vllm() {
    // 128 blocks of 32 tokens, ~35 per request: the six requests need about twice that.
    let order = std::env::temp_dir().join(format!("recache-it-batsteer-{}", std::process::id()));
    let order_s = order.to_string_lossy().to_string();
    let tb = Testbed::up(
        "it-batsteer",
        &[
            "--shim",
            &order_s,
            "--kv-blocks",
            "128",
            "--max-model-len",
            "2048",
        ],
    );
    let args = |publish: bool| {
        let kvloop = KvLoopArgs {
            kv_events: vec![tb.kv_events.clone()],
            kv_engine_blocks: Some(128),
            publish: publish.then(|| order_s.clone()),
            ..Default::default()
        };
        bat_args(&tb, kvloop)
    };
    // Native LRU (no order published): a is the oldest and goes first.
    let native = Proxy::start_with(&args(false)).await;
    wait_snapshot(&native, |_| true, "became live").await;
    reset(&tb).await;
    let native_cached = a_survives(&tb, &native, None).await;
    drop(native);
    // Steered: the refused users' prompts (beyond their items) are the first victims.
    let steered = Proxy::start_with(&args(true)).await;
    wait_snapshot(&steered, |_| true, "became live").await;
    reset(&tb).await;
    flush_events(&tb).await;
    let steered_cached = a_survives(&tb, &steered, Some(&order_s)).await;
    tb.down();
    let _ = std::fs::remove_file(&order);
    assert!(
        native_cached < (PROFILE / 2) as u64,
        "native LRU kept {native_cached} of a's tokens"
    );
    assert!(
        steered_cached >= (PROFILE / 32 * 32) as u64,
        "steered vLLM kept only {steered_cached} of a's tokens"
    );
}
