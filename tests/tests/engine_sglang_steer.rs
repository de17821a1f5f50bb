//! Eviction steering of a real SGLang, both ways: request priorities (`recache serve
//! --sglang-priority`, SGLang with `--radix-eviction-policy priority`, no engine patch) and the
//! recache plugin (`sglang.srt.plugins` entry point reading the order `--publish` writes).
//!
//! recache runs LFU: prefix A is asked three times, then prefix B once, then a larger prompt C
//! that does not fit beside both. SGLang's LRU evicts A, the least recent; steered, SGLang
//! evicts B and keeps A (priorities: A's repeats carry a high one because LFU kept A, B a low
//! one; plugin: B's pages are in recache's order). Evidence: `meta_info.cached_tokens` of
//! `/generate` when A and B are asked again. One SGLang instance per test, flushed between the
//! native and the steered run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use recache::config::ServeArgs;
use recache::kvloop::config::KvLoopArgs;
use recache::kvloop::priority::LEVELS;
use recache_integration::{Proxy, Testbed, wait_for};
use serde_json::{Value, json};

/// SGLang's token pool: 40 x 32 tokens (the testbed's --kv-blocks unit).
const KV_TOKENS: usize = 40 * 32;
const A: usize = 400;
const B: usize = 400;
const C: usize = 600;
// C fits beside A or B, not beside both.
const _: () = assert!(A + B + C > KV_TOKENS && A + C < KV_TOKENS && B + C < KV_TOKENS);

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

/// Runs A x3, B, C through `proxy`, then asks B and A again at `probe` (the engine or recache):
/// (A cached, B cached). `a_first`: probe A before B (the expected survivor must be probed
/// first, see below).
async fn scenario(proxy: &Proxy, tb: &Testbed, probe: &str, a_first: bool) -> (u64, u64) {
    let (a, b, c) = (prompt(1, A), prompt(2, B), prompt(3, C));
    // The mirror must follow SGLang from the flush on (the plugin's order names the blocks
    // its events name): short pings straight to SGLang until recache mirrors one.
    proxy
        .wait_kv_events(async |k| {
            let ping = prompt(1000 + u64::from(k), 8);
            generate(&tb.upstream, &ping).await;
            ping
        })
        .await;
    // SGLang refuses to flush (400) while a request runs, and its /health (recache's probe)
    // is a one-token generation: retry until it accepts.
    // Flushes counted before this one (read first: the count can move within milliseconds).
    let cleared = resyncs_cleared(&proxy.base).await;
    let client = reqwest::Client::new();
    let flush = format!("{}/flush_cache", tb.upstream);
    wait_for(
        "SGLang flushing its cache",
        Duration::from_secs(30),
        async || {
            let status = client.post(&flush).send().await.expect("flush").status();
            if status == 200 {
                Ok(())
            } else {
                Err(format!("/flush_cache {status}"))
            }
        },
    )
    .await;
    // The flush reaches recache as an AllBlocksCleared event that resets the shadow, on the
    // events' own schedule: arriving after A's first request it would wipe A from the
    // policy's view (seen in CI). Ping SGLang directly until recache has counted it.
    // A ping only when the count has not moved (each leaves a short entry in SGLang's cache,
    // the oldest there, evicted first).
    let mut pings = 0u64;
    wait_for(
        "recache counting SGLang's cache flush (kv_mirror_resyncs_total{reason=\"cleared\"})",
        Duration::from_secs(60),
        async || match resyncs_cleared(&proxy.base).await {
            n if n > cleared => Ok(()),
            n => {
                pings += 1;
                generate(&tb.upstream, &prompt(5000 + pings, 8)).await;
                Err(format!(
                    "{n} clears counted, {cleared} before; {pings} pings"
                ))
            }
        },
    )
    .await;
    for _ in 0..3 {
        generate(&proxy.base, &a).await;
        taken(proxy, &a).await;
    }
    generate(&proxy.base, &b).await;
    taken(proxy, &b).await;
    if a_first {
        // Steered: C must find an order that ranks B first, and B's pages get their hashes
        // only from SGLang's KV events, which reach recache on their own schedule. Wait until
        // recache mirrors A and B and has republished since (what a live deployment reaches
        // within milliseconds; under CI load the events can trail the next request).
        settle(&proxy.base, (A + B) as f64).await;
    }
    generate(&proxy.base, &c).await;
    // B first: whichever of A and B is gone comes back at the cost of the other's room, so
    // the survivor must be probed first. Evicting for B when B is gone (steered) takes C (the
    // lowest priority) before A; when B is there (native) asking it evicts nothing.
    let (first, second) = if a_first { (&a, &b) } else { (&b, &a) };
    let got_first = generate(probe, first).await;
    if probe == proxy.base {
        taken(proxy, first).await;
    }
    let got_second = generate(probe, second).await;
    if a_first {
        (got_first, got_second)
    } else {
        (got_second, got_first)
    }
}

/// Waits until recache's engine loop has taken the arrival of `ids`, just sent through
/// `proxy`: the loop answers a query only after every arrival queued before it. With
/// `--sglang-priority`, also until its priority view shows `ids` kept, so the next request's
/// priority is computed from a view that has it.
async fn taken(proxy: &Proxy, ids: &[u32]) {
    let kv = proxy.state.kvloop.as_ref().expect("engine loop on");
    assert!(
        kv.cached_prefix(Vec::new()).is_some(),
        "the engine loop did not answer"
    );
    if kv.priority("/generate", &[]).is_none() {
        return;
    }
    let prompts = [ids.to_vec()];
    wait_for(
        "the priority view showing the prompt just sent as kept",
        Duration::from_secs(10),
        async || match kv.priority("/generate", &prompts) {
            Some(p) if p % LEVELS as i64 > 0 => Ok(()),
            p => Err(format!("priority {p:?}")),
        },
    )
    .await
}

/// One gauge or counter of recache's own `/metrics`, summed over the series whose labels
/// contain `label` ("" for all; 0 when absent).
async fn recache_metric(base: &str, name: &str, label: &str) -> f64 {
    let Ok(resp) = reqwest::get(format!("{base}/metrics")).await else {
        return 0.0;
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Engine cache flushes recache has seen (its `cleared` resyncs).
async fn resyncs_cleared(base: &str) -> f64 {
    recache_metric(
        base,
        "recache_kv_mirror_resyncs_total",
        "reason=\"cleared\"",
    )
    .await
}

/// Waits until recache's mirror holds at least `blocks` blocks and an order was published
/// after that; fails if SGLang's events never get there.
async fn settle(base: &str, blocks: f64) {
    wait_for(
        format_args!("recache mirroring {blocks} blocks (SGLang's KV events for A and B)"),
        Duration::from_secs(60),
        async || match recache_metric(base, "recache_kv_mirror_blocks", "").await {
            n if n >= blocks => Ok(()),
            n => Err(format!("{n} blocks mirrored")),
        },
    )
    .await;
    let seen = recache_metric(base, "recache_kv_order_publishes_total", "").await;
    wait_for(
        "an order published after the mirror held A and B",
        Duration::from_secs(10),
        async || match recache_metric(base, "recache_kv_order_publishes_total", "").await {
            n if n > seen => Ok(()),
            n => Err(format!("{n} publishes, {seen} before")),
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_evicts_what_recache_ranks_low_when_priorities_are_steered() {
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
    let args = |steer: bool| ServeArgs {
        upstream: vec![tb.upstream.clone()],
        engine: "sglang".parse().ok(),
        // SGLang's /health is a generation: on a loaded 2-core machine it can take seconds
        // behind a prefill, and two late probes would take the only replica out.
        health_interval: Some(Duration::from_secs(10)),
        eviction_policy: Some("lfu".into()),
        kvloop: KvLoopArgs {
            kv_events: vec![tb.kv_events.clone()],
            kv_engine_blocks: Some(KV_TOKENS),
            sglang_priority: steer,
            ..Default::default()
        },
        ..Default::default()
    };

    let native = Proxy::start_with(&args(false)).await;
    let (na, nb) = scenario(&native, &tb, &tb.upstream, false).await;
    drop(native);
    let steered = Proxy::start_with(&args(true)).await;
    let (sa, sb) = scenario(&steered, &tb, &tb.upstream, false).await;
    eprintln!("cached tokens (A, B): native LRU ({na}, {nb}), steered by recache LFU ({sa}, {sb})");
    tb.down();

    // Native: the least recent prefix (A) went, B stayed.
    assert!(na < A as u64 / 2, "native LRU kept A: {na}");
    assert!(nb + 1 >= B as u64, "native LRU lost B: {nb}");
    // Steered: recache's LFU keeps A, so SGLang evicts B instead.
    assert!(sa + 1 >= A as u64, "steered SGLang lost A: {sa}");
    assert!(sb < B as u64 / 2, "steered SGLang kept B: {sb}");
}

/// `shim/python` installed into a fresh directory for SGLang's PYTHONPATH (its entry point is
/// found there; the testbed venv stays untouched), built from a copy so the repo stays clean.
fn plugin_site(dir: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let home = std::env::var("RECACHE_TESTBED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/recache-testbed")
        });
    let src = dir.join("src");
    let site = dir.join("site");
    let ok = Command::new("cp")
        .arg("-r")
        .arg(repo.join("shim/python"))
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "copying shim/python");
    let ok = Command::new(home.join("venv-sglang/bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
        ])
        .arg(&site)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "pip install shim/python into {}", site.display());
    site
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_evicts_what_recache_orders_first_through_the_plugin() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/librecache_shim.so");
    assert!(
        lib.is_file(),
        "{} missing: cargo build --release -p recache-shim (tests/run does)",
        lib.display()
    );
    let dir = std::env::temp_dir().join(format!("recache-sglsteer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let site = plugin_site(&dir);
    let order = dir.join("order.bin");
    let kv_blocks = (KV_TOKENS / 32).to_string();
    let tb = Testbed::up_with_env(
        "it-sglsteer-plugin",
        &[
            "--engine",
            "sglang",
            "--kv-blocks",
            &kv_blocks,
            "--max-model-len",
            "1024",
        ],
        &[
            ("PYTHONPATH", &site.display().to_string()),
            ("SGLANG_PLUGINS", "recache"),
            ("RECACHE_SHIM_ORDER", &order.display().to_string()),
            ("RECACHE_SHIM_LIB", &lib.display().to_string()),
            // The plugin's staleness limit (2 s by default) is not the property under test:
            // a machine stalled that long between recache's publish and C must not make the
            // plugin fall back to LRU here (shim/python/tests cover staleness).
            ("RECACHE_SHIM_ORDER_MAX_AGE_MS", "600000"),
        ],
    );
    let args = |publish: Option<String>| ServeArgs {
        upstream: vec![tb.upstream.clone()],
        engine: "sglang".parse().ok(),
        health_interval: Some(Duration::from_secs(10)),
        eviction_policy: Some("lfu".into()),
        kvloop: KvLoopArgs {
            kv_events: vec![tb.kv_events.clone()],
            kv_engine_blocks: Some(KV_TOKENS),
            publish,
            ..Default::default()
        },
        ..Default::default()
    };

    // No order file yet: the plugin leaves SGLang's LRU.
    let native = Proxy::start_with(&args(None)).await;
    let (na, nb) = scenario(&native, &tb, &native.base, false).await;
    drop(native);
    let steered = Proxy::start_with(&args(Some(order.display().to_string()))).await;
    // The order is republished after each arrival, never waited for, so SGLang can allocate
    // C before recache has seen C. What makes it take B then is the order published after B:
    // no victims yet, but LFU's ranking of what it keeps (B's tip before A's). A (the expected
    // survivor) is probed first so the probes themselves evict nothing of it.
    let (sa, sb) = scenario(&steered, &tb, &steered.base, true).await;
    eprintln!(
        "cached tokens (A, B): native LRU ({na}, {nb}), plugin with recache LFU ({sa}, {sb})"
    );
    tb.down();
    let _ = std::fs::remove_dir_all(&dir);

    assert!(na < A as u64 / 2, "native LRU kept A: {na}");
    assert!(nb + 1 >= B as u64, "native LRU lost B: {nb}");
    assert!(sa + 1 >= A as u64, "plugin-steered SGLang lost A: {sa}");
    assert!(sb < B as u64 / 2, "plugin-steered SGLang kept B: {sb}");
}
