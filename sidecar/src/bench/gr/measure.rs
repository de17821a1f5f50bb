//! One mode's run on one engine: its own in-process recache, the engine's prefix cache emptied
//! (the item pool kept: it is computed ahead of time), a pool mode's pool reset to exactly its
//! precomputed set (so every pool mode starts from the same pool), the timed stream, and the
//! row — the engine's hit rate and computed tokens from its counters, and where the time went
//! (engine prefill and queueing, connector load and fill, recache's own time, fill tokens).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use recache_adapters::Engine;
use serde_json::Value;

use super::args::GrArgs;
use super::http::{self, LocalProxy};
use super::memory::Memory;
use super::modes::Mode;
use super::report::ModeResult;
use super::run;
use super::testbed::Instance;
use super::workload::Population;
use crate::bench::BenchError;
use crate::bench::HttpClient;
use crate::progress::Progress;
use crate::rank::pool::{self, Wanted};
use crate::rank::startup;
use crate::rank::vocab::Verdict;
use crate::service::AppState;

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

/// recache's own counters that the row needs, read in-process.
#[derive(Default, Clone, Copy)]
struct Local {
    rank_s: f64,
    engine_s: f64,
    fill_tokens: u64,
    load_s: f64,
    fill_s: f64,
}

fn local(state: &AppState) -> Local {
    let m = &state.ranker.rank.metrics;
    let mut l = Local {
        rank_s: m.total_seconds.get(),
        engine_s: m.engine_seconds.get(),
        ..Default::default()
    };
    if let Some(p) = &state.ranker.rank.pool {
        l.fill_tokens = p.metrics.fill_tokens.get();
        l.load_s = p.metrics.engine_load_seconds.get();
        l.fill_s = p.metrics.engine_fill_seconds.get();
    }
    l
}

/// A pool mode's pool, made exactly the precomputed set: adopt what the engine holds, evict
/// the rest, compute what is missing. Returns (tokens computed, seconds).
async fn prepare_pool(
    ctx: &Ctx<'_>,
    app: &Arc<AppState>,
    name: &str,
) -> Result<(u64, f64), BenchError> {
    let state = &app.ranker;
    if let Verdict::TooSmall(msg) = startup::check_labels(state).await {
        return Err(BenchError::Setup(msg));
    }
    let Some(p) = state.rank.pool.as_ref() else {
        return Err(BenchError::Setup(format!(
            "{name}: this mode's recache has no item pool"
        )));
    };
    let model = Some(ctx.model);
    let (adopted, _) = p
        .sync(state, model)
        .await
        .map_err(|e| BenchError::Setup(format!("{name}: reading the engine's item pool: {e}")))?;
    let wanted: Vec<Wanted> = ctx
        .warm
        .iter()
        .map(|(id, tokens)| Wanted {
            key: pool::key(model, &id.to_string()),
            count: 1,
            tokens: tokens.clone(),
        })
        .collect();
    let keep: HashSet<String> = wanted.iter().map(|w| w.key.clone()).collect();
    let dropped = p.retain_only(&keep);
    // The count to compute (what is not resident yet) is known once the precompute starts.
    let progress = std::sync::OnceLock::new();
    let show = |done: usize, total: usize| {
        progress
            .get_or_init(|| Progress::new(total as u64, format!("{name} precompute")))
            .set(done as u64);
    };
    let limit = Duration::from_secs(3 * 3600);
    let hot_share = state.client.routing().pool_hot_share();
    let done = p
        .precompute(state, model, wanted, hot_share, limit, &show)
        .await
        .map_err(|e| BenchError::Setup(format!("{name}: {e}")))?;
    if let Some(p) = progress.get() {
        p.finish();
    }
    eprintln!(
        "bench gr: {name}: pool {} items ({adopted} kept from the engine, {dropped} evicted, {} \
         computed: {} tokens in {:.1}s)",
        done.resident, done.filled, done.tokens, done.seconds
    );
    Ok((done.tokens, done.seconds))
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
    let layout = if mode.uses_pool() {
        ctx.memory.pooled
    } else {
        ctx.memory.plain
    };
    let user_cache = args.user_cache_tokens.unwrap_or(match layout.kv_blocks {
        0 => crate::rank::config::DEFAULT_USER_CACHE_TOKENS,
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
        crate::bench::engine_ops::reset_cache(ctx.client, ctx.engine, upstream, keep_external).await
    {
        eprintln!("bench gr: warning: {why}; modes are kept apart by cache_salt only");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let state = proxy.proxy.server.state.clone();
    let (precompute_tokens, precompute_s) = if mode.uses_pool() {
        prepare_pool(ctx, &state, mode.name()).await?
    } else {
        (0, 0.0)
    };
    let metrics_url = format!("{upstream}/metrics");
    let before = http::get_text(ctx.client, &metrics_url).await?;
    let local_before = local(&state);
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
    if let Some(sink) = &state.ranker.rank.trace {
        sink.flush()
            .map_err(BenchError::io(format!("writing {}", sink.path().display())))?;
        eprintln!("bench gr: {name}: trace in {}", sink.path().display());
    }
    // vLLM updates its counters as outputs are processed; give the last ones a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = http::get_text(ctx.client, &metrics_url).await?;
    let local_after = local(&state);
    let delta = |name: &str| http::counter(&after, name) - http::counter(&before, name);
    let counters = ctx.engine.cache_counters();
    let queries = delta(counters.queries);
    // Local prefix-cache hits plus tokens the item pool's connector supplied.
    let external = ctx.engine.external_hits_counter().map_or(0.0, delta);
    let hits = delta(counters.hits) + external;
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
        requests: ok,
        rps: ok as f64 / out.wall_s.max(1e-9),
        p50_ms: super::report::quantile(&out.latencies_ms, 0.5),
        p99_ms: super::report::quantile(&out.latencies_ms, 0.99),
        hit_rate: if queries > 0.0 { hits / queries } else { 0.0 },
        computed_tokens: (queries - hits).max(0.0) as u64,
        pool_hit_tokens: external.max(0.0) as u64,
        errors: out.errors,
        user_prefix: out.user_prefix,
        prompt_tokens: out.prompt_tokens,
        cached_tokens: out.cached_tokens,
        wall_s: out.wall_s,
        workload: args.workload.name().to_string(),
        distinct_users: ctx.population.distinct_users,
        returning_share: ctx.population.returning_share,
        kv_bytes: ctx.memory.kv_bytes,
        engine_kv_bytes: layout.kv_blocks * args.block_size * args.kv_token_bytes,
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
        recache_ms_per_request: if ok > 0 {
            own_s.max(0.0) * 1000.0 / ok as f64
        } else {
            0.0
        },
    };
    Ok((row, out.answers))
}

/// One mode's recache and how its requests are sent.
pub struct LocalProxyRun {
    pub proxy: LocalProxy,
    /// This mode's recache follows the engine's KV events.
    pub follows_engine: bool,
    pub url: String,
    pub request_mode: &'static str,
    pub salt_per_request: bool,
}

impl LocalProxyRun {
    pub async fn new(
        upstream: &str,
        kv_events: Option<&str>,
        engine: Engine,
        mode: Mode,
        args: &GrArgs,
        (user_cache, engine_blocks, pool_items): (u64, u64, usize),
        trace_out: Option<std::path::PathBuf>,
    ) -> Result<Self, BenchError> {
        let mut setup = mode.setup_for(args, user_cache, pool_items);
        setup.rank.rank_trace_out = trace_out;
        // Only the cache-aware rule reads the engine's cache; the others never subscribe.
        let follows_engine = mode.reads_engine_cache() && kv_events.is_some();
        let per = engine
            .kv_event_block_size()
            .unwrap_or(args.block_size as usize);
        let kvloop = crate::kvloop::config::KvLoopArgs {
            kv_events: kv_events
                .map(str::to_string)
                .filter(|_| follows_engine)
                .into_iter()
                .collect(),
            publish: args.publish.clone().filter(|_| follows_engine),
            // A token-granular engine (SGLang) counts its capacity and events in tokens.
            kv_engine_blocks: (engine_blocks > 0)
                .then(|| engine_blocks as usize * args.block_size as usize / per),
            kv_block_size: Some(per),
            ..Default::default()
        };
        let proxy = LocalProxy::start(upstream, engine, setup.rank, kvloop).await?;
        Ok(Self {
            url: format!("{}/v1/rank", proxy.base),
            proxy,
            follows_engine,
            request_mode: setup.request_mode,
            salt_per_request: setup.salt_per_request,
        })
    }
}
