//! The Prometheus registry behind `/metrics`: request counts and latency by route and status,
//! in-flight requests, upstream errors and per-upstream health.
//!
//! Route labels are normalised ([`route_label`]) so arbitrary client paths cannot blow up the
//! label cardinality.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
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
}

/// Routes that get their own label; everything else is `other`.
const KNOWN_ROUTES: &[&str] = &[
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/models",
    "/v1/rank",
    "/tokenize",
    "/detokenize",
    "/health",
    "/ready",
    "/metrics",
    "/admin/eviction-policy",
];

/// The label a request path is counted under.
pub fn route_label(path: &str) -> &'static str {
    KNOWN_ROUTES
        .iter()
        .find(|r| **r == path)
        .copied()
        .unwrap_or("other")
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
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(upstream_errors.clone()))?;
        registry.register(Box::new(upstream_healthy.clone()))?;
        registry.register(Box::new(upstream_in_flight.clone()))?;
        Ok(Self {
            registry,
            requests,
            duration,
            in_flight,
            upstream_errors,
            upstream_healthy,
            upstream_in_flight,
        })
    }

    /// Registers a metric owned by another module (e.g. the eviction policy gauges).
    pub fn register(
        &self,
        c: Box<dyn prometheus::core::Collector>,
    ) -> Result<(), prometheus::Error> {
        self.registry.register(c)
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
        self.requests
            .with_label_values(&[route, status.to_string().as_str()])
            .inc();
        self.duration.with_label_values(&[route]).observe(seconds);
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
mod tests {
    use super::*;

    #[test]
    fn normalises_routes_and_renders() {
        assert_eq!(route_label("/v1/completions"), "/v1/completions");
        assert_eq!(route_label("/some/random/path"), "other");
        let m = Metrics::new().expect("metrics");
        m.observe("/v1/models", 200, 0.001);
        let text = String::from_utf8(m.render()).expect("utf8");
        assert!(text.contains(r#"recache_requests_total{route="/v1/models",status="200"} 1"#));
    }
}
