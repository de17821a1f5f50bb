//! Type checks on OpenAI-shaped request bodies (`/v1/completions`, `/v1/chat/completions`).
//!
//! recache only checks the fields whose type it can state for sure; unknown fields are the
//! engine's business (vLLM has many extensions) and pass through untouched. The checks exist so
//! a client gets an OpenAI-style 400 naming the bad field instead of an engine stack trace.

use serde_json::{Map, Value};

/// Routes whose bodies recache parses before forwarding.
pub const COMPLETIONS: &str = "/v1/completions";
pub const CHAT_COMPLETIONS: &str = "/v1/chat/completions";

/// A request body that does not have the shape its route requires.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    /// Human-readable explanation, shown to the client.
    pub message: String,
    /// The offending field, when there is one (OpenAI's `param`).
    pub param: Option<String>,
}

impl ValidationError {
    fn field(param: &str, expected: &str) -> Self {
        Self {
            message: format!("'{param}' must be {expected}"),
            param: Some(param.to_string()),
        }
    }
}

/// What the proxy learns from a validated body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `"stream": true` was asked for.
    pub stream: bool,
}

/// True for routes whose bodies [`validate_body`] checks.
pub fn is_parsed_route(path: &str) -> bool {
    path == COMPLETIONS || path == CHAT_COMPLETIONS
}

/// Checks `body` for `path`; routes recache does not parse are accepted as they are.
pub fn validate_body(path: &str, body: &[u8]) -> Result<RequestInfo, ValidationError> {
    if !is_parsed_route(path) {
        return Ok(RequestInfo::default());
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| ValidationError {
        message: format!("request body is not valid JSON: {e}"),
        param: None,
    })?;
    let Value::Object(obj) = value else {
        return Err(ValidationError {
            message: "request body must be a JSON object".into(),
            param: None,
        });
    };
    validate_object(path, &obj)
}

/// [`validate_body`] for a body already parsed into a JSON object (the sidecar parses each
/// body once and runs every step over the parsed form).
pub fn validate_object(
    path: &str,
    obj: &serde_json::Map<String, Value>,
) -> Result<RequestInfo, ValidationError> {
    if !is_parsed_route(path) {
        return Ok(RequestInfo::default());
    }
    check_common(obj)?;
    if path == COMPLETIONS {
        check_prompt(obj)?;
    } else {
        check_messages(obj)?;
    }
    Ok(RequestInfo {
        stream: matches!(obj.get("stream"), Some(Value::Bool(true))),
    })
}

fn check_common(obj: &Map<String, Value>) -> Result<(), ValidationError> {
    let optional = |key: &str, ok: fn(&Value) -> bool, expected: &str| match obj.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(v) if ok(v) => Ok(()),
        Some(_) => Err(ValidationError::field(key, expected)),
    };
    optional("model", Value::is_string, "a string")?;
    optional("stream", Value::is_boolean, "a boolean")?;
    optional("max_tokens", Value::is_u64, "a non-negative integer")?;
    optional(
        "max_completion_tokens",
        Value::is_u64,
        "a non-negative integer",
    )?;
    optional(
        "n",
        |v| v.as_u64().is_some_and(|n| n >= 1),
        "a positive integer",
    )?;
    optional("temperature", Value::is_number, "a number")?;
    optional("top_p", Value::is_number, "a number")?;
    optional("seed", Value::is_i64, "an integer")?;
    optional(
        "stop",
        |v| v.is_string() || all(v, Value::is_string),
        "a string or an array of strings",
    )
}

fn check_prompt(obj: &Map<String, Value>) -> Result<(), ValidationError> {
    const EXPECTED: &str =
        "a string, an array of strings, an array of token ids or an array of token-id arrays";
    let Some(prompt) = obj.get("prompt") else {
        return Err(ValidationError {
            message: "'prompt' is required".into(),
            param: Some("prompt".into()),
        });
    };
    let token_ids = |v: &Value| all(v, Value::is_u64);
    let ok = prompt.is_string()
        || all(prompt, Value::is_string)
        || token_ids(prompt)
        || all(prompt, token_ids);
    if ok {
        Ok(())
    } else {
        Err(ValidationError::field("prompt", EXPECTED))
    }
}

fn check_messages(obj: &Map<String, Value>) -> Result<(), ValidationError> {
    let Some(Value::Array(messages)) = obj.get("messages") else {
        return Err(ValidationError::field(
            "messages",
            "an array of message objects",
        ));
    };
    for (i, m) in messages.iter().enumerate() {
        let role_ok = m.get("role").is_some_and(Value::is_string);
        if !role_ok {
            return Err(ValidationError::field(
                &format!("messages[{i}].role"),
                "a string",
            ));
        }
    }
    Ok(())
}

/// True when `v` is an array whose elements all satisfy `f` (an empty array qualifies).
fn all(v: &Value, f: impl Fn(&Value) -> bool) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(f))
}

/// Token-id prompts in a `prompt` / `input_ids` value: one list of ids or a batch of them;
/// text (or anything else) gives none.
pub fn token_prompts(v: &Value) -> Vec<Vec<u32>> {
    let ids = |v: &Value| -> Option<Vec<u32>> {
        v.as_array()?
            .iter()
            .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect()
    };
    match v.as_array() {
        Some(items) if items.iter().all(Value::is_array) => items.iter().filter_map(ids).collect(),
        Some(_) => ids(v).into_iter().collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(path: &str, body: &str) -> Result<RequestInfo, ValidationError> {
        validate_body(path, body.as_bytes())
    }

    #[test]
    fn accepts_every_prompt_form() {
        for prompt in [r#""hi""#, r#"["a","b"]"#, "[1,2,3]", "[[1,2],[3]]"] {
            let body = format!(r#"{{"model":"m","prompt":{prompt}}}"#);
            assert!(check(COMPLETIONS, &body).is_ok(), "{body}");
        }
    }

    #[test]
    fn names_the_bad_field() {
        let err = check(COMPLETIONS, r#"{"prompt":"x","max_tokens":"ten"}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
        let err = check(COMPLETIONS, r#"{"prompt":[1,"a"]}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("prompt"));
        let err = check(CHAT_COMPLETIONS, r#"{"messages":[{"content":"x"}]}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("messages[0].role"));
    }

    #[test]
    fn rejects_malformed_json_and_non_objects() {
        assert!(
            check(COMPLETIONS, "{")
                .unwrap_err()
                .message
                .contains("not valid JSON")
        );
        assert!(
            check(CHAT_COMPLETIONS, "[1]")
                .unwrap_err()
                .message
                .contains("JSON object")
        );
        assert!(
            check(COMPLETIONS, "{}")
                .unwrap_err()
                .message
                .contains("required")
        );
    }

    #[test]
    fn reports_streaming_and_ignores_other_routes() {
        assert!(
            check(COMPLETIONS, r#"{"prompt":"x","stream":true}"#)
                .unwrap()
                .stream
        );
        assert!(check("/tokenize", "not json").is_ok());
    }

    #[test]
    fn token_prompts_reads_ids_and_batches_and_skips_text() {
        let v = |s: &str| serde_json::from_str::<Value>(s).expect("json");
        assert_eq!(token_prompts(&v("[1,2]")), vec![vec![1, 2]]);
        assert_eq!(token_prompts(&v("[[1],[2,3]]")).len(), 2);
        assert!(token_prompts(&v(r#""text""#)).is_empty());
        assert!(token_prompts(&v(r#"["a","b"]"#)).is_empty());
        assert!(token_prompts(&v("[-1]")).is_empty());
        assert!(token_prompts(&v("{}")).is_empty());
    }
}
