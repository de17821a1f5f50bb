//! The one engine client. Every call recache makes to an engine replica goes through
//! [`EngineClient`]: proxied requests, ranking and tokenising, item-pool fills, the label
//! check and health probes. It owns
//!
//! - the replica set ([`replica`]: health, outstanding requests, their gauges) and each
//!   replica's keep-alive connections ([`pool`]),
//! - where a request goes ([`route`]: the [`route::ReplicaChoice`] rule — the one place) and
//!   what each replica caches ([`mirror`]: per-replica KV-event mirrors, checked by canaries),
//! - the retry executor: a call that cannot connect is retried on another replica while the
//!   caller has waited under [`RETRY_BUDGET`] (a timed-out connect, when no other replica can
//!   take it, on the same one once, whatever the budget says); a call whose replica failed
//!   before answering (closed the connection: it died mid-request) or answered with a server
//!   error (5xx: a dying or overloaded engine) is sent once more, to another healthy replica,
//!   and that replica's answer is the one passed on (the first 5xx when there is none);
//!   timeouts are not retried (the engine is still working on it),
//! - deadlines: a generation call made for a request with a deadline waits for a place in its
//!   replica's window or is refused ([`crate::slo`]), and the replica is chosen by the rule
//!   composed with predicted completion times ([`crate::slo::dispatch`]),
//! - timeouts, health probing ([`health`]) and one typed error ([`error::ClientError`]),
//! - the count of recache's own calls (canaries, the label check), kept apart from clients'
//!   ([`own`]).

mod deadline;
pub mod error;
pub mod h1;
mod headers;
pub mod health;
mod json;
pub mod mirror;
pub mod own;
mod pinned;
pub mod pool;
pub mod replica;
pub mod route;

use json::{json_or_error, json_request};

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HeaderMap;
use http::uri::PathAndQuery;
use http::{Method, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use serde_json::Value;

pub use self::error::ClientError;
use self::headers::pass_on;
pub use self::headers::{is_hop_by_hop, strip_hop_by_hop};
use self::pool::{Call, SendError};
use self::replica::{FailureKind, InFlight, Replica};
use self::route::{RouteHint, RouteKeys, RouteSlot, Routing};
use crate::metrics::Metrics;
use crate::slo::{self, Demand};

/// Connect failures are retried on other replicas only while the caller has waited less than
/// this: the contract is a 503 within a second when no replica can be reached.
pub const RETRY_BUDGET: Duration = Duration::from_secs(1);

/// How the client talks to replicas.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    pub connect_timeout: Duration,
    /// No response headers within this long: 504.
    pub upstream_timeout: Duration,
    pub health_interval: Duration,
    /// The engine's health route (`recache_adapters::Engine::health_path`).
    pub health_path: &'static str,
    pub routing: Routing,
    /// The engine's dialect: which body field carries a token prompt (route keys of the
    /// calls recache makes itself, e.g. ranking prompts).
    pub engine: recache_adapters::Engine,
    /// Deadline serving (`--slo`).
    pub slo: crate::slo::SloSettings,
}

/// A request to send to some replica.
#[derive(Debug)]
pub struct Outgoing<'a> {
    pub method: Method,
    /// Path and query as the client of recache sent them (the replica's prefix is added).
    pub path: Option<&'a PathAndQuery>,
    /// Headers to pass on; hop-by-hop ones, `host` and `content-length` are dropped.
    pub headers: HeaderMap,
    pub body: Bytes,
    pub hint: RouteHint<'a>,
    /// What the call asks of the engine (prompt tokens, output tokens): the deadline gate's
    /// cost input. Zero when unknown.
    pub demand: Demand,
}

/// A replica's answer: its response, and the guard that counts it outstanding until the body
/// has been passed on.
#[derive(Debug)]
pub struct Answer {
    pub response: Response<h1::AnswerBody>,
    pub in_flight: InFlight,
}

/// A replica's JSON answer, any status.
#[derive(Debug)]
pub struct JsonAnswer {
    pub status: StatusCode,
    /// The body; an `{"error": {...}}` object carrying the text when it was not JSON.
    pub value: Value,
    /// Index of the replica that answered.
    pub replica: Option<usize>,
}

/// The replica set and everything about calling it.
#[derive(Debug)]
pub struct EngineClient {
    replicas: Vec<Arc<Replica>>,
    /// The routing rule, swapped whole by [`Self::set_routing`] (admin API) off the request
    /// path.
    route: arc_swap::ArcSwap<RouteSlot>,
    decision: prometheus::Histogram,
    /// Dispatch moved a call off the rule's pick (None without metrics).
    slo_switches: Option<prometheus::IntCounter>,
    /// recache's own calls, counted apart from clients' ([`own`]; None without metrics).
    own: Option<own::OwnMetricVecs>,
    /// Index of each replica that comes back into rotation ([`Self::returns`]): what other
    /// parts keep per replica (the rank item pools) may have restarted empty.
    returned: tokio::sync::broadcast::Sender<usize>,
    pub settings: ClientSettings,
}

impl EngineClient {
    /// A client for `upstreams`, exporting replica health and load through `metrics`.
    pub fn new(upstreams: &[Uri], settings: ClientSettings, metrics: &Metrics) -> Arc<Self> {
        let mirror_metrics = mirror::MirrorMetricVecs::new(metrics)
            .map_err(|e| tracing::error!(error = %e, "routing mirror metrics not registered"))
            .ok();
        let slo_metrics = slo::metrics::SloMetricVecs::new(metrics)
            .map_err(|e| tracing::error!(error = %e, "deadline metrics not registered"))
            .ok();
        let own = own::OwnMetricVecs::new(metrics)
            .map_err(|e| tracing::error!(error = %e, "own-traffic metrics not registered"))
            .ok();
        let replicas = upstreams
            .iter()
            .map(|u| {
                let mut r = Replica::with_metrics(u.clone(), metrics, settings.connect_timeout);
                if let Some(vecs) = &mirror_metrics {
                    r = r.with_mirror_metrics(vecs);
                }
                if let Some(vecs) = &slo_metrics {
                    r.slo = slo::Gate::new(Some(vecs.for_upstream(&r.label)));
                }
                Arc::new(r)
            })
            .collect();
        Arc::new(Self {
            replicas,
            route: arc_swap::ArcSwap::from_pointee(RouteSlot::new(settings.routing)),
            decision: metrics.route_decision.clone(),
            slo_switches: slo_metrics.map(|v| v.switches),
            own,
            returned: tokio::sync::broadcast::channel(64).0,
            settings,
        })
    }

    pub fn replicas(&self) -> &[Arc<Replica>] {
        &self.replicas
    }

    /// Counts a call recache makes on its own account (`what`: [`own::CANARY`], ...) to
    /// replica `index` with `prompt_tokens`; in flight until the handle drops.
    pub fn own_call(&self, index: usize, what: &'static str, prompt_tokens: u64) -> own::OwnCall {
        match (&self.own, self.replicas.get(index)) {
            (Some(vecs), Some(r)) => vecs.sent(&r.label, what, prompt_tokens),
            _ => own::OwnCall::uncounted(),
        }
    }

    /// The routing rule in use.
    pub fn routing(&self) -> Routing {
        self.route.load().routing
    }

    /// Replaces the routing rule (a fresh one: what the old rule remembered is dropped).
    pub fn set_routing(&self, routing: Routing) {
        self.route.store(Arc::new(RouteSlot::new(routing)));
    }

    /// Whether the rule in use reads route keys (so the pipeline computes them). Never with
    /// one replica: there is nothing to choose.
    pub fn wants_keys(&self) -> bool {
        self.replicas.len() > 1 && self.route.load().rule.wants_keys()
    }

    /// A replica came back after being out of rotation: the routing rule forgets it, and
    /// [`Self::returns`] subscribers hear its index.
    pub fn replica_returned(&self, replica: &Arc<Replica>) {
        if let Some(i) = self.replicas.iter().position(|r| Arc::ptr_eq(r, replica)) {
            self.route.load().rule.forget(i);
            // No subscriber is not an error: nothing else keeps per-replica state then.
            let _ = self.returned.send(i);
        }
    }

    /// Indices of replicas as they come back into rotation (after failed probes or calls).
    pub fn returns(&self) -> tokio::sync::broadcast::Receiver<usize> {
        self.returned.subscribe()
    }

    /// Per replica, for `/ready`'s detail: health, outstanding requests, and its routing
    /// mirror's state with the reason.
    pub fn replica_detail(&self) -> Vec<Value> {
        self.replicas
            .iter()
            .map(|r| {
                serde_json::json!({
                    "upstream": r.label,
                    "healthy": r.is_healthy(),
                    "in_flight": r.in_flight(),
                    "mirror": r.mirror.state().name(),
                    "mirror_why": r.mirror.why(),
                    "silent_zero": r.mirror.silent_zero(),
                })
            })
            .collect()
    }

    /// Ready once some replica is healthy and has answered at least once.
    pub fn ready(&self) -> bool {
        self.replicas
            .iter()
            .any(|r| r.is_healthy() && r.has_answered())
    }

    /// The replica the routing rule picks for `hint` now (None: none is healthy), for a
    /// caller that must know it before it builds the request (a ranking prompt built for one
    /// replica's item pool); send the request with that index in [`route::GrHint::replica`].
    pub fn pick(&self, hint: &RouteHint<'_>) -> Option<usize> {
        let t0 = Instant::now();
        let chosen = self.route.load().rule.choose(&self.replicas, &[], hint);
        self.decision.observe(t0.elapsed().as_secs_f64());
        chosen
    }

    /// Sends `out` to the replica the routing rule picks (or the one its GR hint names, on
    /// the first try, while healthy), moving on to the next one when the connection fails
    /// (within [`RETRY_BUDGET`]) or, once, when the replica failed before answering or
    /// answered a server error.
    pub async fn send(&self, out: Outgoing<'_>) -> Result<Answer, ClientError> {
        let started = Instant::now();
        let headers = pass_on(out.headers);
        let mut tried = Vec::new();
        let mut last_error = ClientError::NoHealthyUpstream;
        let mut resent_after_failure = false;
        // A replica whose connect timed out is dialed once more when no other can take the call.
        let mut dialed_again = false;
        // A 5xx answer held while the call is sent once more (see `Ok` below).
        let mut server_error: Option<Answer> = None;
        let slot = self.route.load_full();
        let deadline = slo::current()
            .filter(|_| self.settings.slo.enabled && slo::is_generation(out.hint.path));
        // A prompt built for one replica goes there while it is healthy: the rule already
        // chose it (and deadline dispatch is not asked to move it).
        let pinned = (out.hint.gr.and_then(|g| g.replica))
            .filter(|&i| self.replicas.get(i).is_some_and(|r| r.is_healthy()));
        loop {
            let t0 = Instant::now();
            let first_pin = pinned.filter(|_| tried.is_empty());
            let mut chosen = match first_pin {
                Some(i) => Some(i),
                None => slot.rule.choose(&self.replicas, &tried, &out.hint),
            };
            if let (Some(pick), Some(_), None) = (chosen, deadline, pinned) {
                chosen = Some(self.dispatch(pick, &tried, out.demand, &out.hint));
            }
            if first_pin.is_none() {
                // A pinned call's decision was timed when it was picked.
                self.decision.observe(t0.elapsed().as_secs_f64());
            }
            let Some(index) = chosen else { break };
            tried.push(index);
            let replica = &self.replicas[index];
            // A deadline call waits for its place here, before anything is counted against
            // the replica, or is refused.
            let permit = match deadline {
                Some(d) => Some(deadline::admit(replica, d, out.demand, &out.hint).await?),
                None => None,
            };
            replica.count_routed();
            let mut in_flight = InFlight::new(replica.clone());
            in_flight.hold(permit);
            let target = replica.origin_for(out.path);
            let call = Call {
                method: &out.method,
                target: &target,
                headers: &headers,
                body: &out.body,
            };
            let sent = (replica.pool)
                .send(&call, &replica.host, self.settings.upstream_timeout)
                .await;
            let label = replica.label.as_str();
            match sent {
                Ok(response) => {
                    // An answer ends a run of failed probes or timed-out connects.
                    replica.record_probe(true, 0);
                    let answer = Answer {
                        response,
                        in_flight,
                    };
                    let status = answer.response.status();
                    // A 5xx is the engine failing, not the request (vLLM and SGLang answer
                    // bad input with 4xx): nothing has reached the caller yet, so it gets the
                    // same single re-send as a replica that died. The 5xx is kept and passed
                    // on if no other replica can take the call.
                    if !status.is_server_error()
                        || resent_after_failure
                        || !self.another_healthy(&tried)
                    {
                        return Ok(answer);
                    }
                    replica.count_failure(FailureKind::ServerError);
                    tracing::warn!(upstream = label, %status, "upstream answered a server error, sending once more elsewhere");
                    resent_after_failure = true;
                    server_error = Some(answer);
                }
                Err(SendError::Dial(source)) => {
                    in_flight.not_served();
                    replica.count_failure(FailureKind::Connect);
                    // A refused connection means nothing listens there: out at once. A connect
                    // that timed out may be a starved host under load (a burst dials dozens of
                    // connections at once): when no other replica can take the call, it counts
                    // as a failed probe (two in a row take the replica out) and the replica is
                    // dialed once more; otherwise the call moves on and the replica goes out.
                    let timed_out = matches!(source, pool::DialError::Timeout(_));
                    let again = timed_out
                        && !dialed_again
                        && !self.another_healthy(&tried)
                        && replica.record_probe(false, 0);
                    if again {
                        tracing::warn!(upstream = label, error = %source, "connect timed out, dialing once more");
                        tried.retain(|&i| i != index);
                        dialed_again = true;
                    } else {
                        tracing::warn!(upstream = label, error = %source, "connect failed, taking upstream out");
                        replica.set_healthy(false);
                    }
                    last_error = ClientError::Connect {
                        upstream: replica.label.clone(),
                        source,
                    };
                    // The one dial more after a timed-out connect is not cut by the budget:
                    // with the default timeout (half the budget) the first one already spent
                    // half of it, and the once-only flag bounds the call at two timeouts.
                    if !again && started.elapsed() + self.settings.connect_timeout > RETRY_BUDGET {
                        break;
                    }
                }
                Err(SendError::Failed(source)) => {
                    replica.count_failure(FailureKind::Failed);
                    tracing::warn!(upstream = label, error = %source, "upstream failed before answering");
                    let failed = ClientError::Failed {
                        upstream: replica.label.clone(),
                        source,
                    };
                    // Nothing of the answer has reached the caller: a replica that dies
                    // mid-request has no answer to give, so the call goes once to another
                    // replica (the work may run twice; an engine call has no side effect
                    // but compute). Once only: a request that breaks every engine must not
                    // go round them all.
                    if resent_after_failure {
                        return server_error.ok_or(failed);
                    }
                    resent_after_failure = true;
                    last_error = failed;
                }
                Err(SendError::Timeout) => {
                    replica.count_failure(FailureKind::Timeout);
                    return server_error.ok_or(ClientError::Timeout {
                        upstream: replica.label.clone(),
                        after: self.settings.upstream_timeout,
                    });
                }
            }
        }
        server_error.ok_or(last_error)
    }

    /// Whether a healthy replica outside `tried` could take a call that is sent again.
    fn another_healthy(&self, tried: &[usize]) -> bool {
        (0..self.replicas.len()).any(|i| replica::can_take(&self.replicas, tried, i))
    }

    /// Sends a JSON body (or none) to `path` and reads the whole answer as JSON.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<JsonAnswer, ClientError> {
        self.json_routed(method, path, body, None).await
    }

    /// [`Self::json`] for a GR ranking prompt: the routing rule also sees its sides.
    pub async fn json_routed(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        gr: Option<&route::GrHint>,
    ) -> Result<JsonAnswer, ClientError> {
        let pq: Option<PathAndQuery> = path.parse().ok();
        // With --slo-engine-priority a deadline call carries its deadline as `priority`.
        let stamped = body
            .and_then(Value::as_object)
            .filter(|_| self.settings.slo.engine_priority)
            .and_then(|obj| {
                let mut obj = obj.clone();
                slo::stamp_priority(&self.settings.slo, path, &mut obj)
                    .then_some(Value::Object(obj))
            });
        let body_value = stamped.as_ref().or(body);
        let (headers, body) = json_request(body_value);
        // recache's own prompts (ranking) route by their prefix too when the rule asks.
        let keys = match (
            self.wants_keys(),
            self.settings.engine.token_prompt_field(path),
        ) {
            (true, Some(field)) => body_value
                .and_then(|v| v.get(field))
                .map(|p| RouteKeys::from_tokens(&recache_adapters::openai::token_prompts(p)))
                .unwrap_or_default(),
            _ => RouteKeys::default(),
        };
        // Each exact mirror's prediction, taken before the call stores its own blocks, to
        // set against what the chosen engine reports.
        let predicted: Vec<Option<usize>> = if keys.keys.is_empty() {
            Vec::new()
        } else {
            self.replicas
                .iter()
                .map(|r| {
                    r.mirror
                        .exact()
                        .map(|v| mirror::held_prefix(&v, &keys.keys))
                })
                .collect()
        };
        let answer = self
            .send(Outgoing {
                method,
                path: pq.as_ref(),
                headers,
                body,
                hint: RouteHint {
                    path,
                    keys: &keys,
                    gr,
                },
                demand: deadline::json_demand(self.settings.engine, path, body_value),
            })
            .await?;
        let Answer {
            response,
            in_flight,
        } = answer;
        let upstream = in_flight.replica().label.clone();
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|source| ClientError::ReadAnswer { upstream, source })?
            .to_bytes();
        let value = json_or_error(&bytes);
        let chosen = self
            .replicas
            .iter()
            .position(|r| Arc::ptr_eq(r, in_flight.replica()));
        if let Some(Some(p)) = chosen.and_then(|i| predicted.get(i))
            && let Some(delivered) = self.settings.engine.reported_cached_tokens(&value)
        {
            let r = in_flight.replica();
            r.mirror.observe(
                (p * route::keys::TOKENS_PER_KEY) as u64,
                delivered,
                &r.label,
            );
        }
        Ok(JsonAnswer {
            status,
            value,
            replica: chosen,
        })
    }
}
