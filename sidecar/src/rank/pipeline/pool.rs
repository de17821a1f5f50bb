//! The item pool's stages: whether the pool serves this request, what each replica's pool
//! holds of its items (the one question ranking asks the pool before building the prompt),
//! the replica an item-first prompt is built for, and the candidates offered back to the
//! pools afterwards (every request's candidates are the hotness signal).

use std::sync::Arc;

use super::Request;
use crate::itempool::cold::Held;
use crate::itempool::recompute::RecomputeSpec;
use crate::itempool::replicas::Pools;
use crate::itempool::{self, Wanted};
use crate::rank::layout;
use crate::rank::{RankState, Ranker};

/// What the replicas' pools supply of a request's items (all empty without a usable pool).
pub(super) struct Residency {
    /// The hot-first items' pool keys.
    pub hot_pool: Vec<String>,
    /// Per replica: prompt tokens its pool (or the store) would supply, labels included.
    pub supplied: Vec<usize>,
    /// Per replica: items it would read from the store.
    pub cold: Vec<usize>,
    /// The pool that serves the item side best, as far as recache knows before routing.
    pub best: Option<usize>,
}

/// The pools as far as layout goes: off for this model and setting while the quality guard
/// measures pooled rankings disagreeing with user-first. Fills go on ([`offer`] uses every
/// pool), so the guard's probes find resident items when it looks again.
pub(super) fn usable<'a>(
    rank: &'a RankState,
    model: Option<&str>,
    spec: RecomputeSpec,
) -> Option<&'a Pools> {
    let allowed = |g: &Arc<crate::rank::guard::QualityGuard>| {
        g.pool_allowed(model.unwrap_or(""), &spec.to_string())
    };
    let pools = rank.pool.as_deref();
    pools.filter(|_| rank.guard.as_ref().is_none_or(allowed))
}

/// Asks every replica's pool what it holds of the request's items.
///
/// Item-first order: with the item pool, resident items go first: the connector supplies a
/// leading run, and their order does not matter (each was computed alone from the same start
/// position); the rest follow hot-first. With several replicas each has its own pool, so what
/// is resident depends on where the prompt goes (decided by [`target`]).
pub(super) fn residency(pools: Option<&Pools>, r: &Request<'_>, spec: RecomputeSpec) -> Residency {
    let hot_pool: Vec<String> = match pools {
        Some(_) => (r.hot_keys.iter())
            .map(|k| itempool::key(r.model, k))
            .collect(),
        None => Vec::new(),
    };
    let held: Vec<Held> = pools
        .map(|ps| (0..ps.len()).map(|i| ps.held_on(i, &hot_pool)).collect())
        .unwrap_or_default();
    // Per replica, the prompt tokens its pool (or the store) would supply, labels included.
    // A store fetch costs about what a local load does, both ~0.1% of computing the item
    // (docs/store.md), so a cold item counts as supplied in full; that it is dearer than a
    // local one orders replicas only after cost, placement and load (`cold` below). Counted
    // one token short per item, it sent 57% of the requests to the replica holding the
    // hotter items (docs/store.md, "Why placement and routing are as they are").
    let supplied: Vec<usize> = (held.iter())
        .map(|h| {
            let pooled: Vec<&[u32]> = (0..h.resident.len())
                .filter(|&j| h.resident[j])
                .map(|j| r.items[r.hot_first[j]])
                .collect();
            // Link tokens are computed again: what the pool supplies is the rest.
            let link: usize = pooled.iter().map(|t| spec.link_count(t.len() + 1)).sum();
            layout::item_tokens(&pooled).saturating_sub(link)
        })
        .collect();
    let cold: Vec<usize> = (held.iter())
        .map(|h| h.cold.iter().filter(|&&c| c).count())
        .collect();
    let best = (0..supplied.len()).max_by_key(|&i| {
        let c = std::cmp::Reverse(cold[i]);
        (supplied[i], c, std::cmp::Reverse(i))
    });
    Residency {
        hot_pool,
        supplied,
        cold,
        best,
    }
}

/// The replica a prompt with per-replica pools is built for: the routing rule's pick, else
/// the best-placed pool; None with one pool or none. `lead`: a user-first prompt's padded
/// profile.
pub(super) fn target(
    state: &Ranker,
    r: &Request<'_>,
    pools: Option<&Pools>,
    lead: Option<&[u32]>,
    held: &Residency,
) -> Option<usize> {
    match pools {
        Some(ps) if ps.len() > 1 => {
            let pool = (&held.supplied[..], &held.cold[..]);
            let pick = super::route::pick_replica(state, r, pool, lead);
            pick.or(held.best)
        }
        _ => None,
    }
}

/// A user-first prompt's profile padded with `pad` to whole blocks of `block` tokens: the
/// engine's prefix cache keeps whole blocks only, and the pooled items loaded after a
/// profile must continue what it holds. None without a pad token.
pub(super) fn padded(user: &[u32], pad: Option<u32>, block: usize) -> Option<Vec<u32>> {
    let pad = pad?;
    let mut lead = user.to_vec();
    lead.resize(user.len().div_ceil(block.max(1)) * block.max(1), pad);
    Some(lead)
}

/// Offers every candidate to the replicas' pools (user-first requests' too: they are the
/// hotness signal), each placed where it is pooled; fills run in the background.
pub(super) fn offer(state: &Ranker, r: &Request<'_>, tokens: &[Arc<Vec<u32>>]) {
    let Some(ps) = state.rank.pool.as_ref() else {
        return;
    };
    let popularity = &state.rank.popularity;
    let keys = &r.keys;
    let counts = popularity.counts(keys);
    let wanted = (0..keys.len())
        .map(|i| Wanted {
            key: itempool::key(r.model, keys[i]),
            count: counts[i],
            tokens: tokens[i].clone(),
        })
        .collect();
    // Which candidates every replica pools (all of them unless `gr` or, with a store,
    // Alg. 1 shards the tail).
    let all_item_tokens = layout::item_tokens(&r.items);
    ps.shape.record(keys.len(), r.user.len(), all_item_tokens);
    let item_tokens = all_item_tokens as f64 / keys.len().max(1) as f64;
    let rule_share = state.engine.client.routing().pool_hot_share();
    let hot_share = ps.hot_share(rule_share, item_tokens);
    let hot = if ps.len() < 2 || hot_share >= 1.0 {
        vec![true; keys.len()]
    } else {
        popularity.hot(keys, hot_share)
    };
    ps.want(&state.engine, r.model, wanted, &hot);
}
