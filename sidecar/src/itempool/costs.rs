//! The costs BAT's Alg. 1 weighs ([`super::hrcs`]), measured on the machine recache serves
//! rather than taken from another: the engine's prefill rate from the replicas' own counters,
//! the store's fetch rate from the connectors' store timings. `--rank-pool-costs`'
//! `prefill=` / `fetch=` still fix either; until a rate's first measurement, and through a
//! period with nothing to measure, the last rate in use stands (at first the constants).
//!
//! - Prefill: vLLM counts the prompt tokens it computed
//!   (`vllm:prompt_tokens_by_source_total{source="local_compute"}`) and each request's time
//!   from first scheduled to first token (`vllm:request_prefill_time_seconds_sum`). Their
//!   increments over a period, summed over the replicas, give prompt tokens per second of a
//!   request's prefill, batching with other requests included: what Alg. 1's `t` (a
//!   request's prefill time) is made of. SGLang has no prefill-time counter (its TTFT
//!   histogram counts the queue too), so with `--engine sglang` the constant stays.
//! - Fetch: every connector answer reports its cumulative store fetch seconds and the tokens
//!   its store reads delivered (`total_store_fetch_s`, `store_tokens_read`; kept per pool by
//!   [`super::metrics`]): tokens per second of waiting on the store, misses and timeouts
//!   included, which is what a request's cold items cost it.
//!
//! A task off the request path measures every [`MEASURE_EVERY`] (only with a store: Alg. 1
//! is not used without one) and republishes the rates in use ([`LiveCosts`], an `ArcSwap`);
//! every request's hot share reads them lock-free. The gauges
//! `recache_rank_pool_cost_{prefill,fetch}_tokens_per_s{source}` and `/ready`'s `store.costs`
//! show them and where they came from.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde_json::{Value, json};

use super::hrcs::{Costs, Given};
use super::replicas::Pools;
use crate::engine::EngineHandle;

/// How often recache measures.
pub const MEASURE_EVERY: Duration = Duration::from_secs(30);

/// Where a rate in use came from: "measured", "flag" (`--rank-pool-costs`) or "default".
pub type Source = &'static str;

/// The costs in use and where each rate came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InUse {
    pub costs: Costs,
    pub prefill: Source,
    pub fetch: Source,
}

/// Cumulative counters at one reading: tokens and the seconds they took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    pub tokens: f64,
    pub seconds: f64,
}

/// What was counted between two readings of the same counters; None when either went back
/// (the engine restarted: the later reading is then the new baseline).
pub fn delta(prev: Sample, now: Sample) -> Option<Sample> {
    let d = Sample {
        tokens: now.tokens - prev.tokens,
        seconds: now.seconds - prev.seconds,
    };
    (d.tokens >= 0.0 && d.seconds >= 0.0).then_some(d)
}

/// Tokens per second over `deltas` together; None when no time or no token was counted.
pub fn rate(deltas: impl IntoIterator<Item = Sample>) -> Option<f64> {
    let sum = (deltas.into_iter()).fold(Sample::default(), |a, d| Sample {
        tokens: a.tokens + d.tokens,
        seconds: a.seconds + d.seconds,
    });
    let r = sum.tokens / sum.seconds;
    (sum.tokens > 0.0 && sum.seconds > 0.0 && r.is_finite()).then_some(r)
}

/// The previous readings.
#[derive(Debug, Default)]
struct Last {
    prefill: Vec<Option<Sample>>,
    fetch: Option<Sample>,
}

/// The costs in use, republished as measurements come.
pub struct LiveCosts {
    in_use: ArcSwap<InUse>,
    given: Given,
    last: Mutex<Last>,
}

impl LiveCosts {
    /// Starts from `costs` (the flag's, defaults where it gave none); `given` says which
    /// rates the flag fixed: those are never measured over.
    pub fn new(costs: Costs, given: Given) -> Self {
        let source = |g| if g { "flag" } else { "default" };
        Self {
            in_use: ArcSwap::from_pointee(InUse {
                costs,
                prefill: source(given.prefill),
                fetch: source(given.fetch),
            }),
            given,
            last: Mutex::new(Last::default()),
        }
    }

    pub fn get(&self) -> Costs {
        self.in_use.load().costs
    }

    pub fn in_use(&self) -> InUse {
        **self.in_use.load()
    }

    /// Takes one reading per replica (None: not read); true when the prefill rate in use
    /// changed.
    pub fn observe_prefill(&self, now: &[Option<Sample>]) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.prefill.resize(now.len(), None);
        let deltas: Vec<Sample> = (last.prefill.iter().zip(now))
            .filter_map(|(p, n)| delta((*p)?, (*n)?))
            .collect();
        for (p, n) in last.prefill.iter_mut().zip(now) {
            // A replica not read this time keeps its last reading for the next.
            if n.is_some() {
                *p = *n;
            }
        }
        drop(last);
        match rate(deltas).filter(|_| !self.given.prefill) {
            Some(r) => self.set(|u| {
                u.costs.prefill_tokens_per_s = r;
                u.prefill = "measured";
            }),
            None => false,
        }
    }

    /// Takes the connectors' store reads so far; true when the fetch rate in use changed.
    pub fn observe_fetch(&self, now: Sample) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let d = last.fetch.and_then(|p| delta(p, now));
        last.fetch = Some(now);
        drop(last);
        match rate(d).filter(|_| !self.given.fetch) {
            Some(r) => self.set(|u| {
                u.costs.fetch_tokens_per_s = r;
                u.fetch = "measured";
            }),
            None => false,
        }
    }

    fn set(&self, f: impl Fn(&mut InUse)) -> bool {
        let mut next = self.in_use();
        f(&mut next);
        let changed = next != self.in_use();
        self.in_use.store(Arc::new(next));
        changed
    }

    /// `/ready`'s `store.costs`.
    pub fn detail(&self) -> Value {
        let u = self.in_use();
        json!({
            "prefill_tokens_per_s": u.costs.prefill_tokens_per_s, "prefill_source": u.prefill,
            "fetch_tokens_per_s": u.costs.fetch_tokens_per_s, "fetch_source": u.fetch,
            "alpha": u.costs.alpha,
        })
    }
}

/// One measurement: every replica's prefill counters (vLLM) and the pools' store reads;
/// then the gauges.
pub async fn measure(pools: &Pools, engine: &EngineHandle) {
    if engine.dialect == recache_adapters::Engine::Vllm {
        let mut now = Vec::new();
        for i in 0..engine.client.replicas().len() {
            now.push(match engine.client.text_to(i, "/metrics").await {
                Ok((status, text)) if status.is_success() => {
                    recache_adapters::vllm::prefill_counters(&text)
                        .map(|(tokens, seconds)| Sample { tokens, seconds })
                }
                Ok(_) | Err(_) => None,
            });
        }
        if pools.costs.observe_prefill(&now) {
            tracing::info!(costs = %pools.costs.detail(), "item pool: prefill rate measured");
        }
    }
    let (tokens, seconds) = pools.metrics.store_reads();
    if pools.costs.observe_fetch(Sample { tokens, seconds }) {
        tracing::info!(costs = %pools.costs.detail(), "item pool: store fetch rate measured");
    }
    let u = pools.costs.in_use();
    pools.metrics.set_costs(
        (u.costs.prefill_tokens_per_s, u.prefill),
        (u.costs.fetch_tokens_per_s, u.fetch),
    );
}

/// Measures every `every` in the background until the runtime stops; None without a store
/// (Alg. 1 then sizes nothing).
pub fn spawn(
    pools: Arc<Pools>,
    engine: Arc<EngineHandle>,
    every: Duration,
) -> Option<tokio::task::JoinHandle<()>> {
    if !pools.has_store() {
        return None;
    }
    if engine.dialect != recache_adapters::Engine::Vllm {
        tracing::info!(
            "item pool: SGLang has no prefill-time counter; Alg. 1 keeps the prefill rate of \
             --rank-pool-costs (or its default)"
        );
    }
    Some(tokio::spawn(async move {
        loop {
            measure(&pools, &engine).await;
            tokio::time::sleep(every).await;
        }
    }))
}

#[cfg(test)]
#[path = "costs_tests.rs"]
mod tests;
