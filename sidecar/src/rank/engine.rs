//! Talking to the engine for ranking: JSON POSTs to the least-loaded healthy replica, the
//! scoring request, and reading scores and cache usage out of its answer.
//!
//! Scores use vLLM's documented completions fields: `logprob_token_ids` (the label tokens; vLLM
//! returns the log-probability of every one of them at the generated position, up to 128) with
//! `logprobs` set as it requires, `return_tokens_as_token_ids` (so the returned map is keyed
//! `token_id:N`, not by decoded text that can collide), `allowed_token_ids` (the one generated
//! token is a label), `max_tokens: 1`, `temperature: 0`. The returned log-probabilities are over
//! the whole vocabulary (vLLM's default `raw_logprobs` mode); ordering is the same as over the
//! label set alone.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

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
    let bytes = Bytes::from(body.to_string());
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
            .method(Method::POST)
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

/// The completions body that scores every label of `prompt`.
pub fn scoring_body(model: Option<&str>, prompt: &Prompt, cache_salt: Option<&str>) -> Value {
    let labels: Vec<u32> = prompt.labels.iter().map(|(l, _)| *l).collect();
    let mut body = json!({
        "prompt": prompt.tokens,
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": 1,
        "logprob_token_ids": labels,
        "allowed_token_ids": labels,
        "return_tokens_as_token_ids": true,
    });
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    if let Some(s) = cache_salt {
        body["cache_salt"] = json!(s);
    }
    body
}

/// What the engine's scoring answer says.
#[derive(Debug, PartialEq)]
pub struct Scores {
    /// Log-probability per prompt position (same order as `prompt.labels`).
    pub logprobs: Vec<f64>,
    pub prompt_tokens: u64,
    /// `usage.prompt_tokens_details.cached_tokens` (vLLM `--enable-prompt-tokens-details`);
    /// 0 when the engine does not report it.
    pub cached_tokens: u64,
}

pub fn read_scores(answer: &Value, prompt: &Prompt) -> Result<Scores, RankError> {
    let top = &answer["choices"][0]["logprobs"]["top_logprobs"][0];
    let Some(map) = top.as_object() else {
        return Err(RankError::BadEngineAnswer(
            "the engine's answer has no choices[0].logprobs.top_logprobs[0] (does it support \
             logprob_token_ids? vLLM 0.32 does)"
                .into(),
        ));
    };
    let logprobs = prompt
        .labels
        .iter()
        .map(|(label, _)| {
            map.get(&format!("token_id:{label}"))
                .and_then(Value::as_f64)
                .ok_or_else(|| {
                    RankError::BadEngineAnswer(format!(
                        "the engine returned no log-probability for label token {label}"
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let usage = &answer["usage"];
    Ok(Scores {
        logprobs,
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        cached_tokens: usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
    })
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
        let s = read_scores(&answer, &prompt).expect("scores");
        assert_eq!(s.logprobs, vec![-0.5, -1.5]);
        assert_eq!((s.prompt_tokens, s.cached_tokens), (2, 1));
        let missing =
            json!({"choices": [{"logprobs": {"top_logprobs": [{"token_id:300": -0.5}]}}]});
        let e = read_scores(&missing, &prompt).expect_err("missing label");
        assert!(e.to_string().contains("label token 301"), "{e}");
        let body = scoring_body(Some("m"), &prompt, Some("s"));
        assert_eq!(body["logprob_token_ids"], json!([300, 301]));
        assert_eq!(body["cache_salt"], "s");
    }
}
