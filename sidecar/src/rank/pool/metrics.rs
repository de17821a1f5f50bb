//! Item pool metrics, registered into recache's `/metrics` (prefixed `recache_`): recache's
//! residency (items by state), fills and evictions, and what the engine's connector reports
//! (its entries and bytes, tokens it loaded, items of requests it held).
//!
//! With several replicas each has its own pool ([`super::replicas`]); they share one
//! `PoolMetrics`, so counters add up and each gauge is the sum over the pools of what each
//! last set ([`PoolMetrics::set_counts`], [`PoolMetrics::observe_report`] take the pool's
//! index).

use std::sync::Mutex;

use prometheus::{Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};
use serde_json::Value;

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
    /// Tokens the fills computed (label + item each).
    pub fill_tokens: IntCounter,
    /// Refresh fills not started because the refresh rate's budget was spent.
    pub refills_deferred: IntCounter,
    /// The connector's cumulative seconds loading pooled K/V and capturing fills.
    pub engine_load_seconds: Gauge,
    pub engine_fill_seconds: Gauge,
    /// What each pool last reported, by pool index: the gauges are their sums.
    per_pool: Mutex<Vec<PerPool>>,
}

/// One pool's share of the gauges.
#[derive(Debug, Default, Clone, Copy)]
struct PerPool {
    resident: i64,
    pending: i64,
    engine_items: i64,
    engine_bytes: i64,
    load_s: f64,
    fill_s: f64,
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
            fill_tokens: IntCounter::new(
                "rank_pool_fill_tokens_total",
                "Prompt tokens the engine computed for pool fills (label + item each)",
            )?,
            refills_deferred: IntCounter::new(
                "rank_pool_refills_deferred_total",
                "Times wanted items were not filled because --rank-item-pool-refresh was spent",
            )?,
            engine_load_seconds: Gauge::new(
                "rank_pool_engine_load_seconds",
                "Seconds the engine's connector spent loading pooled K/V into requests (cumulative, as last reported)",
            )?,
            engine_fill_seconds: Gauge::new(
                "rank_pool_engine_fill_seconds",
                "Seconds the engine's connector spent capturing fills (cumulative, as last reported)",
            )?,
            per_pool: Mutex::new(Vec::new()),
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
        registry.register(Box::new(m.fill_tokens.clone()))?;
        registry.register(Box::new(m.refills_deferred.clone()))?;
        registry.register(Box::new(m.engine_load_seconds.clone()))?;
        registry.register(Box::new(m.engine_fill_seconds.clone()))?;
        Ok(m)
    }

    /// Pool `index`'s own figures, updated by `f`, then every gauge set to the sum over pools.
    fn update(&self, index: usize, f: impl FnOnce(&mut PerPool)) {
        let mut per = self.per_pool.lock().unwrap_or_else(|e| e.into_inner());
        if per.len() <= index {
            per.resize(index + 1, PerPool::default());
        }
        f(&mut per[index]);
        let sum = per.iter().fold(PerPool::default(), |a, p| PerPool {
            resident: a.resident + p.resident,
            pending: a.pending + p.pending,
            engine_items: a.engine_items + p.engine_items,
            engine_bytes: a.engine_bytes + p.engine_bytes,
            load_s: a.load_s + p.load_s,
            fill_s: a.fill_s + p.fill_s,
        });
        self.items
            .with_label_values(&["resident"])
            .set(sum.resident);
        self.items.with_label_values(&["pending"]).set(sum.pending);
        self.engine_items.set(sum.engine_items);
        self.engine_bytes.set(sum.engine_bytes);
        self.engine_load_seconds.set(sum.load_s);
        self.engine_fill_seconds.set(sum.fill_s);
    }

    /// Pool `index` holds `resident` items and waits on `pending` fills.
    pub fn set_counts(&self, index: usize, resident: usize, pending: usize) {
        self.update(index, |p| {
            p.resident = resident as i64;
            p.pending = pending as i64;
        });
    }

    /// Takes in the connector's report of one finished request on pool `index`'s engine.
    pub fn observe_report(&self, index: usize, report: &Value) {
        self.loaded_tokens
            .inc_by(report["loaded_tokens"].as_u64().unwrap_or(0));
        self.update(index, |p| {
            p.engine_bytes = report["bytes"].as_i64().unwrap_or(0);
            p.engine_items = report["entries"].as_i64().unwrap_or(0);
            // Cumulative and reported by requests finishing in any order: keep the largest.
            if let Some(v) = report["total_load_s"].as_f64() {
                p.load_s = p.load_s.max(v);
            }
            if let Some(v) = report["total_fill_s"].as_f64() {
                p.fill_s = p.fill_s.max(v);
            }
        });
    }
}
