//! The admin API: `GET` / `PUT /admin/eviction-policy`, behind a bearer token.
//!
//! Without `--admin-token` the admin API is off (403 saying how to turn it on): an
//! unauthenticated policy switch on a shared proxy would be a foot-gun.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use http_body_util::{BodyExt, Limited};

use crate::Body;
use crate::error::{ApiError, error_json, json_response};
use crate::policy_slot::PolicySlot;

/// The one admin route so far.
pub const EVICTION_POLICY: &str = "/admin/eviction-policy";

/// Largest admin request body; policy configs are tiny.
const MAX_ADMIN_BODY: usize = 64 * 1024;

/// Answers one admin request against the policy slot; `token` is `--admin-token`.
pub async fn handle(
    slot: &PolicySlot,
    token: Option<&str>,
    method: &Method,
    headers: &HeaderMap,
    body: hyper::body::Incoming,
) -> http::Response<Body> {
    let Some(token) = token else {
        let msg =
            "admin API is disabled: start recache with --admin-token (or RECACHE_ADMIN_TOKEN)";
        return json_response(
            StatusCode::FORBIDDEN,
            &error_json(msg, "invalid_request_error", "admin_disabled", None),
        );
    };
    if !authorized(headers, token) {
        return ApiError::Unauthorized(
            "missing or wrong bearer token (Authorization: Bearer TOKEN)",
        )
        .into_response();
    }
    match *method {
        Method::GET => current(slot),
        Method::PUT => {
            let bytes = match Limited::new(body, MAX_ADMIN_BODY).collect().await {
                Ok(c) => c.to_bytes(),
                Err(_) => {
                    return ApiError::PayloadTooLarge {
                        limit: MAX_ADMIN_BODY,
                    }
                    .into_response();
                }
            };
            put(slot, bytes)
        }
        _ => {
            let msg = format!("{EVICTION_POLICY} supports GET and PUT");
            json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                &error_json(&msg, "invalid_request_error", "method_not_allowed", None),
            )
        }
    }
}

fn put(slot: &PolicySlot, body: Bytes) -> http::Response<Body> {
    let swapped = crate::policy_slot::parse_body(&body).and_then(|cfg| slot.swap(cfg));
    match swapped {
        Ok(active) => {
            tracing::info!(
                policy = active.config.name(),
                generation = active.generation,
                "eviction policy switched"
            );
            current(slot)
        }
        Err(e) => ApiError::BadRequest {
            message: e.to_string(),
            param: Some("policy".into()),
        }
        .into_response(),
    }
}

fn current(slot: &PolicySlot) -> http::Response<Body> {
    let active = slot.load();
    let body = serde_json::json!({
        "policy": active.config,
        "generation": active.generation,
        "since": active.since,
        "valid": crate::policy_slot::servable_names(),
    });
    json_response(StatusCode::OK, &body)
}

/// Compares the bearer token in constant time (no early exit on the first differing byte).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(given) = given.strip_prefix("Bearer ") else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
