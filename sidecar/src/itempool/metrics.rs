//! Item pool metrics, registered into recache's `/metrics` (prefixed `recache_`): recache's
//! residency (items by state), fills and evictions, and what the engine's connector reports
//! (its entries and bytes, tokens it loaded, items of requests it held).
//!
//! With several replicas each has its own pool ([`super::replicas`]); they share one
//! `PoolMetrics`, so counters add up and each gauge is the sum over the pools of what each
//! last set ([`PoolMetrics::set_counts`], [`PoolMetrics::observe_report`] take the pool's
//! index).

use std::sync::Mutex;

use prometheus::{Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};
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
    /// Items sent marked cold (another replica's pool holds them: read from the store).
    pub cold_items: IntCounter,
    /// The connectors' store reads by result and writes by result (cumulative, as reported).
    pub store_reads: IntGaugeVec,
    pub store_writes: IntGaugeVec,
    pub store_fetch_seconds: Gauge,
    pub store_bytes_read: IntGauge,
    /// The rates BAT's Alg. 1 uses (`super::costs`), by source (measured, flag, default).
    pub cost_prefill: GaugeVec,
    pub cost_fetch: GaugeVec,
    /// The share of item accesses every replica's pool replicates (`gr:pool_hot_share`, or
    /// BAT's Alg. 1 with a store), as last used.
    pub hot_share: Gauge,
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
    /// Store reads: hit, miss, mismatch, timeout, error; writes: ok, failed.
    reads: [i64; 5],
    writes: [i64; 2],
    fetch_s: f64,
    bytes_read: i64,
    /// Tokens the store reads delivered (`store_tokens_read`; 0 from connectors before it).
    tokens_read: i64,
}

/// The report fields of the store's counters, in [`PerPool`]'s order, and their labels.
/// The connector's `store_misses` counts every failed read; `miss` is what the other kinds
/// leave of it (no entry).
const READS: [(&str, &str); 5] = [
    ("store_hits", "hit"),
    ("store_misses", "miss"),
    ("store_mismatches", "mismatch"),
    ("store_timeouts", "timeout"),
    ("store_errors", "error"),
];
const WRITES: [(&str, &str); 2] = [("store_puts", "ok"), ("store_put_failures", "failed")];

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
            cold_items: IntCounter::new(
                "rank_pool_cold_items_total",
                "Items of ranking prompts sent marked cold: another replica's pool holds them, the engine reads them from the store (--rank-pool-store)",
            )?,
            store_reads: IntGaugeVec::new(
                Opts::new(
                    "rank_pool_store_reads",
                    "The connectors' reads of cold items from the store, by result (hit; miss, mismatch, timeout, error: computed instead), cumulative as last reported",
                ),
                &["result"],
            )?,
            store_writes: IntGaugeVec::new(
                Opts::new(
                    "rank_pool_store_writes",
                    "The connectors' write-through of fills to the store, by result (ok, failed), cumulative as last reported",
                ),
                &["result"],
            )?,
            store_fetch_seconds: Gauge::new(
                "rank_pool_store_fetch_seconds",
                "Seconds the connectors spent waiting on store reads (cumulative, as last reported)",
            )?,
            store_bytes_read: IntGauge::new(
                "rank_pool_store_bytes_read",
                "Bytes the connectors read from the store (cumulative, as last reported)",
            )?,
            cost_prefill: GaugeVec::new(
                Opts::new(
                    "rank_pool_cost_prefill_tokens_per_s",
                    "Engine prefill rate BAT's Alg. 1 uses for the replicated share, by source (measured from the engines' counters, flag: --rank-pool-costs, default)",
                ),
                &["source"],
            )?,
            cost_fetch: GaugeVec::new(
                Opts::new(
                    "rank_pool_cost_fetch_tokens_per_s",
                    "Store fetch rate BAT's Alg. 1 uses for the replicated share, by source (measured from the connectors' store timings, flag: --rank-pool-costs, default)",
                ),
                &["source"],
            )?,
            hot_share: Gauge::new(
                "rank_pool_hot_share",
                "Share of item accesses whose items every replica's pool holds (the rest pooled once and, with a store, read from it elsewhere), as last used",
            )?,
            per_pool: Mutex::new(Vec::new()),
        };
        crate::metrics::register! { registry;
            m.items, m.fills, m.evictions, m.engine_items, m.engine_bytes, m.loaded_tokens,
            m.requested_items, m.present_items, m.unreported, m.fill_tokens, m.refills_deferred,
            m.engine_load_seconds, m.engine_fill_seconds, m.cold_items, m.store_reads,
            m.store_writes, m.store_fetch_seconds, m.store_bytes_read, m.cost_prefill,
            m.cost_fetch, m.hot_share,
        }
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
            reads: std::array::from_fn(|i| a.reads[i] + p.reads[i]),
            writes: std::array::from_fn(|i| a.writes[i] + p.writes[i]),
            fetch_s: a.fetch_s + p.fetch_s,
            bytes_read: a.bytes_read + p.bytes_read,
            tokens_read: a.tokens_read + p.tokens_read,
        });
        self.items
            .with_label_values(&["resident"])
            .set(sum.resident);
        self.items.with_label_values(&["pending"]).set(sum.pending);
        self.engine_items.set(sum.engine_items);
        self.engine_bytes.set(sum.engine_bytes);
        self.engine_load_seconds.set(sum.load_s);
        self.engine_fill_seconds.set(sum.fill_s);
        for (i, (_, label)) in READS.iter().enumerate() {
            self.store_reads
                .with_label_values(&[label])
                .set(sum.reads[i]);
        }
        for (i, (_, label)) in WRITES.iter().enumerate() {
            self.store_writes
                .with_label_values(&[label])
                .set(sum.writes[i]);
        }
        self.store_fetch_seconds.set(sum.fetch_s);
        self.store_bytes_read.set(sum.bytes_read);
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
            // The store's counters (present when the engine's connector has a store).
            let count = |field: &str| report[field].as_i64();
            let mut reads: [i64; 5] = READS.map(|(field, _)| count(field).unwrap_or(0));
            reads[1] -= reads[2] + reads[3] + reads[4];
            for (i, r) in reads.into_iter().enumerate() {
                p.reads[i] = p.reads[i].max(r);
            }
            for (i, (field, _)) in WRITES.iter().enumerate() {
                p.writes[i] = p.writes[i].max(count(field).unwrap_or(0));
            }
            p.bytes_read = p.bytes_read.max(count("store_bytes_read").unwrap_or(0));
            p.tokens_read = p.tokens_read.max(count("store_tokens_read").unwrap_or(0));
            if let Some(v) = report["total_store_fetch_s"].as_f64() {
                p.fetch_s = p.fetch_s.max(v);
            }
        });
    }

    /// The store reads of every pool so far: tokens delivered and seconds spent fetching
    /// (cumulative, as the connectors last reported).
    pub fn store_reads(&self) -> (f64, f64) {
        let per = self.per_pool.lock().unwrap_or_else(|e| e.into_inner());
        let tokens = per.iter().map(|p| p.tokens_read).sum::<i64>() as f64;
        (tokens, per.iter().map(|p| p.fetch_s).sum())
    }

    /// Shows the rates in use: one series per rate, labelled by where it came from.
    pub fn set_costs(&self, prefill: (f64, &str), fetch: (f64, &str)) {
        for (g, (v, source)) in [(&self.cost_prefill, prefill), (&self.cost_fetch, fetch)] {
            g.reset();
            g.with_label_values(&[source]).set(v);
        }
    }
}
