//! The guard's shadow scoring: a sampled request ranked again in a background task, and the
//! rankings compared.
//!
//! - Served pooled → scored again user-first in the request's order (the reference) and in
//!   the reverse order (how far the model agrees with itself when only the order changes).
//! - Served without the pool while the guard holds it off → the same two, and pooled (the
//!   probe that sees the agreement recover).
//!
//! It reads the token cache, the hotness order and the pool's residency, but records nothing
//! (no hotness, no fills, no decisions metric), so the served traffic's state is the same with
//! the guard on or off. The answer the client got is never touched: a shadow that fails or
//! times out is counted (`rank_quality_samples_total{outcome}`) and logged.

use std::sync::Arc;
use std::time::Duration;

use super::{QualityGuard, Slot};
use crate::client::route::GrHint;
use crate::engine::EngineError;
use crate::itempool::recompute::RecomputeSpec;
use crate::rank::api::Validated;
use crate::rank::layout as prompt_layout;
use crate::rank::pooled::{self, Parts};
use crate::rank::select::PrefixKind;
use crate::rank::{Ranker, engine, pipeline};

/// A shadow scoring that does not answer within this long is given up (counted `timeout`).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Why a request is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shadow {
    /// It was served pooled: its answer is the pooled ranking.
    Served,
    /// It was served without the pool (held off): the pooled ranking is a shadow too.
    Probe,
}

/// The layouts a shadow scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    UserFirst { reversed: bool },
    Pooled,
}

/// Starts the shadow scorings of `req` in the background; `served[i]` is the score the answer
/// gave request item i. Returns at once.
pub fn spawn(
    state: &Arc<Ranker>,
    guard: &Arc<QualityGuard>,
    slot: Slot,
    req: &Validated,
    served: Vec<f64>,
    shadow: Shadow,
    spec: RecomputeSpec,
) {
    let (state, guard, req) = (state.clone(), guard.clone(), req.clone());
    tokio::spawn(async move {
        let _slot = slot;
        let model = req.model.clone().unwrap_or_default();
        let setting = spec.to_string();
        let all = async {
            let reference = score(&state, &req, Layout::UserFirst { reversed: false }, spec);
            let reversed = score(&state, &req, Layout::UserFirst { reversed: true }, spec);
            let (reference, reversed) = tokio::try_join!(reference, reversed)?;
            let pooled = match shadow {
                Shadow::Served => (served, 0),
                Shadow::Probe => score(&state, &req, Layout::Pooled, spec).await?,
            };
            Ok::<_, EngineError>((reference, reversed, pooled))
        };
        match tokio::time::timeout(TIMEOUT, all).await {
            Ok(Ok(((reference, a), (reversed, b), (pooled, c)))) => {
                guard.count(&model, "ok");
                guard.count_tokens(&model, a + b + c);
                let compare = super::agreement::agreement;
                match (compare(&pooled, &reference), compare(&reversed, &reference)) {
                    (Some(pooled), Some(reversed)) => {
                        guard.record(&model, &setting, super::Sample { pooled, reversed })
                    }
                    _ => guard.count(&model, "failed"),
                }
            }
            Ok(Err(e)) => {
                guard.count(&model, "failed");
                tracing::warn!(model, ?shadow, error = %e, "quality guard: shadow scoring failed (the served answer is unaffected)");
            }
            Err(_) => {
                guard.count(&model, "timeout");
                tracing::warn!(model, ?shadow, timeout = ?TIMEOUT, "quality guard: shadow scoring timed out (the served answer is unaffected)");
            }
        }
    });
}

/// The request scored in the shadow layout: scores by request item index, and the prompt
/// tokens the engine computed for it.
async fn score(
    state: &Arc<Ranker>,
    req: &Validated,
    layout: Layout,
    spec: RecomputeSpec,
) -> Result<(Vec<f64>, u64), EngineError> {
    let rank = &state.rank;
    let model = req.model.as_deref();
    let (user, items, instruction) = pipeline::resolve_parts(state, req).await?;
    let item_refs: Vec<&[u32]> = items.iter().map(|t| t.as_slice()).collect();
    let base = rank.config.label_base;
    let (mut prompt, used, route) = match (layout, rank.pool.as_ref()) {
        (Layout::Pooled, Some(pools)) => {
            let keys: Vec<&str> = req.items.iter().map(|i| i.key.as_str()).collect();
            let hot_first = rank.popularity.order(&keys);
            let hot_keys: Vec<String> = (hot_first.iter())
                .map(|&i| crate::itempool::key(model, keys[i]))
                .collect();
            let parts = Parts {
                user: &user,
                items: &item_refs,
                instruction: &instruction,
                hot_first: &hot_first,
                hot_keys: &hot_keys,
                label_base: base,
                user_first: false,
            };
            // With several replicas, the probe uses (and is pinned to) the first one's pool.
            let built = pooled::build(pools, 0, &parts, spec);
            let route = GrHint {
                replica: (pools.len() > 1).then_some(0),
                ..GrHint::default()
            };
            (built.prompt, Some(built.pool), route)
        }
        _ => {
            let reversed = layout == (Layout::UserFirst { reversed: true });
            let order = user_first_order(item_refs.len(), reversed);
            let p = prompt_layout::build(
                PrefixKind::User,
                &user,
                &item_refs,
                &order,
                &instruction,
                base,
            );
            (p, None, GrHint::default())
        }
    };
    // Each layout read as it would be served (`auto`: the pooled one by item token, user-first
    // by labels), so the guard compares the rankings a user would get from either.
    let ids: Vec<&str> = req.items.iter().map(|i| i.key.as_str()).collect();
    let readout = req.readout.unwrap_or(rank.config.readout);
    let pooled = layout == Layout::Pooled;
    crate::rank::readout::apply(&mut prompt, &item_refs, &ids, readout, pooled)?;
    let (path, mut body) = engine::scoring_request(
        state.engine.dialect,
        model,
        &prompt,
        req.cache_salt.as_deref(),
    );
    let dialect = state.engine.dialect;
    if let Some(u) = &used {
        dialect.attach_pool_params(&mut body, &u.params);
    }
    let (answer, served) = engine::post_ranked(state, path, &body, &route).await?;
    if let (Some(pools), Some(u)) = (&rank.pool, &used) {
        pools
            .get(served.unwrap_or(0))
            .observe(u, dialect.pool_report(&answer));
    }
    let s = engine::read_scores(state.engine.dialect, &answer, &prompt)?;
    let mut by_item = vec![f64::NEG_INFINITY; req.items.len()];
    for ((_, i), lp) in prompt.labels.iter().zip(&s.logprobs) {
        if let Some(slot) = by_item.get_mut(*i) {
            *slot = *lp;
        }
    }
    Ok((by_item, s.prompt_tokens.saturating_sub(s.cached_tokens)))
}

/// The candidates' order in a user-first shadow: the request's, or reversed.
fn user_first_order(n: usize, reversed: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if reversed {
        order.reverse();
    }
    order
}

#[cfg(test)]
#[path = "shadow_tests.rs"]
mod tests;
