//! Reconciling a replica's item pool when the replica comes back into rotation.
//!
//! An engine that was out of rotation may have been restarted, and its connector's pool then
//! starts empty while recache still counts items resident there: item-first prompts would be
//! built around items the engine must compute after all, and `gr` would count them as cached.
//! Each time the engine client reports a returned replica ([`EngineClient::returns`]), this
//! task asks that replica's connector for its list and [`reconcile`](super::ItemPool::reconcile)s
//! its pool: what is gone is forgotten at once (refilled when next wanted), what is there stays.
//! A replica that only missed probes (no restart) lists what it holds, and nothing changes.
//!
//! [`EngineClient::returns`]: crate::client::EngineClient::returns

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;

use super::replicas::Pools;
use crate::engine::{self, EngineHandle};
use crate::shutdown::TaskGuard;

/// Starts the task when there is an item pool; it stops with the guard.
pub fn spawn(pools: Option<Arc<Pools>>, engine: Arc<EngineHandle>) -> Option<TaskGuard> {
    let pools = pools?;
    // Subscribed before the task runs: a return right after start is not missed.
    let mut returns = engine.client.returns();
    Some(TaskGuard::spawn(move |mut stop| async move {
        loop {
            let which: Vec<usize> = tokio::select! {
                _ = stop.changed() => return,
                got = returns.recv() => match got {
                    Ok(i) => vec![i],
                    // Missed some: every replica's pool, to be sure.
                    Err(RecvError::Lagged(_)) => (0..engine.client.replicas().len()).collect(),
                    Err(RecvError::Closed) => return,
                },
            };
            for i in which {
                resync_one(&pools, &engine, i).await;
            }
        }
    }))
}

async fn resync_one(pools: &Pools, engine: &EngineHandle, i: usize) {
    let pool = pools.get(i);
    let model = engine::served_model(&engine.client).await;
    let upstream = (engine.client.replicas().get(i)).map_or("?", |r| r.label.as_str());
    match pool.resync(engine, model.as_deref()).await {
        Ok(r) => tracing::info!(
            upstream,
            kept = r.kept,
            forgotten = r.forgotten,
            adopted = r.adopted,
            evicted = r.evicted,
            "replica back in rotation: item pool reconciled with its connector's list"
        ),
        // The next ranking answers still correct residency item by item (`observe`).
        Err(e) => {
            tracing::warn!(upstream, error = %e, "replica back in rotation: item pool list failed")
        }
    }
}
