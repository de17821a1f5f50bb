//! Item pool metrics, registered into recache's `/metrics` (prefixed `recache_`): recache's
//! residency (items by state), fills and evictions, and what the engine's connector reports
//! (its entries and bytes, tokens it loaded, items of requests it held).

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use crate::metrics::Metrics;

pub struct PoolMetrics {
    pub items: IntGaugeVec,
    pub fills: IntCounterVec,
    pub evictions: IntCounterVec,
    pub engine_items: IntGauge,
    pub engine_bytes: IntGauge,
    pub loaded_tokens: IntCounter,
    pub requested_items: IntCounter,
    pub present_items: IntCounter,
    pub unreported: IntCounter,
}

impl PoolMetrics {
    pub fn new(registry: &Metrics) -> Result<Self, prometheus::Error> {
        let m = Self {
            items: IntGaugeVec::new(
                Opts::new(
                    "rank_pool_items",
                    "Items recache keeps in the engine's item KV pool, by state (resident, pending = fill in flight)",
                ),
                &["state"],
            )?,
            fills: IntCounterVec::new(
                Opts::new(
                    "rank_pool_fills_total",
                    "Item KV pool fills sent, by result (ok, error)",
                ),
                &["result"],
            )?,
            evictions: IntCounterVec::new(
                Opts::new(
                    "rank_pool_evictions_total",
                    "Items leaving the pool: hotness (recache evicted a colder item), engine (the connector no longer held it)",
                ),
                &["reason"],
            )?,
            engine_items: IntGauge::new(
                "rank_pool_engine_items",
                "Entries in the engine's pool, as its connector last reported",
            )?,
            engine_bytes: IntGauge::new(
                "rank_pool_engine_bytes",
                "Host bytes of the engine's pool, as its connector last reported",
            )?,
            loaded_tokens: IntCounter::new(
                "rank_pool_loaded_tokens_total",
                "Prompt tokens the connector loaded from the pool into ranking requests",
            )?,
            requested_items: IntCounter::new(
                "rank_pool_requested_items_total",
                "Items of item-first ranking prompts sent with pool segments",
            )?,
            present_items: IntCounter::new(
                "rank_pool_present_items_total",
                "Of those, items the engine's pool held when the request finished",
            )?,
            unreported: IntCounter::new(
                "rank_pool_unreported_total",
                "Scoring answers without the connector's report (engine started without the connector?)",
            )?,
        };
        registry.register(Box::new(m.items.clone()))?;
        registry.register(Box::new(m.fills.clone()))?;
        registry.register(Box::new(m.evictions.clone()))?;
        registry.register(Box::new(m.engine_items.clone()))?;
        registry.register(Box::new(m.engine_bytes.clone()))?;
        registry.register(Box::new(m.loaded_tokens.clone()))?;
        registry.register(Box::new(m.requested_items.clone()))?;
        registry.register(Box::new(m.present_items.clone()))?;
        registry.register(Box::new(m.unreported.clone()))?;
        Ok(m)
    }
}
