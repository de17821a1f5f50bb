//! The compared modes: how each one configures recache and salts requests. New modes (e.g. an
//! item-KV pool) add a variant here; the runner and report do not change.

use crate::rank::config::{RankArgs, SelectorKind};

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
    /// Hotness-aware selection (BAT §5.3).
    Bat,
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
        }
    }

    pub fn setup(self, window: usize, user_cache_tokens: u64) -> Setup {
        let selector = |kind| RankArgs {
            rank_selector: Some(kind),
            rank_window: Some(window),
            rank_user_cache_tokens: Some(user_cache_tokens),
            ..Default::default()
        };
        let (kind, request_mode) = match self {
            Mode::Re | Mode::Up => (SelectorKind::UserPrefix, "user_prefix"),
            Mode::Ip => (SelectorKind::ItemPrefix, "item_prefix"),
            Mode::Agnostic => (SelectorKind::Agnostic, "auto"),
            Mode::Bat => (SelectorKind::Bat, "auto"),
        };
        Setup {
            rank: selector(kind),
            request_mode,
            salt_per_request: self == Mode::Re,
        }
    }
}
