//! Filling the item KV pool: one engine request per item whose prompt is only that item's
//! segment (its pool label, then its tokens), so the engine computes the item alone from
//! position 0 and the connector's save path captures its K/V under the item's key.
//!
//! Fills run as tokio tasks with at most `--rank-item-pool-fills` in flight; the ranking
//! request that wanted them has already been sent and never waits. Evictions recache decided
//! ride along in the fill's `kv_transfer_params`, so the connector drops a victim before it
//! stores the item that replaces it.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::Semaphore;

use super::ItemPool;
use crate::engine::{self, EngineError, EngineHandle};

/// Bounds concurrent fills (one per [`ItemPool`]).
pub struct Filler {
    slots: Arc<Semaphore>,
}

impl Filler {
    pub fn new(concurrency: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    /// Starts the fills in the background and returns at once.
    pub fn spawn(
        &self,
        engine: &Arc<EngineHandle>,
        pool: &Arc<ItemPool>,
        model: Option<String>,
        fills: Vec<(String, u32, Arc<Vec<u32>>)>,
    ) {
        for (key, label, tokens) in fills {
            let (engine, pool, slots) = (engine.clone(), pool.clone(), self.slots.clone());
            let model = model.clone();
            tokio::spawn(async move {
                let Ok(_slot) = slots.acquire_owned().await else {
                    return; // the semaphore is never closed; nothing to fill into if it were
                };
                let mut prompt = Vec::with_capacity(tokens.len() + 1);
                prompt.push(label);
                prompt.extend_from_slice(&tokens);
                let evict = pool.take_evictions();
                let plan = json!({"fill": key, "evict": evict});
                let call = engine.dialect.pool_call(&prompt, plan, model.as_deref());
                let result = pool.post(&engine, call).await;
                if let Ok(answer) = &result {
                    let report = engine.dialect.pool_report(answer);
                    pool.metrics.observe_report(pool.index, report);
                }
                if let Err(e) = &result {
                    tracing::warn!(item = %key, error = %e, "item pool fill failed");
                    // The engine may not have seen them: send them again with a later request.
                    pool.requeue_evictions(evict);
                }
                pool.filled(&key, label, result.is_ok(), prompt.len());
            });
        }
    }
}

impl ItemPool {
    /// POSTs a pool-only call (a fill, the `list`: `Engine::pool_call`'s path and body) to
    /// this pool's engine: its replica alone when there are several, else through the routing
    /// rule.
    pub(super) async fn post(
        &self,
        engine: &EngineHandle,
        (path, body): (&'static str, serde_json::Value),
    ) -> Result<serde_json::Value, EngineError> {
        match self.target {
            Some(i) => {
                let call = (engine.client).json_to(i, http::Method::POST, path, Some(&body));
                engine::answer(call.await?)
            }
            None => engine::post_json(&engine.client, path, &body).await,
        }
    }
}
