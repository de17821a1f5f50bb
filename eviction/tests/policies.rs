//! One suite over every policy (rstest template): capacity never exceeded,
//! never a non-leaf or pinned victim (the cache rejects those with
//! `InvalidVictim`, so a clean replay proves it), deterministic.

mod common;

use common::{cache_for, prefix_trace, random_steps, replay};
use recache_eviction::PolicyConfig;
use rstest::rstest;
use rstest_reuse::{apply, template};

#[template]
#[rstest]
fn every_policy(
    #[values("lru", "lfu", "sieve", "fpb", "hf", "laru", "opt", "dead-first")] name: &str,
    #[values(0.0, 0.5, 1.0)] noise: f64,
) {
}

#[test]
fn template_covers_every_policy() {
    assert_eq!(PolicyConfig::NAMES.len(), 8);
}

#[apply(every_policy)]
fn respects_capacity_and_leaf_only(name: &str, noise: f64) {
    let cfg = PolicyConfig::from_name(name).expect("valid");
    let trace = prefix_trace(&random_steps(1200, 11), 40);
    for capacity in [8, 64, 200] {
        let r = replay(&trace, &cfg, capacity, noise).expect("no invalid victim");
        assert!(r.resident.len() <= capacity);
        assert!(r.evictions > 0, "{name} at {capacity} never evicted");
    }
}

#[apply(every_policy)]
fn deterministic(name: &str, noise: f64) {
    let cfg = PolicyConfig::from_name(name).expect("valid");
    let trace = prefix_trace(&random_steps(800, 5), 30);
    let a = replay(&trace, &cfg, 100, noise).expect("run a");
    let b = replay(&trace, &cfg, 100, noise).expect("run b");
    assert_eq!(a, b);
}

#[apply(every_policy)]
fn next_leaves_when_ranked_start_with_the_next_victim(name: &str, noise: f64) {
    // What a server publishes ahead of the engine's need must be what the policy then takes.
    let cfg = PolicyConfig::from_name(name).expect("valid");
    let trace = prefix_trace(&random_steps(600, 13), 20);
    let mut cache = cache_for(&trace, &cfg, 60, noise);
    let mut ranked = 0;
    for (t, req) in trace.iter().enumerate() {
        cache.access(req, t as u64, None).expect("access");
        if t % 50 != 49 {
            continue;
        }
        let Some(next) = cache.next_leaves(8, t as u64) else {
            continue;
        };
        ranked += 1;
        let mut seen = std::collections::HashSet::new();
        for b in &next {
            assert!(
                cache.index().is_evictable_leaf(*b),
                "{name}: {b} not a leaf"
            );
            assert!(seen.insert(*b), "{name}: {b} listed twice");
        }
        let victim = cache.evict(1, t as u64).expect("evict");
        assert_eq!(next.first(), victim.first(), "{name} at request {t}");
    }
    if matches!(name, "lru" | "lfu" | "fpb" | "laru" | "dead-first") {
        assert!(ranked > 0, "{name} ranks its leaves");
    }
}

#[apply(every_policy)]
fn next_chains_unwind_whole_chains_from_the_next_victim(name: &str, noise: f64) {
    // An engine that frees the listed blocks in turn must always free a leaf (an inner block
    // freed first would strand its subtree), and the list starts where next_leaves does.
    let cfg = PolicyConfig::from_name(name).expect("valid");
    let trace = prefix_trace(&random_steps(600, 13), 20);
    let mut cache = cache_for(&trace, &cfg, 60, noise);
    let mut unwound = 0;
    for (t, req) in trace.iter().enumerate() {
        cache.access(req, t as u64, None).expect("access");
        if t % 50 != 49 {
            continue;
        }
        let (Some(leaves), Some(chains)) = (
            cache.next_leaves(8, t as u64),
            cache.next_chains(40, t as u64),
        ) else {
            continue;
        };
        assert_eq!(leaves.first(), chains.first(), "{name} at request {t}");
        assert!(
            chains.len() >= leaves.len().min(40),
            "{name}: chains shorter than leaves"
        );
        // Freed in turn, each listed block must have no children left by then.
        let idx = cache.index();
        let mut freed_children: std::collections::HashMap<u64, u32> = Default::default();
        for b in &chains {
            let left =
                idx.children(*b).expect("resident") - freed_children.get(b).copied().unwrap_or(0);
            assert!(
                left == 0 && idx.pins(*b) == Some(0),
                "{name}: {b} freed before its children"
            );
            if let Some(p) = idx.parent(*b).flatten() {
                *freed_children.entry(p).or_default() += 1;
            }
        }
        unwound += usize::from(chains.len() > leaves.len());
    }
    if matches!(name, "lru" | "lfu" | "fpb" | "laru" | "dead-first") {
        assert!(unwound > 0, "{name} never listed a chain behind a leaf");
    }
}

#[rstest]
fn learned_next_leaves_are_the_next_victims_in_a_flat_cache(#[values("fpb", "laru")] name: &str) {
    // Single-block requests: evicting a leaf makes no new one, and a perfect oracle's
    // predictions do not move while nothing is accessed, so the whole ranking is the next
    // victims in turn, not only its head.
    let cfg = PolicyConfig::from_name(name).expect("valid");
    let trace: Vec<Vec<u64>> = random_steps(900, 17)
        .iter()
        .map(|&(c, add)| vec![u64::from(c % 97) * 4 + u64::from(add)])
        .collect();
    let mut cache = cache_for(&trace, &cfg, 40, 0.0);
    let mut checked = 0;
    for (t, req) in trace.iter().enumerate() {
        cache.access(req, t as u64, None).expect("access");
        if t % 60 != 59 {
            continue;
        }
        let next = cache
            .next_leaves(6, t as u64)
            .expect("learned policies rank");
        let victims = cache.evict(6, t as u64).expect("evict");
        assert_eq!(next, victims, "{name} at request {t}");
        checked += 1;
    }
    assert!(checked >= 10);
}

#[apply(every_policy)]
fn tiny_capacity_drops_instead_of_overflowing(name: &str, noise: f64) {
    // Requests longer than the cache: the tail is dropped, never overflow.
    let cfg = PolicyConfig::from_name(name).expect("valid");
    let trace = prefix_trace(&random_steps(500, 3), 3);
    let r = replay(&trace, &cfg, 2, noise).expect("no invalid victim");
    assert!(r.resident.len() <= 2);
    let zero = replay(&trace, &cfg, 0, noise).expect("capacity 0");
    assert_eq!(zero.total_hits(), 0);
}

/// LARU with the online LightGBM predictor is reproducible: models are
/// installed at fixed request counts, training is single-threaded.
#[cfg(feature = "lightgbm")]
#[test]
fn laru_with_lightgbm_is_deterministic() {
    use recache_eviction::Cache;
    use recache_eviction::policy::{self, PolicyEnv};
    use recache_eviction::predict::lgbm::{LgbmConfig, LightGbm};
    let trace = prefix_trace(&random_steps(2000, 9), 80);
    let run = || {
        // A horizon the 2,000-request trace passes: no model trains before a censored row.
        let mut cfg = LgbmConfig {
            min_rows: 500,
            retrain_every: 2000,
            ..LgbmConfig::default()
        };
        cfg.features.horizon = 300;
        let env = PolicyEnv {
            capacity: 120,
            predictor: Some(Box::new(LightGbm::new(cfg))),
            future: None,
        };
        let laru = PolicyConfig::laru_with_features(None);
        let mut cache = Cache::new(120, policy::build(&laru, env).expect("laru"));
        let hits: Vec<usize> = trace
            .iter()
            .enumerate()
            .map(|(t, r)| cache.access(r, t as u64, None).expect("valid victims").hits)
            .collect();
        let stats = cache.policy_stats().predictor.expect("predictor stats");
        (hits, stats.model_swaps, stats.predict_rows)
    };
    let a = run();
    assert!(a.1 > 0, "a model was trained and installed");
    assert_eq!(a, run());
}

/// The KV-event API drives every policy too: stores, engine removals,
/// clear, and `evict` returning only evictable leaves.
#[apply(every_policy)]
fn kv_event_feed(name: &str, noise: f64) {
    use recache_eviction::policy::{self, PolicyEnv};
    use recache_eviction::predict::OracleNoise;
    use recache_eviction::{Cache, FutureIndex};
    use std::sync::Arc;
    let cfg = PolicyConfig::from_name(name).expect("valid");
    let trace = prefix_trace(&random_steps(300, 17), 10);
    let future = Arc::new(FutureIndex::new(trace.iter().map(Vec::as_slice)));
    let predictor = cfg
        .uses_predictor()
        .then(|| Box::new(OracleNoise::new(future.clone(), noise, 1)) as _);
    let env = PolicyEnv {
        capacity: 50,
        predictor,
        future: Some(future),
    };
    let mut cache = Cache::new(50, policy::build(&cfg, env).expect("build"));
    for (t, req) in trace.iter().enumerate() {
        let mut parent = None;
        for &b in req {
            cache.block_stored(b, parent, t as u64).expect("store");
            parent = Some(b);
        }
        let over = cache.index().len().saturating_sub(50);
        let victims = cache.evict(over, t as u64).expect("valid victims");
        assert_eq!(victims.len(), over);
        assert!(cache.index().len() <= 50);
    }
    let leaf = cache.index().lru_first().expect("a leaf");
    cache.block_removed(leaf).expect("engine removal");
    assert!(cache.block_removed(0).is_err(), "root has children");
    cache.all_cleared();
    assert!(cache.index().is_empty());
    assert!(cache.evict(1, 0).expect("empty").is_empty());
}

/// Async prediction mode (worker thread): results vary run to run, but
/// capacity and victim validity hold for every learned policy.
#[cfg(feature = "lightgbm")]
#[rstest]
fn async_predictions_keep_invariants(#[values("fpb", "hf", "laru")] name: &str) {
    use recache_eviction::Cache;
    use recache_eviction::policy::{self, PolicyEnv};
    use recache_eviction::predict::lgbm::{Install, LgbmConfig, LightGbm};
    let trace = prefix_trace(&random_steps(1500, 21), 60);
    let mut cfg = LgbmConfig {
        min_rows: 500,
        retrain_every: 2000,
        install: Install::Background,
        async_predict: true,
        ..LgbmConfig::default()
    };
    cfg.features.horizon = 300;
    let env = PolicyEnv {
        capacity: 100,
        predictor: Some(Box::new(LightGbm::new(cfg))),
        future: None,
    };
    let pc = PolicyConfig::from_name(name).expect("valid");
    let mut cache = Cache::new(100, policy::build(&pc, env).expect("build"));
    for (t, r) in trace.iter().enumerate() {
        cache.access(r, t as u64, None).expect("valid victims");
        assert!(cache.index().len() <= 100);
    }
}
