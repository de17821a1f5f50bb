//! One engine replica as the client sees it: its base URL, health (with the probe rule that
//! takes it out and back), outstanding requests, and its metric handles resolved once, so the
//! request path never looks a label up.
//!
//! State is atomics only: choosing a replica never takes a lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use std::time::Duration;

use http::uri::PathAndQuery;
use http::{HeaderValue, Uri};
use prometheus::{IntCounter, IntGauge};

use super::mirror::{MirrorMetricVecs, ReplicaMirror};
use super::pool::ConnPool;
use crate::metrics::Metrics;

/// Consecutive failed health probes (or timed-out connects) that take a replica out of
/// rotation. (A refused connection on a real request takes it out at once.)
pub const PROBE_FAILURES_TO_EJECT: u32 = 2;

/// Unanswered probes forgiven on top of those while calls are in flight (busy is not hung).
pub const BUSY_PROBE_GRACE: u32 = 4;

/// The replica's series of `recache_upstream_*`, looked up once at start.
#[derive(Debug, Clone)]
struct Gauges {
    healthy: IntGauge,
    in_flight: IntGauge,
    connect_errors: IntCounter,
    failed: IntCounter,
    timeouts: IntCounter,
    stream: IntCounter,
    server_error: IntCounter,
    routed: IntCounter,
}

/// Why a call to a replica failed, as counted in `recache_upstream_errors_total{kind}`.
#[derive(Debug, Clone, Copy)]
pub enum FailureKind {
    Connect,
    Failed,
    Timeout,
    /// The response body broke off mid-stream.
    Stream,
    /// A 5xx answer, sent once more to another replica.
    ServerError,
}

/// One engine replica.
#[derive(Debug)]
pub struct Replica {
    /// Base URL as configured (scheme, authority, optional path prefix).
    pub base: Uri,
    /// `host:port[/prefix]`, used as the metrics label and in error messages.
    pub label: String,
    prefix: String,
    in_flight: AtomicUsize,
    healthy: AtomicBool,
    answered: AtomicBool,
    probe_failures: AtomicU32,
    gauges: Option<Gauges>,
    /// Keep-alive connections to this replica.
    pub(crate) pool: Arc<ConnPool>,
    /// The `Host` header of requests to it.
    pub(crate) host: HeaderValue,
    /// What it caches, from its KV events, and how far that is trusted.
    pub mirror: ReplicaMirror,
    /// Its deadline gate: window, waiting calls, service-time model.
    pub slo: Arc<crate::slo::Gate>,
}

impl Replica {
    /// A replica without metrics (tests, benchmarks that only route).
    pub fn new(base: Uri) -> Self {
        Self::dialing(base, Duration::from_millis(500))
    }

    /// A replica dialed with `connect_timeout`, without metrics.
    pub fn dialing(base: Uri, connect_timeout: Duration) -> Self {
        let prefix = base.path().trim_end_matches('/').to_string();
        let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
        let port = base.port_u16().unwrap_or(80);
        let host_port = format!("{}:{port}", base.host().unwrap_or_default());
        Self {
            pool: ConnPool::new(host_port, connect_timeout),
            host: HeaderValue::from_str(authority).unwrap_or(HeaderValue::from_static("localhost")),
            label: format!("{authority}{prefix}"),
            base,
            prefix,
            in_flight: AtomicUsize::new(0),
            // Optimistic until the first probe: a request arriving before it should be tried.
            healthy: AtomicBool::new(true),
            answered: AtomicBool::new(false),
            probe_failures: AtomicU32::new(0),
            gauges: None,
            mirror: ReplicaMirror::default(),
            slo: crate::slo::Gate::new(None),
        }
    }

    /// A replica whose health, load and errors are exported through `metrics`.
    pub fn with_metrics(base: Uri, metrics: &Metrics, connect_timeout: Duration) -> Self {
        let mut r = Self::dialing(base, connect_timeout);
        let l = r.label.as_str();
        let errors = |kind: &str| metrics.upstream_errors.with_label_values(&[l, kind]);
        let gauges = Gauges {
            healthy: metrics.upstream_healthy.with_label_values(&[l]),
            in_flight: metrics.upstream_in_flight.with_label_values(&[l]),
            connect_errors: errors("connect"),
            failed: errors("failed"),
            timeouts: errors("timeout"),
            stream: errors("stream"),
            server_error: errors("server_error"),
            routed: metrics.upstream_routed.with_label_values(&[l]),
        };
        gauges.healthy.set(1);
        r.gauges = Some(gauges);
        r
    }

    /// Exports this replica's routing-mirror series through `vecs`.
    pub fn with_mirror_metrics(mut self, vecs: &MirrorMetricVecs) -> Self {
        self.mirror = ReplicaMirror::new(Some(vecs.for_upstream(&self.label)));
        self
    }

    /// The upstream URL for a client's path and query.
    pub fn uri_for(&self, pq: Option<&PathAndQuery>) -> Result<Uri, http::Error> {
        let pq = pq.map(|p| p.as_str()).unwrap_or("/");
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(if self.prefix.is_empty() {
            PathAndQuery::from_maybe_shared(bytes::Bytes::copy_from_slice(pq.as_bytes()))?
        } else {
            format!("{}{pq}", self.prefix).parse()?
        });
        Ok(Uri::from_parts(parts)?)
    }

    /// The origin-form target (`/prefix/path?query`) for a client's path and query, as an
    /// HTTP/1 request line to this replica carries it.
    pub fn origin_for<'a>(&self, pq: Option<&'a PathAndQuery>) -> std::borrow::Cow<'a, str> {
        let pq = pq.map(|p| p.as_str()).unwrap_or("/");
        if self.prefix.is_empty() {
            return pq.into();
        }
        format!("{}{pq}", self.prefix).into()
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// True once this replica has answered a probe or a request.
    pub fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Records a probe's outcome (or a call's: an answer, a timed-out connect). One failed
    /// probe is not enough to take a replica out (a busy engine can answer one probe late);
    /// [`PROBE_FAILURES_TO_EJECT`] + `grace` in a row are. Returns the health after it.
    pub fn record_probe(&self, ok: bool, grace: u32) -> bool {
        if ok {
            self.probe_failures.store(0, Ordering::Relaxed);
            self.set_healthy(true);
            return true;
        }
        let failures = self.probe_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= PROBE_FAILURES_TO_EJECT + grace {
            self.set_healthy(false);
        }
        self.is_healthy()
    }

    /// Records the outcome of a probe or request; returns true when health changed.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        if healthy {
            self.answered.store(true, Ordering::Relaxed);
        }
        let changed = self.healthy.swap(healthy, Ordering::Relaxed) != healthy;
        if changed && let Some(g) = &self.gauges {
            g.healthy.set(i64::from(healthy));
        }
        changed
    }

    /// Counts a request the routing rule sent here.
    pub fn count_routed(&self) {
        if let Some(g) = &self.gauges {
            g.routed.inc();
        }
    }

    /// Counts a failed call.
    pub fn count_failure(&self, kind: FailureKind) {
        if let Some(g) = &self.gauges {
            match kind {
                FailureKind::Connect => g.connect_errors.inc(),
                FailureKind::Failed => g.failed.inc(),
                FailureKind::Timeout => g.timeouts.inc(),
                FailureKind::Stream => g.stream.inc(),
                FailureKind::ServerError => g.server_error.inc(),
            }
        }
    }
}

/// Whether replica `i` may take a call now: healthy and not yet tried for it. What every
/// replica choice (routing rules, deadline dispatch, the client's re-send) filters by.
pub fn can_take(replicas: &[Arc<Replica>], tried: &[usize], i: usize) -> bool {
    !tried.contains(&i) && replicas[i].is_healthy()
}

/// Counts one outstanding request against a replica until dropped (when the response body has
/// been sent in full, or the client went away).
#[derive(Debug)]
pub struct InFlight {
    replica: Arc<Replica>,
    /// A deadline call's place in the replica's window, freed with this guard.
    permit: Option<crate::slo::Permit>,
}

impl InFlight {
    pub fn new(replica: Arc<Replica>) -> Self {
        replica.in_flight.fetch_add(1, Ordering::Relaxed);
        if let Some(g) = &replica.gauges {
            g.in_flight.inc();
        }
        Self {
            replica,
            permit: None,
        }
    }

    /// Holds a deadline call's place until the answer has been passed on.
    pub(crate) fn hold(&mut self, permit: Option<crate::slo::Permit>) {
        self.permit = permit;
    }

    /// The call never reached the engine: its place teaches the cost model nothing.
    pub(crate) fn not_served(&mut self) {
        if let Some(p) = self.permit.as_mut() {
            p.not_served();
        }
    }

    pub fn replica(&self) -> &Arc<Replica> {
        &self.replica
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.replica.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(g) = &self.replica.gauges {
            g.in_flight.dec();
        }
    }
}

#[cfg(test)]
#[path = "replica_tests.rs"]
mod tests;
