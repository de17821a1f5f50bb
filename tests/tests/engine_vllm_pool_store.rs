//! The item pool's cold tier against two real vLLM testbed replicas sharing a real Redis
//! server (`examples/store/install`; replicas started with `up --item-pool --pool-store
//! redis://..`). Redis, not Mooncake Store, because on this 2-core machine a Mooncake read
//! of another engine's segment stalled in some runs (docs/store.md); the Mooncake client is
//! tested through the connector in `shim/python/tests/test_item_pool_cold.py`:
//!
//! 1. an item filled through replica A is served to replica B from the store, and B's scores
//!    equal A's, which loaded the same item from its own pool
//!    (`shim/python/tests/item_cold_check.py --phase served`);
//! 2. the store killed: the same prompt on B is answered with the scores of the plain causal
//!    prompt (vLLM recomputes what failed to load), its failed reads counted (`--phase down`);
//! 3. the store restarted empty on the same ports: new fills through A reach it and B is
//!    served from it again (`--phase refill`);
//! 4. through recache (`--rank-pool-store`, `gr:pool_hot_share=0`: each item pooled on its
//!    home replica only): a ranking sent to one replica carries the items the other holds
//!    marked cold, the engine reads them from the store (recache's store metrics), every
//!    candidate is answered, and `/ready` reports the store reachable.

use std::process::Command;

use recache_integration::store::{self, RedisServer};
use recache_integration::{Engine, Testbed, testbed_home};
use serde_json::{Value, json};

fn venv_python() -> std::path::PathBuf {
    testbed_home().join("venv-vllm/bin/python")
}

/// Runs one phase of `item_cold_check.py` (A fills, B reads the store); returns its JSON.
fn check(a: &Testbed, b: &Testbed, phase: &str, min_connects: u32) -> Value {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(venv_python())
        .arg(repo.join("shim/python/tests/item_cold_check.py"))
        .args(["--a", &a.upstream, "--b", &b.upstream, "--model", &a.model])
        .args([
            "--phase",
            phase,
            "--min-connects",
            &min_connects.to_string(),
        ])
        .output()
        .expect("run item_cold_check.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("item_cold_check {phase}: {stdout}");
    assert!(
        out.status.success(),
        "item_cold_check --phase {phase} failed: {stdout}\n{}\nA's log:\n{}\nB's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        a.log_tail(30),
        b.log_tail(30)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn items_filled_on_one_replica_are_served_to_the_other_from_the_store() {
    store::install(); // redis-server and the clients
    let mut master = RedisServer::start().await;
    let spec = master.url();
    let flags = ["--item-pool", "--pool-store", spec.as_str()];
    // A step's fetch bound well above this busy 2-core machine's worst (the default, 250 ms,
    // is for serving; here a late fetch would fail a check, not cost a recompute).
    let env = [("RECACHE_TESTBED_POOL_STORE_TIMEOUT_MS", "2000")];
    let a = Testbed::up_with_env("it-store-a", &flags, &env);
    let b = Testbed::up_with_env("it-store-b", &flags, &env);

    let served = check(&a, &b, "served", 1);
    assert_eq!(served["cold_vs_local"], json!(0.0), "{served}");
    master.stop();
    let down = check(&a, &b, "down", 1);
    assert!(down["b_store_misses"].as_u64() >= Some(1), "{down}");
    master.restart().await;
    // Each connector sets its client up again once the store answers (its watch).
    check(&a, &b, "refill", 2);

    store::cold_items_are_served_across_replicas(Engine::Vllm, &a, &b, &master.url()).await;
    a.down();
    b.down();
}
