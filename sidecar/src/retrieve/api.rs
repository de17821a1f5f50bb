//! The `/v1/retrieve` request and response shapes, and the checks that turn a body into a
//! [`Validated`] request or a 400 naming the field.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::api::{Checked, Entity, TextOrTokens, bad, check};
use crate::error::ApiError;

/// `POST /v1/retrieve` body (also the `recache_retrieve` object of a completions body, where
/// `model` comes from the completions body).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrieveRequest {
    pub model: Option<String>,
    pub user: Entity,
    pub instruction: Option<TextOrTokens>,
    pub beam_width: Option<usize>,
    pub top_k: Option<usize>,
    /// Item ids never to return (e.g. what the user already has).
    #[serde(default)]
    pub exclude: Vec<Value>,
}

/// A request that passed every check.
#[derive(Debug)]
pub struct Validated {
    pub model: Option<String>,
    pub user: Checked,
    pub instruction: Option<TextOrTokens>,
    pub beam_width: usize,
    pub top_k: usize,
    /// Index positions of the excluded items (ids not in the catalog are ignored: they cannot
    /// be returned anyway).
    pub exclude: Vec<usize>,
}

/// One retrieved item.
#[derive(Debug, Serialize, PartialEq)]
pub struct Item {
    pub id: String,
    /// Sum of the log-probabilities of the item's code tokens.
    pub score: f64,
}

#[derive(Debug, Serialize, Default)]
pub struct Usage {
    /// Prompt tokens over every engine call of the search.
    pub prompt_tokens: u64,
    /// Of those, served from the engine's prefix cache, as the engine reports it (vLLM
    /// reports a batched call's last prompt only, so recache's own loop undercounts on vLLM;
    /// inside the engine every request's count is exact).
    pub cached_tokens: u64,
    /// Engine calls (recache's loop: one per step, more only where a step's label union
    /// exceeds 128; inside the engine: one engine request per live beam and step).
    pub engine_calls: u64,
    pub steps: usize,
    /// Beams dropped because they could not beat the k-th item found.
    pub pruned_beams: u64,
    pub stopped_early: bool,
}

/// `POST /v1/retrieve` answer: items best first.
#[derive(Debug, Serialize)]
pub struct RetrieveResponse {
    pub items: Vec<Item>,
    pub usage: Usage,
}

/// Default beam width when the request gives none.
pub const DEFAULT_BEAM_WIDTH: usize = 32;

/// Parses a `/v1/retrieve` body.
pub fn parse(
    body: &[u8],
    max_beam_width: usize,
    lookup: impl Fn(&str) -> Option<usize>,
) -> Result<Validated, ApiError> {
    let req: RetrieveRequest = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        message: format!("invalid /v1/retrieve body: {e}"),
        param: None,
    })?;
    validate(req, max_beam_width, lookup)
}

/// Checks a parsed request: a non-empty user, `1 <= top_k <= beam_width <= max`, exclude ids
/// that are strings or integers.
pub fn validate(
    req: RetrieveRequest,
    max_beam_width: usize,
    lookup: impl Fn(&str) -> Option<usize>,
) -> Result<Validated, ApiError> {
    let beam_width = req
        .beam_width
        .unwrap_or(DEFAULT_BEAM_WIDTH.min(max_beam_width));
    if beam_width == 0 || beam_width > max_beam_width {
        return Err(bad(
            format!(
                "'beam_width' must be in 1..={max_beam_width} (--retrieve-max-beam-width); got \
                 {beam_width}"
            ),
            "beam_width",
        ));
    }
    let top_k = req.top_k.unwrap_or(10.min(beam_width));
    if top_k == 0 || top_k > beam_width {
        return Err(bad(
            format!("'top_k' must be in 1..=beam_width ({beam_width}); got {top_k}"),
            "top_k",
        ));
    }
    if matches!(&req.instruction, Some(TextOrTokens::Tokens(t)) if t.is_empty())
        || matches!(&req.instruction, Some(TextOrTokens::Text(t)) if t.is_empty())
    {
        return Err(bad("'instruction' must not be empty", "instruction"));
    }
    let user = check(req.user, "user")?;
    let mut exclude = Vec::with_capacity(req.exclude.len());
    for id in &req.exclude {
        let key = match id {
            Value::String(s) => s.clone(),
            Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
            _ => {
                return Err(bad(
                    format!("'exclude' entries must be item ids (strings or integers); got {id}"),
                    "exclude",
                ));
            }
        };
        if let Some(i) = lookup(&key) {
            exclude.push(i);
        }
    }
    Ok(Validated {
        model: req.model,
        user,
        instruction: req.instruction,
        beam_width,
        top_k,
        exclude,
    })
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
