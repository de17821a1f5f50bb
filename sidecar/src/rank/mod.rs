//! GR ranking: `POST /v1/rank` and the `recache_rank` extension of `/v1/completions`.
//!
//! A ranking request is a user profile, N candidate items and an instruction; recache rewrites
//! it into a token-id prompt in one of two layouts, asks the engine for the log-probability of
//! each candidate's label token at the last position, and answers the candidates by score.
//! See `README.md` beside this file for the API, the layouts and measured results.
//!
//! - [`api`]: request/response shapes and validation (400s naming the problem).
//! - [`config`]: `--rank-*` settings.
//! - [`select`]: which layout a request gets (one trait, a file per rule, one factory).
//! - [`popularity`]: the global hot-first item order of item-as-prefix prompts.
//! - [`item_prefix`]: how much of an item-first prompt a causal prefix cache can reuse.
//! - [`layout`]: the rewriter (token prompts and label tokens for both layouts).
//! - [`pipeline`]: validated request → prompt (shared by both entry points).
//! - [`engine`]: the scoring request, sent with its sides for routing; reading scores and
//!   cached tokens (recache's other engine calls are [`crate::engine`]'s).
//! - [`handler`]: `/v1/rank`; [`extension`]: the completions extension.
//! - [`metrics`]: decisions, latency, reused tokens.
//! - [`startup`]: label check, pool adoption and catalog precompute once a replica is healthy.
//! - [`vocab`]: whether the served model has every label token recache may send.
//! - [`pooled`]: the item-first prompt for one replica's pool.
//! - [`guard`]: the online quality guard (pooled vs user-first agreement, pool on or off).
//! - [`trace`]: the GR block trace of every prepared prompt (`--rank-trace-out`), for
//!   `recache sim`.

pub mod api;
pub mod config;
pub mod engine;
pub mod extension;
pub mod guard;
pub mod handler;
pub mod item_prefix;
pub mod layout;
pub mod metrics;
pub mod pipeline;
pub mod pooled;
pub mod popularity;
pub mod readout;
pub mod select;
pub mod startup;
pub mod trace;
pub mod vocab;

use std::sync::Arc;

use crate::engine::EngineHandle;
use crate::kvloop::KvLoopHandle;

/// Everything ranking uses: its own state, the engine (client, dialect, token cache), the
/// engine loop's view of the cache, and the few server settings it reads. Handed to the
/// handler and the completions extension instead of the whole server state.
pub struct Ranker {
    pub rank: RankState,
    pub engine: Arc<EngineHandle>,
    /// The engine loop, when `--kv-events` is set: the mirror's snapshot for prefix choice,
    /// and the shadow cache that sees what ranking wants kept.
    pub kvloop: Option<Arc<KvLoopHandle>>,
    pub max_body_bytes: usize,
}

/// Ranking state shared by all connections.
pub struct RankState {
    pub config: config::RankConfig,
    pub selector: Box<dyn select::PrefixSelector>,
    pub popularity: popularity::Popularity,
    pub item_prefixes: item_prefix::ItemPrefixModel,
    pub metrics: metrics::RankMetrics,
    /// The item KV pool (`--rank-item-pool N`), if on: one per engine replica.
    pub pool: Option<Arc<crate::itempool::replicas::Pools>>,
    /// The engine's verdict on the label range.
    pub vocab: vocab::VocabCheck,
    /// Where prepared prompts are traced (`--rank-trace-out`), if anywhere.
    pub trace: Option<Arc<trace::TraceSink>>,
    /// The pool recompute setting in force (`--rank-pool-recompute`, swapped by the admin
    /// API off the request path; a request's `pool_recompute` overrides it).
    pub recompute: arc_swap::ArcSwap<crate::itempool::recompute::RecomputeSpec>,
    /// The quality guard, when the pool is on and `--rank-quality-sample` > 0.
    pub guard: Option<Arc<guard::QualityGuard>>,
    /// The item pool's store as recache sees it (`--rank-pool-store`): probed for `/ready`.
    pub store: Option<Arc<crate::itempool::store_probe::StoreProbe>>,
}

/// Blocks of the `--rank-trace-out` trace, in tokens: vLLM's (and the testbed's) KV block.
pub const TRACE_BLOCK_TOKENS: usize = 32;

/// Why ranking could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RankSetupError {
    #[error("registering ranking metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("--rank-trace-out: cannot create {path}: {source}")]
    Trace {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl RankState {
    /// Ranking for engine replicas labelled `replicas` (the engine client's, in order: the
    /// item pool keeps one pool per replica).
    pub fn new(
        config: config::RankConfig,
        registry: &crate::metrics::Metrics,
        replicas: &[String],
    ) -> Result<Self, RankSetupError> {
        let pool = match &config.item_pool {
            Some(c) => {
                let first_label = config.label_base + config.max_items as u32;
                let m = crate::itempool::metrics::PoolMetrics::new(registry)?;
                Some(Arc::new(crate::itempool::replicas::Pools::new(
                    c,
                    first_label,
                    m,
                    replicas,
                )))
            }
            None => None,
        };
        let trace = match &config.trace_out {
            Some(path) => Some(Arc::new(
                trace::TraceSink::create(path, TRACE_BLOCK_TOKENS).map_err(|source| {
                    RankSetupError::Trace {
                        path: path.clone(),
                        source,
                    }
                })?,
            )),
            None => None,
        };
        let guard = match (&pool, config.quality.sample > 0.0) {
            (Some(_), true) => Some(Arc::new(guard::QualityGuard::new(
                config.quality,
                registry,
            )?)),
            _ => None,
        };
        let store = (config.item_pool.as_ref())
            .and_then(|p| p.store.as_deref())
            .map(|addr| crate::itempool::store_probe::StoreProbe::new(addr, registry).map(Arc::new))
            .transpose()?;
        Ok(Self {
            trace,
            pool,
            guard,
            store,
            recompute: arc_swap::ArcSwap::from_pointee(config.pool_recompute),
            vocab: vocab::VocabCheck::new(&config, replicas.len()),
            selector: select::build(&config.selector),
            config,
            popularity: Default::default(),
            item_prefixes: Default::default(),
            metrics: metrics::RankMetrics::new(registry)?,
        })
    }
}
