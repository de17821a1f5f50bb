//! Prefix selection: which side of a GR prompt (user profile or candidate items) goes first.
//!
//! One trait, [`PrefixSelector`], one implementation per file, chosen by the serde enum
//! [`SelectorConfig`] through the one factory [`build`]:
//! - [`hotness::Hotness`] (`bat`): BAT §5.3's hotness-aware rule;
//! - [`agnostic::Agnostic`]: the cache-agnostic baseline (longer side first);
//! - [`fixed_user::FixedUser`] / [`fixed_item::FixedItem`]: always UP / always IP.
//!
//! Which user prefixes count as cached comes from the engine's KV events when recache follows
//! them (`--kv-events`: [`EngineView`], built from `kvloop::resident`), else from the hotness
//! selector's own admission model with the configured capacity.

pub mod agnostic;
pub mod fixed_item;
pub mod fixed_user;
pub mod hotness;
pub mod returns;

use serde::{Deserialize, Serialize};

/// Where the shared prefix of a ranking prompt comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixKind {
    /// `[U][I_1..I_N][instr]`
    User,
    /// `[I_1..I_N][U][instr]`
    Item,
}

impl PrefixKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PrefixKind::User => "user",
            PrefixKind::Item => "item",
        }
    }
}

/// What a selector sees of one request.
#[derive(Debug, Clone, Copy)]
pub struct SelectInput<'a> {
    /// The user's id, as the client sent it (JSON text).
    pub user: &'a str,
    /// τ_u: tokens of the user profile.
    pub user_tokens: usize,
    /// τ_i: tokens of all candidate items (labels included).
    pub item_tokens: usize,
    /// Item tokens the engine can be expected to reuse in the item-first layout: all of them
    /// with an item KV pool, else the shared hot-first leading run (the engine's cache when
    /// [`SelectInput::engine`] is there, else the model in `rank::item_prefix`).
    pub reusable_item_tokens: usize,
    /// The engine's cache as its KV events show it; None when recache does not follow them.
    pub engine: Option<EngineView<'a>>,
    /// The item pool also serves a user-first prompt, after its cached profile
    /// (`rank::pooled`): there a wholly cached user reuses both sides.
    pub pool_after_user: bool,
}

/// Asks the engine-cache snapshot whether a block is cached.
pub trait CacheProbe {
    /// Whether the block with this content id is cached.
    fn holds(&self, block: u64) -> bool;
    /// Tokens the cache holds now.
    fn cached_tokens(&self) -> usize;
}

/// What the engine's cache holds that matters to one request.
#[derive(Clone, Copy)]
pub struct EngineView<'a> {
    /// Leading user-profile tokens the engine would reuse in the user-first layout.
    pub cached_user_tokens: usize,
    /// Content id of the user-first prompt's first block: how the selector later asks whether
    /// this user's prefix is still cached. None for profiles shorter than a block.
    pub user_block: Option<u64>,
    pub cache: &'a dyn CacheProbe,
}

impl std::fmt::Debug for EngineView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineView")
            .field("cached_user_tokens", &self.cached_user_tokens)
            .field("user_block", &self.user_block)
            .field("cached_tokens", &self.cache.cached_tokens())
            .finish()
    }
}

/// Chooses the prefix of each `auto` request. Stateful selectors keep their state inside
/// (behind a lock), so one instance serves all connections.
pub trait PrefixSelector: Send + Sync {
    /// The name reported in metrics (`bat`, `agnostic`, `user_prefix`, `item_prefix`).
    fn name(&self) -> &'static str;
    /// Picks the prefix for one request and updates the selector's state with it.
    fn choose(&self, input: &SelectInput<'_>) -> PrefixKind;
}

/// Which selector to build, with its settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SelectorConfig {
    /// Hotness-aware: frequency over the last `window` requests, user prefixes admitted into a
    /// cache of `user_cache_tokens` tokens; `admission` off admits every user whose profile is
    /// the longer side (see `hotness`).
    Bat {
        window: usize,
        user_cache_tokens: u64,
        #[serde(default = "admission_default")]
        admission: bool,
        /// With an item KV pool: an uncached user goes user-first only when its expected
        /// later visits repay the pooled items it gives up (`returns`).
        #[serde(default)]
        repay: bool,
    },
    Agnostic,
    UserPrefix,
    ItemPrefix,
}

fn admission_default() -> bool {
    true
}

/// The one factory.
pub fn build(config: &SelectorConfig) -> Box<dyn PrefixSelector> {
    match config {
        SelectorConfig::Bat {
            window,
            user_cache_tokens,
            admission,
            repay,
        } => Box::new(
            hotness::Hotness::new(*window, *user_cache_tokens, *admission).with_repay(*repay),
        ),
        SelectorConfig::Agnostic => Box::new(agnostic::Agnostic),
        SelectorConfig::UserPrefix => Box::new(fixed_user::FixedUser),
        SelectorConfig::ItemPrefix => Box::new(fixed_item::FixedItem),
    }
}

#[cfg(test)]
mod tests;
