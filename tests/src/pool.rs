//! Ranking requests and answers for the item-pool suites (vLLM's connector, SGLang's linker,
//! the cold tier, the quality guard): synthetic candidates and profiles, an items-first body,
//! its candidates as a catalog to precompute, an answer's scores by id, and replica 0's pool.
//! One place, so the suites that compare engines build the same prompts.

use std::sync::Arc;
use std::time::Duration;

use recache::itempool::ItemPool;
use serde_json::{Value, json};

use recache::client::replica::Replica;

use crate::{Proxy, wait_for};

/// `n` candidates of `len` tokens each: item `i`'s tokens are `base + stride * i + t`, its id
/// `id(i)`. Distinct items share no token run, so each is its own pool entry.
pub fn items(
    n: usize,
    len: usize,
    base: u32,
    stride: u32,
    id: impl Fn(usize) -> Value,
) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let tokens: Vec<u32> = (0..len as u32)
                .map(|t| base + stride * i as u32 + t)
                .collect();
            json!({"id": id(i), "tokens": tokens})
        })
        .collect()
}

/// A user profile of `len` tokens in 3000..3900 that varies with `seed`.
pub fn profile(len: usize, seed: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|t| 3000 + (t * 7 + seed) % 900)
        .collect()
}

/// An items-first `/v1/rank` body (`cache_salt` only when given).
pub fn item_prefix_request(
    model: &str,
    user: &str,
    profile: Vec<u32>,
    items: Vec<Value>,
    salt: Option<&str>,
) -> Value {
    let mut body = json!({"model": model, "user": {"id": user, "tokens": profile},
                          "items": items, "mode": "item_prefix"});
    if let Some(salt) = salt {
        body["cache_salt"] = json!(salt);
    }
    body
}

/// A ranking answer's `(id, score)` pairs sorted by id, to compare two answers item by item.
pub fn scores(v: &Value) -> Vec<(String, f64)> {
    let mut s: Vec<(String, f64)> = v["ranking"]
        .as_array()
        .expect("ranking")
        .iter()
        .map(|r| (r["id"].to_string(), r["score"].as_f64().expect("score")))
        .collect();
    s.sort_by(|a, b| a.0.cmp(&b.0));
    s
}

/// A body's candidates as `rank::startup::prepare`'s catalog (`(id, tokens, weight 1)`).
pub fn catalog_of(body: &Value) -> Vec<(String, Arc<Vec<u32>>, u64)> {
    body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let tokens: Vec<u32> = serde_json::from_value(i["tokens"].clone()).expect("tokens");
            (i["id"].to_string(), Arc::new(tokens), 1)
        })
        .collect()
}

impl Proxy {
    /// The item pool recache keeps for its first replica (panics when the pool is off).
    pub fn pool(&self) -> Arc<ItemPool> {
        let pools = self.state.ranker.rank.pool.as_ref().expect("item pool on");
        pools.get(0).clone()
    }
}

/// Waits until `pool` holds nothing resident: recache reconciled it with an engine that came
/// back empty.
pub async fn wait_reconciled(pool: &ItemPool, limit: Duration) {
    wait_for(
        "the pool reconciled to 0 resident after the engine came back",
        limit,
        async || match pool.counts() {
            (0, _) => Ok(()),
            counts => Err(format!("(resident, pending) {counts:?}")),
        },
    )
    .await;
}

/// Waits until the background refills an answer started have finished: nothing in flight on
/// `replica` and items resident in `pool` again.
pub async fn wait_refilled(replica: &Replica, pool: &ItemPool) {
    wait_for(
        "the refills finishing (nothing in flight, items resident again)",
        Duration::from_secs(60),
        async || match (replica.in_flight(), pool.counts()) {
            (0, (resident, _)) if resident > 0 => Ok(()),
            (n, counts) => Err(format!(
                "{n} in flight, pool {counts:?} (resident, pending)"
            )),
        },
    )
    .await;
}
