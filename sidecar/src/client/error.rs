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
        source: super::h1::H1Error,
    },
    #[error("reading the answer of upstream {upstream}: {source}")]
    ReadAnswer {
        upstream: String,
        #[source]
        source: super::h1::H1Error,
    },
    #[error("cannot build the request to upstream {upstream}: {why}")]
    Build { upstream: String, why: String },
    /// The deadline gate refused the call: it would finish after its deadline.
    #[error(
        "the deadline of {} ms cannot be met: upstream {upstream} would answer after about {:.0} ms{}; \
         retry after {} s, or send x-recache-best-effort: 1 to be served late",
        refusal.budget_ms,
        refusal.predicted_ms,
        if refusal.late { " (its turn came too late)" } else { "" },
        refusal.retry_after_s
    )]
    DeadlineUnreachable {
        upstream: String,
        refusal: crate::slo::Refusal,
    },
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
            ClientError::DeadlineUnreachable { .. } => StatusCode::TOO_MANY_REQUESTS,
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
            ClientError::DeadlineUnreachable { .. } => "deadline_unreachable",
        }
    }

    /// Seconds a client should wait before retrying (`Retry-After`), where that is known.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            ClientError::DeadlineUnreachable { refusal, .. } => Some(refusal.retry_after_s),
            _ => None,
        }
    }
}
