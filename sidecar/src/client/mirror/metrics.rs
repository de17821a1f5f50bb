//! Prometheus series of the per-replica routing mirrors: state, size, canary outcomes, and
//! cached tokens predicted (by the mirror or the rule's record) against delivered (the
//! engine's own report), all labelled by upstream.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use crate::metrics::Metrics;

use super::MirrorState;

/// The registered families (one set per process).
#[derive(Debug, Clone)]
pub struct MirrorMetricVecs {
    state: IntGaugeVec,
    blocks: IntGaugeVec,
    canary: IntCounterVec,
    predicted: IntCounterVec,
    delivered: IntCounterVec,
    silent_zero: IntGaugeVec,
    resyncs: IntCounterVec,
}

impl MirrorMetricVecs {
    pub fn new(registry: &Metrics) -> Result<Self, prometheus::Error> {
        let gv = |n: &str, h: &str, l: &[&str]| registry.add(IntGaugeVec::new(Opts::new(n, h), l)?);
        let cv =
            |n: &str, h: &str, l: &[&str]| registry.add(IntCounterVec::new(Opts::new(n, h), l)?);
        Ok(Self {
            state: gv(
                "route_mirror_state",
                "1 for the routing mirror's current state (exact, degraded, approximate) per upstream",
                &["upstream", "state"],
            )?,
            blocks: gv(
                "route_mirror_blocks",
                "Cached blocks the upstream's routing mirror holds (from its KV events)",
                &["upstream"],
            )?,
            canary: cv(
                "route_canary_total",
                "Canary checks of the routing mirror by outcome (agree, missed_events, silent_zero, evicted, \
                 unreported, failed)",
                &["upstream", "outcome"],
            )?,
            predicted: cv(
                "route_predicted_cached_tokens_total",
                "Prompt tokens predicted cached on the upstream (mirror, or the rule's record when \
                 not exact), on calls whose delivered count is known (canaries, recache's own calls)",
                &["upstream"],
            )?,
            delivered: cv(
                "route_delivered_cached_tokens_total",
                "Prompt tokens the upstream reported cached on the same calls",
                &["upstream"],
            )?,
            silent_zero: gv(
                "route_silent_zero",
                "1 while the upstream delivers no cached tokens although its mirror predicts some \
                 (the silent-0% condition), else 0",
                &["upstream"],
            )?,
            resyncs: cv(
                "route_mirror_resyncs_total",
                "Routing mirror resyncs by cause (gap_replayed, gap_cleared, restart, reconnect)",
                &["upstream", "reason"],
            )?,
        })
    }

    /// One upstream's handles.
    pub fn for_upstream(&self, upstream: &str) -> MirrorMetrics {
        MirrorMetrics {
            state: MirrorState::ALL.map(|s| self.state.with_label_values(&[upstream, s.name()])),
            blocks: self.blocks.with_label_values(&[upstream]),
            canary: self.canary.clone(),
            predicted: self.predicted.with_label_values(&[upstream]),
            delivered: self.delivered.with_label_values(&[upstream]),
            silent_zero: self.silent_zero.with_label_values(&[upstream]),
            resyncs: self.resyncs.clone(),
            upstream: upstream.to_string(),
        }
    }
}

/// One upstream's series.
#[derive(Debug, Clone)]
pub struct MirrorMetrics {
    state: [IntGauge; 3],
    pub blocks: IntGauge,
    canary: IntCounterVec,
    pub predicted: IntCounter,
    pub delivered: IntCounter,
    pub silent_zero: IntGauge,
    resyncs: IntCounterVec,
    upstream: String,
}

impl MirrorMetrics {
    pub fn state(&self, s: MirrorState) -> &IntGauge {
        &self.state[s as usize]
    }

    pub fn canary(&self, outcome: &str) {
        self.canary
            .with_label_values(&[&self.upstream, outcome])
            .inc();
    }

    pub fn resync(&self, reason: &str) {
        self.resyncs
            .with_label_values(&[&self.upstream, reason])
            .inc();
    }
}
