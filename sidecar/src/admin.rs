//! The admin API, behind a bearer token: `GET` / `PUT /admin/eviction-policy` (the policy
//! slot), `GET` / `PUT /admin/routing` (the engine client's routing rule) and `GET` / `PUT
//! /admin/rank-pool-recompute` (the item pool's recompute setting, `itempool::recompute`).
//!
//! Without `--admin-token` the admin API is off (403 saying how to turn it on): an
//! unauthenticated policy switch on a shared proxy would be a foot-gun.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use http_body_util::{BodyExt, Limited};

use crate::Body;
use crate::client::EngineClient;
use crate::client::route::Routing;
use crate::error::{ApiError, error_json, json_response};
use crate::itempool::recompute::RecomputeSpec;
use crate::policy_slot::PolicySlot;
use arc_swap::ArcSwap;

pub const EVICTION_POLICY: &str = "/admin/eviction-policy";
pub const ROUTING: &str = "/admin/routing";
pub const POOL_RECOMPUTE: &str = "/admin/rank-pool-recompute";

/// What an admin route reads and swaps.
pub enum Target<'a> {
    Policy(&'a PolicySlot),
    Routing(&'a EngineClient),
    PoolRecompute(&'a ArcSwap<RecomputeSpec>),
}

impl Target<'_> {
    fn path(&self) -> &'static str {
        match self {
            Self::Policy(_) => EVICTION_POLICY,
            Self::Routing(_) => ROUTING,
            Self::PoolRecompute(_) => POOL_RECOMPUTE,
        }
    }
}

/// Largest admin request body; policy configs are tiny.
const MAX_ADMIN_BODY: usize = 64 * 1024;

/// Answers one admin request against `target`; `token` is `--admin-token`.
pub async fn handle(
    target: Target<'_>,
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
        Method::GET => match target {
            Target::Policy(slot) => current(slot),
            Target::Routing(client) => current_routing(client),
            Target::PoolRecompute(slot) => current_recompute(slot),
        },
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
            match target {
                Target::Policy(slot) => put(slot, bytes),
                Target::Routing(client) => put_routing(client, &bytes),
                Target::PoolRecompute(slot) => put_recompute(slot, &bytes),
            }
        }
        _ => {
            let msg = format!("{} supports GET and PUT", target.path());
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

fn put_routing(client: &EngineClient, body: &[u8]) -> http::Response<Body> {
    let parsed = serde_json::from_slice::<Routing>(body)
        .map_err(|e| {
            format!("body must be like {{\"routing\": \"prefix\", \"balance\": 0.3}}: {e}")
        })
        .and_then(|r| r.check().map(|()| r));
    match parsed {
        Ok(routing) => {
            client.set_routing(routing);
            tracing::info!(routing = routing.name(), "routing switched");
            current_routing(client)
        }
        Err(message) => ApiError::BadRequest {
            message,
            param: Some("routing".into()),
        }
        .into_response(),
    }
}

/// `{"pool_recompute": "link:k=1"}`: parsed and checked here, then one pointer swap; ranking
/// requests load the setting without locking.
fn put_recompute(slot: &ArcSwap<RecomputeSpec>, body: &[u8]) -> http::Response<Body> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Put {
        pool_recompute: RecomputeSpec,
    }
    match serde_json::from_slice::<Put>(body) {
        Ok(put) => {
            slot.store(std::sync::Arc::new(put.pool_recompute));
            tracing::info!(setting = %put.pool_recompute, "pool recompute switched");
            current_recompute(slot)
        }
        Err(e) => ApiError::BadRequest {
            message: format!("body must be like {{\"pool_recompute\": \"link:k=1\"}}: {e}"),
            param: Some("pool_recompute".into()),
        }
        .into_response(),
    }
}

fn current_recompute(slot: &ArcSwap<RecomputeSpec>) -> http::Response<Body> {
    let body = serde_json::json!({"pool_recompute": **slot.load(),
        "valid": "none | link:k=N, each optionally with :pos=true"});
    json_response(StatusCode::OK, &body)
}

fn current_routing(client: &EngineClient) -> http::Response<Body> {
    let body = serde_json::json!({"routing": client.routing(), "valid": Routing::NAMES});
    json_response(StatusCode::OK, &body)
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
