//! recache's own calls to an engine replica, made on no client's behalf: the routing canary
//! ([`super::mirror::canary`]) and the ranking label check (`crate::rank::startup`). Each is
//! counted per upstream (requests when sent, the prompt tokens they carried, the cached
//! tokens the engine reported, calls still in flight; the label check, routed like a
//! client's call, only once answered, when its replica is known) so that whoever reads the engines' own
//! counters (a benchmark's hit rate, an operator's dashboard) can take recache's checks out:
//! traffic a system adds to watch itself is no workload's.
//!
//! Item-pool fills and the quality guard's shadow scorings are not counted here: they are
//! work the pool and the guard cost, and their tokens stay in what the engine computed
//! (`recache_rank_pool_*`, `recache_rank_quality_tokens_total` report them apart).

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts};

use crate::metrics::Metrics;

/// The routing canary's calls.
pub const CANARY: &str = "canary";
/// The ranking label check's call (once per start).
pub const LABEL_CHECK: &str = "label_check";

/// The registered families (one set per process).
#[derive(Debug, Clone)]
pub struct OwnMetricVecs {
    requests: IntCounterVec,
    tokens: IntCounterVec,
    in_flight: IntGaugeVec,
}

impl OwnMetricVecs {
    pub fn new(registry: &Metrics) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "own_requests_total",
                "Requests recache sent the upstream on its own account, not a client's, by what \
                 sent them (canary, label_check); counted when sent",
            ),
            &["upstream", "what"],
        )?;
        let tokens = IntCounterVec::new(
            Opts::new(
                "own_tokens_total",
                "Prompt tokens of recache's own requests (kind=prompt, counted when sent) and \
                 the cached tokens the upstream reported for them (kind=cached)",
            ),
            &["upstream", "what", "kind"],
        )?;
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "own_in_flight",
                "recache's own requests to the upstream sent and not yet answered",
            ),
            &["upstream"],
        )?;
        crate::metrics::register! { registry;
            requests, tokens, in_flight,
        }
        Ok(Self {
            requests,
            tokens,
            in_flight,
        })
    }

    /// Counts one call to `upstream` by `what` with `prompt_tokens`, in flight until the
    /// returned handle is dropped.
    pub fn sent(&self, upstream: &str, what: &'static str, prompt_tokens: u64) -> OwnCall {
        self.requests.with_label_values(&[upstream, what]).inc();
        (self.tokens.with_label_values(&[upstream, what, "prompt"])).inc_by(prompt_tokens);
        let in_flight = self.in_flight.with_label_values(&[upstream]);
        in_flight.inc();
        OwnCall {
            cached: Some(self.tokens.with_label_values(&[upstream, what, "cached"])),
            in_flight: Some(in_flight),
        }
    }
}

/// One own call in flight; dropping it (answered or failed) ends it.
#[derive(Debug)]
pub struct OwnCall {
    cached: Option<prometheus::IntCounter>,
    in_flight: Option<IntGauge>,
}

impl OwnCall {
    /// A call nobody counts (no metrics registered).
    pub fn uncounted() -> Self {
        Self {
            cached: None,
            in_flight: None,
        }
    }

    /// The cached tokens the engine reported for this call.
    pub fn cached(&self, tokens: u64) {
        if let Some(c) = &self.cached {
            c.inc_by(tokens);
        }
    }
}

impl Drop for OwnCall {
    fn drop(&mut self) {
        if let Some(g) = &self.in_flight {
            g.dec();
        }
    }
}

#[cfg(test)]
#[path = "own_tests.rs"]
mod tests;
