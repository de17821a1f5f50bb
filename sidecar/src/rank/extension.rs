//! GR prompts through `/v1/completions` for OpenAI clients: a completions body may carry
//! `"recache_rank": {user, items, instruction?, mode?}` instead of `prompt`. recache rewrites
//! it exactly as `/v1/rank` would (same layouts, selector and label tokens), sets `prompt` to
//! the token ids, sets `allowed_token_ids` to the labels unless the client set it, removes the
//! extension object and forwards the body; the engine's completion comes back unchanged.
//!
//! The response carries `x-recache-prefix: user|item` and `x-recache-labels`, a JSON array of
//! `[label_token_id, item_id]` pairs (omitted if an id is not header-safe), so a client can map
//! a generated label or its log-probabilities back to items.

use std::sync::Arc;

use http::{HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};

use super::api::{self, RankRequest};
use super::pipeline::prepare;
use crate::client::route::GrHint;
use crate::engine::EngineError;
use crate::engine::api::bad;
use crate::rank::Ranker;

/// The body key that marks a GR completions request.
pub const KEY: &str = "recache_rank";

/// Rewrites a completions body that carries [`KEY`] (the proxy's pipeline calls this only
/// then) in place; returns the headers for the response and the prompt's sides for the
/// routing rule.
pub async fn rewrite(
    state: &Arc<Ranker>,
    obj: &mut Map<String, Value>,
) -> Result<(HeaderMap, GrHint), EngineError> {
    let Some(spec) = obj.remove(KEY) else {
        return Ok((HeaderMap::new(), GrHint::default()));
    };
    if obj.contains_key("prompt") {
        return Err(bad(format!("give either 'prompt' or '{KEY}', not both"), KEY).into());
    }
    let mut req: RankRequest = serde_json::from_value(spec)
        .map_err(|e| bad(format!("invalid '{KEY}' object: {e}"), KEY))?;
    if req.model.is_some() || req.top_k.is_some() || req.cache_salt.is_some() {
        return Err(bad(
            format!("'{KEY}' takes user, items, instruction and mode; put model and cache_salt in the completions body"),
            KEY,
        )
        .into());
    }
    if req.deadline_ms.is_some() {
        return Err(bad(
            format!("'{KEY}' takes no deadline_ms: send the x-recache-deadline-ms header"),
            KEY,
        )
        .into());
    }
    req.model = obj.get("model").and_then(Value::as_str).map(str::to_string);
    let req = api::validate(req, state.rank.config.max_items)?;
    let prepared = prepare(state, &req).await?;
    let labels: Vec<u32> = prepared.prompt.labels.iter().map(|(l, _)| *l).collect();
    obj.insert("prompt".into(), json!(prepared.prompt.tokens));
    obj.entry("allowed_token_ids").or_insert(json!(labels));
    if let Some(used) = &prepared.pool {
        let mut body = Value::Object(std::mem::take(obj));
        state
            .engine
            .dialect
            .attach_pool_params(&mut body, &used.params);
        if let Value::Object(m) = body {
            *obj = m;
        }
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-recache-prefix",
        HeaderValue::from_static(prepared.kind.as_str()),
    );
    let pairs: Vec<Value> = prepared
        .prompt
        .labels
        .iter()
        .map(|(l, i)| json!([l, req.items[*i].id]))
        .collect();
    if let Ok(v) = HeaderValue::from_str(&Value::Array(pairs).to_string()) {
        headers.insert("x-recache-labels", v);
    }
    Ok((headers, prepared.route))
}
