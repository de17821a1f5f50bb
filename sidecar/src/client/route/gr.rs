//! `gr`: [`super::prefix`] for GR ranking prompts, with each side's placement (BAT §5.2).
//!
//! A ranking prompt has two reusable sides, and which one leads is chosen per request
//! (`rank::select`). The rank pipeline tells this rule which ([`GrHint`]):
//!
//! - **user-first**: the user's profile is the prefix. Where some replica holds it (mirror or
//!   record), cost decides as in `prefix`. Where none does (a new user, or one every replica
//!   has evicted), the user goes to its *home* replica ([`placement::home`] of the user id),
//!   not to whichever is idle: so its next request, from this recache or another one in front
//!   of the same replicas, finds it there.
//! - **item-first**: the candidates are the prefix. Hot items (those covering `hot_share` of
//!   item accesses) are replicated; each cold item has one home. Among replicas of equal cost
//!   the request goes where most of its cold candidates are homed, so each replica's cache
//!   sees a shard of the long tail instead of all of it.
//!
//! - **item-first with per-replica item pools** (`--rank-item-pool` and several replicas):
//!   the tokens each replica's pool would supply count as cached there ([`GrHint::pooled`]),
//!   so the request goes where most of its candidates are pooled; the rank pipeline asks
//!   the rule before it builds the prompt, since the prompt depends on that pool. With a
//!   store, items another replica's pool holds count as supplied too ([`GrHint::cold`]).
//!
//! Requests without a hint (proxied completions, chat) are routed exactly as `prefix` routes
//! them. Load bound and queue gap apply as in `prefix`; placement only breaks cost ties, and
//! on a replica whose KV events are mirrored exactly only while its recent share is at most
//! the mean (there every instance sees where a prompt went; see `Prefix::choose_with`).

use std::sync::Arc;

use super::prefix::{Prefix, PrefixParams};
use super::{ReplicaChoice, RouteHint};
use crate::client::replica::Replica;
use recache_hash::placement;

/// What a ranking prompt tells the rule (filled by the rank pipeline).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrHint {
    /// The user's profile leads the prompt (else the items do).
    pub user_first: bool,
    /// [`placement::id`] of the user id.
    pub user: u64,
    /// [`placement::id`] of each cold candidate (hot ones are replicated: no preference).
    pub cold_items: Vec<u64>,
    /// Item-first prompts with per-replica item pools: per replica, the prompt tokens its
    /// pool would supply (pooled items with their labels). Counted as cached, as the
    /// prefix a replica holds is (empty otherwise).
    pub pooled: Vec<usize>,
    /// Of those, per replica, the items it would read from the store (another replica's
    /// pool holds them): a cold item costs about what a local one does, so this orders
    /// replicas only after cost, placement and load (empty: none).
    pub cold: Vec<usize>,
    /// Leading keys a replica must hold before its pool supplies anything (a user-first
    /// prompt's profile; 0 item-first).
    pub pooled_after: usize,
    /// The replica the prompt was built for (its item pool's labels): the client sends it
    /// there first, without asking the rule again.
    pub replica: Option<usize>,
}

#[derive(Debug)]
pub struct Gr {
    prefix: Prefix,
}

impl Gr {
    pub fn new(params: PrefixParams) -> Self {
        Self {
            prefix: Prefix::new(params),
        }
    }
}

/// Per replica, how strongly `hint` places the request there: 1 on the user's home for a
/// user-first prompt; the number of cold candidates homed there for an item-first one.
/// Homes are taken over the healthy replicas (an unhealthy one holds nobody's home).
pub fn affinity(replicas: &[Arc<Replica>], hint: &GrHint) -> Vec<usize> {
    let mut per = vec![0; replicas.len()];
    let ids: Vec<u64> = (replicas.iter())
        .map(|r| placement::replica_id(&r.label))
        .collect();
    let healthy: Vec<bool> = replicas.iter().map(|r| r.is_healthy()).collect();
    let eligible = |i: usize| healthy[i];
    if hint.user_first {
        if let Some(h) = placement::home_of(hint.user, &ids, eligible) {
            per[h] = 1;
        }
    } else {
        for &item in &hint.cold_items {
            if let Some(h) = placement::home_of(item, &ids, eligible) {
                per[h] += 1;
            }
        }
    }
    per
}

impl ReplicaChoice for Gr {
    fn forget(&self, index: usize) {
        self.prefix.forget(index);
    }

    fn wants_keys(&self) -> bool {
        true
    }

    fn choose(
        &self,
        replicas: &[Arc<Replica>],
        tried: &[usize],
        hint: &RouteHint<'_>,
    ) -> Option<usize> {
        match hint.gr {
            Some(gr) => {
                let per = affinity(replicas, gr);
                let near = |i: usize| per.get(i).copied().unwrap_or(0);
                let pooled = |i: usize, held: usize| match held >= gr.pooled_after {
                    true => gr.pooled.get(i).copied().unwrap_or(0) as f64,
                    false => 0.0,
                };
                let cold = |i: usize| gr.cold.get(i).copied().unwrap_or(0);
                self.prefix
                    .choose_with(replicas, tried, hint, near, pooled, cold)
            }
            None => self.prefix.choose(replicas, tried, hint),
        }
    }
}

#[cfg(test)]
#[path = "gr_tests.rs"]
mod tests;
