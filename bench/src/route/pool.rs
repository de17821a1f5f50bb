//! `bench route --pool-items N`: each strategy's item pools precomputed before its timed
//! stream, as a deployment would precompute its catalog at start-up.
//!
//! Every replica has its own pool (`rank::pool::replicas`), so what goes where is the
//! strategy's placement: under `least-loaded`, `prefix` and `gr` (its default
//! `pool_hot_share` 1) every replica pools the past period's hottest items; `gr` with a
//! `pool_hot_share` below 1 pools the hot ones everywhere and each other item on its home
//! replica only. Each pool takes up to N items. What the precompute computed is reported
//! (`precompute_tokens`, `precompute_s`), not counted in the stream's hit rate.

use std::time::Duration;

use serde_json::{Value, json};

use super::gr_load::PastItem;
use crate::error::BenchError;
use recache::harness::LocalServer;
use recache::harness::Progress;
use recache::harness::{Wanted, pool_key};

/// Precomputes `past` (hottest first) into the local recache's pools under its routing rule;
/// returns the row's fields about it.
pub async fn precompute(
    local: &LocalServer,
    model: &str,
    past: &[PastItem],
    name: &str,
) -> Result<Value, BenchError> {
    let state = local.ranker();
    let Some(pools) = local.pools() else {
        return Err(BenchError::Setup(
            "--pool-items: this run's recache has no item pool".into(),
        ));
    };
    let model = Some(model);
    pools.sync(state, model).await.map_err(|e| {
        BenchError::Setup(format!(
            "reading the replicas' item pools: {e} (start each replica with `{}`)",
            crate::testbed::up_command("--item-pool")
        ))
    })?;
    let wanted: Vec<Wanted> = (past.iter())
        .map(|it| Wanted {
            key: pool_key(model, &it.id),
            count: it.count,
            tokens: it.tokens.clone(),
        })
        .collect();
    let share = local.routing().pool_hot_share();
    let progress = std::sync::OnceLock::new();
    let show = |done: usize, total: usize| {
        progress
            .get_or_init(|| Progress::new(total as u64, format!("{name} pool precompute")))
            .set(done as u64);
    };
    let limit = Duration::from_secs(3600);
    let done = pools
        .precompute(state, model, wanted, share, limit, &show)
        .await
        .map_err(|e| BenchError::Setup(format!("{name}: {e}")))?;
    if let Some(p) = progress.get() {
        p.finish();
    }
    let resident: Vec<usize> = pools.iter().map(|p| p.counts().0).collect();
    eprintln!(
        "[route] {name}: pools hold {resident:?} items ({} computed: {} tokens in {:.1}s)",
        done.filled, done.tokens, done.seconds
    );
    Ok(json!({
        "pool_hot_share": share,
        "pool_items_resident": resident,
        "precompute_tokens": done.tokens,
        "precompute_s": done.seconds,
    }))
}
