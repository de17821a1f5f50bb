//! Calls to one named replica, past the routing rule and without retries elsewhere: what a
//! check of that replica needs (the routing canary asks *this* engine what it has cached).

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
        let replica = self
            .replicas()
            .get(index)
            .ok_or(ClientError::NoHealthyUpstream)?;
        let pq: Option<PathAndQuery> = path.parse().ok();
        let (headers, bytes) = super::json_request(body);
        let target = replica.origin_for(pq.as_ref());
        let call = Call {
            method: &method,
            target: &target,
            headers: &headers,
            body: &bytes,
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
        Ok(JsonAnswer {
            status,
            value: super::json_or_error(&bytes),
            replica: Some(index),
        })
    }
}
