//! Routing decision time with a full record: every replica's `prefix` record filled to
//! `blocks` keys from the trace's own prompts, then each request's decision timed alone (no
//! engine, no network). With `mirrored`, every replica also has an `exact` KV-event mirror of
//! that many blocks (the trace's prompts' blocks first, then synthetic ones), so the decision
//! reads the mirror as it does with `--kv-events`. The live runs report the same from
//! `recache_route_decision_seconds`. Under `gr` every decision carries a ranking hint (every
//! other one user-first, the rest item-first with [`GR_COLD_ITEMS`] cold candidates), so its
//! placement is timed too.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use recache::harness::MirrorState;
use recache::harness::Replica;
use recache::harness::{GrHint, RouteHint, RouteKeys, Routing, route};

/// Cold candidates of the item-first hints under `gr` (every candidate of a 100-item request:
/// the most placement work a request can ask for).
pub const GR_COLD_ITEMS: u64 = 100;
use recache_eviction::hash::FastSet;

/// Times `rounds` decisions of `routing` over `replicas` replicas whose records hold about
/// `blocks` keys each, prompts cycling through `prompts`.
pub fn measure(
    routing: Routing,
    replicas: usize,
    prompts: &[Vec<u32>],
    rounds: usize,
    mirrored: usize,
) -> Value {
    let set: Vec<Arc<Replica>> = (0..replicas)
        .map(|i| {
            Arc::new(Replica::new(
                format!("http://r{i}:1").parse().expect("static uri"),
            ))
        })
        .collect();
    let rule = route::build(routing);
    let keys: Vec<RouteKeys> = prompts
        .iter()
        .map(|p| RouteKeys::from_tokens(std::slice::from_ref(p)))
        .collect();
    let blocks = routing.prefix_params().map_or(0, |p| p.blocks);
    // Fill: distinct synthetic prompts until each record is full, then the trace's prompts.
    let per_prompt = 64usize;
    let fill = (blocks * replicas).div_ceil(per_prompt);
    for i in 0..fill {
        let p: Vec<u32> = (0..(per_prompt * 32) as u32)
            .map(|t| (i as u32).wrapping_mul(7919) ^ t.wrapping_mul(31))
            .collect();
        let k = RouteKeys::from_tokens(&[p]);
        rule.choose(&set, &[], &RouteHint::new("", &k));
    }
    if mirrored > 0 {
        // Each replica mirrors every other prompt of the trace (so the two disagree) plus
        // synthetic blocks up to `mirrored`.
        for (r, replica) in set.iter().enumerate() {
            let mut ids: FastSet<u64> = keys
                .iter()
                .enumerate()
                .filter(|(i, _)| i % replicas.max(1) == r)
                .flat_map(|(_, k)| k.keys.iter().copied())
                .collect();
            let mut x = r as u64;
            while ids.len() < mirrored {
                x = recache_hash::mix64(x.wrapping_add(0x9e37_79b9));
                ids.insert(x);
            }
            replica.mirror.publish(ids);
            replica
                .mirror
                .set_state(MirrorState::Exact, "bench: mirrored", "bench");
        }
    }
    let hints: Vec<Option<GrHint>> = (0..keys.len() as u64)
        .map(|i| {
            routing.hot_share().map(|_| GrHint {
                user_first: i % 2 == 0,
                user: recache_hash::mix64(i),
                cold_items: (0..GR_COLD_ITEMS)
                    .map(|j| recache_hash::mix64(i * 1000 + j))
                    .collect(),
                ..GrHint::default()
            })
        })
        .collect();
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let at = i % keys.len().max(1);
        let hint = RouteHint {
            path: "",
            keys: &keys[at],
            gr: hints[at].as_ref(),
        };
        let t = Instant::now();
        let chosen = rule.choose(&set, &[], &hint);
        times.push(t.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(chosen);
    }
    times.sort_by(f64::total_cmp);
    let q = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let mean_keys =
        keys.iter().map(|k| k.keys.len()).sum::<usize>() as f64 / keys.len().max(1) as f64;
    json!({
        "strategy": routing.name(), "replicas": replicas, "blocks_per_replica": blocks,
        "decisions": rounds, "mean_prompt_keys": mean_keys, "mirrored_blocks_per_replica": mirrored,
        "decision_p50_us": q(0.5), "decision_p99_us": q(0.99),
    })
}
