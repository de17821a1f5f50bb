//! The Prometheus registry behind `/metrics`: request counts and latency by route and status,
//! in-flight requests, upstream errors, per-upstream health and routing.
//!
//! Route labels are normalised ([`route_label`]) so arbitrary client paths cannot blow up the
//! label cardinality.

/// Registers a clone of each collector with `registry`, returning the first failure (`?`).
macro_rules! register {
    ($registry:expr; $($c:expr),+ $(,)?) => {
        $($registry.register(Box::new($c.clone()))?;)+
    };
}
pub(crate) use register;

use std::sync::OnceLock;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Every metric recache exports.
pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
    pub in_flight: IntGauge,
    pub upstream_errors: IntCounterVec,
    pub upstream_healthy: IntGaugeVec,
    pub upstream_in_flight: IntGaugeVec,
    pub upstream_routed: IntCounterVec,
    /// Time the routing rule took to pick a replica.
    pub route_decision: Histogram,
    /// Per-route handles resolved at start, so counting a request does no label lookup.
    routes: Vec<RouteHandles>,
}

/// One route's series, resolved on first use (so `/metrics` shows only series that were
/// counted) and kept; statuses outside [`COMMON_STATUSES`] go through the label lookup.
#[derive(Default)]
struct RouteHandles {
    duration: OnceLock<prometheus::Histogram>,
    by_status: [OnceLock<prometheus::IntCounter>; COMMON_STATUSES.len()],
}

/// Statuses whose counters are resolved up front.
const COMMON_STATUSES: [u16; 12] = [200, 400, 401, 403, 404, 405, 413, 429, 500, 502, 503, 504];

/// Routes that get their own label; everything else is `other`.
const KNOWN_ROUTES: &[&str] = &[
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/models",
    "/v1/rank",
    "/v1/retrieve",
    "/tokenize",
    "/detokenize",
    "/health",
    "/ready",
    "/metrics",
    "/admin/eviction-policy",
    "/admin/routing",
    "/admin/rank-pool-recompute",
];

/// The label a request path is counted under.
pub fn route_label(path: &str) -> &'static str {
    KNOWN_ROUTES
        .iter()
        .find(|r| **r == path)
        .copied()
        .unwrap_or("other")
}

fn route_index(route: &str) -> usize {
    KNOWN_ROUTES
        .iter()
        .position(|r| *r == route)
        .unwrap_or(KNOWN_ROUTES.len())
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("recache".into()), None)?;
        let requests = IntCounterVec::new(
            Opts::new(
                "requests_total",
                "Requests answered, by route and HTTP status",
            ),
            &["route", "status"],
        )?;
        // Buckets from 100 µs (proxy overhead) to 10 min (long generations).
        let buckets = prometheus::exponential_buckets(0.0001, 4.0, 11)?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "request_duration_seconds",
                "Time from request received to the last response byte sent, by route",
            )
            .buckets(buckets),
            &["route"],
        )?;
        let in_flight = IntGauge::new("in_flight_requests", "Requests being served now")?;
        let upstream_errors = IntCounterVec::new(
            Opts::new(
                "upstream_errors_total",
                "Upstream failures by upstream and kind (connect, timeout, failed, stream)",
            ),
            &["upstream", "kind"],
        )?;
        let upstream_healthy = IntGaugeVec::new(
            Opts::new(
                "upstream_healthy",
                "1 when the upstream is taken as healthy, else 0",
            ),
            &["upstream"],
        )?;
        let upstream_in_flight = IntGaugeVec::new(
            Opts::new(
                "upstream_in_flight_requests",
                "Outstanding requests per upstream",
            ),
            &["upstream"],
        )?;
        let upstream_routed = IntCounterVec::new(
            Opts::new(
                "upstream_routed_total",
                "Requests the routing rule sent to each upstream (each try counts)",
            ),
            &["upstream"],
        )?;
        // Sub-microsecond to a millisecond: the rule runs on every request.
        let route_decision = Histogram::with_opts(
            HistogramOpts::new(
                "route_decision_seconds",
                "Time the routing rule took to choose a replica",
            )
            .buckets(vec![
                0.25e-6, 0.5e-6, 1e-6, 1.5e-6, 2e-6, 3e-6, 4e-6, 5e-6, 7.5e-6, 10e-6, 15e-6, 20e-6,
                50e-6, 100e-6, 1e-3,
            ]),
        )?;
        register! { registry;
            upstream_routed, route_decision, requests, duration, in_flight, upstream_errors,
            upstream_healthy, upstream_in_flight,
        }
        Ok(Self {
            routes: (0..=KNOWN_ROUTES.len())
                .map(|_| RouteHandles::default())
                .collect(),
            registry,
            requests,
            duration,
            in_flight,
            upstream_errors,
            upstream_healthy,
            upstream_in_flight,
            upstream_routed,
            route_decision,
        })
    }

    /// Registers a metric owned by another module (e.g. the eviction policy gauges).
    pub fn register(
        &self,
        c: Box<dyn prometheus::core::Collector>,
    ) -> Result<(), prometheus::Error> {
        self.registry.register(c)
    }

    /// Registers a clone of `c` and hands `c` back.
    pub fn add<C>(&self, c: C) -> Result<C, prometheus::Error>
    where
        C: prometheus::core::Collector + Clone + 'static,
    {
        self.registry.register(Box::new(c.clone()))?;
        Ok(c)
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "failed to encode metrics");
        }
        out
    }

    /// Counts a finished request.
    pub fn observe(&self, route: &'static str, status: u16, seconds: f64) {
        let Some(h) = self.routes.get(route_index(route)) else {
            return;
        };
        h.duration
            .get_or_init(|| self.duration.with_label_values(&[route]))
            .observe(seconds);
        match COMMON_STATUSES.iter().position(|s| *s == status) {
            Some(i) => h.by_status[i]
                .get_or_init(|| {
                    self.requests
                        .with_label_values(&[route, status.to_string().as_str()])
                })
                .inc(),
            None => self
                .requests
                .with_label_values(&[route, status.to_string().as_str()])
                .inc(),
        }
    }
}

/// Counts one request from arrival until dropped: in-flight while alive, then its status and
/// duration. Proxied responses move it into their body so streaming time is included.
pub struct RequestRecord {
    metrics: std::sync::Arc<Metrics>,
    route: &'static str,
    status: u16,
    started: std::time::Instant,
}

impl RequestRecord {
    pub fn start(metrics: std::sync::Arc<Metrics>, route: &'static str) -> Self {
        metrics.in_flight.inc();
        Self {
            metrics,
            route,
            status: 0,
            started: std::time::Instant::now(),
        }
    }

    pub fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    pub fn metrics(&self) -> &std::sync::Arc<Metrics> {
        &self.metrics
    }
}

impl Drop for RequestRecord {
    fn drop(&mut self) {
        self.metrics.in_flight.dec();
        self.metrics.observe(
            self.route,
            self.status,
            self.started.elapsed().as_secs_f64(),
        );
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
