//! Token ids for the text parts of ranking requests and the item catalog, from the engine's
//! `/tokenize`, cached.
//!
//! Items recur across requests (hot items in most of them), and a user's profile recurs with
//! each of their requests, so each text is tokenized once: the cache key is the model, the
//! entity's id and a hash of its text (a changed text is a new entry). The cache is cleared when
//! it holds more than [`MAX_CACHED_TOKENS`], which bounds memory without an LRU on this path.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use super::api::TextOrTokens;
use super::{EngineError, EngineHandle};

/// 16 M token ids (64 MiB).
pub const MAX_CACHED_TOKENS: usize = 16 << 20;

#[derive(Default)]
pub struct TokenCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Arc<Vec<u32>>>,
    tokens: usize,
}

/// The cache key of `text` for entity `kind:id` under `model`.
pub fn key(model: Option<&str>, kind: &str, id: &str, text: &str) -> String {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    format!(
        "{}\u{0}{kind}\u{0}{id}\u{0}{:016x}",
        model.unwrap_or(""),
        h.finish()
    )
}

impl TokenCache {
    pub fn get(&self, key: &str) -> Option<Arc<Vec<u32>>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.map.get(key).cloned()
    }

    pub fn put(&self, key: String, tokens: Arc<Vec<u32>>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.tokens + tokens.len() > MAX_CACHED_TOKENS {
            inner.map.clear();
            inner.tokens = 0;
        }
        inner.tokens += tokens.len();
        if let Some(old) = inner.map.insert(key, tokens) {
            inner.tokens -= old.len();
        }
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Token ids of one user, item or instruction: given ids as they are, text through the cache.
pub async fn resolve(
    engine: &EngineHandle,
    model: Option<&str>,
    kind: &str,
    id: &str,
    content: &TextOrTokens,
) -> Result<Arc<Vec<u32>>, EngineError> {
    let text = match content {
        TextOrTokens::Tokens(t) => return Ok(Arc::new(t.clone())),
        TextOrTokens::Text(text) => text,
    };
    let cache = &engine.tokens;
    let k = key(model, kind, id, text);
    if let Some(hit) = cache.get(&k) {
        return Ok(hit);
    }
    let tokens = Arc::new(super::tokenize(&engine.client, model, text).await?);
    if tokens.is_empty() {
        return Err(EngineError::Api(super::api::bad(
            format!("{kind} {id:?}: its text tokenizes to no tokens"),
            kind,
        )));
    }
    cache.put(k, tokens.clone());
    Ok(tokens)
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;
