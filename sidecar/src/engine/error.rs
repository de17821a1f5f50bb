//! The error of a request recache answers by asking the engine (ranking, retrieval, the
//! completions extensions, the item pool's calls), rendered in OpenAI's error shape.

use http::{Response, StatusCode};
use serde_json::Value;

use crate::Body;
use crate::client::ClientError;
use crate::error::{ApiError, error_json, json_response};

/// Why a request answered through the engine failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The call to the engine failed (its status and code come from the client's error).
    #[error(transparent)]
    Upstream(#[from] ClientError),
    /// The engine refused the rewritten request; its error body is passed on.
    #[error("the engine answered {status}: {body}")]
    Engine { status: StatusCode, body: Value },
    #[error("{0}")]
    BadEngineAnswer(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// recache's settings do not fit the served model (a server-side problem).
    #[error("{0}")]
    Config(String),
}

impl EngineError {
    pub fn into_response(self) -> Response<Body> {
        let gateway = |msg: &str| {
            let body = error_json(msg, "upstream_error", "upstream_error", None);
            json_response(StatusCode::BAD_GATEWAY, &body)
        };
        match self {
            EngineError::Api(e) => e.into_response(),
            EngineError::Upstream(e) => ApiError::from(e).into_response(),
            EngineError::BadEngineAnswer(m) => gateway(&m),
            EngineError::Engine { status, body } => json_response(status, &body),
            EngineError::Internal(m) => ApiError::Internal(m).into_response(),
            EngineError::Config(m) => {
                let body = error_json(&m, "server_error", "invalid_configuration", None);
                json_response(StatusCode::INTERNAL_SERVER_ERROR, &body)
            }
        }
    }
}
