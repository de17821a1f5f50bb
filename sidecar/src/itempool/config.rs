//! The item pool's `recache serve` settings (`--rank-item-pool*`, `--rank-pool-store`,
//! `--rank-pool-costs`, `--rank-item-catalog`; `RECACHE_RANK_*` environment, `rank_*` TOML
//! keys), resolved and checked into one [`PoolConfig`]. They are flattened into ranking's
//! flags (`rank::config::RankArgs`), which the pool serves; the source of each value is
//! settled by the caller, as for every `serve` setting.

use std::path::PathBuf;

/// Item pool fills per second while serving: on the 2-core CPU testbed one fill (~19 tokens)
/// costs ~13 ms of engine time, so 4/s bounds refresh work to ~5% of the engine.
pub const DEFAULT_POOL_REFRESH_PER_S: f64 = 4.0;
/// Background fills of the item pool in flight: the engine batches them.
pub const DEFAULT_POOL_FILLS: usize = 32;
/// Fills waiting or running at most; beyond this, wanted items wait for a later request.
const MAX_PENDING: usize = 512;

/// Flags of the item pool (flattened into ranking's).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PoolArgs {
    /// Item KV pool in the engine (vLLM with recache_shim.item_pool; testbed `up --item-pool`):
    /// keep up to N items resident (in each replica's pool), each reused in every item-first
    /// prompt wherever it sits. Needs LABEL_BASE + MAX_ITEMS + N <= the model's vocabulary
    /// [default: off]
    #[arg(long, env = "RECACHE_RANK_ITEM_POOL")]
    pub rank_item_pool: Option<usize>,
    /// Concurrent background fills of the item pool (each is one short prompt; the engine
    /// batches them) [default: 32]
    #[arg(long, env = "RECACHE_RANK_ITEM_POOL_FILLS")]
    pub rank_item_pool_fills: Option<usize>,
    /// Item pool fills per second at most while serving, per replica (items that became hot;
    /// each fill computes one item), 0 = unbounded; the catalog precompute is not bounded
    /// [default: 4]
    #[arg(long, env = "RECACHE_RANK_ITEM_POOL_REFRESH")]
    pub rank_item_pool_refresh: Option<f64>,
    /// The item pool's cold tier: the store the replicas' connectors write fills through to
    /// (testbed `up --pool-store`), as host:port (Mooncake Store's master) or
    /// redis://host:port (Redis or Valkey). recache then sends an
    /// item another replica's pool holds marked cold, and the engine reads it from the store
    /// instead of computing it; each replica's pool takes its own label range, so it needs
    /// LABEL_BASE + MAX_ITEMS + replicas x N <= the model's vocabulary; /ready reports the
    /// store unreachable [default: off]
    #[arg(long, env = "RECACHE_RANK_POOL_STORE", value_name = "ADDR")]
    pub rank_pool_store: Option<String>,
    /// With --rank-pool-store: the costs BAT's Alg. 1 sizes the share of item accesses every
    /// replica's pool replicates from (the rest pooled once and read from the store
    /// elsewhere), as fetch=TOKENS_PER_S (the store's), prefill=TOKENS_PER_S (the engine's),
    /// alpha=A (the fetch time a request may wait, over its prefill time); a rate not given is
    /// measured while serving (the engines' prefill counters, the connectors' store timings;
    /// every 30 s), the default standing until then; `--routing gr:pool_hot_share=P`
    /// overrides the result [default: measured, else fetch=311000,prefill=876; alpha=0.1]
    #[arg(long, env = "RECACHE_RANK_POOL_COSTS", value_name = "SPEC")]
    pub rank_pool_costs: Option<String>,
    /// Item catalog to precompute into the pool at start-up, hottest first (JSON lines
    /// `{"id": .., "text" | "tokens": .., "count"?: n}`); needs --rank-item-pool
    // Checked in `try_resolve_for`, not by clap's `requires`, so the pool may come from the file.
    #[arg(long, env = "RECACHE_RANK_ITEM_CATALOG")]
    pub rank_item_catalog: Option<PathBuf>,
}

/// `--rank-item-pool*` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// Items kept resident (label slots).
    pub items: usize,
    /// Concurrent fill requests.
    pub fills: usize,
    /// Fills waiting or running at most; more wanted items wait for a later request.
    pub max_pending: usize,
    /// Fills per second at most while serving (0: unbounded); precomputing ignores it.
    pub refresh_per_s: f64,
    /// `--rank-pool-store`: the store (`host:port` of Mooncake's master, or `redis://..`)
    /// the replicas' connectors write fills through to, so an item one replica holds may be
    /// served to another ([`super::cold`]). None: each replica serves only what its own pool holds.
    pub store: Option<String>,
    /// `--rank-pool-costs`: what BAT's Alg. 1 weighs to size the replicated share with a
    /// store ([`super::hrcs`]; `gr:pool_hot_share` overrides it), and which of its rates the
    /// flag fixed (the others are measured while serving, [`super::costs`]).
    pub costs: super::hrcs::Costs,
    pub costs_given: super::hrcs::Given,
}

/// A pool value that cannot be used, named by its flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct InvalidPool {
    pub setting: &'static str,
    pub why: String,
}

impl PoolArgs {
    /// Whether the pool is on (0 items is the documented way to say "no pool").
    pub fn enabled(&self) -> bool {
        self.rank_item_pool.is_some_and(|n| n > 0)
    }

    /// The pool's settings, None when it is off. Call [`check`](Self::check) first: a value
    /// it refuses is not reported here.
    pub fn resolve(&self) -> Option<PoolConfig> {
        self.rank_item_pool
            .filter(|n| *n > 0)
            .map(|items| PoolConfig {
                items,
                fills: self.rank_item_pool_fills.unwrap_or(DEFAULT_POOL_FILLS),
                max_pending: MAX_PENDING,
                refresh_per_s: self
                    .rank_item_pool_refresh
                    .unwrap_or(DEFAULT_POOL_REFRESH_PER_S),
                store: self.rank_pool_store.clone(),
                // Checked in `check`: a bad spec never gets here.
                costs: (self.rank_pool_costs.as_deref())
                    .and_then(|c| super::hrcs::Costs::parse(c).ok())
                    .unwrap_or_default(),
                costs_given: super::hrcs::Given::of(self.rank_pool_costs.as_deref()),
            })
    }

    /// The first value that cannot be used, with what to change.
    pub fn check(&self) -> Result<(), InvalidPool> {
        let invalid = |setting, why: &str| {
            Err(InvalidPool {
                setting,
                why: why.to_string(),
            })
        };
        if self.rank_item_pool_fills == Some(0) {
            return invalid(
                "--rank-item-pool-fills",
                "must be at least 1 (background pool fills in flight); to turn the pool off, \
                 leave --rank-item-pool unset or 0",
            );
        }
        if let Some(r) = self.rank_item_pool_refresh
            && !(r.is_finite() && r >= 0.0)
        {
            return invalid(
                "--rank-item-pool-refresh",
                "must be a finite number of fills per second, >= 0 (0 = unbounded)",
            );
        }
        if let Some(addr) = &self.rank_pool_store {
            if self.rank_item_pool.unwrap_or(0) == 0 {
                return invalid(
                    "--rank-pool-store",
                    "needs --rank-item-pool N (N > 0): the store holds the item pool's entries",
                );
            }
            if super::store_probe::address(addr).is_none() {
                return invalid(
                    "--rank-pool-store",
                    "must name the store as host:port (Mooncake's master, its RPC port) or \
                     redis://host:port (Redis or Valkey)",
                );
            }
        }
        if let Some(spec) = &self.rank_pool_costs
            && let Err(why) = super::hrcs::Costs::parse(spec)
        {
            return invalid("--rank-pool-costs", &why);
        }
        if self.rank_item_catalog.is_some() && self.rank_item_pool.unwrap_or(0) == 0 {
            return invalid(
                "--rank-item-catalog",
                "needs --rank-item-pool N (N > 0): the catalog is computed into the item pool",
            );
        }
        Ok(())
    }
}
