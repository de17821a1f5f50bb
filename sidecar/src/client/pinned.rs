//! Calls to one named replica, past the routing rule and without retries elsewhere: what a
//! check of that replica needs (the routing canary asks *this* engine what it has cached; the
//! item pool's cost meter reads *its* counters).

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

use super::pool::{Call, SendError};
use super::replica::{FailureKind, InFlight};
use super::{ClientError, EngineClient, JsonAnswer};

impl EngineClient {
    /// POSTs (or GETs, without a body) JSON to replica `index` and reads the whole answer.
    pub async fn json_to(
        &self,
        index: usize,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<JsonAnswer, ClientError> {
        let (headers, bytes) = super::json_request(body);
        let (status, answer) = self.call_to(index, method, path, &headers, &bytes).await?;
        Ok(JsonAnswer {
            status,
            value: super::json_or_error(&answer),
            replica: Some(index),
        })
    }

    /// GETs `path` from replica `index` and reads the whole answer as text (lossy UTF-8): a
    /// replica's own `/metrics`, say.
    pub async fn text_to(
        &self,
        index: usize,
        path: &str,
    ) -> Result<(StatusCode, String), ClientError> {
        let (headers, bytes) = super::json_request(None);
        let (status, answer) = (self.call_to(index, Method::GET, path, &headers, &bytes)).await?;
        Ok((status, String::from_utf8_lossy(&answer).into_owned()))
    }

    async fn call_to(
        &self,
        index: usize,
        method: Method,
        path: &str,
        headers: &http::HeaderMap,
        bytes: &Bytes,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let replica = self
            .replicas()
            .get(index)
            .ok_or(ClientError::NoHealthyUpstream)?;
        let pq: Option<PathAndQuery> = path.parse().ok();
        let target = replica.origin_for(pq.as_ref());
        let call = Call {
            method: &method,
            target: &target,
            headers,
            body: bytes,
        };
        let _in_flight = InFlight::new(replica.clone());
        let upstream = replica.label.clone();
        let sent = (replica.pool)
            .send(&call, &replica.host, self.settings.upstream_timeout)
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(SendError::Dial(source)) => {
                replica.count_failure(FailureKind::Connect);
                return Err(ClientError::Connect { upstream, source });
            }
            Err(SendError::Failed(source)) => {
                replica.count_failure(FailureKind::Failed);
                return Err(ClientError::Failed { upstream, source });
            }
            Err(SendError::Timeout) => {
                replica.count_failure(FailureKind::Timeout);
                return Err(ClientError::Timeout {
                    upstream,
                    after: self.settings.upstream_timeout,
                });
            }
        };
        let status: StatusCode = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|source| ClientError::ReadAnswer {
                upstream: upstream.clone(),
                source,
            })?
            .to_bytes();
        Ok((status, bytes))
    }
}
