//! Forwarding a client's request to an engine replica.
//!
//! The body is read whole (bounded by `--max-body-bytes`) and passed through the request
//! [`pipeline`]: parsed at most once, rewritten by the steps that apply, forwarded byte for
//! byte when none did. The [`EngineClient`] picks the replica and retries; a small answer of
//! known length is read whole and sent in one write, anything else streams back frame by
//! frame ([`stream::UpstreamBody`]).

pub mod pipeline;
pub mod stream;

use std::sync::Arc;

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::Body;
use crate::client::replica::FailureKind;
use crate::client::route::RouteHint;
use crate::client::{Answer, ClientError, EngineClient, Outgoing, strip_hop_by_hop};
use crate::kvloop::KvLoopHandle;
use crate::metrics::RequestRecord;
use crate::rank::Ranker;

/// What forwarding needs: the engine client, and the steps' own state.
pub struct Proxy {
    pub client: Arc<EngineClient>,
    /// The `recache_rank` completions extension.
    pub ranker: Arc<Ranker>,
    /// The `recache_retrieve` completions extension, when `--retrieve-index` is set.
    pub retriever: Option<Arc<crate::retrieve::Retriever>>,
    /// The engine loop (observation, `--sglang-priority`), when `--kv-events` is set.
    pub kvloop: Option<Arc<KvLoopHandle>>,
    pub max_body_bytes: usize,
    pub engine: recache_adapters::Engine,
}

impl Proxy {
    /// Reads, transforms and forwards `req`; `record` moves into the streamed response so
    /// streaming time counts.
    pub async fn forward(
        &self,
        req: Request<Incoming>,
        mut record: RequestRecord,
    ) -> Response<Body> {
        let (parts, body) = req.into_parts();
        match crate::body::read(body, &parts.headers, self.max_body_bytes).await {
            Ok(bytes) => self.forward_read(parts, bytes, record).await,
            Err(e) => {
                let resp = e.into_response();
                record.set_status(resp.status().as_u16());
                resp
            }
        }
    }

    /// [`Self::forward`] for a request whose body has been read (under `--max-body-bytes`).
    pub async fn forward_read(
        &self,
        parts: http::request::Parts,
        bytes: bytes::Bytes,
        mut record: RequestRecord,
    ) -> Response<Body> {
        let prepared = match pipeline::run(self, parts.uri.path(), bytes).await {
            // A step answered the request itself (the retrieval extension).
            Ok(p) if p.answered.is_some() => {
                let value = p.answered.unwrap_or_default();
                record.set_status(200);
                return crate::error::json_response(http::StatusCode::OK, &value);
            }
            Ok(p) => p,
            Err(e) => {
                let resp = e.into_response();
                record.set_status(resp.status().as_u16());
                return resp;
            }
        };
        let sent = self
            .client
            .send(Outgoing {
                method: parts.method,
                path: parts.uri.path_and_query(),
                headers: parts.headers,
                body: prepared.body,
                hint: RouteHint {
                    path: parts.uri.path(),
                    keys: &prepared.route_keys,
                    gr: prepared.gr.as_ref(),
                },
                demand: prepared.demand,
            })
            .await;
        match sent {
            Ok(answer) => {
                let Answer {
                    response,
                    in_flight,
                } = answer;
                let (mut head, incoming) = response.into_parts();
                strip_hop_by_hop(&mut head.headers);
                head.headers.extend(prepared.response_headers);
                let sse = is_event_stream(&head.headers);
                if !sse && small(&head.headers) {
                    // A small answer of known length is read whole and sent in one write, as
                    // nginx's proxy buffering does: streaming it would flush the headers alone
                    // first and wake the client twice.
                    return match incoming.collect().await {
                        Ok(body) => {
                            record.set_status(head.status.as_u16());
                            drop(in_flight);
                            Response::from_parts(head, crate::error::full(body.to_bytes()))
                        }
                        Err(source) => {
                            let replica = in_flight.replica();
                            replica.count_failure(FailureKind::Stream);
                            replica.set_healthy(false);
                            let err = crate::error::ApiError::from(ClientError::ReadAnswer {
                                upstream: replica.label.clone(),
                                source,
                            });
                            record.set_status(err.status().as_u16());
                            err.into_response()
                        }
                    };
                }
                record.set_status(head.status.as_u16());
                let body = stream::UpstreamBody::new(incoming, sse, in_flight, record);
                Response::from_parts(head, BodyExt::boxed(body))
            }
            Err(err) => {
                let err = crate::error::ApiError::from(err);
                record.set_status(err.status().as_u16());
                err.into_response()
            }
        }
    }
}

/// Answers up to this size with a declared length are buffered (one write to the client).
const BUFFER_BELOW: u64 = 64 * 1024;

fn small(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n <= BUFFER_BELOW)
}

fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}
