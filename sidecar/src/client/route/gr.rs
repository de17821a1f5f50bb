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

use super::placement;
use super::prefix::{Prefix, PrefixParams};
use super::{ReplicaChoice, RouteHint};
use crate::client::replica::Replica;

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
                let pooled = |i: usize| gr.pooled.get(i).copied().unwrap_or(0) as f64;
                let cold = |i: usize| gr.cold.get(i).copied().unwrap_or(0);
                self.prefix
                    .choose_with(replicas, tried, hint, near, pooled, cold)
            }
            None => self.prefix.choose(replicas, tried, hint),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::RouteKeys;
    use super::super::{Routing, build};
    use super::*;
    use crate::client::mirror::MirrorState;
    use crate::client::replica::InFlight;

    fn set(urls: &[&str]) -> Vec<Arc<Replica>> {
        urls.iter()
            .map(|u| Arc::new(Replica::new(u.parse().expect("uri"))))
            .collect()
    }

    fn prompt(seed: u32, len: u32) -> RouteKeys {
        RouteKeys::from_tokens(&[(0..len).map(|t| seed * 100_000 + t).collect()])
    }

    fn user(u: &str) -> GrHint {
        GrHint {
            user_first: true,
            user: placement::id(u),
            cold_items: Vec::new(),
            ..GrHint::default()
        }
    }

    /// Two recache instances, replicas listed in different orders, no shared state and no
    /// history: each new user goes to the same replica from both.
    #[test]
    fn new_users_go_home_from_any_instance() {
        let (one, two) = (build(Routing::gr()), build(Routing::gr()));
        let ab = set(&["http://a:1", "http://b:2"]);
        let ba = set(&["http://b:2", "http://a:1"]);
        let mut homes = [0usize; 2];
        for u in 0..200 {
            let keys = prompt(u, 256);
            let gr = user(&format!("user-{u}"));
            let hint = RouteHint {
                path: "/v1/completions",
                keys: &keys,
                gr: Some(&gr),
            };
            let x = one.choose(&ab, &[], &hint).expect("some");
            let y = two.choose(&ba, &[], &hint).expect("some");
            assert_eq!(ab[x].label, ba[y].label, "user {u}");
            homes[x] += 1;
        }
        assert!(homes.iter().all(|&n| n > 60), "{homes:?}");
    }

    /// New users homed on one replica: without KV events every one goes home (up to the load
    /// bound, so the next request finds it from any instance); where the mirrors are exact,
    /// a home above its fair share yields and the users spread.
    #[test]
    fn homes_yield_to_balance_where_mirrors_are_exact() {
        let homed_on_first = |reps: &[Arc<Replica>]| {
            (0..)
                .map(|u| format!("user-{u}"))
                .filter(|u| affinity(reps, &user(u))[0] == 1)
                .take(20)
                .collect::<Vec<_>>()
        };
        let on_first = |exact: bool| {
            let rule = build(Routing::gr());
            let reps = set(&["http://a:1", "http://b:2"]);
            if exact {
                for r in &reps {
                    r.mirror.set_state(MirrorState::Exact, "test", &r.label);
                }
            }
            let mut n = 0;
            for (i, u) in homed_on_first(&reps).iter().enumerate() {
                let keys = prompt(1000 + i as u32, 256);
                let gr = user(u);
                let hint = RouteHint {
                    path: "",
                    keys: &keys,
                    gr: Some(&gr),
                };
                n += usize::from(rule.choose(&reps, &[], &hint) == Some(0));
            }
            n
        };
        let (approximate, exact) = (on_first(false), on_first(true));
        assert!(
            approximate >= 13,
            "home up to the load bound: {approximate} of 20"
        );
        assert!(exact <= 11, "spread where mirrors are exact: {exact} of 20");
    }

    /// A replica holding the user's prefix beats the user's home; placement breaks ties only.
    #[test]
    fn a_cached_prefix_beats_the_home() {
        let rule = build(Routing::gr());
        let reps = set(&["http://a:1", "http://b:2"]);
        let gr = user("someone");
        let home = affinity(&reps, &gr).iter().position(|&a| a == 1);
        let away = 1 - home.expect("a home");
        let keys = prompt(5, 512);
        // The prompt went away from home once (home was tried and failed).
        let hint = RouteHint {
            path: "",
            keys: &keys,
            gr: Some(&gr),
        };
        assert_eq!(rule.choose(&reps, &[1 - away], &hint), Some(away));
        assert_eq!(
            rule.choose(&reps, &[], &hint),
            Some(away),
            "its prefix is there"
        );
        // An unhealthy home holds nobody's home: the other replica is.
        reps[1 - away].set_healthy(false);
        assert_eq!(affinity(&reps, &gr)[away], 1);
    }

    /// Item-first prompts go where most cold candidates are homed; hot ones do not count;
    /// past the queue gap load wins.
    #[test]
    fn item_first_prompts_follow_their_cold_items() {
        let rule = build(Routing::gr());
        let reps = set(&["http://a:1", "http://b:2"]);
        let labels = || reps.iter().map(|r| r.label.as_str());
        let homed = |r: usize| {
            (0..)
                .map(|i| placement::id(&format!("item-{i}")))
                .filter(move |&id| placement::home(id, labels(), |_| true) == Some(r))
        };
        for r in 0..2 {
            let mut cold: Vec<u64> = homed(r).take(6).collect();
            cold.extend(homed(1 - r).take(4));
            let gr = GrHint {
                user_first: false,
                user: 0,
                cold_items: cold,
                ..GrHint::default()
            };
            let keys = prompt(10 + r as u32, 256);
            let hint = RouteHint {
                path: "",
                keys: &keys,
                gr: Some(&gr),
            };
            assert_eq!(affinity(&reps, &gr)[r], 6);
            assert_eq!(rule.choose(&reps, &[], &hint), Some(r));
            let _queued: Vec<_> = (0..9).map(|_| InFlight::new(reps[r].clone())).collect();
            let other = prompt(20 + r as u32, 256);
            let hint = RouteHint {
                path: "",
                keys: &other,
                gr: Some(&gr),
            };
            assert_eq!(rule.choose(&reps, &[], &hint), Some(1 - r), "queue gap");
        }
    }

    /// Per-replica item pools: the replica whose pool supplies more of an item-first prompt
    /// wins, whatever the placement of its cold candidates.
    #[test]
    fn pooled_items_count_as_cached() {
        let (rule, reps) = (build(Routing::gr()), set(&["http://a:1", "http://b:2"]));
        for r in [0, 1, 0, 1] {
            let mut pooled = vec![100, 100];
            pooled[r] = 900;
            let gr = GrHint {
                pooled,
                cold_items: (0..50).map(|i| placement::id(&format!("i{i}"))).collect(),
                ..GrHint::default()
            };
            assert_eq!(item_first(&*rule, &reps, &gr), Some(r));
        }
    }

    /// The rule's pick for an item-first prompt of 2,000 tokens with hint `gr`.
    fn item_first(rule: &dyn ReplicaChoice, reps: &[Arc<Replica>], gr: &GrHint) -> Option<usize> {
        let keys = RouteKeys {
            keys: Vec::new(),
            tokens: 2000,
            token_ids: true,
        };
        let hint = RouteHint {
            path: "",
            keys: &keys,
            gr: Some(gr),
        };
        rule.choose(reps, &[], &hint)
    }

    /// Items read from the store count as supplied: with equal supply, placement and load
    /// decide first, and only then does the replica reading fewer of them from the store win.
    #[test]
    fn cold_items_count_as_supplied_and_order_only_ties() {
        let (rule, reps) = (build(Routing::gr()), set(&["http://a:1", "http://b:2"]));
        let choose = |gr: &GrHint| item_first(&*rule, &reps, gr);
        // Equal supply, no placement, equal load: the one with fewer cold items.
        for r in [0, 1] {
            let mut cold = vec![40, 40];
            cold[r] = 10;
            let gr = GrHint {
                pooled: vec![1800, 1800],
                cold,
                ..GrHint::default()
            };
            assert_eq!(choose(&gr), Some(r), "fewer cold items on {r}");
        }
        // A busier replica loses even with fewer cold items.
        let _busy = InFlight::new(reps[0].clone());
        let gr = GrHint {
            pooled: vec![1800, 1800],
            cold: vec![0, 40],
            ..GrHint::default()
        };
        assert_eq!(choose(&gr), Some(1), "load before cold");
        // More supply wins whatever is cold.
        let gr = GrHint {
            pooled: vec![1000, 1800],
            cold: vec![0, 40],
            ..GrHint::default()
        };
        assert_eq!(choose(&gr), Some(1), "supply before cold");
    }
}
