//! The layout stage: which side of the prompt goes first, by the request's `mode` or, for
//! `auto`, by the configured selector over what the engine can reuse of either side.

use super::Request;
use crate::kvloop::resident::Snapshot;
use crate::rank::Ranker;
use crate::rank::api::Mode;
use crate::rank::config::ItemReuse;
use crate::rank::layout;
use crate::rank::select::{CacheProbe, EngineView, PrefixKind, SelectInput};

impl CacheProbe for Snapshot {
    fn holds(&self, block: u64) -> bool {
        Snapshot::holds(self, block)
    }
    fn cached_tokens(&self) -> usize {
        self.len() * self.block_size()
    }
}

/// The layout and the rule that chose it (`request` for a fixed mode, else the selector's
/// name). `pool_supplied`: item tokens the best-placed replica's pool would supply, when the
/// item pool is usable for this request.
pub(super) fn layout(
    state: &Ranker,
    r: &Request<'_>,
    pool_supplied: Option<usize>,
) -> (PrefixKind, &'static str) {
    let rank = &state.rank;
    if let Mode::Fixed(kind) = r.req.mode {
        return (kind, "request");
    }
    let item_tokens = layout::item_tokens(&r.items);
    // The engine's cache from its KV events, when recache follows them.
    let snapshot = state.kvloop.as_ref().and_then(|l| l.resident());
    let reusable_item_tokens = match (rank.config.item_reuse, &snapshot) {
        // The connector supplies every resident item (they lead the prompt).
        (ItemReuse::Pool, _) => pool_supplied.unwrap_or(item_tokens),
        (ItemReuse::Prefix, Some(snap)) => {
            // The item-first prompt's leading cached run, items region only.
            let base = rank.config.label_base;
            let region = layout::build(PrefixKind::Item, &[], &r.items, &r.hot_first, &[], base);
            snap.cached_prefix_tokens(&region.tokens).min(item_tokens)
        }
        (ItemReuse::Prefix, None) => {
            let run = rank.item_prefixes.reusable_items(&r.hot_keys);
            let shared: Vec<&[u32]> = r.hot_first[..run].iter().map(|&i| r.items[i]).collect();
            layout::item_tokens(&shared)
        }
    };
    let engine = snapshot.as_deref().map(|snap| EngineView {
        cached_user_tokens: snap.cached_prefix_tokens(r.user),
        user_block: snap.first_block(r.user),
        cache: snap,
    });
    let input = SelectInput {
        user: &r.req.user.key,
        user_tokens: r.user.len(),
        item_tokens,
        reusable_item_tokens,
        engine,
        pool_after_user: pool_supplied.is_some() && rank.config.pool_after_user,
    };
    let kind = rank.selector.choose(&input);
    tracing::debug!(?input, ?kind, "rank: prefix chosen");
    (kind, rank.selector.name())
}
