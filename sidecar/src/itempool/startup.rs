//! The item pool's part of start-up, once a replica is healthy: adopt what the engine's pools
//! already hold ([`super::sync`]), then compute the catalog's hottest items into them
//! ([`super::precompute`]), reporting progress. Ranking's start-up ([`crate::rank::startup`])
//! checks the labels first and runs this.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::catalog::{self, CatalogItem};
use super::precompute::Precomputed;
use super::replicas::Pools;
use super::{Wanted, key};
use crate::engine::{EngineError, EngineHandle, tokens};

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

/// Adopts what the engines' pools hold, then precomputes `catalog` (hottest first: item key,
/// token ids, count) for `model`; `progress` gets (done, total) fills.
pub async fn prepare(
    pools: &Pools,
    engine: &Arc<EngineHandle>,
    model: Option<&str>,
    catalog: Vec<(String, Arc<Vec<u32>>, u64)>,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Prepared, EngineError> {
    let (adopted, evicted) = pools.sync(engine, model).await?;
    let mut out = Prepared {
        adopted,
        evicted,
        precomputed: None,
    };
    if !catalog.is_empty() {
        let wanted = catalog
            .into_iter()
            .map(|(item, tokens, count)| Wanted {
                key: key(model, &item),
                count,
                tokens,
            })
            .collect();
        // With several replicas, the catalog's counts say which items every replica pools.
        let hot_share = engine.client.routing().pool_hot_share();
        let done = pools
            .precompute(engine, model, wanted, hot_share, PRECOMPUTE_LIMIT, progress)
            .await
            .map_err(|e| EngineError::Internal(format!("item pool precompute: {e}")))?;
        out.precomputed = Some(done);
    }
    Ok(out)
}

/// `--rank-item-catalog`'s items, hottest first; none (logged) when it cannot be read.
pub fn load_catalog(path: Option<&Path>) -> Vec<CatalogItem> {
    match path.map(catalog::load) {
        Some(Ok(items)) => items,
        Some(Err(e)) => {
            tracing::error!("{e}; the item pool fills on demand only");
            Vec::new()
        }
        None => Vec::new(),
    }
}

/// Token ids of every catalog item, tokenizing text items on the engine (cached like ranking
/// requests' items).
pub async fn catalog_tokens(
    engine: &EngineHandle,
    model: Option<&str>,
    items: Vec<CatalogItem>,
) -> Result<Vec<(String, Arc<Vec<u32>>, u64)>, EngineError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let tokens = tokens::resolve(engine, model, "item", &item.key, &item.content).await?;
        out.push((item.key, tokens, item.count));
    }
    Ok(out)
}
