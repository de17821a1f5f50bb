//! The parts of a request that ranking and retrieval share: a user or an item given as an id
//! and either text (tokenized by the engine) or token ids, the check that turns one into a
//! [`Checked`] entity or a 400 naming the field, and that 400.

use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

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

/// One user or item after the checks: the id as sent, its key (text form) and content.
#[derive(Debug, Clone)]
pub struct Checked {
    pub id: Value,
    pub key: String,
    pub content: TextOrTokens,
}

/// A 400 naming the request field `param`.
pub fn bad(message: impl Into<String>, param: &str) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
        param: Some(param.to_string()),
    }
}

/// Checks one user or item (`param`: the field it came in, named in the 400).
pub fn check(e: Entity, param: &str) -> Result<Checked, ApiError> {
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
