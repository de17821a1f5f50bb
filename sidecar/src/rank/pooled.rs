//! The prompt for one replica's item pool: resident items lead (each keeps its
//! pool label; their order does not matter, each was computed alone), then the pool
//! recompute setting's link tokens, then the other items hot-first, the user and the
//! instruction. A user-first prompt puts the same item run after the user's profile (padded
//! to whole blocks, so the engine's prefix cache can hold all of it): the connector loads
//! the pooled items after a cached profile, so a returning user reuses both sides. With a store, items another replica's pool holds follow the local ones in the
//! pooled run, with that pool's labels, marked cold ([`crate::itempool::cold`]). Shared by the
//! pipeline and the quality guard's shadow scoring, so both build the same tokens for the
//! same pool state; it records nothing (no hotness, no fills).

use super::layout::{self, Prompt};
use super::select::PrefixKind;
use crate::itempool::cold::Held;
use crate::itempool::recompute::RecomputeSpec;
use crate::itempool::replicas::Pools;
use crate::itempool::{ItemPool, PoolUse};

/// A built pooled prompt.
pub struct Pooled {
    pub prompt: Prompt,
    pub pool: PoolUse,
    /// Request indices of the items in prompt order.
    pub order: Vec<usize>,
    /// Leading items recache takes as resident (the connector may supply fewer).
    pub resident: usize,
    /// Tokens sent again after the pooled run (`link:k=N`): computed by the engine.
    pub link_tokens: usize,
}

/// The pieces of a request a pooled prompt is made of.
pub struct Parts<'a> {
    pub user: &'a [u32],
    pub items: &'a [&'a [u32]],
    pub instruction: &'a [u32],
    /// Request indices in hot-first order, and each one's pool key in that order.
    pub hot_first: &'a [usize],
    pub hot_keys: &'a [String],
    pub label_base: u32,
    /// The user leads (`user` then is the profile padded to whole blocks).
    pub user_first: bool,
}

/// Builds the prompt for replica `r`'s pool (and, with a store, what it reads from it).
pub fn build(pools: &Pools, r: usize, parts: &Parts<'_>, spec: RecomputeSpec) -> Pooled {
    build_with(pools.get(r), pools.held_on(r, parts.hot_keys), parts, spec)
}

/// Builds the prompt for `pool` holding `held` of the parts' items with `spec`.
pub fn build_with(pool: &ItemPool, held: Held, parts: &Parts<'_>, spec: RecomputeSpec) -> Pooled {
    let n = held.resident.len();
    // Local items lead, cold ones follow (a failed fetch is recomputed from its block on),
    // then the rest; each group keeps its hot-first order.
    let group = |j: usize| match (held.resident[j], held.cold[j]) {
        (true, false) => 0,
        (true, true) => 1,
        _ => 2,
    };
    let mut perm: Vec<usize> = (0..n).collect();
    perm.sort_by_key(|&j| group(j));
    let resident = perm.iter().filter(|&&j| held.resident[j]).count();
    let order: Vec<usize> = perm.iter().map(|&j| parts.hot_first[j]).collect();
    let keys: Vec<String> = perm.iter().map(|&j| parts.hot_keys[j].clone()).collect();
    let cold: Vec<String> = (perm.iter())
        .filter(|&&j| held.cold[j])
        .map(|&j| parts.hot_keys[j].clone())
        .collect();
    let slot_labels: Vec<Option<u32>> = perm.iter().map(|&j| held.labels[j]).collect();
    let labels = layout::labels(parts.label_base, &slot_labels);
    let (kind, at) = match parts.user_first {
        true => (PrefixKind::User, parts.user.len()),
        false => (PrefixKind::Item, 0),
    };
    let mut prompt = layout::build_labeled(
        kind,
        parts.user,
        parts.items,
        &order,
        parts.instruction,
        &labels,
    );
    let lens: Vec<usize> = order.iter().map(|&i| parts.items[i].len() + 1).collect();
    let run: usize = at + lens[..resident].iter().sum::<usize>();
    let segments: Vec<&[u32]> = (lens[..resident].iter())
        .scan(at, |at, &n| {
            let s = *at;
            *at += n;
            Some(&prompt.tokens[s..s + n])
        })
        .collect();
    let link = spec.link_tokens(&segments);
    let link_tokens = link.len();
    prompt.tokens.splice(run..run, link);
    let pool = pool.request(keys, &lens, at, resident, link_tokens, spec, cold);
    Pooled {
        prompt,
        pool,
        order,
        resident,
        link_tokens,
    }
}

#[cfg(test)]
#[path = "pooled_tests.rs"]
mod tests;
