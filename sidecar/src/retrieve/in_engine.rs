//! Retrieval's beam search inside the engine: on vLLM replicas that run recache's endpoint
//! plugin (`VLLM_PLUGINS=recache-retrieve`; wire format in `recache_adapters::beam_plugin`),
//! one call runs the whole search in the API server, each beam an engine request with exactly
//! its own allowed tokens and no HTTP round trip per step. The plugin's search is
//! [`super::search`]'s step for step (`shim/python/recache_shim/beam_trie.py`).
//!
//! With `--retrieve-in-engine auto` (the default) the first retrieval asks the engine to run
//! it; a 404 (no plugin) says the replicas do not, and from then on, as with `off` or on
//! SGLang, recache runs the search itself ([`super::engine`]) (the plugin also answers `GET`
//! on its route, for people). The catalog's codes go to a replica only when it says it lacks
//! them (409).

use std::sync::atomic::{AtomicU8, Ordering};

use http::{Method, StatusCode};
use recache_adapters::Engine;
use recache_adapters::beam_plugin::{self, BeamAsk, PATH};
use serde_json::Value;

use super::index::RetrieveIndex;
use super::search::{Found, SearchSpec, SearchStats};
use crate::client::EngineClient;
use crate::engine::{EngineError, answer};

/// What the replicas said: not asked yet, ran a search, answered 404.
const UNKNOWN: u8 = 0;
const ADVERTISED: u8 = 1;
const ABSENT: u8 = 2;

/// The in-engine search's setting, the catalog as the plugin takes it, what the replicas said.
pub struct InEngine {
    enabled: bool,
    state: AtomicU8,
    digest: String,
    codes: Value,
}

impl InEngine {
    pub fn new(enabled: bool, index: &RetrieveIndex) -> Self {
        let items = &index.file.items;
        Self {
            enabled,
            state: AtomicU8::new(UNKNOWN),
            digest: beam_plugin::digest(items.iter().map(|i| i.code.as_slice())),
            codes: items.iter().map(|i| i.code.clone()).collect(),
        }
    }

    /// Runs the search in the engine; None when it cannot run there (the caller runs it).
    pub async fn search(
        &self,
        client: &EngineClient,
        engine: Engine,
        prompt: &[u32],
        spec: &SearchSpec,
    ) -> Option<Result<(Vec<Found>, SearchStats), EngineError>> {
        if !self.enabled || engine != Engine::Vllm || self.state.load(Ordering::Relaxed) == ABSENT {
            return None;
        }
        let (ex, digest) = (&spec.exclude, &self.digest);
        let (beam_width, top_k) = (spec.beam_width, spec.top_k);
        let mut ask = BeamAsk {
            prompt,
            beam_width,
            top_k,
            exclude: ex,
            digest,
            codes: None,
        };
        let mut got = client
            .json(Method::POST, PATH, Some(&beam_plugin::body(&ask)))
            .await;
        if let Ok(a) = &got
            && let (StatusCode::CONFLICT, Some(r)) = (a.status, a.replica)
            && beam_plugin::is_unknown_index(&a.value)
        {
            ask.codes = Some(&self.codes);
            got = client
                .json_to(r, Method::POST, PATH, Some(&beam_plugin::body(&ask)))
                .await;
        }
        let a = match got {
            Ok(a) => a,
            Err(e) => return Some(Err(e.into())),
        };
        let state = match a.status == StatusCode::NOT_FOUND {
            true => ABSENT,
            false => ADVERTISED,
        };
        if self.state.swap(state, Ordering::Relaxed) != state {
            let place = [
                "inside the engine (recache's plugin)",
                "in recache (no engine plugin)",
            ];
            tracing::info!(replica = ?a.replica, "retrieve: the beam search runs {}", place[(state == ABSENT) as usize]);
        }
        (state == ADVERTISED).then(|| answer(a).and_then(|v| self.read(&v)))
    }

    fn read(&self, v: &Value) -> Result<(Vec<Found>, SearchStats), EngineError> {
        let catalog = self.codes.as_array().map_or(0, Vec::len);
        let a = beam_plugin::read(v, catalog)
            .map_err(|e| EngineError::BadEngineAnswer(e.to_string()))?;
        let found = (a.items.iter())
            .map(|&(item, score)| Found {
                item,
                score: score as f32,
            })
            .collect();
        let stats = SearchStats {
            steps: a.steps as usize,
            engine_calls: a.engine_requests,
            prompt_tokens: a.prompt_tokens,
            cached_tokens: a.cached_tokens,
            pruned_beams: a.pruned_beams,
            stopped_early: a.stopped_early,
        };
        Ok((found, stats))
    }
}
