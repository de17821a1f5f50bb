//! The one error of a call to an engine replica, whoever made it (proxy, ranking, pool fills,
//! probes). Its status and code are decided here; `crate::error` renders it in OpenAI's shape.

use std::time::Duration;

use http::StatusCode;

/// Why a call to the engine got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no healthy upstream is available")]
    NoHealthyUpstream,
    #[error("could not connect to upstream {upstream}: {source}")]
    Connect {
        upstream: String,
        #[source]
        source: super::pool::DialError,
    },
    #[error("upstream {upstream} did not answer within {after:?} (--upstream-timeout)")]
    Timeout { upstream: String, after: Duration },
    #[error("upstream {upstream} failed before answering: {source}")]
    Failed {
        upstream: String,
        #[source]
        source: hyper::Error,
    },
    #[error("reading the answer of upstream {upstream}: {source}")]
    ReadAnswer {
        upstream: String,
        #[source]
        source: hyper::Error,
    },
    #[error("cannot build the request to upstream {upstream}: {why}")]
    Build { upstream: String, why: String },
}

impl ClientError {
    /// The status a client of recache receives.
    pub fn status(&self) -> StatusCode {
        match self {
            ClientError::NoHealthyUpstream | ClientError::Connect { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ClientError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ClientError::Failed { .. } | ClientError::ReadAnswer { .. } => StatusCode::BAD_GATEWAY,
            ClientError::Build { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A stable machine-readable code, one per variant (OpenAI's `code` field).
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::NoHealthyUpstream => "no_healthy_upstream",
            ClientError::Connect { .. } => "upstream_connect_error",
            ClientError::Timeout { .. } => "upstream_timeout",
            ClientError::Failed { .. } | ClientError::ReadAnswer { .. } => "upstream_error",
            ClientError::Build { .. } => "internal_error",
        }
    }
}
