//! Errors recache answers itself, rendered in OpenAI's error shape
//! (`{"error": {"message", "type", "param", "code"}}`) with the status a client can act on.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Full};

use crate::Body;
use crate::client::ClientError;

/// A request recache refuses or could not complete.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
    },
    #[error("request body exceeds the limit of {limit} bytes (set --max-body-bytes to raise it)")]
    PayloadTooLarge { limit: usize },
    #[error("failed to read the request body: {source}")]
    BodyRead {
        #[source]
        source: crate::BoxError,
    },
    /// A call to the engine failed; its status and code come from [`ClientError`].
    #[error(transparent)]
    Upstream(#[from] ClientError),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(&'static str),
    #[error(
        "this client address already has {limit} requests in flight \
         (--max-in-flight-per-client); retry when some have finished"
    )]
    TooManyRequests { limit: usize },
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } | ApiError::BodyRead { .. } => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Upstream(e) => e.status(),
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `type` field: who is at fault.
    fn kind(&self) -> &'static str {
        match self.status() {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_client_error() => "invalid_request_error",
            _ => "upstream_error",
        }
    }

    /// A stable machine-readable code, one per variant.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "invalid_request",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::BodyRead { .. } => "body_read_error",
            ApiError::Upstream(e) => e.code(),
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::NotFound(_) => "not_found",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::TooManyRequests { .. } => "too_many_requests",
            ApiError::Internal(_) => "internal_error",
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ApiError::BadRequest { param, .. } => param.as_deref(),
            _ => None,
        }
    }

    /// The JSON object a client receives (also used as an SSE error event's payload).
    pub fn to_json(&self) -> serde_json::Value {
        error_json(&self.to_string(), self.kind(), self.code(), self.param())
    }

    pub fn into_response(self) -> Response<Body> {
        let mut resp = json_response(self.status(), &self.to_json());
        if let ApiError::Upstream(e) = &self
            && let Some(s) = e.retry_after_s()
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        resp
    }
}

/// An OpenAI-shaped error object.
pub fn error_json(message: &str, kind: &str, code: &str, param: Option<&str>) -> serde_json::Value {
    serde_json::json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// A JSON response with `status`.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::from(value.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A complete in-memory body.
pub fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
