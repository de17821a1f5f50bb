//! recache's own calls to the engine, shared by the endpoints it answers itself (ranking,
//! retrieval) and the item pool: JSON calls through the engine client (which picks the replica
//! and retries), `/tokenize`, the served model, and the one error those requests answer with.
//!
//! - [`EngineHandle`]: what a caller needs to talk to the engine: the client, the engine's
//!   dialect and the token cache; handed to ranking and the item pool instead of their owners.
//! - [`api`]: the request parts ranking and retrieval share (users, items, text or tokens).
//! - [`tokens`]: text to token ids through `/tokenize`, cached.
//! - [`error`]: [`EngineError`], rendered in OpenAI's error shape.

pub mod api;
pub mod error;
pub mod tokens;

use std::sync::Arc;

use http::Method;
use serde_json::{Value, json};

pub use error::EngineError;

use crate::client::{EngineClient, JsonAnswer};

/// The engine as recache's own requests see it: the client, the engine's dialect (routes and
/// request shapes, `recache_adapters::Engine`) and the token cache.
pub struct EngineHandle {
    pub client: Arc<EngineClient>,
    pub dialect: recache_adapters::Engine,
    pub tokens: tokens::TokenCache,
}

impl EngineHandle {
    pub fn new(client: Arc<EngineClient>, dialect: recache_adapters::Engine) -> Self {
        Self {
            client,
            dialect,
            tokens: Default::default(),
        }
    }
}

/// POSTs `body` to `path` through the engine client and returns the JSON answer; a non-2xx
/// answer becomes [`EngineError::Engine`] carrying the engine's body.
pub async fn post_json(
    client: &EngineClient,
    path: &str,
    body: &Value,
) -> Result<Value, EngineError> {
    answer(client.json(Method::POST, path, Some(body)).await?)
}

/// GETs `path`, as [`post_json`].
pub async fn get_json(client: &EngineClient, path: &str) -> Result<Value, EngineError> {
    answer(client.json(Method::GET, path, None).await?)
}

/// The JSON of a 2xx answer; any other is [`EngineError::Engine`].
pub fn answer(a: JsonAnswer) -> Result<Value, EngineError> {
    if a.status.is_success() {
        Ok(a.value)
    } else {
        Err(EngineError::Engine {
            status: a.status,
            body: a.value,
        })
    }
}

/// Token ids of `text` from the engine's `/tokenize` (no special tokens added).
pub async fn tokenize(
    client: &EngineClient,
    model: Option<&str>,
    text: &str,
) -> Result<Vec<u32>, EngineError> {
    let mut body = json!({"prompt": text, "add_special_tokens": false});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    let answer = post_json(client, "/tokenize", &body).await?;
    answer["tokens"]
        .as_array()
        .and_then(|a| a.iter().map(|t| t.as_u64().map(|t| t as u32)).collect())
        .ok_or_else(|| EngineError::BadEngineAnswer(format!("/tokenize answered {answer}")))
}

/// The engine's first served model (pool keys carry the model name requests use).
pub async fn served_model(client: &EngineClient) -> Option<String> {
    let answer: Value = get_json(client, "/v1/models").await.ok()?;
    answer["data"][0]["id"].as_str().map(str::to_string)
}
