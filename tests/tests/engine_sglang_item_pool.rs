//! The item KV pool on the real SGLang CPU engine, through SGLang's external unified-cache
//! linker (`examples/testbed/up --engine sglang --item-pool`, which loads
//! `recache_shim.sglang_item_pool`):
//!
//! 1. correctness: `shim/python/tests/item_pool_check.py --engine sglang` compares SGLang's
//!    label log-probs with every item loaded from the pool against the tiny HF Qwen2 (float32)
//!    under the pool's layout, the same checks and tolerance (0.05 nats) as on vLLM: shared
//!    start, `pos` re-rotation, link tokens, items after a cached user prefix; every item token
//!    loaded and counted by SGLang as a host hit (`cached_tokens_details.host`);
//! 2. what cannot be served is computed, never loaded wrong: `item_pool_faults.py` sends a
//!    resident key for other tokens (nothing loaded, scores equal the plain prompt's), a run
//!    with an item never filled (the run stops there), a plan evicting its own first item,
//!    plans that are not JSON or not segments; the engine answers each and stays healthy;
//! 3. through recache (`--engine sglang --rank-item-pool`), across a restart: a recache
//!    precomputes a catalog into SGLang's pool, ranks with every item token loaded from it
//!    (SGLang's `host` hits) and scores a repeat identically; the engine is SIGKILLed and
//!    restarted on the same ports (its pool empty): once health probes take it back recache's
//!    residency is reconciled to 0 through the linker's list, nothing stays in flight, ranking
//!    serves every candidate again and the refills make items resident again;
//! 4. the cold tier: two SGLang replicas sharing a real Redis (`up --pool-store redis://..`)
//!    behind recache (`--rank-pool-store`, each item pooled at its home only): a ranking sent
//!    to one replica carries the other's items marked cold, its linker reads them from the
//!    store before it claims them (store hits in recache's metrics), and every candidate is
//!    answered (`recache_integration::store::cold_items_are_served_across_replicas`, the
//!    body vLLM's `engine_vllm_pool_store.rs` runs too).

use std::process::Command;
use std::time::Duration;

use recache::config::ServeArgs;
use recache::itempool::config::PoolArgs;
use recache::rank::config::RankArgs;
use recache_adapters::{Engine, prom};
use recache_integration::store::{self, RedisServer};
use recache_integration::{Proxy, SGLANG_HEALTH_INTERVAL, Testbed, pool, testbed_home, wait_for};
use serde_json::{Value, json};

const ITEMS: usize = 20;
const ITEM_TOKENS: usize = 12;

/// Runs `shim/python/tests/<script>` with the SGLang venv's Python against `tb`; asserts it
/// exits 0 and prints its JSON line.
fn check(tb: &Testbed, script: &str, extra: &[&str]) {
    let home = testbed_home();
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let run = Command::new(home.join("venv-sglang/bin/python"))
        .arg(repo.join("shim/python/tests").join(script))
        .args([
            "--upstream",
            &tb.upstream,
            "--model",
            &tb.model,
            "--engine",
            "sglang",
        ])
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let out = String::from_utf8_lossy(&run.stdout);
    println!("{script}: {out}");
    assert!(
        run.status.success(),
        "{script} failed: {out}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_pool_matches_the_layout_reference_and_computes_what_it_cannot_serve() {
    let tb = Testbed::up("it-sglpool", &["--engine", "sglang", "--item-pool"]);
    let model_dir = testbed_home().join("models/tiny-qwen2");
    check(
        &tb,
        "item_pool_check.py",
        &["--model-dir", &model_dir.display().to_string()],
    );
    check(&tb, "item_pool_faults.py", &[]);
    tb.down();
}

fn request(model: &str, user: &str, salt: &str) -> Value {
    let items = pool::items(ITEMS, ITEM_TOKENS, 500, 37, |i| json!(i));
    let profile = pool::profile(300, user.len() as u32);
    pool::item_prefix_request(model, user, profile, items, Some(salt))
}

/// SGLang's prompt tokens served by the linker (`cached_tokens_total{cache_source="host"}`).
async fn host_hits(tb: &Testbed) -> f64 {
    let text = reqwest::get(format!("{}/metrics", tb.upstream))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    prom::selected_sum(&text, recache_adapters::sglang::METRIC_POOL_HITS)
}

/// Waits until SGLang has counted `region` more host-hit tokens than `before` (it counts as it
/// processes outputs, a moment after the answer).
async fn host_hits_reach(tb: &Testbed, before: f64, region: f64) -> f64 {
    wait_for(
        format_args!("SGLang counting {region} host-hit tokens"),
        Duration::from_secs(30),
        async || match host_hits(tb).await {
            now if now - before >= region => Ok(now),
            now => Err(format!("{} counted", now - before)),
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_pool_serves_through_recache_and_is_reconciled_after_a_restart() {
    let tb = Testbed::up("it-sglpool-sync", &["--engine", "sglang", "--item-pool"]);
    let body = request(&tb.model, "u-a", "s1");
    let catalog = pool::catalog_of(&body);
    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        engine: Some(Engine::Sglang),
        // SGLang's HTTP loop stalls during prefills on a busy 2-core machine: its interval.
        health_interval: Some(SGLANG_HEALTH_INTERVAL),
        rank: RankArgs {
            pool: PoolArgs {
                rank_item_pool: Some(64),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    let none = |_: usize, _: usize| {};
    let done =
        recache::rank::startup::prepare(&proxy.state.ranker, Some(&tb.model), catalog, &none)
            .await
            .expect("precompute");
    let pre = done.precomputed.expect("a catalog was given");
    assert_eq!((pre.filled, pre.resident), (ITEMS, ITEMS));
    let ready = proxy.ready().await;
    assert_eq!(ready["item_pool"][0]["engine_pool"], "loaded", "{ready}");
    let pool = proxy.pool();
    let region = (ITEMS * (ITEM_TOKENS + 1)) as f64;
    let host0 = host_hits(&tb).await;
    let first = proxy.rank(&body).await;
    let host1 = host_hits_reach(&tb, host0, region).await;
    assert_eq!(host1 - host0, region, "every item token from SGLang's pool");
    assert_eq!(first["ranking"].as_array().map(Vec::len), Some(ITEMS));
    let again = proxy.rank(&request(&tb.model, "u-a", "s2")).await;
    assert_eq!(
        pool::scores(&first),
        pool::scores(&again),
        "pool loads are deterministic"
    );

    // SIGKILL, and back on the same ports with an empty pool: recache hears the replica
    // return and reconciles through the linker's list before any ranking answer tells it.
    assert_eq!(pool.counts().0, ITEMS);
    let tb = tb.kill_and_restart(&["--engine", "sglang", "--item-pool"]);
    pool::wait_reconciled(&pool, Duration::from_secs(90)).await;
    let replica = &proxy.state.client.replicas()[0];
    assert!(replica.is_healthy());
    assert_eq!(replica.in_flight(), 0, "nothing stuck in flight");
    let after = proxy.rank(&request(&tb.model, "u-b", "s3")).await;
    assert_eq!(after["ranking"].as_array().map(Vec::len), Some(ITEMS));
    pool::wait_refilled(replica, &pool).await;
    tb.down();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_pool_reads_what_the_other_replica_filled_from_the_store() {
    store::install(); // redis-server and the clients
    let master = RedisServer::start().await;
    let spec = master.url();
    let flags = ["--engine", "sglang", "--item-pool", "--pool-store", &spec];
    // A cold read's bound well above this busy 2-core machine's worst (the default, 250 ms,
    // is for serving; here a late read would fail the check, not cost a recompute).
    let env = [("RECACHE_TESTBED_POOL_STORE_TIMEOUT_MS", "2000")];
    let a = Testbed::up_with_env("it-sgl-store-a", &flags, &env);
    let b = Testbed::up_with_env("it-sgl-store-b", &flags, &env);
    store::cold_items_are_served_across_replicas(
        recache_integration::Engine::Sglang,
        &a,
        &b,
        &spec,
    )
    .await;
    a.down();
    b.down();
}
