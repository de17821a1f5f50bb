//! Talking to the engine for ranking: JSON POSTs to the least-loaded healthy replica, the
//! scoring request, and reading scores and cache usage out of its answer.
//!
//! The scoring request's shape is the engine's dialect (`recache_adapters::Engine::score_body`:
//! vLLM `/v1/completions` with `logprob_token_ids`, SGLang `/generate` with
//! `token_ids_logprob`); here it is sent and its answer mapped to ranking errors.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use recache_adapters::Engine;
use recache_adapters::scoring::{ScoreAnswer, ScoreRequest};

use super::RankError;
use super::layout::Prompt;
use crate::service::AppState;
use crate::upstream::InFlight;

/// POSTs `body` to `path` on a healthy replica (the next one on connect failure) and returns
/// the JSON answer; a non-2xx answer becomes [`RankError::Engine`].
pub async fn post_json(
    state: &Arc<AppState>,
    path: &str,
    body: &Value,
) -> Result<Value, RankError> {
    send_json(state, Method::POST, path, Bytes::from(body.to_string())).await
}

/// GETs `path` on a healthy replica, as [`post_json`].
pub async fn get_json(state: &Arc<AppState>, path: &str) -> Result<Value, RankError> {
    send_json(state, Method::GET, path, Bytes::new()).await
}

async fn send_json(
    state: &Arc<AppState>,
    method: Method,
    path: &str,
    bytes: Bytes,
) -> Result<Value, RankError> {
    let mut tried = Vec::new();
    let mut last = RankError::NoUpstream;
    while let Some(index) = state.upstreams.pick(&tried) {
        tried.push(index);
        let upstream = state.upstreams.get(index).clone();
        let _in_flight = InFlight::new(upstream.clone(), state.metrics.clone());
        let pq = path.parse().ok();
        let uri = upstream
            .uri_for(pq.as_ref())
            .map_err(|e| RankError::Internal(format!("cannot build upstream URL: {e}")))?;
        let req = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(bytes.clone()))
            .map_err(|e| RankError::Internal(format!("cannot build upstream request: {e}")))?;
        let label = upstream.label.clone();
        let resp =
            match tokio::time::timeout(state.config.upstream_timeout, state.client.request(req))
                .await
            {
                Ok(Ok(resp)) => resp,
                Ok(Err(e)) if e.is_connect() => {
                    upstream.set_healthy(false);
                    last =
                        RankError::Upstream(format!("could not connect to upstream {label}: {e}"));
                    continue;
                }
                Ok(Err(e)) => {
                    return Err(RankError::Upstream(format!("upstream {label} failed: {e}")));
                }
                Err(_) => {
                    return Err(RankError::Upstream(format!(
                        "upstream {label} did not answer within {:?} (--upstream-timeout)",
                        state.config.upstream_timeout
                    )));
                }
            };
        upstream.set_healthy(true);
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| RankError::Upstream(format!("reading the answer of {label}: {e}")))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
            json!({"error": {"message": String::from_utf8_lossy(&body), "type": "upstream_error"}})
        });
        if !status.is_success() {
            return Err(RankError::Engine {
                status,
                body: value,
            });
        }
        return Ok(value);
    }
    Err(last)
}

/// Token ids of `text` from the engine's `/tokenize` (no special tokens added).
pub async fn tokenize(
    state: &Arc<AppState>,
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
