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
//!    plans that are not JSON or not segments; the engine answers each and stays healthy.

use std::process::Command;

use recache_integration::Testbed;

fn testbed_home() -> std::path::PathBuf {
    match std::env::var("RECACHE_TESTBED_HOME") {
        Ok(h) => h.into(),
        Err(_) => std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
            .join(".cache/recache-testbed"),
    }
}

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
