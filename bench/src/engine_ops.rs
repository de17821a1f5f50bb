//! The engine operations the benchmarks need, in the engine's dialect (asked of
//! `recache_adapters::Engine`, never matched on names here): which engine is behind a URL,
//! emptying its prefix cache between runs, and its prefix-cache hit rate from the deltas of
//! its own Prometheus counters.

use std::time::Duration;

use recache_adapters::{Engine, ResetOutcome};
use serde_json::json;

use crate::http::HttpClient;
use crate::http::{self, counter};

/// The engine behind `upstream`: `Some(e)` as given, else SGLang if it answers SGLang's
/// model-info route, else vLLM.
pub async fn resolve(client: &HttpClient, upstream: &str, given: Option<Engine>) -> Engine {
    if let Some(e) = given {
        return e;
    }
    let url = format!("{upstream}{}", recache_adapters::sglang::MODEL_INFO_PATH);
    let answered = match url.parse() {
        Ok(uri) => client.get(uri).await.ok().map(|r| r.status().as_u16()),
        Err(_) => None,
    };
    let engine = if answered == Some(200) {
        Engine::Sglang
    } else {
        Engine::Vllm
    };
    eprintln!("bench: engine at {upstream}: {engine} (detected; --engine to set it)");
    engine
}

/// Empties the engine's prefix cache (and its KV connector's, unless `keep_external`: an item
/// pool computed ahead of time), waiting while running requests hold it (up to 5 s). Returns
/// why not when it could not.
pub async fn reset_cache(
    client: &HttpClient,
    engine: Engine,
    upstream: &str,
    keep_external: bool,
) -> Result<(), String> {
    let path = if keep_external {
        engine.reset_prefix_only_path()
    } else {
        engine.reset_cache_path()
    };
    let url = format!("{upstream}{path}");
    for _ in 0..20 {
        let (status, body) = http::post(client, &url, &json!({}))
            .await
            .map_err(|e| e.to_string())?;
        match engine.reset_outcome(status, &body) {
            ResetOutcome::Done if engine == Engine::Sglang && !keep_external => {
                // SGLang's /flush_cache keeps the item pool (as vLLM's prefix-only reset
                // does); a list request with `clear` empties it (an engine without the pool
                // ignores the plan).
                let (path, body) =
                    engine.pool_call(&[0], json!({"list": true, "clear": true}), None);
                let (status, answer) = http::post(client, &format!("{upstream}{path}"), &body)
                    .await
                    .map_err(|e| e.to_string())?;
                return match status {
                    200 => Ok(()),
                    _ => Err(format!("emptying the item pool: {status} {answer}")),
                };
            }
            ResetOutcome::Done => return Ok(()),
            ResetOutcome::Busy => tokio::time::sleep(Duration::from_millis(250)).await,
            ResetOutcome::Refused(why) => return Err(why),
        }
    }
    Err(format!(
        "{} kept answering busy (requests still hold the cache)",
        engine.reset_cache_path()
    ))
}

/// Sends a fresh engine a short and a long prompt: its first requests can take minutes (kernel
/// warm-up), which must not land in the first measured run's numbers.
pub async fn warm_up(
    client: &HttpClient,
    upstream: &str,
    model: &str,
) -> Result<(), crate::error::BenchError> {
    eprintln!("bench: warming up {upstream}");
    for n in [64usize, 1024] {
        let body = json!({"model": model, "prompt": vec![7u32; n], "max_tokens": 1});
        http::post(client, &format!("{upstream}/v1/completions"), &body).await?;
    }
    Ok(())
}

/// Prompt tokens looked up and found cached between two `/metrics` scrapes of the engine.
pub fn cache_deltas(engine: Engine, before: &str, after: &str) -> (f64, f64) {
    let c = engine.cache_counters();
    let d = |name: &str| counter(after, name) - counter(before, name);
    (d(c.queries), d(c.hits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_read_each_engines_counters() {
        let before = "sglang:prompt_tokens_total{is_streaming=\"false\"} 10\n\
                      sglang:cached_tokens_total{cache_source=\"device\"} 2\n";
        let after = "sglang:prompt_tokens_total{is_streaming=\"false\"} 110\n\
                     sglang:prompt_tokens_total{is_streaming=\"true\"} 20\n\
                     sglang:cached_tokens_total{cache_source=\"device\"} 62\n";
        assert_eq!(cache_deltas(Engine::Sglang, before, after), (120.0, 60.0));
        let v = "vllm:prefix_cache_queries_total{model_name=\"m\"} 64\n\
                 vllm:prefix_cache_hits_total{model_name=\"m\"} 32\n";
        assert_eq!(cache_deltas(Engine::Vllm, "", v), (64.0, 32.0));
    }
}
