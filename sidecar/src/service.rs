//! Routes one request: recache's own `/health`, `/ready` and `/metrics`; everything else is
//! forwarded to an upstream by [`crate::proxy`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::Body;
use crate::config::Config;
use crate::error::{ApiError, full, json_response};
use crate::metrics::{Metrics, RequestRecord, route_label};
use crate::policy_slot::PolicySlot;
use crate::upstream::Upstreams;

/// The pooled HTTP/1 client recache uses towards upstreams.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Everything a request handler needs, shared by all connections.
pub struct AppState {
    pub config: Config,
    pub client: HttpClient,
    pub upstreams: Upstreams,
    pub metrics: Arc<Metrics>,
    pub rank: crate::rank::RankState,
    pub policy: PolicySlot,
    /// The engine loop, when `--kv-events` is set.
    pub kvloop: Option<crate::kvloop::KvLoopHandle>,
}

impl AppState {
    pub fn new(config: Config) -> Result<Arc<Self>, prometheus::Error> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let metrics = Arc::new(Metrics::new()?);
        let upstreams = Upstreams::new(&config.upstreams);
        for u in upstreams.all() {
            metrics
                .upstream_healthy
                .with_label_values(&[u.label.as_str()])
                .set(1);
        }
        let rank = crate::rank::RankState::new(config.rank.clone(), &metrics)?;
        let policy = PolicySlot::new(config.eviction_policy.clone(), &metrics)?;
        let kvloop = match config.kvloop.clone() {
            Some(cfg) => Some((cfg, crate::kvloop::LoopMetrics::new(&metrics)?)),
            None => None,
        };
        Ok(Arc::new_cyclic(|state| Self {
            kvloop: kvloop
                .map(|(cfg, m)| crate::kvloop::KvLoopHandle::start(cfg, m, state.clone())),
            rank,
            config,
            client,
            upstreams,
            metrics,
            policy,
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
        (&Method::POST, "/v1/rank") => crate::rank::handler::handle(&state, req).await,
        (_, crate::admin::EVICTION_POLICY) => {
            let (parts, body) = req.into_parts();
            crate::admin::handle(&state, &parts.method, &parts.headers, body).await
        }
        _ => return Ok(crate::proxy::forward(&state, req, record).await),
    };
    record.set_status(resp.status().as_u16());
    Ok(resp)
}

fn ready(state: &AppState) -> Response<Body> {
    if state.upstreams.ready() {
        json_response(StatusCode::OK, &serde_json::json!({"status": "ready"}))
    } else {
        let err = ApiError::NoHealthyUpstream;
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
