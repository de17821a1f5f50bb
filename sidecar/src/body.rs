//! Reading a client's request body whole, under `--max-body-bytes`: a declared length over
//! the limit is refused before reading, and a body that grows past it is cut off (413).

use bytes::Bytes;
use http::HeaderMap;
use http::header;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::error::ApiError;

/// The whole body, or 413 / 400.
pub async fn read(body: Incoming, headers: &HeaderMap, limit: usize) -> Result<Bytes, ApiError> {
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
