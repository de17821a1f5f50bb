//! Prometheus series of deadline serving, labelled by upstream: each gate's window, queue and
//! cost model (its weights and how far off its predictions are), and what happened to the
//! calls with deadlines (admitted, refused on arrival or at their turn, demoted, finished on
//! time or late), plus load-aware dispatch's switches.

use prometheus::{Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use super::cost::CostModel;
use crate::metrics::Metrics;

const TERMS: [&str; 4] = [
    "intercept",
    "per_1k_uncached",
    "per_100_output",
    "per_in_flight",
];

/// The registered families (one set per process).
#[derive(Debug, Clone)]
pub struct SloMetricVecs {
    window: IntGaugeVec,
    waiting: IntGaugeVec,
    offered: GaugeVec,
    weight: GaugeVec,
    error: GaugeVec,
    calls: IntCounterVec,
    /// Dispatch moved a call off the routing rule's pick (by predicted completion).
    pub switches: IntCounter,
}

impl SloMetricVecs {
    pub fn new(registry: &Metrics) -> Result<Self, prometheus::Error> {
        let window = IntGaugeVec::new(
            Opts::new(
                "slo_window",
                "Calls with deadlines the upstream may have in flight at once (from its cost model)",
            ),
            &["upstream"],
        )?;
        let waiting = IntGaugeVec::new(
            Opts::new(
                "slo_waiting",
                "Calls with deadlines waiting in recache for a place",
            ),
            &["upstream"],
        )?;
        let offered = GaugeVec::new(
            Opts::new(
                "slo_offered_load",
                "Engine time the upstream's deadline calls brought in over the last 10 s per unit \
                 of time it serves (1: all it can serve; at or above 1 best-effort calls that \
                 would be late are refused instead of demoted)",
            ),
            &["upstream"],
        )?;
        let weight = GaugeVec::new(
            Opts::new(
                "slo_cost_weight_ms",
                "The upstream's fitted service-time model: ms per unit of each term \
                 (intercept, per 1k uncached prompt tokens, per 100 output tokens, per call in flight)",
            ),
            &["upstream", "term"],
        )?;
        let error = GaugeVec::new(
            Opts::new(
                "slo_cost_abs_error_ms",
                "Smoothed absolute error of the upstream's service-time predictions (ms)",
            ),
            &["upstream"],
        )?;
        let calls = IntCounterVec::new(
            Opts::new(
                "slo_calls_total",
                "Calls with deadlines by outcome: admitted, refused (on arrival), refused_late \
                 (at their turn), demoted (best effort, past deadline), on_time, late",
            ),
            &["upstream", "outcome"],
        )?;
        let switches = IntCounter::new(
            "slo_dispatch_switches_total",
            "Calls sent to another replica than the routing rule's pick because its predicted \
             completion was shorter by more than --slo-dispatch-threshold",
        )?;
        crate::metrics::register! { registry;
            window, waiting, offered, weight, error, calls, switches,
        }
        Ok(Self {
            window,
            waiting,
            offered,
            weight,
            error,
            calls,
            switches,
        })
    }

    /// One upstream's handles, looked up once.
    pub fn for_upstream(&self, upstream: &str) -> GateMetrics {
        let c = |o: &str| self.calls.with_label_values(&[upstream, o]);
        GateMetrics {
            window: self.window.with_label_values(&[upstream]),
            waiting: self.waiting.with_label_values(&[upstream]),
            offered: self.offered.with_label_values(&[upstream]),
            weights: TERMS.map(|t| self.weight.with_label_values(&[upstream, t])),
            error: self.error.with_label_values(&[upstream]),
            admitted: c("admitted"),
            refused: c("refused"),
            refused_late: c("refused_late"),
            demoted: c("demoted"),
            on_time: c("on_time"),
            late: c("late"),
        }
    }
}

/// One gate's series.
#[derive(Debug, Clone)]
pub struct GateMetrics {
    window: IntGauge,
    waiting: IntGauge,
    offered: Gauge,
    weights: [Gauge; 4],
    error: Gauge,
    admitted: IntCounter,
    refused: IntCounter,
    refused_late: IntCounter,
    demoted: IntCounter,
    on_time: IntCounter,
    late: IntCounter,
}

impl GateMetrics {
    pub(super) fn show(&self, model: &CostModel, window: usize, waiting: usize, offered: f64) {
        self.window.set(window as i64);
        self.waiting.set(waiting as i64);
        self.offered.set(offered);
        for (g, w) in self.weights.iter().zip(model.weights()) {
            g.set(w);
        }
        self.error.set(model.abs_error_ms());
    }

    pub(super) fn admitted(&self) {
        self.admitted.inc();
    }

    pub(super) fn refused(&self, late: bool) {
        if late {
            self.refused_late.inc();
        } else {
            self.refused.inc();
        }
    }

    pub(super) fn demoted(&self) {
        self.demoted.inc();
    }

    pub(super) fn finished(&self, on_time: bool) {
        if on_time {
            self.on_time.inc();
        } else {
            self.late.inc();
        }
    }
}
