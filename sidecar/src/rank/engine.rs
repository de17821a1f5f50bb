//! Scoring on the engine for ranking: the scoring request, sent with the prompt's sides for
//! the routing rule, and the scores and cache usage read out of its answer.
//!
//! The scoring request's shape is the engine's dialect (`recache_adapters::Engine::score_body`:
//! vLLM `/v1/completions` with `logprob_token_ids`, SGLang `/generate` with
//! `token_ids_logprob`); here it is sent and its answer mapped to ranking errors.

use std::sync::Arc;

use http::Method;
use serde_json::Value;

use recache_adapters::Engine;
use recache_adapters::scoring::{ScoreAnswer, ScoreRequest};

use super::layout::Prompt;
use crate::client::route::GrHint;
use crate::engine::{EngineError, answer};
use crate::rank::Ranker;

/// [`crate::engine::post_json`] for a ranking prompt: the routing rule also sees its sides
/// (`gr`). Returns the answer and the index of the replica that gave it.
pub async fn post_ranked(
    state: &Arc<Ranker>,
    path: &str,
    body: &Value,
    route: &GrHint,
) -> Result<(Value, Option<usize>), EngineError> {
    let call = (state.engine.client).json_routed(Method::POST, path, Some(body), Some(route));
    let a = call.await?;
    let replica = a.replica;
    Ok((answer(a)?, replica))
}

/// The engine's scoring request for every label of `prompt`: (path, body).
pub fn scoring_request(
    engine: Engine,
    model: Option<&str>,
    prompt: &Prompt,
    cache_salt: Option<&str>,
) -> (&'static str, Value) {
    let labels: Vec<u32> = prompt.labels.iter().map(|(l, _)| *l).collect();
    let req = ScoreRequest {
        model,
        tokens: &prompt.tokens,
        labels: &labels,
        cache_salt,
    };
    (engine.scoring_path(), engine.score_body(&req))
}

/// What the engine's scoring answer says: log-probability per prompt position (same order as
/// `prompt.labels`), prompt tokens, cached prompt tokens (0 when the engine does not report).
pub type Scores = ScoreAnswer;

pub fn read_scores(engine: Engine, answer: &Value, prompt: &Prompt) -> Result<Scores, EngineError> {
    let labels: Vec<u32> = prompt.labels.iter().map(|(l, _)| *l).collect();
    engine
        .read_score(answer, &labels)
        .map_err(|e| EngineError::BadEngineAnswer(e.to_string()))
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
