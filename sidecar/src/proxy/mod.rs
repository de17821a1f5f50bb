//! Forwarding a request to an upstream replica, unchanged.
//!
//! The request body is read whole (bounded by `--max-body-bytes`), so routes recache parses can
//! be validated and a request that could not connect can be retried on another replica; the
//! response body streams back frame by frame ([`stream::UpstreamBody`]).

pub mod stream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::{Request, Response, request};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;

use crate::Body;
use crate::error::ApiError;
use crate::metrics::RequestRecord;
use crate::service::AppState;
use crate::upstream::InFlight;

/// Connect failures are retried on other replicas only while the client has waited less than
/// this: the contract is a 503 within a second when no replica can be reached.
const RETRY_BUDGET: Duration = Duration::from_secs(1);

/// Reads the body of `req` and forwards it; `record` is moved into the streamed response.
pub async fn forward(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    mut record: RequestRecord,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let bytes = read_body(body, &parts.headers, state.config.max_body_bytes).await;
    // GR prompts sent as completions with `recache_rank` are rewritten to token ids here.
    let (bytes, extra) = match bytes {
        Ok(bytes) => match crate::rank::extension::rewrite(state, parts.uri.path(), bytes).await {
            Ok((bytes, extra)) => (Ok(bytes), extra),
            Err(e) => {
                let resp = e.into_response();
                record.set_status(resp.status().as_u16());
                return resp;
            }
        },
        Err(e) => (Err(e), HeaderMap::new()),
    };
    let result = match bytes {
        Ok(bytes) => match recache_adapters::validate_body(parts.uri.path(), &bytes) {
            Ok(_) => {
                let mut bytes = bytes;
                if let Some(kv) = &state.kvloop {
                    // The priority is read before this request reaches the shadow: it says
                    // how much of the prompt the policy kept from earlier requests.
                    if let Some(steered) = kv.steer(parts.uri.path(), &bytes) {
                        bytes = steered;
                    }
                    kv.observe(parts.uri.path(), &bytes);
                }
                send(state, &parts, bytes, &mut record).await
            }
            Err(e) => Err(ApiError::BadRequest {
                message: e.message,
                param: e.param,
            }),
        },
        Err(e) => Err(e),
    };
    match result {
        Ok((resp, in_flight, sse)) => {
            let (mut parts, incoming) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            parts.headers.extend(extra);
            record.set_status(parts.status.as_u16());
            let body = stream::UpstreamBody::new(incoming, sse, in_flight, record);
            Response::from_parts(parts, BodyExt::boxed(body))
        }
        Err(err) => {
            record.set_status(err.status().as_u16());
            err.into_response()
        }
    }
}

/// Sends to the least-loaded healthy replica, moving on to the next one on connect failure.
async fn send(
    state: &Arc<AppState>,
    parts: &request::Parts,
    body: Bytes,
    record: &mut RequestRecord,
) -> Result<(Response<Incoming>, InFlight, bool), ApiError> {
    let started = Instant::now();
    let mut tried = Vec::new();
    let mut last_error = ApiError::NoHealthyUpstream;
    while let Some(index) = state.upstreams.pick(&tried) {
        tried.push(index);
        let upstream = state.upstreams.get(index).clone();
        let in_flight = InFlight::new(upstream.clone(), record.metrics().clone());
        let req = upstream_request(
            parts,
            body.clone(),
            &upstream.uri_for(parts.uri.path_and_query()),
        )?;
        let label = upstream.label.as_str();
        let errors = |kind: &str| {
            state
                .metrics
                .upstream_errors
                .with_label_values(&[label, kind])
                .inc()
        };
        match tokio::time::timeout(state.config.upstream_timeout, state.client.request(req)).await {
            Ok(Ok(resp)) => {
                upstream.set_healthy(true);
                let sse = is_event_stream(resp.headers());
                return Ok((resp, in_flight, sse));
            }
            Ok(Err(source)) if source.is_connect() => {
                errors("connect");
                tracing::warn!(upstream = label, error = %source, "connect failed, taking upstream out");
                if upstream.set_healthy(false) {
                    state
                        .metrics
                        .upstream_healthy
                        .with_label_values(&[label])
                        .set(0);
                }
                last_error = ApiError::UpstreamConnect {
                    upstream: upstream.label.clone(),
                    source,
                };
                if started.elapsed() + state.config.connect_timeout > RETRY_BUDGET {
                    break;
                }
            }
            Ok(Err(source)) => {
                errors("failed");
                return Err(ApiError::UpstreamFailed {
                    upstream: upstream.label.clone(),
                    source,
                });
            }
            Err(_) => {
                errors("timeout");
                return Err(ApiError::UpstreamTimeout {
                    upstream: upstream.label.clone(),
                    after: state.config.upstream_timeout,
                });
            }
        }
    }
    Err(last_error)
}

fn upstream_request(
    parts: &request::Parts,
    body: Bytes,
    uri: &Result<http::Uri, http::Error>,
) -> Result<Request<Full<Bytes>>, ApiError> {
    let uri = uri
        .as_ref()
        .map_err(|e| ApiError::Internal(format!("cannot build upstream URL: {e}")))?;
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri.clone();
    let headers = req.headers_mut();
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::CONTENT_LENGTH && !is_hop_by_hop(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    Ok(req)
}

pub(crate) async fn read_body(
    body: Incoming,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::PayloadTooLarge { limit })
        }
        Err(source) => Err(ApiError::BodyRead { source }),
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}
