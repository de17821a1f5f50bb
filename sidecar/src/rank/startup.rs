//! What ranking needs from the engine before it can be trusted, done once a replica is healthy:
//!
//! 1. the label check ([`super::vocab`]): a one-token scoring request for the highest label
//!    recache may send; a refusal is logged as an error naming the flags and answered to every
//!    `/v1/rank` request from then on;
//! 2. with the item pool, its start-up ([`crate::itempool::startup`]): adopt what the
//!    engine's pool already holds, then compute `--rank-item-catalog`'s hottest items into it,
//!    reporting progress.
//!
//! `recache serve` runs it in the background ([`spawn`]); serving never waits for it.
//! `recache bench gr` runs [`prepare`] itself and waits, with a progress bar.

use std::sync::Arc;
use std::time::Duration;

use super::engine;
use super::vocab::Verdict;
use crate::client::own;
use crate::engine::{EngineError, answer, served_model};
use crate::itempool::startup as pool_startup;
use crate::rank::Ranker;

pub use crate::itempool::startup::Prepared;

/// Asks the engine about the label range; records and returns the verdict.
pub async fn check_labels(state: &Arc<Ranker>) -> Verdict {
    let highest = state.rank.vocab.highest;
    let prompt = super::layout::Prompt {
        tokens: vec![highest],
        labels: vec![(highest, 0)],
    };
    let (path, body) = engine::scoring_request(state.engine.dialect, None, &prompt, None);
    let client = &state.engine.client;
    let reply = client.json(http::Method::POST, path, Some(&body)).await;
    // recache's own call, counted apart from clients' (the replica is known once answered).
    if let Ok(a) = &reply
        && let Some(i) = a.replica
    {
        let own = client.own_call(i, own::LABEL_CHECK, prompt.tokens.len() as u64);
        own.cached(
            (state.engine.dialect)
                .reported_cached_tokens(&a.value)
                .unwrap_or(0),
        );
    }
    let answer = reply.map_err(EngineError::from).and_then(answer);
    state.rank.vocab.record(&answer)
}

/// Runs the start-up steps against a healthy engine. `model`: the model name ranking requests
/// will carry (None: the engine's first served model); `catalog`: items to precompute (hottest
/// first), `progress` gets (done, total) fills.
pub async fn prepare(
    state: &Arc<Ranker>,
    model: Option<&str>,
    catalog: Vec<(String, Arc<Vec<u32>>, u64)>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Prepared, EngineError> {
    if let Verdict::TooSmall(msg) = check_labels(state).await {
        return Err(EngineError::Config(msg));
    }
    let Some(p) = state.rank.pool.as_ref() else {
        return Ok(Prepared::default());
    };
    let model = match model {
        Some(m) => Some(m.to_string()),
        None => served_model(&state.engine.client).await,
    };
    pool_startup::prepare(p, &state.engine, model.as_deref(), catalog, progress).await
}

/// `recache serve`'s background start-up: waits for a healthy replica, then [`prepare`]s with
/// `--rank-item-catalog`, logging progress and the outcome.
pub fn spawn(state: Arc<Ranker>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut waited = 0u64;
        while !state.engine.client.ready() {
            if waited % 60 == 0 && waited > 0 {
                tracing::info!("ranking start-up: waiting for a healthy replica");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            waited += 1;
        }
        let catalog = pool_startup::load_catalog(state.rank.config.item_catalog.as_deref());
        let model = served_model(&state.engine.client).await;
        let tokenized = pool_startup::catalog_tokens(&state.engine, model.as_deref(), catalog);
        let catalog = match tokenized.await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "tokenizing --rank-item-catalog failed; the item pool fills on demand only");
                Vec::new()
            }
        };
        let every = (catalog.len() / 20).max(1);
        let progress = |done: usize, total: usize| {
            if total > 0 && (done % every == 0 || done == total) {
                tracing::info!(done, total, "item pool precompute");
            }
        };
        match prepare(&state, model.as_deref(), catalog, &progress).await {
            Ok(p) => tracing::info!(
                adopted = p.adopted,
                evicted = p.evicted,
                precomputed = ?p.precomputed,
                "ranking start-up done"
            ),
            Err(EngineError::Config(msg)) => tracing::error!("{msg}"),
            Err(e) => tracing::warn!(error = %e, "ranking start-up incomplete"),
        }
    })
}
