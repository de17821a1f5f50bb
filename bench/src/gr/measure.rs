//! One mode's run on one engine: its own in-process recache, the engine's prefix cache emptied
//! (the item pool kept: it is computed ahead of time), a pool mode's pool reset to exactly its
//! precomputed set (so every pool mode starts from the same pool), the timed stream, the fills
//! it started awaited ([`super::pool`]), and the row — the engine's hit rate and computed
//! tokens from its counters, and where the time went (engine prefill and queueing, connector
//! load and fill, recache's own time, fill tokens).

use std::sync::Arc;
use std::time::Duration;

use recache_adapters::Engine;
use serde_json::Value;

use super::args::GrArgs;
use super::memory::Memory;
use super::modes::Mode;
use super::proxy::LocalProxyRun;
use super::report::ModeResult;
use super::workload::Population;
use super::{pool, run};
use crate::error::BenchError;
use crate::http;
use crate::http::HttpClient;
use crate::progress::Progress;
use crate::stats::quantile;
use crate::testbed::Instance;

/// What every mode's run shares.
pub struct Ctx<'a> {
    pub args: &'a GrArgs,
    pub client: &'a HttpClient,
    pub engine: Engine,
    pub model: &'a str,
    pub memory: &'a Memory,
    /// Pool items computed ahead of time, hottest first: (item id, tokens).
    pub warm: &'a [(u64, Arc<Vec<u32>>)],
    pub population: &'a Population,
    pub nonce: u128,
}

/// One run: a mode on an engine at an offered load.
pub struct Run<'a> {
    pub mode: Mode,
    pub instance: &'a Instance,
    pub bodies: &'a [Arc<Value>],
    pub arrivals: &'a [f64],
    pub offered_rps: f64,
    pub round: usize,
}

pub async fn run_mode(ctx: &Ctx<'_>, run: Run<'_>) -> Result<ModeResult, BenchError> {
    Ok(run_mode_answers(ctx, run).await?.0)
}

/// [`run_mode`] and every request's answer by its index (`None`: an error).
pub async fn run_mode_answers(
    ctx: &Ctx<'_>,
    run: Run<'_>,
) -> Result<(ModeResult, Vec<Option<Value>>), BenchError> {
    let (args, mode, upstream) = (ctx.args, run.mode, run.instance.upstream.as_str());
    let layout = ctx.memory.layout(mode.uses_pool());
    let user_cache = args.user_cache_tokens.unwrap_or(match layout.kv_blocks {
        0 => recache::harness::DEFAULT_USER_CACHE_TOKENS,
        b => ((b - 1) * args.block_size).saturating_sub(args.max_prompt_tokens as u64),
    });
    let pool_items = ctx.memory.pool_items.len();
    // recache first, so that a recache following the engine's KV events sees the reset.
    let kv_events = run.instance.kv_events.as_deref();
    let proxy = LocalProxyRun::new(
        upstream,
        kv_events,
        ctx.engine,
        mode,
        args,
        (user_cache, layout.kv_blocks, pool_items),
        args.trace_out
            .as_deref()
            .map(|base| super::trace::path_for(base, args, mode, run.round, run.offered_rps)),
    )
    .await?;
    if proxy.follows_engine && !proxy.proxy.wait_for_kv_events(Duration::from_secs(5)).await {
        eprintln!(
            "bench gr: warning: no KV events from {kv_events:?} within 5 s; bat uses its own model"
        );
    }
    let keep_external = true;
    if let Err(why) =
        crate::engine_ops::reset_cache(ctx.client, ctx.engine, upstream, keep_external).await
    {
        eprintln!("bench gr: warning: {why}; modes are kept apart by cache_salt only");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = &proxy.proxy.server;
    let (precompute_tokens, precompute_s) = if mode.uses_pool() {
        pool::prepare(server, ctx.model, ctx.warm, mode.name()).await?
    } else {
        (0, 0.0)
    };
    let metrics_url = format!("{upstream}/metrics");
    let before = http::get_text(ctx.client, &metrics_url).await?;
    let local_before = server.rank_counters();
    let name = mode.name();
    let progress = Progress::new(
        run.bodies.len() as u64,
        format!("{name} @{}", run.offered_rps),
    );
    let (nonce, round, per_request) = (ctx.nonce, run.round, proxy.salt_per_request);
    let salt = move |i: usize| {
        if per_request {
            format!("{name}-{nonce}-{round}-{i}")
        } else {
            format!("{name}-{nonce}-{round}")
        }
    };
    let stream = run::Stream {
        bodies: run.bodies,
        arrivals_s: run.arrivals,
        concurrency: args.concurrency,
        open: run.offered_rps > 0.0,
    };
    let out = run::run(
        ctx.client,
        &proxy.url,
        &stream,
        proxy.request_mode,
        &salt,
        &progress,
    )
    .await?;
    progress.finish();
    // Fills the stream started are its work: wait for them before reading any counter.
    let (fill_wait_s, fills_pending) = pool::settle(server, pool::SETTLE_LIMIT).await;
    if fills_pending > 0 {
        eprintln!(
            "bench gr: {name}: warning: {fills_pending} item pool fills still running {:.0} s \
             after the stream; the row counts the fills that ended",
            fill_wait_s
        );
    }
    if let Some(flushed) = server.flush_rank_trace() {
        let path = flushed.map_err(BenchError::io("writing the --trace-out trace"))?;
        eprintln!("bench gr: {name}: trace in {}", path.display());
    }
    // vLLM updates its counters as outputs are processed: read them once they stop moving
    // (one upstream: recache sends no canaries to take out).
    let counters = crate::snapshot::engine_counters(ctx.engine);
    let after = crate::snapshot::settled_one(name, ctx.client, &metrics_url, &counters).await?;
    let local_after = server.rank_counters();
    let delta = |name: &str| http::counter(&after, name) - http::counter(&before, name);
    let counters = ctx.engine.cache_counters();
    let queries = delta(counters.queries);
    // Local prefix-cache hits plus tokens the item pool's connector supplied.
    let external = ctx.engine.external_hits_counter().map_or(0.0, delta);
    let hits = delta(counters.hits) + external;
    let pool = ctx.engine.pool_hits_counter();
    let sel = recache_adapters::prom::selected_sum;
    let pool_hits = sel(&after, pool) - sel(&before, pool);
    let (prefill_s, queue_s) = ctx
        .engine
        .phase_counters()
        .map_or((0.0, 0.0), |(p, q)| (delta(p), delta(q)));
    if let Some(e) = &out.first_error {
        eprintln!("bench gr: {name}: {} errors, first: {e}", out.errors);
    }
    let ok = out.latencies_ms.len();
    let own_s =
        (local_after.rank_s - local_before.rank_s) - (local_after.engine_s - local_before.engine_s);
    let pool_on = mode.uses_pool();
    let row = ModeResult {
        mode: name.to_string(),
        model: ctx.model.to_string(),
        requests: ok,
        rps: ok as f64 / out.wall_s.max(1e-9),
        p50_ms: quantile(&out.latencies_ms, 0.5),
        p99_ms: quantile(&out.latencies_ms, 0.99),
        service_p50_ms: quantile(&out.service_ms, 0.5),
        service_p99_ms: quantile(&out.service_ms, 0.99),
        latency_from: if stream.open { "arrival" } else { "sent" }.to_string(),
        hit_rate: if queries > 0.0 { hits / queries } else { 0.0 },
        computed_tokens: (queries - hits).max(0.0) as u64,
        pool_hit_tokens: pool_hits.max(0.0) as u64,
        pool_recompute: if pool_on {
            args.rank_pool_recompute.to_string()
        } else {
            "none".to_string()
        },
        readout: args.rank_readout.to_string(),
        errors: out.errors,
        user_prefix: out.user_prefix,
        prompt_tokens: out.prompt_tokens,
        cached_tokens: out.cached_tokens,
        attended_pairs: out.attended_pairs,
        wall_s: out.wall_s,
        workload: args.workload.name().to_string(),
        distinct_users: ctx.population.distinct_users,
        returning_share: ctx.population.returning_share,
        kv_bytes: ctx.memory.total_bytes(layout),
        engine_kv_bytes: ctx.memory.engine_bytes(layout),
        pool_bytes: if pool_on { layout.pool_bytes } else { 0 },
        pool_items: if pool_on { pool_items } else { 0 },
        offered_rps: run.offered_rps,
        concurrency: args.concurrency,
        repeat: run.round,
        fill_tokens: local_after.fill_tokens - local_before.fill_tokens,
        precompute_tokens,
        precompute_s,
        engine_prefill_s: prefill_s,
        engine_queue_s: queue_s,
        connector_load_s: local_after.load_s - local_before.load_s,
        connector_fill_s: local_after.fill_s - local_before.fill_s,
        fill_wait_s,
        fills_pending,
        recache_ms_per_request: if ok > 0 {
            own_s.max(0.0) * 1000.0 / ok as f64
        } else {
            0.0
        },
    };
    Ok((row, out.answers))
}
