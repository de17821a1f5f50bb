//! Unit tests of `client::route::gr`.

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
