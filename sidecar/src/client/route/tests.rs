//! One suite over every rule, then each rule's own behaviour.

use super::*;
use crate::client::replica::InFlight;

fn set(urls: &[&str]) -> Vec<Arc<Replica>> {
    urls.iter()
        .map(|u| Arc::new(Replica::new(u.parse().expect("uri"))))
        .collect()
}

fn every_rule() -> [Routing; 3] {
    [Routing::LeastLoaded, Routing::prefix(), Routing::gr()]
}

fn prompt(seed: u32, len: u32) -> RouteKeys {
    RouteKeys::from_tokens(&[(0..len).map(|t| seed * 100_000 + t).collect()])
}

/// Every rule: only healthy, untried replicas; None when none is left; with and without keys.
#[test]
fn every_rule_skips_unhealthy_and_tried_replicas() {
    for routing in every_rule() {
        let rule = build(routing);
        let reps = set(&["http://a:1", "http://b:2", "http://c:3"]);
        reps[2].set_healthy(false);
        for i in 0..6 {
            let keys = prompt(i % 2, 256);
            let hint = RouteHint::new("/v1/completions", &keys);
            let i = rule.choose(&reps, &[], &hint).expect("a healthy replica");
            assert!(i < 2, "{routing:?} chose the unhealthy replica");
        }
        let hint = RouteHint::default();
        assert_eq!(rule.choose(&reps, &[0, 1], &hint), None, "{routing:?}");
        reps.iter().for_each(|r| {
            r.set_healthy(false);
        });
        assert_eq!(rule.choose(&reps, &[], &hint), None, "{routing:?}");
        assert_eq!(
            rule.choose(&[], &[], &hint),
            None,
            "{routing:?}: no replicas"
        );
    }
}

/// Every rule spreads distinct prompts with no load over all replicas.
#[test]
fn every_rule_spreads_distinct_prompts() {
    for routing in every_rule() {
        let rule = build(routing);
        let reps = set(&["http://a:1", "http://b:2"]);
        let mut count = [0usize; 2];
        for i in 0..100 {
            let keys = prompt(i, 128);
            let hint = RouteHint::new("/v1/completions", &keys);
            count[rule.choose(&reps, &[], &hint).expect("some")] += 1;
        }
        assert!(count[0] >= 40 && count[1] >= 40, "{routing:?}: {count:?}");
    }
}

#[test]
fn least_loaded_prefers_the_idle_replica() {
    let rule = build(Routing::LeastLoaded);
    let reps = set(&["http://a:1", "http://b:2", "http://c:3"]);
    let _a = InFlight::new(reps[0].clone());
    let _b = InFlight::new(reps[1].clone());
    assert_eq!(rule.choose(&reps, &[], &RouteHint::default()), Some(2));
}

#[test]
fn prefix_sends_a_returning_prompt_where_its_prefix_went() {
    let rule = build(Routing::prefix());
    let reps = set(&["http://a:1", "http://b:2", "http://c:3"]);
    let first = prompt(7, 512);
    let hint = RouteHint::new("/v1/completions", &first);
    let home = rule.choose(&reps, &[], &hint).expect("some");
    // Other users in between, then the same user with a longer prompt.
    for i in 0..5 {
        let k = prompt(100 + i, 512);
        rule.choose(&reps, &[], &RouteHint::new("", &k));
    }
    let mut longer: Vec<u32> = (0..512).map(|t| 7 * 100_000 + t).collect();
    longer.extend(1..200);
    let keys = RouteKeys::from_tokens(&[longer]);
    let again = rule.choose(&reps, &[], &RouteHint::new("", &keys));
    assert_eq!(again, Some(home));
}

#[test]
fn prefix_forgets_a_replica_that_came_back() {
    let rule = build(Routing::prefix());
    let reps = set(&["http://a:1", "http://b:2"]);
    let p = prompt(9, 256);
    let hint = RouteHint::new("", &p);
    let home = rule.choose(&reps, &[], &hint).expect("some");
    // One other prompt to the other replica; then home has the most recent requests, so
    // only the record pulls the prompt back there.
    let k = prompt(200, 256);
    rule.choose(&reps, &[home], &RouteHint::new("", &k));
    assert_eq!(rule.choose(&reps, &[], &hint), Some(home), "remembered");
    rule.forget(home);
    assert_eq!(
        rule.choose(&reps, &[], &hint),
        Some(1 - home),
        "forgotten: no affinity left"
    );
}

#[test]
fn prefix_keeps_affinity_until_the_queue_gap() {
    let rule = build(Routing::prefix()); // queue_gap 8
    let reps = set(&["http://a:1", "http://b:2"]);
    let p = prompt(1, 64);
    let hint = RouteHint::new("", &p);
    let home = rule.choose(&reps, &[], &hint).expect("some");
    let mut queued: Vec<_> = (0..8).map(|_| InFlight::new(reps[home].clone())).collect();
    assert_eq!(
        rule.choose(&reps, &[], &hint),
        Some(home),
        "8 queued: within the gap"
    );
    queued.push(InFlight::new(reps[home].clone()));
    assert_eq!(
        rule.choose(&reps, &[], &hint),
        Some(1 - home),
        "9 queued: past the gap, the idle replica wins"
    );
}

#[test]
fn prefix_bounds_a_hot_prompts_share() {
    let balance = 0.3;
    let rule = build(Routing::Prefix {
        blocks: 1 << 16,
        ttl_s: 600.0,
        balance,
        queue_gap: 8,
    });
    let reps = set(&["http://a:1", "http://b:2"]);
    let hot = prompt(3, 1024);
    let mut count = [0usize; 2];
    for _ in 0..2000 {
        count[rule
            .choose(&reps, &[], &RouteHint::new("", &hot))
            .expect("some")] += 1;
    }
    let max_share = *count.iter().max().expect("two") as f64 / 1000.0;
    assert!(max_share <= 1.0 + balance + 0.02, "{count:?}");
}

#[test]
fn routing_specs_parse_and_bad_ones_name_the_problem() {
    assert_eq!(
        Routing::from_spec("least-loaded").expect("ok"),
        Routing::LeastLoaded
    );
    assert_eq!(
        Routing::from_spec("least-outstanding").expect("old name"),
        Routing::LeastLoaded
    );
    assert_eq!(
        Routing::from_spec("prefix:blocks=1024:balance=0.5").expect("ok"),
        Routing::Prefix {
            blocks: 1024,
            ttl_s: 600.0,
            balance: 0.5,
            queue_gap: 8,
        }
    );
    for (spec, says) in [
        ("nearest", "unknown variant"),
        ("prefix:blocks=0", "blocks"),
        ("prefix:balance=-1", "balance"),
        ("prefix:ttl_s=0", "ttl_s"),
        ("prefix:bogus=1", "unknown field"),
        ("prefix:blocks", "key=value"),
        ("gr:hot_share=1.5", "hot_share"),
        ("prefix:hot_share=0.5", "unknown field"),
    ] {
        let e = Routing::from_spec(spec).expect_err(spec).to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
    let v = serde_json::to_value(Routing::prefix()).expect("json");
    assert_eq!(v["routing"], "prefix");
    let gr = Routing::from_spec("gr:hot_share=0.8:blocks=512").expect("ok");
    assert_eq!((gr.name(), gr.hot_share()), ("gr", Some(0.8)));
    assert_eq!(gr.prefix_params().map(|p| p.blocks), Some(512));
    assert_eq!(Routing::prefix().hot_share(), None);
}
