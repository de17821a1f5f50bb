//! The `/v1/rank` request and response shapes, and the checks that turn a body into a
//! [`Validated`] request or a 400 naming the problem.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::select::PrefixKind;
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

/// A user or an item: an id and either text (tokenized by the engine) or token ids.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entity {
    pub id: Value,
    pub text: Option<String>,
    pub tokens: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TextOrTokens {
    Text(String),
    Tokens(Vec<u32>),
}

/// How the prefix of this request is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The configured selector decides.
    Auto,
    Fixed(PrefixKind),
}

/// One user or item after the checks: the id as sent, its key (text form) and content.
#[derive(Debug, Clone)]
pub struct Checked {
    pub id: Value,
    pub key: String,
    pub content: TextOrTokens,
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
    pub pool_recompute: Option<super::recompute::RecomputeSpec>,
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

pub fn bad(message: impl Into<String>, param: &str) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
        param: Some(param.to_string()),
    }
}

/// Parses a `/v1/rank` body.
pub fn parse(body: &[u8], max_items: usize) -> Result<Validated, ApiError> {
    let req: RankRequest = serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        message: format!("invalid /v1/rank body: {e}"),
        param: None,
    })?;
    validate(req, max_items)
}

pub(crate) fn check(e: Entity, param: &str) -> Result<Checked, ApiError> {
    let key = match &e.id {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        _ => {
            return Err(bad(
                format!("'{param}.id' must be a non-empty string or an integer"),
                param,
            ));
        }
    };
    let content = match (e.text, e.tokens) {
        (Some(t), None) if !t.is_empty() => TextOrTokens::Text(t),
        (None, Some(t)) if !t.is_empty() => TextOrTokens::Tokens(t),
        (Some(_), Some(_)) => {
            return Err(bad(
                format!("'{param}' ({key}) has both 'text' and 'tokens'; give one"),
                param,
            ));
        }
        _ => {
            return Err(bad(
                format!("'{param}' ({key}) needs a non-empty 'text' or 'tokens'"),
                param,
            ));
        }
    };
    Ok(Checked {
        id: e.id,
        key,
        content,
    })
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
            spec.parse::<super::recompute::RecomputeSpec>()
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
mod tests {
    use super::*;

    fn err(body: serde_json::Value) -> String {
        match parse(body.to_string().as_bytes(), 3) {
            Err(ApiError::BadRequest { message, .. }) => message,
            other => panic!("expected 400, got {other:?}"),
        }
    }

    #[test]
    fn accepts_text_tokens_and_integer_ids() {
        let v = parse(
            br#"{"model":"m","user":{"id":5,"tokens":[1,2]},"items":[{"id":"a","text":"x"},{"id":7,"tokens":[3]}],"top_k":9}"#,
            3,
        )
        .expect("valid");
        assert_eq!(v.user.key, "5");
        assert_eq!(v.items[1].key, "7");
        assert_eq!(v.items[1].id, serde_json::json!(7));
        assert_eq!(v.top_k, 2);
        assert_eq!(v.mode, Mode::Auto);
    }

    #[test]
    fn rejects_with_a_message_naming_the_problem() {
        let user = serde_json::json!({"id": "u", "text": "hi"});
        let item = |id: &str| serde_json::json!({"id": id, "text": "x"});
        let m = err(serde_json::json!({"user": user, "items": []}));
        assert!(m.contains("at least one candidate"), "{m}");
        let m = err(serde_json::json!({"user": user, "items": [item("a"), item("a")]}));
        assert!(m.contains("duplicate id \"a\""), "{m}");
        let m = err(serde_json::json!({"user": {"id": "u", "text": ""}, "items": [item("a")]}));
        assert!(m.contains("'user' (u) needs a non-empty"), "{m}");
        let m = err(serde_json::json!({"user": user, "items": [item("a")], "mode": "x"}));
        assert!(m.contains("'mode' must be one of"), "{m}");
        let m = err(
            serde_json::json!({"user": user, "items": [item("a")], "pool_recompute": "link:k=0"}),
        );
        assert!(m.contains("pool recompute 'link:k=0'"), "{m}");
        let four = [item("a"), item("b"), item("c"), item("d")];
        let m = err(serde_json::json!({"user": user, "items": four}));
        assert!(m.contains("has 4 candidates; at most 3"), "{m}");
        let m = err(serde_json::json!({"items": [item("a")]}));
        assert!(m.contains("missing field `user`"), "{m}");
    }
}
