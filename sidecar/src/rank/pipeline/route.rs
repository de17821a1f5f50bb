//! What the routing rule sees of a ranking prompt: its sides for `gr` ([`hint`]), and the
//! rule's pick for an item-first prompt built for one replica's pool ([`pick_replica`]).

use recache_hash::placement;

use super::Request;
use crate::client::route::{GrHint, RouteHint, RouteKeys};
use crate::rank::Ranker;
use crate::rank::api::Validated;
use crate::rank::layout;
use crate::rank::select::PrefixKind;

/// Where a prompt served from the item pool goes when every replica has its own pool: the
/// routing rule's pick now, before the prompt is built for that replica's pool. The rule sees
/// the prompt's length and, under `gr`, what each replica's pool would supply and how many of
/// those items it would read from the store (`pool`: supplied tokens, cold items). `lead`:
/// a user-first prompt's padded profile, whose keys the rule matches; a pool supplies there
/// only after all of them (the connector loads only what continues the engine's hit).
pub(super) fn pick_replica(
    state: &Ranker,
    r: &Request<'_>,
    pool: (&[usize], &[usize]),
    lead: Option<&[u32]>,
) -> Option<usize> {
    let kind = lead.map_or(PrefixKind::Item, |_| PrefixKind::User);
    let mut gr = hint(state, r.req, kind, &r.keys);
    gr.pooled = pool.0.to_vec();
    gr.cold = pool.1.to_vec();
    // The prompt's length; item-first, no keys: its leading items depend on the replica.
    let mut tokens = RouteKeys::from_tokens(&[lead.unwrap_or_default().to_vec()]);
    tokens.tokens += layout::item_tokens(&r.items) + r.instruction.len();
    tokens.token_ids = true;
    gr.pooled_after = tokens.keys.len();
    let hint = RouteHint {
        path: state.engine.dialect.scoring_path(),
        keys: &tokens,
        gr: Some(&gr),
    };
    state.engine.client.pick(&hint)
}

/// What the `gr` routing rule needs of this prompt (empty unless that rule is active).
pub(super) fn hint(state: &Ranker, req: &Validated, kind: PrefixKind, keys: &[&str]) -> GrHint {
    let Some(hot_share) = state.engine.client.routing().hot_share() else {
        return GrHint::default();
    };
    let hot = state.rank.popularity.hot(keys, hot_share);
    GrHint {
        user_first: kind == PrefixKind::User,
        user: placement::id(&req.user.key),
        cold_items: (keys.iter().zip(hot))
            .filter(|(_, h)| !h)
            .map(|(k, _)| placement::id(k))
            .collect(),
        ..GrHint::default()
    }
}
