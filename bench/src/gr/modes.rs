//! The compared modes: how each one configures recache and salts requests. New modes (e.g. an
//! item-KV pool) add a variant here; the runner and report do not change.

use recache::harness::{Admission, ItemReuse, PoolArgs, RankArgs, SelectorKind};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Recompute: a unique `cache_salt` per request, so nothing is ever reused.
    Re,
    /// Always user-as-prefix.
    Up,
    /// Always item-as-prefix (hot-first canonical item order).
    Ip,
    /// Cache-agnostic: the longer side first.
    Agnostic,
    /// Hotness-aware selection (BAT §5.3) with recache's default admission setting.
    Bat,
    /// Hotness-aware selection with BAT's admission test on (`--rank-admission on`).
    BatAdmit,
    /// Always item-as-prefix, items reused from the engine's item KV pool wherever they sit
    /// (`--rank-item-pool`; the engine needs the connector: testbed `up --item-pool`).
    IpPool,
    /// BAT: hotness-aware selection with its admission test and the item KV pool (τ_i counts
    /// the resident items).
    BatPool,
    /// Always user-as-prefix with the item KV pool: pooled items are loaded after the user's
    /// profile once the engine caches it (a returning user reuses both sides;
    /// `--rank-pool-after-user`, for a model trained with that layout).
    UpPool,
}

/// What one mode sends.
pub struct Setup {
    pub rank: RankArgs,
    /// The request's `mode` field.
    pub request_mode: &'static str,
    /// A fresh salt per request (else one salt for the whole mode).
    pub salt_per_request: bool,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Re => "re",
            Mode::Up => "up",
            Mode::Ip => "ip",
            Mode::Agnostic => "agnostic",
            Mode::Bat => "bat",
            Mode::BatAdmit => "bat-admit",
            Mode::IpPool => "ip-pool",
            Mode::BatPool => "bat-pool",
            Mode::UpPool => "up-pool",
        }
    }

    /// Whether the mode's rule reads the engine's cache (when recache follows its KV events).
    pub fn reads_engine_cache(self) -> bool {
        matches!(self, Mode::Bat | Mode::BatAdmit | Mode::BatPool)
    }

    /// Whether the mode uses the engine's item KV pool.
    pub fn uses_pool(self) -> bool {
        matches!(self, Mode::IpPool | Mode::BatPool | Mode::UpPool)
    }

    /// `pool_items`: items recache keeps resident in the pool modes.
    pub fn setup(self, window: usize, user_cache_tokens: u64, pool_items: usize) -> Setup {
        let selector = |kind| RankArgs {
            rank_selector: Some(kind),
            rank_window: Some(window),
            rank_user_cache_tokens: Some(user_cache_tokens),
            ..Default::default()
        };
        let (kind, request_mode) = match self {
            Mode::Re | Mode::Up | Mode::UpPool => (SelectorKind::UserPrefix, "user_prefix"),
            Mode::Ip | Mode::IpPool => (SelectorKind::ItemPrefix, "item_prefix"),
            Mode::Agnostic => (SelectorKind::Agnostic, "auto"),
            Mode::Bat | Mode::BatAdmit | Mode::BatPool => (SelectorKind::Bat, "auto"),
        };
        // bat-pool is BAT as published: its admission test sends cold users item-first, where
        // the pool now gives their items back.
        let admission = matches!(self, Mode::BatAdmit | Mode::BatPool).then_some(Admission::On);
        Setup {
            rank: RankArgs {
                rank_admission: admission,
                pool: PoolArgs {
                    rank_item_pool: self.uses_pool().then_some(pool_items),
                    ..Default::default()
                },
                rank_item_reuse: matches!(self, Mode::BatPool | Mode::UpPool)
                    .then_some(ItemReuse::Pool),
                rank_pool_after_user: self == Mode::UpPool,
                ..selector(kind)
            },
            request_mode,
            salt_per_request: self == Mode::Re,
        }
    }
}
