//! Ranking metrics, registered into recache's `/metrics`: prefix decisions by kind and rule,
//! `/v1/rank` latency, and prompt tokens the engine reused from its cache per request.

use prometheus::{Counter, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts};

use crate::metrics::Metrics;

pub struct RankMetrics {
    pub decisions: IntCounterVec,
    pub latency: Histogram,
    pub reused_tokens: Histogram,
    pub prompt_tokens: IntCounter,
    pub cached_tokens: IntCounter,
    /// Seconds answered `/v1/rank` requests took in all, and of that, waiting for the
    /// engine's scoring answer: the difference is recache's own time.
    pub total_seconds: Counter,
    pub engine_seconds: Counter,
}

impl RankMetrics {
    pub fn new(registry: &Metrics) -> Result<Self, prometheus::Error> {
        let decisions = IntCounterVec::new(
            Opts::new(
                "rank_prefix_decisions_total",
                "Ranking prompts by prefix kind (user, item) and who chose it (selector name, or \
                 request for an explicit mode)",
            ),
            &["prefix", "rule"],
        )?;
        // 1 ms (cache hit on a tiny model) to ~65 s.
        let latency = Histogram::with_opts(
            HistogramOpts::new(
                "rank_duration_seconds",
                "Time to answer a /v1/rank request, tokenization and engine included",
            )
            .buckets(prometheus::exponential_buckets(0.001, 2.0, 17)?),
        )?;
        let reused_tokens = Histogram::with_opts(
            HistogramOpts::new(
                "rank_reused_tokens",
                "Prompt tokens the engine served from its prefix cache, per ranking request",
            )
            .buckets(prometheus::exponential_buckets(32.0, 2.0, 10)?),
        )?;
        let prompt_tokens = IntCounter::new(
            "rank_prompt_tokens_total",
            "Prompt tokens of ranking requests sent to the engine",
        )?;
        let cached_tokens = IntCounter::new(
            "rank_cached_tokens_total",
            "Prompt tokens of ranking requests the engine reported as cached",
        )?;
        let total_seconds = Counter::new(
            "rank_seconds_total",
            "Seconds answered /v1/rank requests took, arrival to answer",
        )?;
        let engine_seconds = Counter::new(
            "rank_engine_seconds_total",
            "Of rank_seconds_total, seconds waiting for the engine's scoring answer (the rest is recache's own work)",
        )?;
        crate::metrics::register! { registry;
            total_seconds, engine_seconds, decisions, latency, reused_tokens, prompt_tokens,
            cached_tokens,
        }
        Ok(Self {
            decisions,
            latency,
            reused_tokens,
            prompt_tokens,
            cached_tokens,
            total_seconds,
            engine_seconds,
        })
    }
}
