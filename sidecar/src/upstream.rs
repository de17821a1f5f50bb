//! The replica set: each upstream's health and outstanding requests, and the choice of where a
//! request goes (fewest outstanding among healthy ones, ties broken round-robin).
//!
//! State is atomics only, so choosing an upstream never takes a lock on the request path.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use http::Uri;
use http::uri::PathAndQuery;

use crate::metrics::Metrics;

/// Consecutive failed health probes that take a replica out of rotation. (A refused
/// connection on a real request takes it out at once.)
pub const PROBE_FAILURES_TO_EJECT: u32 = 2;

/// One engine replica.
#[derive(Debug)]
pub struct Upstream {
    /// Base URL as configured (scheme, authority, optional path prefix).
    pub base: Uri,
    /// `host:port[/prefix]`, used as the metrics label and in error messages.
    pub label: String,
    prefix: String,
    in_flight: AtomicUsize,
    healthy: AtomicBool,
    answered: AtomicBool,
    probe_failures: AtomicU32,
}

impl Upstream {
    fn new(base: Uri) -> Self {
        let prefix = base.path().trim_end_matches('/').to_string();
        let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
        Self {
            label: format!("{authority}{prefix}"),
            base,
            prefix,
            in_flight: AtomicUsize::new(0),
            // Optimistic until the first probe: a request arriving before it should be tried.
            healthy: AtomicBool::new(true),
            answered: AtomicBool::new(false),
            probe_failures: AtomicU32::new(0),
        }
    }

    /// The upstream URL for a client's path and query.
    pub fn uri_for(&self, pq: Option<&PathAndQuery>) -> Result<Uri, http::Error> {
        let pq = pq.map(|p| p.as_str()).unwrap_or("/");
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(format!("{}{pq}", self.prefix).parse()?);
        Ok(Uri::from_parts(parts)?)
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// True once this upstream has answered a probe or a request.
    pub fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Records a probe's outcome. One failed probe is not enough to take a replica out (a busy
    /// engine can answer one probe late); [`PROBE_FAILURES_TO_EJECT`] in a row are. Returns
    /// the health after the probe.
    pub fn record_probe(&self, ok: bool) -> bool {
        if ok {
            self.probe_failures.store(0, Ordering::Relaxed);
            self.set_healthy(true);
            return true;
        }
        let failures = self.probe_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= PROBE_FAILURES_TO_EJECT {
            self.set_healthy(false);
        }
        self.is_healthy()
    }

    /// Records the outcome of a probe or request; returns true when health changed.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        if healthy {
            self.answered.store(true, Ordering::Relaxed);
        }
        self.healthy.swap(healthy, Ordering::Relaxed) != healthy
    }
}

/// All configured upstreams.
#[derive(Debug)]
pub struct Upstreams {
    list: Vec<Arc<Upstream>>,
    next: AtomicUsize,
}

impl Upstreams {
    pub fn new(bases: &[Uri]) -> Self {
        Self {
            list: bases
                .iter()
                .cloned()
                .map(|b| Arc::new(Upstream::new(b)))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    pub fn all(&self) -> &[Arc<Upstream>] {
        &self.list
    }

    /// Ready once some upstream is healthy and has answered at least once.
    pub fn ready(&self) -> bool {
        self.list.iter().any(|u| u.is_healthy() && u.has_answered())
    }

    /// The healthy upstream with the fewest outstanding requests, skipping those in `tried`
    /// (indices already attempted for this request).
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.list.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|i| (start + i) % n)
            .filter(|i| !tried.contains(i) && self.list[*i].is_healthy())
            .min_by_key(|i| self.list[*i].in_flight())
    }

    pub fn get(&self, index: usize) -> &Arc<Upstream> {
        &self.list[index]
    }
}

/// Counts one outstanding request against an upstream until dropped (when the response body
/// has been sent in full, or the client went away).
pub struct InFlight {
    upstream: Arc<Upstream>,
    metrics: Arc<Metrics>,
}

impl InFlight {
    pub fn new(upstream: Arc<Upstream>, metrics: Arc<Metrics>) -> Self {
        upstream.in_flight.fetch_add(1, Ordering::Relaxed);
        metrics
            .upstream_in_flight
            .with_label_values(&[upstream.label.as_str()])
            .inc();
        Self { upstream, metrics }
    }

    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.upstream.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.metrics
            .upstream_in_flight
            .with_label_values(&[self.upstream.label.as_str()])
            .dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(urls: &[&str]) -> Upstreams {
        Upstreams::new(
            &urls
                .iter()
                .map(|u| u.parse().expect("uri"))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn picks_fewest_outstanding_among_healthy() {
        let ups = set(&["http://a:1", "http://b:2", "http://c:3"]);
        let m = Arc::new(Metrics::new().expect("metrics"));
        let _a = InFlight::new(ups.get(0).clone(), m.clone());
        let _b = InFlight::new(ups.get(1).clone(), m.clone());
        assert_eq!(ups.pick(&[]), Some(2));
        ups.get(2).set_healthy(false);
        let picked = ups.pick(&[]).expect("one healthy");
        assert!(picked == 0 || picked == 1);
        assert_eq!(ups.pick(&[0, 1]), None);
    }

    #[test]
    fn one_late_probe_does_not_eject_two_in_a_row_do() {
        let ups = set(&["http://a:1"]);
        let a = ups.get(0);
        assert!(a.record_probe(false), "one failed probe keeps it in");
        assert!(!a.record_probe(false), "the second in a row takes it out");
        assert!(a.record_probe(true), "a good probe takes it back");
        assert!(a.record_probe(false));
    }

    #[test]
    fn spreads_ties_round_robin_and_keeps_prefixes() {
        let ups = set(&["http://a:1", "http://b:2/engine"]);
        let picks: Vec<_> = (0..4).filter_map(|_| ups.pick(&[])).collect();
        assert!(picks.contains(&0) && picks.contains(&1));
        let pq: PathAndQuery = "/v1/models?x=1".parse().expect("pq");
        assert_eq!(
            ups.get(1).uri_for(Some(&pq)).expect("uri").to_string(),
            "http://b:2/engine/v1/models?x=1"
        );
        assert_eq!(ups.get(1).label, "b:2/engine");
        assert!(!ups.ready());
        ups.get(0).set_healthy(true);
        assert!(ups.ready());
    }
}
