//! Talking to the engine for ranking: JSON calls through the engine client (which picks the
//! replica and retries), the scoring request, and reading scores and cache usage out of its
//! answer.
//!
//! The scoring request's shape is the engine's dialect (`recache_adapters::Engine::score_body`:
//! vLLM `/v1/completions` with `logprob_token_ids`, SGLang `/generate` with
//! `token_ids_logprob`); here it is sent and its answer mapped to ranking errors.

use std::sync::Arc;

use http::Method;
use serde_json::{Value, json};

use recache_adapters::Engine;
use recache_adapters::scoring::{ScoreAnswer, ScoreRequest};

use super::RankError;
use super::layout::Prompt;
use crate::client::JsonAnswer;
use crate::client::route::GrHint;
use crate::rank::Ranker;

/// POSTs `body` to `path` through the engine client and returns the JSON answer; a non-2xx
/// answer becomes [`RankError::Engine`] carrying the engine's body.
pub async fn post_json(state: &Arc<Ranker>, path: &str, body: &Value) -> Result<Value, RankError> {
    answer(state.client.json(Method::POST, path, Some(body)).await?)
}

/// [`post_json`] for a ranking prompt: the routing rule also sees its sides (`gr`). Returns
/// the answer and the index of the replica that gave it.
pub async fn post_ranked(
    state: &Arc<Ranker>,
    path: &str,
    body: &Value,
    route: &GrHint,
) -> Result<(Value, Option<usize>), RankError> {
    let call = state
        .client
        .json_routed(Method::POST, path, Some(body), Some(route));
    let a = call.await?;
    let replica = a.replica;
    Ok((answer(a)?, replica))
}

/// GETs `path`, as [`post_json`].
pub async fn get_json(state: &Arc<Ranker>, path: &str) -> Result<Value, RankError> {
    answer(state.client.json(Method::GET, path, None).await?)
}

pub(crate) fn answer(a: JsonAnswer) -> Result<Value, RankError> {
    if a.status.is_success() {
        Ok(a.value)
    } else {
        Err(RankError::Engine {
            status: a.status,
            body: a.value,
        })
    }
}

/// Token ids of `text` from the engine's `/tokenize` (no special tokens added).
pub async fn tokenize(
    state: &Arc<Ranker>,
    model: Option<&str>,
    text: &str,
) -> Result<Vec<u32>, RankError> {
    let mut body = json!({"prompt": text, "add_special_tokens": false});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    let answer = post_json(state, "/tokenize", &body).await?;
    answer["tokens"]
        .as_array()
        .and_then(|a| a.iter().map(|t| t.as_u64().map(|t| t as u32)).collect())
        .ok_or_else(|| RankError::BadEngineAnswer(format!("/tokenize answered {answer}")))
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

pub fn read_scores(engine: Engine, answer: &Value, prompt: &Prompt) -> Result<Scores, RankError> {
    let labels: Vec<u32> = prompt.labels.iter().map(|(l, _)| *l).collect();
    engine
        .read_score(answer, &labels)
        .map_err(|e| RankError::BadEngineAnswer(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_label_and_usage() {
        let prompt = Prompt {
            tokens: vec![1, 2],
            labels: vec![(300, 1), (301, 0)],
        };
        let answer = json!({"choices": [{"logprobs": {"top_logprobs": [
            {"token_id:301": -1.5, "token_id:300": -0.5}]}}],
            "usage": {"prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}});
        let s = read_scores(Engine::Vllm, &answer, &prompt).expect("scores");
        assert_eq!(s.logprobs, vec![-0.5, -1.5]);
        assert_eq!((s.prompt_tokens, s.cached_tokens), (2, 1));
        let missing =
            json!({"choices": [{"logprobs": {"top_logprobs": [{"token_id:300": -0.5}]}}]});
        let e = read_scores(Engine::Vllm, &missing, &prompt).expect_err("missing label");
        assert!(e.to_string().contains("label token 301"), "{e}");
        let (path, body) = scoring_request(Engine::Vllm, Some("m"), &prompt, Some("s"));
        assert_eq!(path, "/v1/completions");
        assert_eq!(body["logprob_token_ids"], json!([300, 301]));
        assert_eq!(body["cache_salt"], "s");
    }
}
