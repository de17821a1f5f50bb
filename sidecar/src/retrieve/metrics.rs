//! Retrieval metrics, registered into recache's `/metrics`: searches, engine calls and the
//! prompt tokens they sent and had cached, pruned beams and early stops, latency.

use prometheus::{Histogram, HistogramOpts, IntCounter};

use crate::metrics::Metrics;

pub struct RetrieveMetrics {
    pub searches: IntCounter,
    pub in_engine: IntCounter,
    pub engine_calls: IntCounter,
    pub prompt_tokens: IntCounter,
    pub cached_tokens: IntCounter,
    pub pruned_beams: IntCounter,
    pub stopped_early: IntCounter,
    pub latency: Histogram,
}

impl RetrieveMetrics {
    pub fn new(registry: &Metrics) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str| registry.add(IntCounter::new(name, help)?);
        let latency = registry.add(Histogram::with_opts(
            HistogramOpts::new(
                "retrieve_duration_seconds",
                "Time to answer a retrieval (every beam step's engine calls included)",
            )
            .buckets(prometheus::exponential_buckets(0.001, 2.0, 17)?),
        )?)?;
        Ok(Self {
            searches: counter("retrieve_searches_total", "Retrievals answered")?,
            in_engine: counter(
                "retrieve_in_engine_total",
                "Of those, searches run inside the engine (recache's vLLM endpoint plugin)",
            )?,
            engine_calls: counter(
                "retrieve_engine_calls_total",
                "Engine requests retrieval made (one per step; in the engine, one per beam and step)",
            )?,
            prompt_tokens: counter(
                "retrieve_prompt_tokens_total",
                "Prompt tokens of retrieval's scoring calls",
            )?,
            cached_tokens: counter(
                "retrieve_cached_tokens_total",
                "Of those, tokens the engine reported served from its prefix cache",
            )?,
            pruned_beams: counter(
                "retrieve_pruned_beams_total",
                "Beams dropped because they could not beat the k-th item already found",
            )?,
            stopped_early: counter(
                "retrieve_stopped_early_total",
                "Retrievals that ended before the deepest code level (no live beam could win)",
            )?,
            latency,
        })
    }
}
