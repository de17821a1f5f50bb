//! The `/v1/rank` request and response shapes, and the checks that turn a body into a
//! [`Validated`] request or a 400 naming the problem.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::select::PrefixKind;
use crate::engine::api::{Checked, Entity, TextOrTokens, bad, check};
use crate::error::ApiError;

/// `POST /v1/rank` body (also the `recache_rank` object of a completions body, where `model`,
/// `top_k` and `cache_salt` come from the completions body instead).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankRequest {
    pub model: Option<String>,
    pub user: Entity,
    pub items: Vec<Entity>,
    pub instruction: Option<TextOrTokens>,
    pub top_k: Option<usize>,
    pub mode: Option<String>,
    /// Passed to vLLM's `cache_salt`: requests with different salts never share cached blocks.
    pub cache_salt: Option<String>,
    /// The request's deadline in ms from its arrival (instead of the
    /// `x-recache-deadline-ms` header); see `crate::slo`.
    pub deadline_ms: Option<u64>,
    /// This request's pool recompute setting (`--rank-pool-recompute`'s spelling), instead
    /// of the one in force.
    pub pool_recompute: Option<String>,
    /// This request's readout (`auto`, `label` or `item`, as `--rank-readout`), instead of the
    /// server's.
    pub readout: Option<String>,
}

/// How the prefix of this request is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The configured selector decides.
    Auto,
    Fixed(PrefixKind),
}

/// A request that passed every check.
#[derive(Debug, Clone)]
pub struct Validated {
    pub model: Option<String>,
    pub user: Checked,
    pub items: Vec<Checked>,
    pub instruction: Option<TextOrTokens>,
    pub top_k: usize,
    pub mode: Mode,
    pub cache_salt: Option<String>,
    pub deadline: Option<std::time::Duration>,
    pub pool_recompute: Option<crate::itempool::recompute::RecomputeSpec>,
    pub readout: Option<super::readout::Readout>,
}

#[derive(Debug, Serialize)]
pub struct Scored {
    pub id: Value,
    pub score: f64,
}

#[derive(Debug, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// With the item pool on: prompt tokens the engine's pool supplied (the connector's own
    /// count; 0 when the request was not built for the pool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_tokens: Option<u64>,
    /// With the item pool on: tokens the recompute setting sent again (computed in context).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_tokens: Option<u64>,
}

/// `POST /v1/rank` answer: candidates best first, the layout used and the engine's token usage.
#[derive(Debug, Serialize)]
pub struct RankResponse {
    pub ranking: Vec<Scored>,
    pub prefix: PrefixKind,
    pub usage: Usage,
}

/// Parses a `/v1/rank` body.
pub fn parse(body: &[u8], max_items: usize) -> Result<Validated, ApiError> {
    let req: RankRequest = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        message: format!("invalid /v1/rank body: {e}"),
        param: None,
    })?;
    validate(req, max_items)
}

/// A 400 naming the first id two candidates share.
fn unique_ids(items: &[Checked]) -> Result<(), ApiError> {
    let mut seen = std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(first) = seen.insert(item.key.as_str(), i) {
            return Err(bad(
                format!(
                    "'items' has duplicate id {:?} (positions {first} and {i}); ids must be unique",
                    item.key
                ),
                "items",
            ));
        }
    }
    Ok(())
}

/// Checks a parsed request: candidates present, within the label budget, unique ids; a
/// non-empty user; a known mode.
pub fn validate(req: RankRequest, max_items: usize) -> Result<Validated, ApiError> {
    if req.items.is_empty() {
        return Err(bad("'items' must contain at least one candidate", "items"));
    }
    if req.items.len() > max_items {
        return Err(bad(
            format!(
                "'items' has {} candidates; at most {max_items} can be scored per request (one \
                 label token each; vLLM scores at most 128 given tokens; see --rank-max-items)",
                req.items.len()
            ),
            "items",
        ));
    }
    let mode = match req.mode.as_deref() {
        None | Some("auto") => Mode::Auto,
        Some("user_prefix") => Mode::Fixed(PrefixKind::User),
        Some("item_prefix") => Mode::Fixed(PrefixKind::Item),
        Some(other) => {
            return Err(bad(
                format!("'mode' must be one of auto, user_prefix, item_prefix; got {other:?}"),
                "mode",
            ));
        }
    };
    if req.top_k == Some(0) {
        return Err(bad("'top_k' must be at least 1", "top_k"));
    }
    if matches!(&req.instruction, Some(TextOrTokens::Tokens(t)) if t.is_empty()) {
        return Err(bad("'instruction' must not be empty", "instruction"));
    }
    let user = check(req.user, "user")?;
    let items = req
        .items
        .into_iter()
        .map(|e| check(e, "items"))
        .collect::<Result<Vec<_>, _>>()?;
    unique_ids(&items)?;
    let top_k = req.top_k.unwrap_or(items.len()).min(items.len());
    let deadline = match req.deadline_ms {
        Some(ms) => Some(
            crate::slo::budget_ms("deadline_ms", Some(ms), &ms.to_string())
                .map_err(|e| bad(e.to_string(), "deadline_ms"))?,
        ),
        None => None,
    };
    let pool_recompute = match req.pool_recompute.as_deref() {
        Some(spec) => Some(
            spec.parse::<crate::itempool::recompute::RecomputeSpec>()
                .map_err(|e| bad(e.to_string(), "pool_recompute"))?,
        ),
        None => None,
    };
    let readout = match req.readout.as_deref() {
        Some(r) => Some(r.parse().map_err(|e: String| bad(e, "readout"))?),
        None => None,
    };
    Ok(Validated {
        model: req.model,
        user,
        items,
        instruction: req.instruction,
        top_k,
        mode,
        cache_salt: req.cache_salt,
        deadline,
        pool_recompute,
        readout,
    })
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
