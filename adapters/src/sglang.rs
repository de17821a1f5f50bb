//! SGLang's dialect: its native routes (`/generate`, `/flush_cache`), the metrics recache
//! reads, and the scoring request on `/generate`. Its `/v1/*` OpenAI routes are the same
//! shape as vLLM's and pass through the proxy unchanged.
//!
//! Checked against SGLang 0.5.23 (CPU engine) on the testbed in `examples/testbed`. KV events
//! use vLLM's wire format (same decoder, [`crate::kv_events`]) at token granularity: SGLang's
//! radix cache publishes one hash per token (`block_size` 1, coalesced into chained
//! `BlockStored` runs), `BlockRemoved` per evicted radix node, and `AllBlocksCleared` on
//! `/flush_cache`; the batch's third element is the data-parallel rank (each rank publishes
//! on its own port, endpoint port + rank, so one subscriber follows one rank).

use serde_json::{Value, json};

use crate::scoring::{BatchAnswer, ScoreAnswer, ScoreBatch, ScoreError, ScoreRequest};

/// Answers 200 once the engine is up (SGLang runs a one-token generation for it).
pub const HEALTH_PATH: &str = "/health";

/// The native generation route: `input_ids` or `text`, `sampling_params`, logprob options.
pub const GENERATE_PATH: &str = "/generate";

/// Routes whose bodies take a request `priority` (with `--radix-eviction-policy priority` the
/// radix cache evicts the lowest priority first).
pub const PRIORITY_PATHS: [&str; 3] = [
    GENERATE_PATH,
    crate::openai::COMPLETIONS,
    crate::openai::CHAT_COMPLETIONS,
];

/// SGLang-only route (model path, generation or not); answering it tells SGLang from vLLM.
pub const MODEL_INFO_PATH: &str = "/model_info";

/// Empties the radix cache: 200 "Cache flushed." when done, 400 while requests are running.
pub const FLUSH_CACHE_PATH: &str = "/flush_cache";

/// Prompt tokens of finished requests (counter, tokens; labels `is_streaming`).
pub const METRIC_PROMPT_TOKENS: &str = "sglang:prompt_tokens_total";

/// Prompt tokens served from the cache (counter, tokens; labels `cache_source`).
pub const METRIC_CACHED_TOKENS: &str = "sglang:cached_tokens_total";

/// Prompt tokens recache's item pool loaded: the linker's loads count as `host` hits.
pub const METRIC_POOL_HITS: &str = "sglang:cached_tokens_total{cache_source=\"host\"}";

/// Tokens per KV-event block: the radix cache is token-granular (`--page-size` 1).
pub const KV_EVENT_BLOCK_SIZE: usize = 1;

/// The `/generate` body that scores every label: one greedy token with `return_logprob` and
/// `token_ids_logprob` (SGLang returns the log-probability of each listed id at the generated
/// position, over the whole vocabulary). `logprob_start_len: -1` asks for no prompt logprobs.
pub fn score_body(req: &ScoreRequest<'_>) -> Value {
    let mut body = json!({
        "input_ids": req.tokens,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": true,
        "logprob_start_len": -1,
        "token_ids_logprob": req.labels,
    });
    if let Some(s) = req.cache_salt {
        body["cache_salt"] = json!(s);
    }
    body
}

/// Reads `meta_info.output_token_ids_logprobs[0]` (`[[logprob, token_id, text], ...]`),
/// `meta_info.prompt_tokens` and `meta_info.cached_tokens`.
pub fn read_score(answer: &Value, labels: &[u32]) -> Result<ScoreAnswer, ScoreError> {
    let meta = &answer["meta_info"];
    let Some(entries) = meta["output_token_ids_logprobs"][0].as_array() else {
        return Err(ScoreError::Shape(
            "the engine's answer has no meta_info.output_token_ids_logprobs[0] (was it \
             SGLang's /generate with token_ids_logprob?)"
                .into(),
        ));
    };
    let by_id: Vec<(u64, f64)> = entries
        .iter()
        .filter_map(|e| Some((e[1].as_u64()?, e[0].as_f64()?)))
        .collect();
    let logprobs = labels
        .iter()
        .map(|&l| {
            by_id
                .iter()
                .find(|(id, _)| *id == u64::from(l))
                .map(|(_, lp)| *lp)
                .ok_or(ScoreError::MissingLabel(l))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ScoreAnswer {
        logprobs,
        prompt_tokens: meta["prompt_tokens"].as_u64().unwrap_or(0),
        cached_tokens: meta["cached_tokens"].as_u64().unwrap_or(0),
    })
}

/// One `/generate` call for a whole batch: `input_ids` the list of prompts and
/// `token_ids_logprob` each prompt's own labels (SGLang takes a list per prompt).
pub fn score_batch_body(batch: &ScoreBatch<'_>) -> Value {
    let mut body = score_body(&ScoreRequest {
        model: batch.model,
        tokens: &[],
        labels: &[],
        cache_salt: None,
    });
    body["input_ids"] = json!(batch.prompts);
    body["token_ids_logprob"] = json!(batch.labels);
    body
}

/// Reads a batch answer: a list with one [`read_score`] answer per prompt, in order.
pub fn read_score_batch(answer: &Value, labels: &[Vec<u32>]) -> Result<BatchAnswer, ScoreError> {
    let Some(each) = answer.as_array().filter(|a| a.len() == labels.len()) else {
        return Err(ScoreError::Shape(format!(
            "a batched /generate answers a list of {} results; the engine answered {}",
            labels.len(),
            if answer.is_array() {
                "a list of another length"
            } else {
                "something else"
            }
        )));
    };
    let mut out = BatchAnswer {
        logprobs: Vec::with_capacity(labels.len()),
        prompt_tokens: 0,
        cached_tokens: 0,
    };
    for (a, l) in each.iter().zip(labels) {
        let s = read_score(a, l)?;
        out.logprobs.push(s.logprobs);
        out.prompt_tokens += s.prompt_tokens;
        out.cached_tokens += s.cached_tokens;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_from_a_real_generate_answer() {
        // meta_info trimmed from SGLang 0.5.23's answer on the testbed.
        let answer = json!({"text": " haso", "output_ids": [941], "meta_info": {
            "prompt_tokens": 11, "completion_tokens": 1, "cached_tokens": 8,
            "output_token_ids_logprobs": [[[-8.063722610473633, 300, null],
                [-8.729738235473633, 301, null], [-8.067628860473633, 302, null]]]}});
        let s = read_score(&answer, &[302, 300]).expect("scores");
        assert_eq!(s.logprobs, vec![-8.067628860473633, -8.063722610473633]);
        assert_eq!((s.prompt_tokens, s.cached_tokens), (11, 8));
        assert_eq!(
            read_score(&answer, &[303]),
            Err(ScoreError::MissingLabel(303))
        );
        assert!(read_score(&json!({"meta_info": {}}), &[1]).is_err());
        let req = ScoreRequest {
            model: Some("m"),
            tokens: &[1, 2],
            labels: &[300],
            cache_salt: Some("s"),
        };
        let body = score_body(&req);
        assert_eq!(body["token_ids_logprob"], json!([300]));
        assert_eq!(body["input_ids"], json!([1, 2]));
        assert!(body.get("model").is_none());
    }

    #[test]
    fn a_batch_is_one_generate_with_each_prompts_labels() {
        let prompts = vec![vec![1, 2], vec![1, 3]];
        let labels = vec![vec![300], vec![301, 302]];
        let body = score_batch_body(&ScoreBatch {
            model: None,
            prompts: &prompts,
            labels: &labels,
        });
        assert_eq!(body["input_ids"], json!([[1, 2], [1, 3]]));
        assert_eq!(body["token_ids_logprob"], json!([[300], [301, 302]]));
        let one = |lp: f64, t: u64, cached: u64| {
            json!({"meta_info": {"prompt_tokens": 2, "cached_tokens": cached,
                "output_token_ids_logprobs": [[[lp, t, null], [lp - 1.0, t + 1, null]]]}})
        };
        let answer = json!([one(-1.0, 300, 0), one(-2.0, 301, 1)]);
        let a = read_score_batch(&answer, &labels).expect("batch");
        assert_eq!(a.logprobs, vec![vec![-1.0], vec![-2.0, -3.0]]);
        assert_eq!((a.prompt_tokens, a.cached_tokens), (4, 1));
        assert!(read_score_batch(&json!([one(-1.0, 300, 0)]), &labels).is_err());
        assert!(read_score_batch(&one(-1.0, 300, 0), &labels).is_err());
    }
}
