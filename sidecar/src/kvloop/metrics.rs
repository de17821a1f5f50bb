//! Prometheus metrics of the engine loop: event ingestion, resyncs, mirror size against the
//! engine's capacity, shadow hits and publishes, and what the engine's shim says of the order.

use std::time::Duration;

use prometheus::{CounterVec, Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

#[derive(Clone)]
pub struct LoopMetrics {
    pub batches: IntCounter,
    pub decode_errors: IntCounter,
    pub apply_issues: IntCounterVec,
    pub resyncs: IntCounterVec,
    pub mirror_blocks: IntGauge,
    pub engine_blocks: IntGauge,
    pub connected: IntGauge,
    pub arrivals: IntCounter,
    pub arrivals_dropped: IntCounter,
    pub publishes: IntCounter,
    pub publish_errors: IntCounter,
    pub victims: IntGauge,
    pub ranked: IntGauge,
    pub shadow_hit_blocks: IntCounter,
    pub shadow_blocks: IntCounter,
    /// What the engine's shim says (`super::shim_status`).
    pub shim_state: IntGaugeVec,
    pub shim_went_stale: IntGauge,
    pub shim_status_age: Gauge,
    /// The shim's own count of seconds spent steering the engine's allocations (its cost
    /// inside the engine, beside the loop's `busy`).
    pub shim_steer_seconds: Gauge,
    /// Seconds the loop's thread spent on each kind of work (`Phase`): what recache's
    /// steering costs on the machine it shares with the engine.
    pub busy_seconds: CounterVec,
    /// The active policy's own figures (`PolicyStats`), since it was built or swapped in.
    pub policy: PolicyGauges,
}

/// The active eviction policy's statistics as gauges (a swap starts a fresh policy, so
/// they are not counters). LARU's λ is 1 for policies without one.
#[derive(Clone)]
pub struct PolicyGauges {
    pub lambda: Gauge,
    pub lru_fallbacks: IntGauge,
    pub phases: IntGauge,
    pub prediction_induced_misses: IntGauge,
    pub guard_trips: IntGauge,
}

impl PolicyGauges {
    pub fn set(&self, s: &recache_eviction::policy::PolicyStats) {
        self.lambda.set(s.lambda.unwrap_or(1.0));
        self.lru_fallbacks.set(s.lru_fallbacks as i64);
        self.phases.set(s.phases as i64);
        self.prediction_induced_misses
            .set(s.prediction_induced_misses as i64);
        self.guard_trips.set(s.guard_trips as i64);
    }
}

/// What the loop's thread spends its time on, as `recache_kv_loop_busy_seconds_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Feeding prompts to the shadow cache (the policy's bookkeeping and predictions).
    Arrivals,
    /// Applying the engine's KV events to the mirror.
    Events,
    /// Answering the request path's cached-prefix queries.
    Queries,
    /// Ranking and writing the eviction order (and reading the shim's status).
    Publish,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Self::Arrivals, Self::Events, Self::Queries, Self::Publish];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Arrivals => "arrivals",
            Self::Events => "events",
            Self::Queries => "queries",
            Self::Publish => "publish",
        }
    }
}

impl LoopMetrics {
    /// Counts `d` of the loop thread's time against `phase`.
    pub fn busy(&self, phase: Phase, d: Duration) {
        self.busy_seconds
            .with_label_values(&[phase.as_str()])
            .inc_by(d.as_secs_f64());
    }

    pub fn new(m: &crate::metrics::Metrics) -> Result<Self, prometheus::Error> {
        let c = |n: &str, h: &str| m.add(IntCounter::new(n, h)?);
        let g = |n: &str, h: &str| m.add(IntGauge::new(n, h)?);
        let cv = |n: &str, h: &str, l: &str| m.add(IntCounterVec::new(Opts::new(n, h), &[l])?);
        Ok(Self {
            batches: c(
                "kv_events_batches_total",
                "KV event batches applied to the mirror",
            )?,
            decode_errors: c(
                "kv_events_decode_errors_total",
                "KV event messages that did not decode (logged, skipped)",
            )?,
            apply_issues: cv(
                "kv_mirror_apply_issues_total",
                "Events the mirror could not apply as meant, by kind",
                "kind",
            )?,
            resyncs: cv(
                "kv_mirror_resyncs_total",
                "Mirror resyncs by cause (gap_replayed, gap_cleared, restart, reconnect, cleared: the engine emptied its cache)",
                "reason",
            )?,
            mirror_blocks: g(
                "kv_mirror_blocks",
                "Blocks cached in the engine, per the mirror",
            )?,
            engine_blocks: g(
                "kv_engine_blocks",
                "The engine's KV cache capacity in blocks (as configured)",
            )?,
            connected: g(
                "kv_events_connected",
                "1 while subscribed to the engine's events",
            )?,
            arrivals: c(
                "kv_arrivals_total",
                "Token-id prompts fed to the shadow cache",
            )?,
            arrivals_dropped: c(
                "kv_arrivals_dropped_total",
                "Prompts not fed to the shadow because the loop was behind",
            )?,
            publishes: c("kv_order_publishes_total", "Eviction orders published")?,
            publish_errors: c("kv_order_publish_errors_total", "Failed order writes")?,
            victims: g(
                "kv_order_victims",
                "Blocks in the last published eviction order that the policy has evicted already",
            )?,
            ranked: g(
                "kv_order_ranked",
                "Blocks the policy keeps, listed after the victims in its eviction order",
            )?,
            shadow_hit_blocks: c(
                "kv_shadow_hit_blocks_total",
                "Prompt blocks the shadow cache (active policy) had cached",
            )?,
            shadow_blocks: c("kv_shadow_blocks_total", "Prompt blocks seen by the shadow")?,
            shim_state: m.add(IntGaugeVec::new(
                Opts::new(
                    "kv_shim_state",
                    "What the engine's shim last said of the published order (1 for the \
                         current state): absent, installed, fresh, stale (the engine's own \
                         eviction decided)",
                ),
                &["state"],
            )?)?,
            shim_went_stale: g(
                "kv_shim_went_stale",
                "Times the engine's shim found a fresh order gone stale (its own count)",
            )?,
            shim_status_age: m.add(Gauge::new(
                "kv_shim_status_age_seconds",
                "Seconds since the engine's shim wrote its status (it writes while it evicts)",
            )?)?,
            shim_steer_seconds: m.add(Gauge::new(
                "kv_shim_steer_seconds",
                "Seconds the engine's shim has spent steering allocations by the order (its \
                     own count, since the engine started; vLLM)",
            )?)?,
            busy_seconds: {
                let v = CounterVec::new(
                    Opts::new(
                        "kv_loop_busy_seconds_total",
                        "Seconds the engine loop's thread spent by phase: arrivals (the shadow \
                         cache and its policy), events (the mirror), queries, publish (ranking \
                         and writing the order); LightGBM trains on its own thread, not counted",
                    ),
                    &["phase"],
                )?;
                m.register(Box::new(v.clone()))?;
                for p in Phase::ALL {
                    v.with_label_values(&[p.as_str()]);
                }
                v
            },
            policy: PolicyGauges {
                lambda: m.add(Gauge::new(
                    "kv_policy_lambda",
                    "LARU's confidence in its predictor (lambda: 1 trusts it fully, halved \
                         after each run of prediction-induced misses; 1 for other policies)",
                )?)?,
                lru_fallbacks: g(
                    "kv_policy_lru_fallbacks",
                    "Victims the active policy chose by plain LRU for want of a usable prediction",
                )?,
                phases: g(
                    "kv_policy_phases",
                    "LARU phases started by the active policy",
                )?,
                prediction_induced_misses: g(
                    "kv_policy_prediction_induced_misses",
                    "Misses on blocks the active policy's predictions evicted earlier in the phase",
                )?,
                guard_trips: g(
                    "kv_policy_guard_trips",
                    "Times the active policy's guard stopped trusting predictions",
                )?,
            },
        })
    }
}
