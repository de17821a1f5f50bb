//! Routes one request: recache's own `/health`, `/ready` and `/metrics`; everything else is
//! forwarded to an upstream by [`crate::proxy`]. A request first takes its client's place
//! under `--max-in-flight-per-client` ([`crate::limits`]); with `--admin-listen`, the admin API
//! answers on that port only and that port answers nothing else.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use crate::Body;
use crate::client::{ClientError, ClientSettings, EngineClient};
use crate::config::Config;
use crate::engine::EngineHandle;
use crate::error::{ApiError, full, json_response};
use crate::kvloop::{KvLoopHandle, LoopMetrics};
use crate::limits::per_client::Client;
use crate::limits::{ClientLimits, per_client};
use crate::metrics::{Metrics, RequestRecord, route_label};
use crate::policy_slot::PolicySlot;
use crate::proxy::Proxy;
use crate::rank::{RankState, Ranker};
use crate::retrieve::Retriever;
use crate::slo;

/// The server's parts, built once from the configuration. Each handler gets the part it
/// uses; nothing below the server holds this.
pub struct AppState {
    pub config: Config,
    pub client: Arc<EngineClient>,
    pub metrics: Arc<Metrics>,
    pub ranker: Arc<Ranker>,
    /// `/v1/retrieve`, when `--retrieve-index` is set.
    pub retriever: Option<Arc<Retriever>>,
    pub policy: Arc<PolicySlot>,
    pub proxy: Proxy,
    /// The engine loop, when `--kv-events` is set.
    pub kvloop: Option<Arc<KvLoopHandle>>,
    /// `--max-in-flight-per-client`; None when off.
    pub client_limits: Option<Arc<ClientLimits>>,
}

/// Which of recache's ports a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// `--listen`: the API clients use.
    Main,
    /// `--admin-listen`: the admin API only.
    Admin,
}

/// Where a request came from: the port, and the client address's in-flight count (looked up
/// once per connection; None when the limit is off).
#[derive(Clone)]
pub struct Origin {
    pub port: Port,
    pub client: Option<Arc<Client>>,
}

impl Origin {
    /// A connection from `peer` on `port`.
    pub fn new(state: &AppState, port: Port, peer: IpAddr) -> Self {
        let client = match port {
            Port::Main => state.client_limits.as_ref().map(|l| l.client(peer)),
            Port::Admin => None,
        };
        Self { port, client }
    }
}

/// Why the serving parts could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("creating metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error(transparent)]
    Rank(#[from] crate::rank::RankSetupError),
}

impl AppState {
    pub fn new(config: Config) -> Result<Arc<Self>, StartError> {
        let metrics = Arc::new(Metrics::new()?);
        let client = EngineClient::new(
            &config.upstreams,
            ClientSettings {
                connect_timeout: config.connect_timeout,
                upstream_timeout: config.upstream_timeout,
                health_interval: config.health_interval,
                health_path: config.engine.health_path(),
                routing: config.routing,
                engine: config.engine,
                slo: config.slo,
            },
            &metrics,
        );
        let policy = Arc::new(PolicySlot::new(config.eviction_policy.clone(), &metrics)?);
        let client_limits = match config.limits.max_in_flight_per_client {
            Some(max) => {
                let refused = prometheus::IntCounter::new(
                    "client_limit_refusals_total",
                    "Requests answered 429 because their client address had \
                     --max-in-flight-per-client requests in flight",
                )?;
                metrics.register(Box::new(refused.clone()))?;
                Some(ClientLimits::new(max, refused))
            }
            None => None,
        };
        let kvloop = match config.kvloop.clone() {
            Some(cfg) => Some(Arc::new(KvLoopHandle::start(
                cfg,
                LoopMetrics::new(&metrics)?,
                policy.clone(),
                config.engine,
            ))),
            None => None,
        };
        let ranker = Arc::new(Ranker {
            rank: RankState::new(config.rank.clone(), &metrics, &replica_labels(&client))?,
            engine: Arc::new(EngineHandle::new(client.clone(), config.engine)),
            kvloop: kvloop.clone(),
            max_body_bytes: config.max_body_bytes,
        });
        let retriever = match config.retrieve.clone() {
            Some(r) => Some(Arc::new(Retriever::new(
                r,
                client.clone(),
                config.engine,
                config.max_body_bytes,
                &metrics,
            )?)),
            None => None,
        };
        let proxy = Proxy {
            client: client.clone(),
            ranker: ranker.clone(),
            retriever: retriever.clone(),
            kvloop: kvloop.clone(),
            max_body_bytes: config.max_body_bytes,
            engine: config.engine,
        };
        Ok(Arc::new(Self {
            config,
            client,
            metrics,
            ranker,
            retriever,
            policy,
            proxy,
            kvloop,
            client_limits,
        }))
    }
}

/// Answers one request; never fails at the HTTP level (errors become JSON responses).
pub async fn handle(
    state: Arc<AppState>,
    origin: Origin,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let route = route_label(req.uri().path());
    let mut record = RequestRecord::start(state.metrics.clone(), route);
    if origin.port == Port::Admin {
        let resp = admin_port(&state, route, req).await;
        record.set_status(resp.status().as_u16());
        return Ok(resp);
    }
    let (permit, deadline) = match admit(&state, &origin, route, req.headers()) {
        Ok(admitted) => admitted,
        Err(resp) => {
            record.set_status(resp.status().as_u16());
            return Ok(resp);
        }
    };
    let resp = match (req.method(), route) {
        (&Method::GET, "/health") => {
            json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
        }
        (&Method::GET, "/ready") => ready(&state),
        (&Method::GET, "/metrics") => metrics(&state),
        (&Method::POST, "/v1/rank") => {
            slo::scope(deadline, crate::rank::handler::handle(&state.ranker, req)).await
        }
        (&Method::POST, "/v1/retrieve") => match &state.retriever {
            Some(r) => slo::scope(deadline, crate::retrieve::handler::handle(r, req)).await,
            None => ApiError::NotFound(
                "/v1/retrieve needs a retrieval index: start recache serve with \
                 --retrieve-index (made by recache items index)"
                    .into(),
            )
            .into_response(),
        },
        (
            _,
            crate::admin::EVICTION_POLICY | crate::admin::ROUTING | crate::admin::POOL_RECOMPUTE,
        ) => {
            if state.config.admin_listen.is_some() {
                ApiError::Forbidden(
                    "the admin API is served on the --admin-listen address only, not this port",
                )
                .into_response()
            } else {
                admin(&state, route, req).await
            }
        }
        _ => {
            let resp = slo::scope(deadline, state.proxy.forward(req, record)).await;
            return Ok(hold(resp, permit));
        }
    };
    record.set_status(resp.status().as_u16());
    Ok(hold(resp, permit))
}

/// Whether recache answers `method path` itself on its main port ([`handle`]'s own arms);
/// everything else is forwarded.
pub fn answers_itself(method: &Method, path: &str) -> bool {
    matches!(
        (method, route_label(path)),
        (&Method::GET, "/health" | "/ready" | "/metrics")
            | (&Method::POST, "/v1/rank" | "/v1/retrieve")
            | (
                _,
                crate::admin::EVICTION_POLICY
                    | crate::admin::ROUTING
                    | crate::admin::POOL_RECOMPUTE
            )
    )
}

/// A request to forward whose body has been read (the lean HTTP/1 path, `crate::server::h1`):
/// admitted and forwarded as [`handle`] does.
pub async fn proxied(
    state: &AppState,
    origin: &Origin,
    parts: http::request::Parts,
    body: Bytes,
) -> Response<Body> {
    let route = route_label(parts.uri.path());
    let mut record = RequestRecord::start(state.metrics.clone(), route);
    let (permit, deadline) = match admit(state, origin, route, &parts.headers) {
        Ok(admitted) => admitted,
        Err(resp) => {
            record.set_status(resp.status().as_u16());
            return resp;
        }
    };
    let forward = state.proxy.forward_read(parts, body, record);
    // Outside a scope `slo::current()` is None, as inside one without a deadline: the common
    // case skips the task-local wrapper (and moving the whole forwarding future into it).
    let resp = match deadline {
        Some(d) => slo::scope(Some(d), forward).await,
        None => forward.await,
    };
    hold(resp, permit)
}

/// The request's place under `--max-in-flight-per-client` and its deadline, or the answer
/// that refuses it (429, or 400 for a deadline header that cannot be read).
// A refusal is the rare case; the size of `Err` costs nothing on the path that matters.
#[allow(clippy::result_large_err)]
fn admit(
    state: &AppState,
    origin: &Origin,
    route: &str,
    headers: &http::HeaderMap,
) -> Result<(Option<per_client::Permit>, Option<slo::Deadline>), Response<Body>> {
    // Probes and scrapes are never refused: a busy client must not look like a dead recache.
    let permit = match (&origin.client, &state.client_limits, route) {
        (None, _, _) | (_, None, _) | (_, _, "/health" | "/ready" | "/metrics") => None,
        (Some(client), Some(limits), _) => match client.acquire() {
            Some(permit) => Some(permit),
            None => {
                return Err(ApiError::TooManyRequests {
                    limit: limits.max(),
                }
                .into_response());
            }
        },
    };
    match deadline(&state.config.slo, route, headers) {
        Ok(d) => Ok((permit, d)),
        Err(e) => Err(hold(e.into_response(), permit)),
    }
}

/// The request's deadline: its header's, else its route's default (`--slo-*-deadline`);
/// never one with `--slo off`. A header that cannot be read is a 400 naming it.
fn deadline(
    settings: &slo::SloSettings,
    route: &str,
    headers: &http::HeaderMap,
) -> Result<Option<slo::Deadline>, ApiError> {
    if !settings.enabled {
        return Ok(None);
    }
    let now = tokio::time::Instant::now();
    let bad = |e: slo::BadDeadline| ApiError::BadRequest {
        message: e.to_string(),
        param: Some(e.what.to_string()),
    };
    if let Some(d) = slo::from_headers(headers, now).map_err(bad)? {
        return Ok(Some(d));
    }
    Ok(settings.default_for(route).map(|budget| {
        slo::Deadline::within(budget, now, slo::best_effort(headers).unwrap_or(false))
    }))
}

/// The response with its client's place held until its body is sent.
fn hold(resp: Response<Body>, permit: Option<per_client::Permit>) -> Response<Body> {
    match permit {
        Some(permit) => resp.map(|body| per_client::hold(body, permit)),
        None => resp,
    }
}

/// The `--admin-listen` port: the admin API and a liveness answer, nothing else.
async fn admin_port(state: &AppState, route: &str, req: Request<Incoming>) -> Response<Body> {
    match (req.method(), route) {
        (
            _,
            crate::admin::EVICTION_POLICY | crate::admin::ROUTING | crate::admin::POOL_RECOMPUTE,
        ) => admin(state, route, req).await,
        (&Method::GET, "/health") => {
            json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
        }
        _ => ApiError::NotFound(format!(
            "{} is not on the admin port: it serves /admin/eviction-policy, /admin/routing, \
             /admin/rank-pool-recompute and /health",
            req.uri().path()
        ))
        .into_response(),
    }
}

async fn admin(state: &AppState, route: &str, req: Request<Incoming>) -> Response<Body> {
    use crate::admin::Target;
    let target = match route {
        crate::admin::ROUTING => Target::Routing(&state.client),
        crate::admin::POOL_RECOMPUTE => Target::PoolRecompute(&state.ranker.rank.recompute),
        _ => Target::Policy(&state.policy),
    };
    let (parts, body) = req.into_parts();
    let token = state.config.admin_token.as_ref().map(|t| t.expose());
    crate::admin::handle(target, token, &parts.method, &parts.headers, body).await
}

fn ready(state: &AppState) -> Response<Body> {
    if state.client.ready() {
        let upstreams = state.client.replica_detail();
        let mut body = serde_json::json!({"status": "ready", "upstreams": upstreams});
        let rank = &state.ranker.rank;
        if let Some(g) = &rank.guard {
            body["quality"] = g.detail();
        }
        // Ready either way: an engine without the pool computes every item (no wrong answer).
        if let Some(p) = &rank.pool {
            body["item_pool"] = p.iter().map(|p| p.detail()).collect();
        }
        // Ready either way: a store that is down costs recomputing cold items, not answers.
        if let Some(s) = &rank.store {
            body["store"] = s.detail();
            // Alg. 1's rates in use, measured or not (itempool::costs).
            if let Some(p) = &rank.pool {
                body["store"]["costs"] = p.costs.detail();
            }
        }
        json_response(StatusCode::OK, &body)
    } else {
        let err = ApiError::from(ClientError::NoHealthyUpstream);
        let body = crate::error::error_json(
            "not ready: no upstream has answered a health probe yet",
            "upstream_error",
            err.code(),
            None,
        );
        json_response(StatusCode::SERVICE_UNAVAILABLE, &body)
    }
}

fn metrics(state: &AppState) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::from(state.metrics.render())));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    resp
}

/// The engine client's replica labels, in order (the item pool keeps one pool per replica).
fn replica_labels(client: &EngineClient) -> Vec<String> {
    client.replicas().iter().map(|r| r.label.clone()).collect()
}
