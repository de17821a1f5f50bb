//! Which engine recache fronts, and the parts of its dialect the sidecar needs: health probe,
//! cache reset, prefix-cache counters, KV-event granularity, the scoring request. Sidecar code
//! asks these methods instead of matching on engine names; the names and shapes themselves
//! live in one module per engine ([`crate::vllm`], [`crate::sglang`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use serde_json::Value;

use crate::scoring::{BatchAnswer, ScoreAnswer, ScoreBatch, ScoreError, ScoreRequest};
use crate::{sglang, vllm};

/// An inference engine recache knows how to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// vLLM's OpenAI-compatible server (`vllm.entrypoints.openai.api_server`).
    #[default]
    Vllm,
    /// SGLang's HTTP server (`sglang.launch_server`): OpenAI routes plus its native ones.
    Sglang,
}

/// What an answer to the cache-reset request means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetOutcome {
    Done,
    /// Requests still hold cache; ask again shortly.
    Busy,
    /// The engine cannot reset (route off, error): why.
    Refused(String),
}

/// Prometheus counters (tokens) whose deltas give the engine's prefix-cache hit rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheCounters {
    /// Prompt tokens looked up.
    pub queries: &'static str,
    /// Prompt tokens found cached.
    pub hits: &'static str,
}

impl Engine {
    /// Every engine, in the order help texts list them.
    pub const ALL: &'static [Engine] = &[Engine::Vllm, Engine::Sglang];

    /// The lowercase name used on the command line and in config files.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
        }
    }

    /// Path that answers 200 once the engine can serve; recache probes it to decide health.
    pub fn health_path(self) -> &'static str {
        match self {
            Engine::Vllm => vllm::HEALTH_PATH,
            Engine::Sglang => sglang::HEALTH_PATH,
        }
    }

    /// POST here (body `{}`) empties the engine's prefix cache (vLLM: and its KV connector's;
    /// SGLang's `/flush_cache` keeps recache's item pool: a list call with `clear`,
    /// [`Engine::pool_call`], empties it).
    pub fn reset_cache_path(self) -> &'static str {
        match self {
            Engine::Vllm => vllm::RESET_PREFIX_AND_EXTERNAL_PATH,
            Engine::Sglang => sglang::FLUSH_CACHE_PATH,
        }
    }

    /// POST here (body `{}`) empties the engine's prefix cache but keeps what its KV connector
    /// holds (recache's item pool, computed ahead of time); same answers as
    /// [`Engine::reset_cache_path`].
    pub fn reset_prefix_only_path(self) -> &'static str {
        match self {
            Engine::Vllm => vllm::RESET_PREFIX_CACHE_PATH,
            Engine::Sglang => sglang::FLUSH_CACHE_PATH,
        }
    }

    /// Reads the answer to [`Engine::reset_cache_path`].
    pub fn reset_outcome(self, status: u16, body: &Value) -> ResetOutcome {
        let path = self.reset_cache_path();
        match (self, status) {
            // vLLM answers 200 with success=false while blocks are in use.
            (Engine::Vllm, 200) if body["success"] == Value::Bool(false) => ResetOutcome::Busy,
            (_, 200) => ResetOutcome::Done,
            (Engine::Vllm, 404) => ResetOutcome::Refused(format!(
                "the engine has no {path}; start vLLM with VLLM_SERVER_DEV_MODE=1"
            )),
            // SGLang refuses while requests are running or waiting.
            (Engine::Sglang, 400) => ResetOutcome::Busy,
            (_, s) => ResetOutcome::Refused(format!("{path} answered {s}: {body}")),
        }
    }

    /// The counters behind the engine's prefix-cache hit rate.
    pub fn cache_counters(self) -> CacheCounters {
        match self {
            Engine::Vllm => CacheCounters {
                queries: vllm::METRIC_PREFIX_CACHE_QUERIES,
                hits: vllm::METRIC_PREFIX_CACHE_HITS,
            },
            Engine::Sglang => CacheCounters {
                queries: sglang::METRIC_PROMPT_TOKENS,
                hits: sglang::METRIC_CACHED_TOKENS,
            },
        }
    }

    /// The engine's counters of summed request phases, seconds: (prefill, queueing); None
    /// when the engine has none (SGLang 0.5.23's CPU engine exports no such sums).
    pub fn phase_counters(self) -> Option<(&'static str, &'static str)> {
        match self {
            Engine::Vllm => Some((vllm::METRIC_PREFILL_SECONDS, vllm::METRIC_QUEUE_SECONDS)),
            Engine::Sglang => None,
        }
    }

    /// The counter of requests the engine finished (each replica's share of a run); None
    /// where no such counter has been checked against the testbed (SGLang).
    pub fn requests_counter(self) -> Option<&'static str> {
        match self {
            Engine::Vllm => Some(vllm::METRIC_REQUESTS),
            Engine::Sglang => None,
        }
    }

    /// The counter of prompt tokens a KV connector supplied (vLLM: recache's item pool) that
    /// the prefix-cache hits counter leaves out; None when there is none (SGLang counts the
    /// pool's tokens among its cached tokens: [`Engine::pool_hits_counter`]).
    pub fn external_hits_counter(self) -> Option<&'static str> {
        match self {
            Engine::Vllm => Some(vllm::METRIC_EXTERNAL_HITS),
            Engine::Sglang => None,
        }
    }

    /// The counter of prompt tokens recache's item pool supplied, with a label selector where
    /// it is one series of a wider counter (read with [`crate::prom::selected_sum`]).
    pub fn pool_hits_counter(self) -> &'static str {
        match self {
            Engine::Vllm => vllm::METRIC_EXTERNAL_HITS,
            Engine::Sglang => sglang::METRIC_POOL_HITS,
        }
    }

    /// Blocks of the engine's KV cache that never hold a cached prefix block. vLLM keeps one
    /// null block, and the running request's partial tail block is never cached (2); SGLang
    /// caches at token granularity (no partial tail) and allocates its padding slot beyond the
    /// pool's size (`size + page_size` slots in `memory_pool.py`), so every slot can cache (0).
    pub fn uncached_blocks(self) -> usize {
        match self {
            Engine::Vllm => 2,
            Engine::Sglang => 0,
        }
    }

    /// The body field that carries token-id prompts on `path` (one list of ids or a batch), for
    /// the routes whose prompts recache reads: OpenAI completions on both engines, SGLang's
    /// native `/generate` (`input_ids`), and the beam search plugin's route on vLLM.
    pub fn token_prompt_field(self, path: &str) -> Option<&'static str> {
        match (self, path) {
            (_, crate::openai::COMPLETIONS) => Some("prompt"),
            (Engine::Sglang, sglang::GENERATE_PATH) => Some("input_ids"),
            (Engine::Vllm, crate::beam_plugin::PATH) => Some("prompt"),
            _ => None,
        }
    }

    /// Generation routes whose JSON bodies take a scheduling `priority` (SGLang: its native
    /// `/generate` and the OpenAI routes; recache sets it with `--sglang-priority`).
    pub fn priority_paths(self) -> &'static [&'static str] {
        match self {
            Engine::Vllm => &[],
            Engine::Sglang => &sglang::PRIORITY_PATHS,
        }
    }

    /// Tokens per block in the engine's KV events when the engine fixes it (SGLang: 1, its
    /// radix cache is token-granular); None when it is a launch setting (vLLM `--block-size`).
    pub fn kv_event_block_size(self) -> Option<usize> {
        match self {
            Engine::Vllm => None,
            Engine::Sglang => Some(sglang::KV_EVENT_BLOCK_SIZE),
        }
    }

    /// Where scoring requests go.
    pub fn scoring_path(self) -> &'static str {
        match self {
            Engine::Vllm => vllm::COMPLETIONS_PATH,
            Engine::Sglang => sglang::GENERATE_PATH,
        }
    }

    /// The body of a scoring request.
    pub fn score_body(self, req: &ScoreRequest<'_>) -> Value {
        match self {
            Engine::Vllm => vllm::score_body(req),
            Engine::Sglang => sglang::score_body(req),
        }
    }

    /// The body of one call scoring a batch of prompts, each against its own labels.
    pub fn score_batch_body(self, batch: &ScoreBatch<'_>) -> Value {
        match self {
            Engine::Vllm => vllm::score_batch_body(batch),
            Engine::Sglang => sglang::score_batch_body(batch),
        }
    }

    /// Reads a batch scoring answer; `labels` as in the request.
    pub fn read_score_batch(
        self,
        answer: &Value,
        labels: &[Vec<u32>],
    ) -> Result<BatchAnswer, ScoreError> {
        match self {
            Engine::Vllm => vllm::read_score_batch(answer, labels),
            Engine::Sglang => sglang::read_score_batch(answer, labels),
        }
    }

    /// The smallest generation for a token prompt (one greedy token): the routing canary's
    /// request, (path, body).
    pub fn probe_body(self, tokens: &[u32]) -> (&'static str, Value) {
        match self {
            Engine::Vllm => (
                vllm::COMPLETIONS_PATH,
                serde_json::json!({"prompt": tokens, "max_tokens": 1, "temperature": 0}),
            ),
            Engine::Sglang => (
                sglang::GENERATE_PATH,
                serde_json::json!({
                    "input_ids": tokens,
                    "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                }),
            ),
        }
    }

    /// Prompt tokens an answer says the engine reused from its cache; None when the engine
    /// does not report them (vLLM without `--enable-prompt-tokens-details`). Tokens the item
    /// pool loaded are among them on both engines (vLLM: external hits; SGLang: the `host` part
    /// of `cached_tokens_details`), so nobody adds the pool's `loaded_tokens` to this.
    pub fn reported_cached_tokens(self, answer: &Value) -> Option<u64> {
        match self {
            Engine::Vllm => answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
            Engine::Sglang => answer["meta_info"]["cached_tokens"]
                .as_u64()
                .or_else(|| answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64()),
        }
    }

    /// Reads a scoring answer; `labels` as in the request.
    pub fn read_score(self, answer: &Value, labels: &[u32]) -> Result<ScoreAnswer, ScoreError> {
        match self {
            Engine::Vllm => vllm::read_score(answer, labels),
            Engine::Sglang => sglang::read_score(answer, labels),
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The engine name given is not one recache supports.
#[derive(Debug, thiserror::Error)]
#[error("unknown engine {given:?}; valid engines: {valid}")]
pub struct UnknownEngine {
    given: String,
    valid: String,
}

impl FromStr for Engine {
    type Err = UnknownEngine;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::ALL
            .iter()
            .copied()
            .find(|e| e.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownEngine {
                given: s.to_string(),
                valid: Engine::ALL
                    .iter()
                    .map(|e| e.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_unknown_with_the_valid_list() {
        assert_eq!("vllm".parse::<Engine>().ok(), Some(Engine::Vllm));
        assert_eq!(" VLLM ".parse::<Engine>().ok(), Some(Engine::Vllm));
        assert_eq!("sglang".parse::<Engine>().ok(), Some(Engine::Sglang));
        let err = "tgi".parse::<Engine>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unknown engine \"tgi\"; valid engines: vllm, sglang")
        );
    }

    #[test]
    fn probe_answers_say_cached_tokens_or_that_they_do_not() {
        let (path, body) = Engine::Vllm.probe_body(&[1, 2]);
        assert_eq!(
            (path, body["max_tokens"].as_u64()),
            ("/v1/completions", Some(1))
        );
        let (path, body) = Engine::Sglang.probe_body(&[1, 2]);
        assert_eq!(
            (path, body["input_ids"][1].as_u64()),
            ("/generate", Some(2))
        );
        let v = serde_json::json!({"usage": {"prompt_tokens_details": {"cached_tokens": 64}}});
        assert_eq!(Engine::Vllm.reported_cached_tokens(&v), Some(64));
        assert_eq!(
            Engine::Vllm.reported_cached_tokens(&serde_json::json!({"usage": {}})),
            None
        );
        let s = serde_json::json!({"meta_info": {"cached_tokens": 7}});
        assert_eq!(Engine::Sglang.reported_cached_tokens(&s), Some(7));
    }

    #[test]
    fn reset_answers_by_engine() {
        use serde_json::json;
        let (v, s) = (Engine::Vllm, Engine::Sglang);
        assert_eq!(v.reset_outcome(200, &json!({})), ResetOutcome::Done);
        assert_eq!(
            v.reset_outcome(200, &json!({"success": false})),
            ResetOutcome::Busy
        );
        assert!(matches!(
            v.reset_outcome(404, &json!("")),
            ResetOutcome::Refused(_)
        ));
        assert_eq!(
            s.reset_outcome(200, &json!("Cache flushed.")),
            ResetOutcome::Done
        );
        assert_eq!(
            s.reset_outcome(400, &json!("Cache not flushed.")),
            ResetOutcome::Busy
        );
        assert_eq!(s.reset_cache_path(), "/flush_cache");
        assert!(v.reset_cache_path().starts_with("/reset_prefix_cache"));
        assert_eq!(s.kv_event_block_size(), Some(1));
        assert_eq!(v.kv_event_block_size(), None);
    }
}
