//! Routes one request: recache's own `/health`, `/ready` and `/metrics`; everything else is
//! forwarded to an upstream by [`crate::proxy`].

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use crate::Body;
use crate::client::{ClientError, ClientSettings, EngineClient};
use crate::config::Config;
use crate::error::{ApiError, full, json_response};
use crate::kvloop::{KvLoopHandle, LoopMetrics};
use crate::metrics::{Metrics, RequestRecord, route_label};
use crate::policy_slot::PolicySlot;
use crate::proxy::Proxy;
use crate::rank::{RankState, Ranker};

/// The server's parts, built once from the configuration. Each handler gets the part it
/// uses; nothing below the server holds this.
pub struct AppState {
    pub config: Config,
    pub client: Arc<EngineClient>,
    pub metrics: Arc<Metrics>,
    pub ranker: Arc<Ranker>,
    pub policy: Arc<PolicySlot>,
    pub proxy: Proxy,
    /// The engine loop, when `--kv-events` is set.
    pub kvloop: Option<Arc<KvLoopHandle>>,
}

impl AppState {
    pub fn new(config: Config) -> Result<Arc<Self>, prometheus::Error> {
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
            },
            &metrics,
        );
        let policy = Arc::new(PolicySlot::new(config.eviction_policy.clone(), &metrics)?);
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
            rank: RankState::new(config.rank.clone(), &metrics)?,
            client: client.clone(),
            kvloop: kvloop.clone(),
            engine: config.engine,
            max_body_bytes: config.max_body_bytes,
        });
        let proxy = Proxy {
            client: client.clone(),
            ranker: ranker.clone(),
            kvloop: kvloop.clone(),
            max_body_bytes: config.max_body_bytes,
            engine: config.engine,
        };
        Ok(Arc::new(Self {
            config,
            client,
            metrics,
            ranker,
            policy,
            proxy,
            kvloop,
        }))
    }
}

/// Answers one request; never fails at the HTTP level (errors become JSON responses).
pub async fn handle(
    state: Arc<AppState>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let route = route_label(req.uri().path());
    let mut record = RequestRecord::start(state.metrics.clone(), route);
    let resp = match (req.method(), route) {
        (&Method::GET, "/health") => {
            json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
        }
        (&Method::GET, "/ready") => ready(&state),
        (&Method::GET, "/metrics") => metrics(&state),
        (&Method::POST, "/v1/rank") => crate::rank::handler::handle(&state.ranker, req).await,
        (_, crate::admin::EVICTION_POLICY | crate::admin::ROUTING) => {
            use crate::admin::Target;
            let target = if route == crate::admin::ROUTING {
                Target::Routing(&state.client)
            } else {
                Target::Policy(&state.policy)
            };
            let (parts, body) = req.into_parts();
            let token = state.config.admin_token.as_deref();
            crate::admin::handle(target, token, &parts.method, &parts.headers, body).await
        }
        _ => return Ok(state.proxy.forward(req, record).await),
    };
    record.set_status(resp.status().as_u16());
    Ok(resp)
}

fn ready(state: &AppState) -> Response<Body> {
    if state.client.ready() {
        let upstreams = state.client.replica_detail();
        json_response(
            StatusCode::OK,
            &serde_json::json!({"status": "ready", "upstreams": upstreams}),
        )
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
