//! Starting each policy's run cold, with the loop's shadow cold at the same moment. The engine's
//! prefix cache is emptied after the in-process recache has subscribed to its KV events, and
//! the run waits until the loop has seen that reset. vLLM publishes a reset only with its next
//! scheduler step's events, so a reset asked for before subscribing, or not nudged, reached the
//! loop with the first request's events and reset the shadow one request into the run. The
//! shadow then ran one request behind `bench replay`'s own simulation: on the Mooncake stream
//! that alone moved LARU's hit rate from 0.0739 to 0.0755 (2026-11-27, docs/steering.md).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::engine_ops;
use crate::error::BenchError;
use crate::http;
use recache_adapters::Engine;

/// The loop's count of engine cache resets ("cleared") and restarts, from its metrics.
pub fn resets(metrics: &str) -> f64 {
    ["cleared", "restart"]
        .iter()
        .map(|r| {
            http::counter(
                metrics,
                &format!("recache_kv_mirror_resyncs_total{{reason=\"{r}\"}}"),
            )
        })
        .sum()
}

/// How long a run waits for the loop to see the engine's reset before it starts anyway.
pub const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Empties the engine's prefix cache and makes it publish that now: one prompt shorter than a
/// block, sent to the engine directly, is the scheduler step that carries the reset. The
/// shadow never sees it; vLLM caches no block of it, SGLang one token that no replayed prompt
/// holds. Then waits up to `wait` for `loop_metrics` to count the reset. Says whether it did.
pub async fn reset_and_settle<F, Fut>(
    client: &crate::http::HttpClient,
    engine: Engine,
    upstream: &str,
    model: &str,
    loop_metrics: F,
    wait: Duration,
) -> Result<bool, BenchError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<String, BenchError>>,
{
    let before = resets(&loop_metrics().await?);
    engine_ops::reset_cache(client, engine, upstream, false)
        .await
        .map_err(BenchError::Setup)?;
    // A token id outside the replay's 3..4003, so no replayed prompt shares it.
    let nudge = json!({"model": model, "prompt": [5000], "max_tokens": 1, "temperature": 0});
    let (status, body) = http::post(client, &format!("{upstream}/v1/completions"), &nudge).await?;
    if status != 200 {
        return Err(BenchError::Setup(format!(
            "the engine refused the one-token request after its cache reset ({status}): {body}"
        )));
    }
    let t0 = Instant::now();
    while t0.elapsed() < wait {
        if resets(&loop_metrics().await?) > before {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_count_clears_and_restarts_only() {
        let m = "recache_kv_mirror_resyncs_total{reason=\"cleared\"} 2\n\
                 recache_kv_mirror_resyncs_total{reason=\"restart\"} 1\n\
                 recache_kv_mirror_resyncs_total{reason=\"gap_replayed\"} 5\n";
        assert_eq!(resets(m), 3.0);
        assert_eq!(resets(""), 0.0);
    }
}
