//! What ranking needs from the engine before it can be trusted, done once a replica is healthy:
//!
//! 1. the label check ([`super::vocab`]): a one-token scoring request for the highest label
//!    recache may send; a refusal is logged as an error naming the flags and answered to every
//!    `/v1/rank` request from then on;
//! 2. with the item pool: adopt what the engine's pool already holds ([`super::pool::sync`]);
//! 3. with `--rank-item-catalog`: compute the catalog's hottest items into the pool
//!    ([`super::pool::precompute`]), reporting progress.
//!
//! `recache serve` runs it in the background ([`spawn`]); serving never waits for it.
//! `recache bench gr` runs [`prepare`] itself and waits, with a progress bar.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::RankError;
use super::engine;
use super::pool::{self, Wanted, precompute::Precomputed};
use super::vocab::Verdict;
use crate::client::own;
use crate::rank::Ranker;

/// Longest a start-up precompute may take before it gives up (fills keep their results).
const PRECOMPUTE_LIMIT: Duration = Duration::from_secs(6 * 3600);

/// What start-up found and did.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// Pool entries adopted from the engine, and entries it held that recache evicted.
    pub adopted: usize,
    pub evicted: usize,
    pub precomputed: Option<Precomputed>,
}

/// Asks the engine about the label range; records and returns the verdict.
pub async fn check_labels(state: &Arc<Ranker>) -> Verdict {
    let highest = state.rank.vocab.highest;
    let prompt = super::layout::Prompt {
        tokens: vec![highest],
        labels: vec![(highest, 0)],
    };
    let (path, body) = engine::scoring_request(state.engine, None, &prompt, None);
    let answer = (state.client)
        .json(http::Method::POST, path, Some(&body))
        .await;
    // recache's own call, counted apart from clients' (the replica is known once answered).
    if let Ok(a) = &answer
        && let Some(i) = a.replica
    {
        let own = (state.client).own_call(i, own::LABEL_CHECK, prompt.tokens.len() as u64);
        own.cached(state.engine.reported_cached_tokens(&a.value).unwrap_or(0));
    }
    let answer = answer.map_err(RankError::from).and_then(engine::answer);
    state.rank.vocab.record(&answer)
}

/// The engine's first served model (pool keys carry the model name requests use).
pub(crate) async fn served_model(state: &Arc<Ranker>) -> Option<String> {
    let answer: Value = engine::get_json(state, "/v1/models").await.ok()?;
    answer["data"][0]["id"].as_str().map(str::to_string)
}

/// Runs the start-up steps against a healthy engine. `model`: the model name ranking requests
/// will carry (None: the engine's first served model); `catalog`: items to precompute (hottest
/// first), `progress` gets (done, total) fills.
pub async fn prepare(
    state: &Arc<Ranker>,
    model: Option<&str>,
    catalog: Vec<(String, Arc<Vec<u32>>, u64)>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Prepared, RankError> {
    if let Verdict::TooSmall(msg) = check_labels(state).await {
        return Err(RankError::Config(msg));
    }
    let Some(p) = state.rank.pool.as_ref() else {
        return Ok(Prepared::default());
    };
    let model = match model {
        Some(m) => Some(m.to_string()),
        None => served_model(state).await,
    };
    let (adopted, evicted) = p.sync(state, model.as_deref()).await?;
    let mut out = Prepared {
        adopted,
        evicted,
        precomputed: None,
    };
    if !catalog.is_empty() {
        let wanted = catalog
            .into_iter()
            .map(|(key, tokens, count)| Wanted {
                key: pool::key(model.as_deref(), &key),
                count,
                tokens,
            })
            .collect();
        // With several replicas, the catalog's counts say which items every replica pools.
        let hot_share = state.client.routing().pool_hot_share();
        let done = p
            .precompute(
                state,
                model.as_deref(),
                wanted,
                hot_share,
                PRECOMPUTE_LIMIT,
                progress,
            )
            .await
            .map_err(|e| RankError::Internal(format!("item pool precompute: {e}")))?;
        out.precomputed = Some(done);
    }
    Ok(out)
}

/// Token ids of every catalog item, tokenizing text items on the engine (cached like ranking
/// requests' items).
async fn catalog_tokens(
    state: &Arc<Ranker>,
    model: Option<&str>,
    items: Vec<pool::catalog::CatalogItem>,
) -> Result<Vec<(String, Arc<Vec<u32>>, u64)>, RankError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let tokens = super::tokens::resolve(state, model, "item", &item.key, &item.content).await?;
        out.push((item.key, tokens, item.count));
    }
    Ok(out)
}

/// `recache serve`'s background start-up: waits for a healthy replica, then [`prepare`]s with
/// `--rank-item-catalog`, logging progress and the outcome.
pub fn spawn(state: Arc<Ranker>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut waited = 0u64;
        while !state.client.ready() {
            if waited % 60 == 0 && waited > 0 {
                tracing::info!("ranking start-up: waiting for a healthy replica");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            waited += 1;
        }
        let catalog = match &state.rank.config.item_catalog {
            Some(path) => match pool::catalog::load(path) {
                Ok(items) => items,
                Err(e) => {
                    tracing::error!("{e}; the item pool fills on demand only");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let model = served_model(&state).await;
        let catalog = match catalog_tokens(&state, model.as_deref(), catalog).await {
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
            Err(RankError::Config(msg)) => tracing::error!("{msg}"),
            Err(e) => tracing::warn!(error = %e, "ranking start-up incomplete"),
        }
    })
}
