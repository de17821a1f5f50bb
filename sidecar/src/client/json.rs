//! JSON bodies both ways: a request body's headers and bytes, and an engine's answer read as
//! JSON (or as an OpenAI-shaped error object carrying its text when it is not).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use serde_json::Value;

/// Headers and bytes of a JSON request body (none: an empty body without a content type).
pub(super) fn json_request(body: Option<&Value>) -> (HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    let Some(v) = body else {
        return (headers, Bytes::new());
    };
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    (headers, Bytes::from(v.to_string()))
}

/// An answer's body as JSON; an `{"error": ...}` object carrying the text when it is not.
pub(super) fn json_or_error(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|_| {
        serde_json::json!({"error": {"message": String::from_utf8_lossy(bytes), "type": "upstream_error"}})
    })
}
