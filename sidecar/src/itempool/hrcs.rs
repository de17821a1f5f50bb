//! How much of the item accesses every replica's pool replicates when a store serves the
//! rest: BAT's Alg. 1 (HRCS, §5.2) on costs measured on the testbed.
//!
//! Alg. 1 allows a request to wait `α · t` for items fetched from other machines, where `t` is
//! the prefill of its user tokens after the cached items; at a fetch rate of `B` tokens/s that
//! is `R_max = α · t · B · (N−1) / (c · τ_i · N)` of its `c · τ_i` item tokens (the `(N−1)/N`:
//! an evenly sharded item is local on one replica in `N`). The hottest items covering
//! `1 − R_max` of the accesses are then pooled on every replica, the rest once, at a home, and
//! read from the store elsewhere ([`super::replicas`]).
//!
//! The costs ([`Costs`]) are measured while serving ([`super::costs`]: the engine's prefill
//! rate from its counters, the store's fetch rate from the connectors' timings) unless
//! `--rank-pool-costs` fixes them; until the first measurement they are what docs/store.md
//! once measured: a Redis fetch of 100 of the testbed's items (19 tokens each) in 6.1 ms,
//! 311k tokens/s, against a bf16 testbed prefill of 876 tokens/s at saturation. On costs
//! like those `R_max` is far above 1 and nothing is replicated; a slow network (`B` near the
//! prefill rate) makes Alg. 1 replicate the hottest items. The request shape (`c`, `τ_u`, `τ_i`) is what recache
//! has ranked so far ([`Shape`]); before the first request, a request of 100 candidates with
//! as many user tokens as item tokens.

use std::sync::atomic::{AtomicU64, Ordering};

/// What Alg. 1 weighs: the store's fetch rate, the engine's prefill rate and `α`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// `B`: item tokens a replica reads from the store per second.
    pub fetch_tokens_per_s: f64,
    /// Tokens the engine prefills per second (the `t` of a request's user tokens).
    pub prefill_tokens_per_s: f64,
    /// `α`: the fetch time a request may wait, as a share of its prefill time.
    pub alpha: f64,
}

impl Default for Costs {
    fn default() -> Self {
        Self {
            fetch_tokens_per_s: 311_000.0,
            prefill_tokens_per_s: 876.0,
            alpha: 0.1,
        }
    }
}

/// Which rates a `--rank-pool-costs` spec fixes (the others are measured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Given {
    pub fetch: bool,
    pub prefill: bool,
}

impl Given {
    /// The keys `spec` sets (a spec [`Costs::parse`] refuses sets none).
    pub fn of(spec: Option<&str>) -> Self {
        let Some(spec) = spec.filter(|s| Costs::parse(s).is_ok()) else {
            return Self::default();
        };
        let has = |key: &str| {
            (spec.split(','))
                .filter_map(|kv| kv.split_once('='))
                .any(|(k, _)| k.trim() == key)
        };
        Self {
            fetch: has("fetch"),
            prefill: has("prefill"),
        }
    }
}

impl Costs {
    /// Parses `fetch=TOKENS_PER_S,prefill=TOKENS_PER_S,alpha=A` (any subset; the rest default).
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut c = Self::default();
        for kv in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = (kv.split_once('='))
                .ok_or_else(|| format!("{kv:?} is not key=value (keys: fetch, prefill, alpha)"))?;
            let v: f64 = (v.trim().parse()).map_err(|_| format!("{k}: {v:?} is not a number"))?;
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{k} must be a positive number"));
            }
            match k.trim() {
                "fetch" => c.fetch_tokens_per_s = v,
                "prefill" => c.prefill_tokens_per_s = v,
                "alpha" => c.alpha = v,
                other => {
                    return Err(format!(
                        "unknown key {other:?} (keys: fetch, prefill, alpha)"
                    ));
                }
            }
        }
        Ok(c)
    }

    /// `R_max` for requests of `candidates` items of `item_tokens` tokens each and
    /// `user_tokens` user tokens, over `replicas` pools.
    pub fn r_max(
        &self,
        candidates: f64,
        user_tokens: f64,
        item_tokens: f64,
        replicas: usize,
    ) -> f64 {
        let n = replicas.max(1) as f64;
        let t = user_tokens / self.prefill_tokens_per_s;
        let items = candidates * item_tokens;
        if items <= 0.0 || n < 2.0 {
            return 0.0;
        }
        self.alpha * t * self.fetch_tokens_per_s * (n - 1.0) / (items * n)
    }
}

/// The ranked requests' mean shape (`c`, `τ_u`, `τ_i`), counted as they come.
#[derive(Debug, Default)]
pub struct Shape {
    requests: AtomicU64,
    candidates: AtomicU64,
    user_tokens: AtomicU64,
    item_tokens: AtomicU64,
}

impl Shape {
    /// Counts one ranking request.
    pub fn record(&self, candidates: usize, user_tokens: usize, item_tokens: usize) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.candidates
            .fetch_add(candidates as u64, Ordering::Relaxed);
        self.user_tokens
            .fetch_add(user_tokens as u64, Ordering::Relaxed);
        self.item_tokens
            .fetch_add(item_tokens as u64, Ordering::Relaxed);
    }

    /// (`c`, `τ_u`, `τ_i`): means over the requests so far; before any, 100 candidates of
    /// `default_item_tokens` and as many user tokens as item tokens.
    pub fn mean(&self, default_item_tokens: f64) -> (f64, f64, f64) {
        let n = self.requests.load(Ordering::Relaxed);
        let c = self.candidates.load(Ordering::Relaxed);
        if n == 0 || c == 0 {
            let c = 100.0;
            return (c, c * default_item_tokens, default_item_tokens);
        }
        let (n, c) = (n as f64, c as f64);
        let u = self.user_tokens.load(Ordering::Relaxed) as f64;
        let i = self.item_tokens.load(Ordering::Relaxed) as f64;
        (c / n, u / n, i / c)
    }
}

/// Alg. 1's replicated share of accesses: `1 − R_max`, within [0, 1] (1 with one replica).
pub fn hot_share(costs: &Costs, shape: (f64, f64, f64), replicas: usize) -> f64 {
    if replicas < 2 {
        return 1.0;
    }
    let (c, u, i) = shape;
    (1.0 - costs.r_max(c, u, i, replicas)).clamp(0.0, 1.0)
}

#[cfg(test)]
#[path = "hrcs_tests.rs"]
mod tests;
