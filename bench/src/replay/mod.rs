//! `recache bench replay`: a Mooncake block-hash trace replayed against a real engine (vLLM or
//! SGLang) through an in-process recache, once per eviction policy, comparing the engine's own
//! prefix-cache hit rate with the eviction simulator's on the same request stream and capacity.
//!
//! Each hash id becomes a fixed 32-token block (seeded from the id, so shared prefixes stay
//! shared), plus one trailing token per request so vLLM can hit every full block (it never
//! serves a block-aligned prompt's last token from cache). Requests go in trace order, one at
//! a time by default (so the engine sees the stream the simulator sees), or at most
//! `--concurrency` in flight to measure the time to first token under load (LCR measures P99
//! TTFT); each request streams its one output token, and its first chunk times the TTFT. Policies: `native` (recache
//! publishes no order: the engine's own LRU), else any servable policy steered through the
//! shim (vLLM) or through request priorities (SGLang, `--sglang-priority`; SGLang must run
//! with `--radix-eviction-policy priority`). Between policies the engine's prefix cache is
//! emptied (vLLM `POST /reset_prefix_cache`, needs `VLLM_SERVER_DEV_MODE=1`; SGLang
//! `/flush_cache`) once the in-process recache has subscribed to its events, and the run waits
//! until the loop has seen the reset ([`cold`]), so engine and shadow start cold together and
//! the shadow runs the simulator's stream. The hit rate comes from the engine's counters (vLLM
//! `vllm:prefix_cache_*`, SGLang `sglang:prompt_tokens_total` / `sglang:cached_tokens_total`).
//! SGLang's cache is token-granular: `--kv-blocks N` means `N * 32` tokens, and its simulated
//! capacity is N blocks (no null block, no uncached tail block).
//! Each row also says what the run cost in CPU time, recache's and the engine's shim's
//! ([`cost`]): on a CPU engine that shares the cores, steering that costs more than its hits
//! save serves slower. With more than one policy, paired rows compare each policy's TTFT with
//! the baseline's (native) request by request, with a bootstrap interval ([`paired`]): one
//! run's P99 alone moves by several percent between identical runs.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::error::BenchError;
use crate::stats::pct;

mod cold;
mod cost;
mod paired;
mod send;
mod summary;
pub mod trace;

use crate::engine_ops;
use crate::http::{self, counter};
use recache::harness::KvLoopArgs;
use recache::harness::ServeArgs;
use recache_adapters::Engine;
use recache_eviction::{Access, Cache, PolicyConfig};
use send::send_all;
use summary::summarize;
pub use trace::{BLOCK, GrContext, load_trace, tokens};

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// Mooncake-format trace (JSONL with hash_ids)
    #[arg(long)]
    pub trace: PathBuf,
    /// The engine, e.g. http://127.0.0.1:8000
    #[arg(long)]
    pub upstream: String,
    /// The engine's dialect: vllm or sglang [default: detected]
    #[arg(long)]
    pub engine: Option<Engine>,
    /// The engine's KV-event publisher, e.g. tcp://127.0.0.1:5557
    #[arg(long)]
    pub kv_events: String,
    /// Comma-separated: native (no order published) and/or policies steered via the shim
    #[arg(long, default_value = "native,lru,laru", value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Requests replayed from the start of the trace
    #[arg(long, default_value_t = 1500)]
    pub requests: usize,
    /// The engine's KV cache in 32-token blocks (testbed --kv-blocks; SGLang: tokens / 32)
    #[arg(long, default_value_t = 1024)]
    pub kv_blocks: usize,
    /// The engine's max model length; longer prompts are truncated to whole blocks
    #[arg(long, default_value_t = 8192)]
    pub max_model_len: usize,
    /// The order file the engine's shim reads (testbed --shim FILE)
    #[arg(long, env = "RECACHE_PUBLISH")]
    pub publish: Option<PathBuf>,
    /// Requests in flight at most, in trace order (closed loop); a list runs every policy at
    /// each. Each request streams its one output token, so its first chunk's arrival is the
    /// time to first token (TTFT)
    #[arg(long, default_value = "1", value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Rounds: every (concurrency, policy) runs this many times, policies alternating within a
    /// round (paired); with more than one, summary rows give the median and the spread
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Print one JSON object per policy (else a table)
    #[arg(long)]
    pub json: bool,
    /// Also write every run's TTFTs, milliseconds in trace order, one JSON line per run
    #[arg(long)]
    pub ttft_out: Option<PathBuf>,
    /// GR traces (with `segments`): tell recache each request's live prefix (its leading user
    /// or pooled-item blocks) as `/v1/rank` does for the prompts it writes, so the shadow keeps
    /// only that and the engine is told to evict the rest first; the simulator gets the
    /// segments too (dead-first needs them)
    #[arg(long)]
    pub shadow_segments: bool,
    /// The live shadow models the engine's concurrency (recache's `--shadow-in-flight` set to
    /// each run's `--concurrency`): a request's blocks stay pinned in the shadow until that
    /// many minus one more have arrived, so the order never names a running request's blocks
    #[arg(long)]
    pub shadow_in_flight: bool,
}

fn load(args: &ReplayArgs) -> Result<Vec<Vec<u64>>, BenchError> {
    load_trace(&args.trace, args.requests, args.max_model_len)
}

/// Simulated hit rate in tokens, as vLLM counts it; with `gr`, each block's entity context.
fn simulate(
    reqs: &[Vec<u64>],
    gr: Option<&GrContext>,
    cfg: &PolicyConfig,
    capacity: usize,
    in_flight: usize,
) -> Result<f64, BenchError> {
    let policy = recache::harness::build_policy(cfg, capacity, BLOCK)
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let mut cache = Cache::new(capacity, policy).in_flight(in_flight);
    let (mut hits, mut queries) = (0u64, 0u64);
    for (t, r) in reqs.iter().enumerate() {
        let entities = gr
            .and_then(|g| g.entities.get(t))
            .map_or(&[][..], |e| e.as_slice());
        let access = Access {
            blocks: r,
            entities,
            ..Access::default()
        };
        let out = cache
            .serve(&access, t as u64 + 1)
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        hits += (out.hits * BLOCK) as u64;
        queries += (r.len() * BLOCK + 1) as u64;
    }
    Ok(hits as f64 / queries.max(1) as f64)
}

struct Local {
    base: String,
    server: recache::harness::LocalServer,
}

/// The policy spec the in-process recache serves for a `--policies` entry: the whole spec
/// (`laru:install_after=100:...`), not only its name, so the live shadow runs the policy the
/// simulator beside it runs; `native` serves LRU (and publishes nothing).
fn served_spec(name: &str) -> &str {
    if name == "native" { "lru" } else { name }
}

async fn start(
    args: &ReplayArgs,
    engine: Engine,
    policy: &str,
    steer: Steer,
    in_flight: usize,
) -> Result<Local, BenchError> {
    // A token-granular engine's capacity is counted in its own blocks (tokens).
    let engine_blocks = engine
        .kv_event_block_size()
        .map_or(args.kv_blocks, |bs| args.kv_blocks * BLOCK / bs);
    let (publish, sglang_priority) = match steer {
        Steer::Native => (None, false),
        Steer::Publish(p) => (Some(p.display().to_string()), false),
        Steer::Priority => (None, true),
    };
    let serve = ServeArgs {
        upstream: vec![args.upstream.clone()],
        engine: Some(engine),
        // One request at a time on a busy CPU engine: SGLang's HTTP loop can stall for
        // seconds during a long prefill, and a missed 2 s probe would take the only replica out.
        health_interval: Some(Duration::from_secs(10)),
        eviction_policy: Some(policy.to_string()),
        kvloop: KvLoopArgs {
            kv_events: vec![args.kv_events.clone()],
            publish,
            kv_engine_blocks: Some(engine_blocks),
            sglang_priority,
            shadow_in_flight: Some(in_flight),
            ..Default::default()
        },
        ..Default::default()
    };
    let server = recache::harness::LocalServer::start(&serve)
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    Ok(Local {
        base: server.base(),
        server,
    })
}

/// How a policy reaches the engine.
enum Steer {
    /// Not at all: the engine's own eviction.
    Native,
    /// The eviction order file the vLLM shim reads.
    Publish(PathBuf),
    /// SGLang request priorities (`--sglang-priority`).
    Priority,
}

async fn one(
    args: &ReplayArgs,
    engine: Engine,
    reqs: &[Vec<u64>],
    gr: Option<&GrContext>,
    name: &str,
    (concurrency, round): (usize, usize),
) -> Result<(serde_json::Value, Vec<f64>), BenchError> {
    let client = http::client();
    let native = name == "native";
    let cfg = PolicyConfig::from_spec(if native { "lru" } else { name })
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let steer = if native {
        Steer::Native
    } else if engine.kv_event_block_size().is_some() {
        // SGLang: no shim; the policy's view travels as request priorities.
        Steer::Priority
    } else {
        Steer::Publish(args.publish.clone().ok_or_else(|| {
            BenchError::Setup(format!(
                "policy {name} needs --publish FILE (the shim's order file)"
            ))
        })?)
    };
    if let Some(p) = &args.publish {
        let _ = std::fs::remove_file(p); // no order from an earlier run: native until published
    }
    let in_flight = if args.shadow_in_flight {
        concurrency
    } else {
        1
    };
    let local = start(args, engine, served_spec(name), steer, in_flight).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await; // ZMQ subscribe + first publish
    let model = http::first_model(&client, &args.upstream).await?;
    let loop_metrics = || {
        let text = local.server.metrics_text();
        async move { Ok::<_, BenchError>(text) }
    };
    // Engine and shadow start cold together, so the shadow runs the simulator's stream.
    let settled = cold::reset_and_settle(
        &client,
        engine,
        &args.upstream,
        &model,
        loop_metrics,
        cold::SETTLE_WAIT,
    )
    .await?;
    if !settled {
        tracing::warn!(
            wait_s = cold::SETTLE_WAIT.as_secs(),
            "the engine loop saw no cache reset; the shadow may reset during the run"
        );
    }
    let resets_before = cold::resets(&loop_metrics().await?);
    let metrics = |c: &crate::http::HttpClient| {
        let url = format!("{}/metrics", args.upstream);
        let c = c.clone();
        async move { http::get_text(&c, &url).await }
    };
    let before = metrics(&client).await?;
    let cost_before = cost::Snapshot::take(&loop_metrics().await?, args.publish.as_deref());
    let url = format!("{}/v1/completions", local.base);
    let progress =
        crate::progress::Progress::new(reqs.len() as u64, format!("replay {name} c={concurrency}"));
    let keep = gr.map(|g| g.keep_tokens.as_slice());
    let timings = send_all(&client, &url, &model, reqs, keep, concurrency, &progress).await?;
    progress.finish();
    let (lat, wall) = (&timings.latency, timings.wall_s);
    // The engine updates its counters as outputs are processed: read them once they stop
    // moving (one upstream: recache sends no canaries to take out).
    let counters = crate::snapshot::engine_counters(engine);
    let metrics_url = format!("{}/metrics", args.upstream);
    let after = crate::snapshot::settled_one(name, &client, &metrics_url, &counters).await?;
    let cost = cost_before.until(&cost::Snapshot::take(
        &loop_metrics().await?,
        args.publish.as_deref(),
    ));
    let (queries, hits) = engine_ops::cache_deltas(engine, &before, &after);
    let hit_rate = hits / queries.max(1.0);
    // vLLM keeps a null block and never caches a request's partial tail block; SGLang's
    // token pool has neither.
    let reserved = if engine.kv_event_block_size().is_some() {
        0
    } else {
        2
    };
    let capacity = args.kv_blocks.saturating_sub(reserved).max(1);
    let sim_hit_rate = simulate(reqs, gr, &cfg, capacity, 1)?;
    // The same with `concurrency` requests pinned at once, as the engine runs them: what the
    // policy can keep when it may not evict a running request's blocks.
    let sim_in_flight = if concurrency > 1 {
        simulate(reqs, gr, &cfg, capacity, concurrency)?
    } else {
        sim_hit_rate // one in flight is the run above: not simulated twice
    };
    let shadow = local.server.metrics_text();
    let shadow_hit_rate = counter(&shadow, "recache_kv_shadow_hit_blocks_total")
        / counter(&shadow, "recache_kv_shadow_blocks_total").max(1.0);
    // Each one started the shadow over mid-run: its hit rate then covers less than the run.
    let shadow_resets = cold::resets(&shadow) - resets_before;
    let row = json!({
        "policy": name, "requests": reqs.len(), "hit_rate": hit_rate,
        "rps": reqs.len() as f64 / wall, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
        "ttft_p50_ms": pct(&timings.ttft, 0.5), "ttft_p99_ms": pct(&timings.ttft, 0.99),
        "concurrency": concurrency, "round": round,
        "sim_hit_rate": sim_hit_rate, "sim_in_flight_hit_rate": sim_in_flight,
        "shadow_block_hit_rate": shadow_hit_rate,
        "reset_settled": settled, "shadow_resets": shadow_resets,
        "kv_blocks": args.kv_blocks, "sim_capacity": capacity,
        "recache_cpu_s": cost["recache_cpu_s"], "loop_busy_s": cost["loop_busy_s"],
        "shim_steer_s": cost["shim_steer_s"], "engine_cpu_s": cost["engine_cpu_s"],
        "shadow_segments": gr.is_some(), "shadow_in_flight": in_flight,
    });
    Ok((row, timings.ttft_by_request))
}

pub async fn run(args: ReplayArgs) -> Result<(), BenchError> {
    if args.repeat == 0 || args.concurrency.contains(&0) {
        return Err(BenchError::Setup(
            "--repeat and every --concurrency must be at least 1".into(),
        ));
    }
    let reqs = load(&args)?;
    let gr = if args.shadow_segments {
        Some(trace::load_gr(
            &args.trace,
            args.requests,
            args.max_model_len,
        )?)
    } else {
        None
    };
    let engine = engine_ops::resolve(&http::client(), &args.upstream, args.engine).await;
    let mut ttft_out = match &args.ttft_out {
        Some(p) => Some(std::fs::File::create(p).map_err(BenchError::io("creating --ttft-out"))?),
        None => None,
    };
    let mut runs = Vec::new();
    for round in 0..args.repeat {
        for &c in &args.concurrency {
            for p in &args.policies {
                let (row, ttft) =
                    one(&args, engine, &reqs, gr.as_ref(), p.trim(), (c, round)).await?;
                if args.json {
                    println!("{row}");
                } else {
                    eprintln!("{row}");
                }
                if let Some(f) = ttft_out.as_mut() {
                    use std::io::Write;
                    let line = json!({"policy": row["policy"], "concurrency": c, "round": round,
                                      "ttft_ms": ttft});
                    writeln!(f, "{line}").map_err(BenchError::io("writing --ttft-out"))?;
                }
                runs.push((row, ttft));
            }
        }
    }
    // Request by request against the baseline, with a bootstrap interval: one run's P99 is
    // too noisy to read alone.
    let pairs = paired::rows(&runs);
    let rows: Vec<serde_json::Value> = runs.into_iter().map(|(r, _)| r).collect();
    if let Some(p) = &args.publish {
        let _ = std::fs::remove_file(p);
    }
    let summaries = if args.repeat > 1 {
        summarize(&rows)
    } else {
        Vec::new()
    };
    if args.json {
        for s in summaries.iter().chain(&pairs) {
            println!("{s}");
        }
        return Ok(());
    }
    println!(
        "{:<8} {:>4} {:>8} {:>9} {:>13} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "policy",
        "c",
        "requests",
        "hit_rate",
        "sim_hit_rate",
        "rps",
        "p50_ms",
        "p99_ms",
        "ttft_p50",
        "ttft_p99"
    );
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    for r in &rows {
        println!(
            "{:<8} {:>4} {:>8} {:>9.4} {:>13.4} {:>8.2} {:>8.1} {:>8.1} {:>9.1} {:>9.1}",
            r["policy"].as_str().unwrap_or(""),
            r["concurrency"],
            r["requests"],
            f(r, "hit_rate"),
            f(r, "sim_hit_rate"),
            f(r, "rps"),
            f(r, "p50_ms"),
            f(r, "p99_ms"),
            f(r, "ttft_p50_ms"),
            f(r, "ttft_p99_ms")
        );
    }
    for s in summaries.iter().chain(&pairs) {
        println!("{s}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_served_policy_keeps_its_parameters() {
        let spec = "laru:install_after=100:label_horizon=500:guard_window=16384";
        assert_eq!(super::served_spec(spec), spec);
        assert_eq!(super::served_spec("native"), "lru");
        assert_eq!(super::served_spec("dead-first"), "dead-first");
    }
}
