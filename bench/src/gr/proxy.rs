//! One mode's recache: `recache serve` in this process on loopback ([`LocalProxy`]), set up
//! as the mode says ([`LocalProxyRun`]: rank flags, whether it follows the engine's KV events,
//! how requests are salted). `bench gr`'s runs, its `--trace-only` traces and `bench quality`
//! start theirs here.

use std::time::Duration;

use recache::harness::{KvLoopArgs, LocalServer, RankArgs, ServeArgs};
use recache_adapters::Engine;

use super::args::GrArgs;
use super::modes::{Mode, Setup};
use crate::error::BenchError;

/// recache serving in this process on loopback, stopped on drop.
pub struct LocalProxy {
    pub base: String,
    pub server: LocalServer,
}

impl LocalProxy {
    pub async fn start(
        upstream: &str,
        engine: recache_adapters::Engine,
        rank: RankArgs,
        kvloop: KvLoopArgs,
    ) -> Result<Self, BenchError> {
        let args = ServeArgs {
            upstream: vec![upstream.to_string()],
            engine: Some(engine),
            // The stream keeps a CPU engine busy; a 2 s probe limit would eject it.
            health_interval: Some(Duration::from_secs(10)),
            rank,
            kvloop,
            ..Default::default()
        };
        let server = LocalServer::start(&args)
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        Ok(Self {
            base: server.base(),
            server,
        })
    }

    /// Waits (up to `limit`) until the engine loop receives the engine's KV events; false if it
    /// does not follow them or they never came.
    pub async fn wait_for_kv_events(&self, limit: Duration) -> bool {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < limit {
            if self.server.kv_events_seen() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

/// [`Mode::setup`] with `bench gr`'s settings: its window and the rank flags it passes through
/// to every mode's recache (`--rank-label-base`).
pub fn setup_for(mode: Mode, args: &GrArgs, user_cache_tokens: u64, pool_items: usize) -> Setup {
    let mut setup = mode.setup(args.window, user_cache_tokens, pool_items);
    setup.rank.rank_label_base = Some(args.rank_label_base);
    setup.rank.rank_readout = Some(args.rank_readout);
    if mode.uses_pool() {
        setup.rank.rank_pool_recompute = Some(args.rank_pool_recompute.to_string());
    }
    setup
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
        let mut setup = setup_for(mode, args, user_cache, pool_items);
        setup.rank.rank_trace_out = trace_out;
        // Only the cache-aware rule reads the engine's cache; the others never subscribe.
        let follows_engine = mode.reads_engine_cache() && kv_events.is_some();
        let per = engine
            .kv_event_block_size()
            .unwrap_or(args.block_size as usize);
        let kvloop = KvLoopArgs {
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
