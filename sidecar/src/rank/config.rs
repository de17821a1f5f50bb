//! `recache serve` settings of the GR ranking API (`--rank-*` flags, `RECACHE_RANK_*`
//! environment, `rank_*` TOML keys), resolved and checked into one [`RankConfig`].
//!
//! Which source gave a value is settled by the caller (`recache serve`'s settings module),
//! which fills [`RankArgs`] before resolving it; this module owns what the values mean.

use serde::Deserialize;

use super::select::SelectorConfig;
use crate::itempool::config::PoolArgs;

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
/// The pool recompute setting when none is given (`itempool::recompute`); chosen on dev users
/// (docs/quality.md).
pub const DEFAULT_POOL_RECOMPUTE: &str = "none";
/// Share of pool-served rankings the quality guard scores again user-first: at 1%, its
/// shadow prompts add about 1% of a user-first prompt's tokens per request.
pub const DEFAULT_QUALITY_SAMPLE: f64 = 0.01;
/// Relative agreement (pooled top-10 overlap with user-first over reversed user-first's)
/// below which the guard turns the pool off: on dev users the trained testbed ranker reads
/// 1.27 and one never trained pooled 0.54 (docs/quality.md).
pub const DEFAULT_QUALITY_MIN: f64 = 0.75;
/// Used when a request gives no instruction: the discriminant position follows it.
pub const DEFAULT_INSTRUCTION: &str =
    "Rank the candidate items for this user. The label of the best item is:";

/// Which rule picks the prefix of a request whose `mode` is `auto` (or absent).
// The TOML file spells the values as the flags do (kebab-case).
#[derive(clap::ValueEnum, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
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
// The TOML file spells the values as the flags do (kebab-case).
#[derive(clap::ValueEnum, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ItemReuse {
    /// A causal prefix cache (unmodified engine): only the hot-first leading run that earlier
    /// item-first prompts shared.
    #[default]
    Prefix,
    /// An item KV pool that reuses every cached item wherever it sits (BAT's setting).
    Pool,
}

/// Whether the bat rule applies BAT's admission test (f_u > min f_p) to users not cached.
// The TOML file spells the values as the flags do (kebab-case).
#[derive(clap::ValueEnum, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
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
    /// The item KV pool's flags (`--rank-item-pool*`, `--rank-pool-store`, `--rank-pool-costs`,
    /// `--rank-item-catalog`).
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Write the GR block trace of every ranking prompt to FILE (JSON lines `recache sim
    /// --trace` reads: 32-token blocks, user / item / other segments, entity ids, ms since
    /// start), to compare eviction policies offline on this traffic
    #[arg(long, env = "RECACHE_RANK_TRACE_OUT", value_name = "FILE")]
    pub rank_trace_out: Option<std::path::PathBuf>,
    /// What the item pool's prompts compute again in context: none, link:k=N (each pooled
    /// item's first N tokens sent again after the pooled items), each optionally with
    /// :pos=true (pooled K re-rotated to its true position); switch later with PUT
    /// /admin/rank-pool-recompute, or per request with "pool_recompute" [default: none]
    #[arg(long, env = "RECACHE_RANK_POOL_RECOMPUTE", value_name = "SPEC")]
    pub rank_pool_recompute: Option<String>,
    /// Which token scores a candidate: label (the label introducing it in the prompt), item
    /// (its own first token, for models trained to name the next item; every candidate of a
    /// request must start with a distinct token), or auto (item for prompts served from the
    /// item pool whose candidates start with distinct tokens, label otherwise); per request
    /// with "readout" [default: auto]
    #[arg(long, env = "RECACHE_RANK_READOUT", value_enum)]
    pub rank_readout: Option<super::readout::Readout>,
    /// The item pool also serves user-first prompts: pooled items after the user's cached
    /// profile (padded to whole blocks). Only for a model trained with that layout: the
    /// testbed ranker, trained without it, ranks no better than chance there (docs/ranking.md)
    #[arg(long, env = "RECACHE_RANK_POOL_AFTER_USER")]
    pub rank_pool_after_user: bool,
    /// Quality guard: share of pool-served rankings scored again user-first in the
    /// background (0 = off); agreement per model in /metrics and /ready [default: 0.01]
    #[arg(long, env = "RECACHE_RANK_QUALITY_SAMPLE", value_name = "F")]
    pub rank_quality_sample: Option<f64>,
    /// Quality guard: relative agreement (the pooled ranking's top-10 overlap with user-first
    /// over that of user-first in reverse order) below which bat stops using the item pool
    /// for that model and setting once the window shows it by 2 standard errors, and
    /// resumes once it recovers [default: 0.75]
    #[arg(long, env = "RECACHE_RANK_QUALITY_MIN", value_name = "X")]
    pub rank_quality_min: Option<f64>,
}

/// Resolved ranking settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RankConfig {
    pub selector: SelectorConfig,
    pub label_base: u32,
    pub max_items: usize,
    pub item_reuse: ItemReuse,
    pub default_instruction: String,
    pub item_pool: Option<crate::itempool::PoolConfig>,
    /// `--rank-item-catalog`: precomputed into the pool at start-up.
    pub item_catalog: Option<std::path::PathBuf>,
    /// `--rank-trace-out`: where prepared prompts are traced.
    pub trace_out: Option<std::path::PathBuf>,
    /// `--rank-pool-recompute`: the recompute setting at start-up.
    pub pool_recompute: crate::itempool::recompute::RecomputeSpec,
    /// `--rank-readout`: which token scores a candidate (a request's `readout` overrides it).
    pub readout: super::readout::Readout,
    /// `--rank-quality-sample`, `--rank-quality-min`.
    pub quality: super::guard::GuardConfig,
    /// `--rank-pool-after-user`.
    pub pool_after_user: bool,
}

impl Default for RankConfig {
    fn default() -> Self {
        RankArgs::default().resolve()
    }
}

/// A ranking value that cannot be used, named by its flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct InvalidRank {
    pub setting: &'static str,
    pub why: String,
}

impl RankArgs {
    /// Resolves for an engine whose eviction recache does not steer.
    pub fn resolve(&self) -> RankConfig {
        self.resolve_for(false)
    }

    /// [`RankArgs::try_resolve_for`], panicking on a value it refuses: for callers that build
    /// the arguments in code. `recache serve` goes through `try_resolve_for`.
    pub fn resolve_for(&self, eviction_steered: bool) -> RankConfig {
        self.try_resolve_for(eviction_steered)
            .unwrap_or_else(|e| panic!("ranking settings: {e}"))
    }

    /// Resolves; `eviction_steered`: the engine evicts first what recache's shadow cache does
    /// not keep (`--publish` with the vLLM shim), so a refused admission really spares the cache.
    pub fn try_resolve_for(&self, eviction_steered: bool) -> Result<RankConfig, InvalidRank> {
        self.check()?;
        let selector = match self.rank_selector.unwrap_or_default() {
            SelectorKind::Bat => SelectorConfig::Bat {
                window: self.rank_window.unwrap_or(DEFAULT_WINDOW),
                user_cache_tokens: self
                    .rank_user_cache_tokens
                    .unwrap_or(DEFAULT_USER_CACHE_TOKENS),
                admission: self
                    .rank_admission
                    .unwrap_or_default()
                    .applies(eviction_steered),
                repay: self.rank_item_reuse == Some(ItemReuse::Pool) && self.pool.enabled(),
            },
            SelectorKind::Agnostic => SelectorConfig::Agnostic,
            SelectorKind::UserPrefix => SelectorConfig::UserPrefix,
            SelectorKind::ItemPrefix => SelectorConfig::ItemPrefix,
        };
        Ok(RankConfig {
            selector,
            label_base: self.rank_label_base.unwrap_or(DEFAULT_LABEL_BASE),
            max_items: self.rank_max_items.unwrap_or(DEFAULT_MAX_ITEMS),
            item_reuse: self.rank_item_reuse.unwrap_or_default(),
            default_instruction: DEFAULT_INSTRUCTION.to_string(),
            item_pool: self.pool.resolve(),
            item_catalog: self.pool.rank_item_catalog.clone(),
            trace_out: self.rank_trace_out.clone(),
            pool_recompute: self.pool_recompute()?,
            readout: self.rank_readout.unwrap_or_default(),
            quality: super::guard::GuardConfig {
                sample: self.rank_quality_sample.unwrap_or(DEFAULT_QUALITY_SAMPLE),
                min: self.rank_quality_min.unwrap_or(DEFAULT_QUALITY_MIN),
            },
            pool_after_user: self.rank_pool_after_user,
        })
    }

    fn pool_recompute(&self) -> Result<crate::itempool::recompute::RecomputeSpec, InvalidRank> {
        let spec = self
            .rank_pool_recompute
            .as_deref()
            .unwrap_or(DEFAULT_POOL_RECOMPUTE);
        spec.parse()
            .map_err(|e: crate::itempool::recompute::BadSpec| InvalidRank {
                setting: "--rank-pool-recompute",
                why: e.to_string(),
            })
    }

    /// The first value that cannot be used, with what to change.
    fn check(&self) -> Result<(), InvalidRank> {
        let invalid = |setting, why: &str| {
            Err(InvalidRank {
                setting,
                why: why.to_string(),
            })
        };
        if self.rank_window == Some(0) {
            return invalid(
                "--rank-window",
                "must be at least 1 (requests over which user frequency is counted)",
            );
        }
        if self.rank_max_items == Some(0) {
            return invalid(
                "--rank-max-items",
                "must be at least 1 (most candidates per request; vLLM allows up to 128)",
            );
        }
        // The pool's own values next (each refusal names its flag).
        self.pool.check().map_err(|e| InvalidRank {
            setting: e.setting,
            why: e.why,
        })?;
        if self.rank_pool_after_user && !self.pool.enabled() {
            return invalid("--rank-pool-after-user", "needs --rank-item-pool N (N > 0)");
        }
        if let Some(f) = self.rank_quality_sample
            && !(0.0..=1.0).contains(&f)
        {
            return invalid(
                "--rank-quality-sample",
                "must be a share from 0 to 1 of pool-served rankings (0 turns the guard off)",
            );
        }
        if let Some(x) = self.rank_quality_min
            && !(0.0..=1.0).contains(&x)
        {
            return invalid(
                "--rank-quality-min",
                "must be a relative agreement from 0 to 1 (0 never turns the pool off)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
