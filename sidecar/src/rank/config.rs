//! `recache serve` settings of the GR ranking API (`--rank-*` flags, `RECACHE_RANK_*`
//! environment), resolved into one [`RankConfig`].
//!
//! Flags and environment only for now: the TOML file's keys are owned by `crate::config`.

use super::select::SelectorConfig;

/// vLLM 0.32 caps `logprob_token_ids` at 128 entries (`MAX_LOGPROB_TOKEN_IDS`), and every
/// candidate needs one label token scored, so this is the most candidates one request can have.
pub const DEFAULT_MAX_ITEMS: usize = 128;
/// First label token id. Byte-level BPE vocabularies (Qwen2, the testbed's) start with the 256
/// byte tokens, so ids from 256 on are ordinary merged tokens in any such model.
pub const DEFAULT_LABEL_BASE: u32 = 256;
/// Requests in the hotness window (BAT §5.3 counts user frequency over a sliding window).
pub const DEFAULT_WINDOW: usize = 1000;
/// Prompt tokens of user prefixes the BAT selector assumes the engine keeps cached: the
/// testbed's default KV cache (1024 blocks × 32 tokens). Set it to your engine's KV size.
pub const DEFAULT_USER_CACHE_TOKENS: u64 = 32 * 1024;
/// Item pool fills per second while serving: on the 2-core CPU testbed one fill (~19 tokens)
/// costs ~13 ms of engine time, so 4/s bounds refresh work to ~5% of the engine.
pub const DEFAULT_POOL_REFRESH_PER_S: f64 = 4.0;
/// Used when a request gives no instruction: the discriminant position follows it.
pub const DEFAULT_INSTRUCTION: &str =
    "Rank the candidate items for this user. The label of the best item is:";

/// Which rule picks the prefix of a request whose `mode` is `auto` (or absent).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelectorKind {
    /// Hotness-aware (BAT §5.3): user prefix only for long, frequently seen users.
    #[default]
    Bat,
    /// Cache-agnostic: whichever side has more tokens becomes the prefix.
    Agnostic,
    /// Always user-as-prefix.
    UserPrefix,
    /// Always item-as-prefix.
    ItemPrefix,
}

/// What the engine can reuse of the item side, for the bat rule's τ_i.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemReuse {
    /// A causal prefix cache (unmodified engine): only the hot-first leading run that earlier
    /// item-first prompts shared.
    #[default]
    Prefix,
    /// An item KV pool that reuses every cached item wherever it sits (BAT's setting).
    Pool,
}

/// Whether the bat rule applies BAT's admission test (f_u > min f_p) to users not cached.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Admission {
    /// On when the engine's eviction follows recache (`--publish` to the vLLM shim), else off.
    #[default]
    Auto,
    /// BAT §5.3: a cold user goes item-first unless it is hotter than a cached one.
    On,
    /// Every user whose profile is the longer side goes user-first: on a prefix cache that
    /// stores item-first prompts too (an unsteered vLLM), refusing admission spares nothing.
    Off,
}

impl Admission {
    /// Whether the test applies, given whether the engine evicts what recache says first.
    pub fn applies(self, eviction_steered: bool) -> bool {
        match self {
            Admission::Auto => eviction_steered,
            Admission::On => true,
            Admission::Off => false,
        }
    }
}

/// Flags of the ranking API (flattened into `recache serve`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RankArgs {
    /// Prefix rule for /v1/rank requests with mode "auto" [default: bat]
    #[arg(long, env = "RECACHE_RANK_SELECTOR", value_enum)]
    pub rank_selector: Option<SelectorKind>,
    /// Sliding window, in requests, over which user frequency is counted [default: 1000]
    #[arg(long, env = "RECACHE_RANK_WINDOW")]
    pub rank_window: Option<usize>,
    /// Tokens of user prefixes the bat selector treats as cacheable; set to the engine's KV
    /// capacity in tokens [default: 32768]
    #[arg(long, env = "RECACHE_RANK_USER_CACHE_TOKENS")]
    pub rank_user_cache_tokens: Option<u64>,
    /// Token id of the first candidate's label; candidate k gets BASE+k [default: 256]
    #[arg(long, env = "RECACHE_RANK_LABEL_BASE")]
    pub rank_label_base: Option<u32>,
    /// Most candidates per request (each needs a scored label token) [default: 128]
    #[arg(long, env = "RECACHE_RANK_MAX_ITEMS")]
    pub rank_max_items: Option<usize>,
    /// Item tokens the bat rule counts as reusable: prefix (causal prefix cache, unmodified
    /// engine) or pool (item KV pool) [default: prefix]
    #[arg(long, env = "RECACHE_RANK_ITEM_REUSE", value_enum)]
    pub rank_item_reuse: Option<ItemReuse>,
    /// bat's admission test for users whose prefix is not cached: on (BAT §5.3) or off (every
    /// long-enough user goes user-first); auto = on when eviction is steered (--publish)
    /// [default: auto]
    #[arg(long, env = "RECACHE_RANK_ADMISSION", value_enum)]
    pub rank_admission: Option<Admission>,
    /// Item KV pool in the engine (vLLM with recache_shim.item_pool; testbed `up --item-pool`):
    /// keep up to N items resident, each reused in every item-first prompt wherever it sits.
    /// Needs LABEL_BASE + MAX_ITEMS + N <= the model's vocabulary [default: off]
    #[arg(long, env = "RECACHE_RANK_ITEM_POOL")]
    pub rank_item_pool: Option<usize>,
    /// Concurrent background fills of the item pool (each is one short prompt; the engine
    /// batches them) [default: 32]
    #[arg(long, env = "RECACHE_RANK_ITEM_POOL_FILLS")]
    pub rank_item_pool_fills: Option<usize>,
    /// Item pool fills per second at most while serving (items that became hot; each fill
    /// computes one item), 0 = unbounded; the catalog precompute is not bounded [default: 4]
    #[arg(long, env = "RECACHE_RANK_ITEM_POOL_REFRESH")]
    pub rank_item_pool_refresh: Option<f64>,
    /// Item catalog to precompute into the pool at start-up, hottest first (JSON lines
    /// `{"id": .., "text" | "tokens": .., "count"?: n}`); needs --rank-item-pool
    #[arg(long, env = "RECACHE_RANK_ITEM_CATALOG", requires = "rank_item_pool")]
    pub rank_item_catalog: Option<std::path::PathBuf>,
}

/// Resolved ranking settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RankConfig {
    pub selector: SelectorConfig,
    pub label_base: u32,
    pub max_items: usize,
    pub item_reuse: ItemReuse,
    pub default_instruction: String,
    pub item_pool: Option<super::pool::PoolConfig>,
    /// `--rank-item-catalog`: precomputed into the pool at start-up.
    pub item_catalog: Option<std::path::PathBuf>,
}

impl Default for RankConfig {
    fn default() -> Self {
        RankArgs::default().resolve()
    }
}

impl RankArgs {
    /// Resolves for an engine whose eviction recache does not steer.
    pub fn resolve(&self) -> RankConfig {
        self.resolve_for(false)
    }

    /// Resolves; `eviction_steered`: the engine evicts first what recache's shadow cache does
    /// not keep (`--publish` with the vLLM shim), so a refused admission really spares the cache.
    pub fn resolve_for(&self, eviction_steered: bool) -> RankConfig {
        let selector = match self.rank_selector.unwrap_or_default() {
            SelectorKind::Bat => SelectorConfig::Bat {
                window: self.rank_window.unwrap_or(DEFAULT_WINDOW).max(1),
                user_cache_tokens: self
                    .rank_user_cache_tokens
                    .unwrap_or(DEFAULT_USER_CACHE_TOKENS),
                admission: self
                    .rank_admission
                    .unwrap_or_default()
                    .applies(eviction_steered),
                repay: self.rank_item_reuse == Some(ItemReuse::Pool)
                    && self.rank_item_pool.is_some_and(|n| n > 0),
            },
            SelectorKind::Agnostic => SelectorConfig::Agnostic,
            SelectorKind::UserPrefix => SelectorConfig::UserPrefix,
            SelectorKind::ItemPrefix => SelectorConfig::ItemPrefix,
        };
        RankConfig {
            selector,
            label_base: self.rank_label_base.unwrap_or(DEFAULT_LABEL_BASE),
            max_items: self.rank_max_items.unwrap_or(DEFAULT_MAX_ITEMS).max(1),
            item_reuse: self.rank_item_reuse.unwrap_or_default(),
            default_instruction: DEFAULT_INSTRUCTION.to_string(),
            item_pool: self.rank_item_pool.filter(|n| *n > 0).map(|items| {
                super::pool::PoolConfig {
                    items,
                    fills: self.rank_item_pool_fills.unwrap_or(32).max(1),
                    // Beyond this many fills in flight, wanted items wait for a later request.
                    max_pending: 512,
                    refresh_per_s: self
                        .rank_item_pool_refresh
                        .unwrap_or(DEFAULT_POOL_REFRESH_PER_S),
                }
            }),
            item_catalog: self.rank_item_catalog.clone(),
        }
    }
}
