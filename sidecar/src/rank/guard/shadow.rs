//! The guard's shadow scoring: a sampled request ranked again in the other layout, in a
//! background task, and the two rankings compared.
//!
//! - Served pooled → scored again user-first (the reference the pool must match).
//! - Served without the pool while the guard holds it off → scored again pooled (the probe
//!   that sees the agreement recover).
//!
//! It reads the token cache, the hotness order and the pool's residency, but records nothing
//! (no hotness, no fills, no decisions metric), so the served traffic's state is the same with
//! the guard on or off. The answer the client got is never touched: a shadow that fails or
//! times out is counted (`rank_quality_samples_total{outcome}`) and logged.

use std::sync::Arc;
use std::time::Duration;

use super::{QualityGuard, Slot};
use crate::client::route::GrHint;
use crate::rank::api::Validated;
use crate::rank::layout;
use crate::rank::pooled::{self, Parts};
use crate::rank::recompute::RecomputeSpec;
use crate::rank::select::PrefixKind;
use crate::rank::{RankError, Ranker, engine, pipeline};

/// A shadow scoring that does not answer within this long is given up (counted `timeout`).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Which layout the shadow scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shadow {
    /// The request was served pooled; the shadow is user-first.
    UserFirst,
    /// The request was served without the pool (held off); the shadow is pooled.
    Pooled,
}

/// Starts a shadow scoring of `req` in the background; `served[i]` is the score the answer
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
        match tokio::time::timeout(TIMEOUT, score(&state, &req, shadow, spec)).await {
            Ok(Ok((scores, computed))) => {
                guard.count(&model, "ok");
                guard.count_tokens(&model, computed);
                let (pooled, user_first) = match shadow {
                    Shadow::UserFirst => (&served, &scores),
                    Shadow::Pooled => (&scores, &served),
                };
                match super::agreement::agreement(pooled, user_first) {
                    Some(a) => guard.record(&model, &setting, a),
                    None => guard.count(&model, "failed"),
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
    shadow: Shadow,
    spec: RecomputeSpec,
) -> Result<(Vec<f64>, u64), RankError> {
    let rank = &state.rank;
    let model = req.model.as_deref();
    let (user, items, instruction) = pipeline::resolve_parts(state, req).await?;
    let item_refs: Vec<&[u32]> = items.iter().map(|t| t.as_slice()).collect();
    let base = rank.config.label_base;
    let (prompt, used, route) = match (shadow, rank.pool.as_ref()) {
        (Shadow::Pooled, Some(pools)) => {
            let keys: Vec<&str> = req.items.iter().map(|i| i.key.as_str()).collect();
            let hot_first = rank.popularity.order(&keys);
            let hot_keys: Vec<String> = (hot_first.iter())
                .map(|&i| crate::rank::pool::key(model, keys[i]))
                .collect();
            let parts = Parts {
                user: &user,
                items: &item_refs,
                instruction: &instruction,
                hot_first: &hot_first,
                hot_keys: &hot_keys,
                label_base: base,
            };
            // With several replicas, the probe uses (and is pinned to) the first one's pool.
            let built = pooled::build(pools.get(0), &parts, spec);
            let route = GrHint {
                replica: (pools.len() > 1).then_some(0),
                ..GrHint::default()
            };
            (built.prompt, Some(built.pool), route)
        }
        _ => {
            let order: Vec<usize> = (0..item_refs.len()).collect();
            let p = layout::build(
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
    let (path, mut body) =
        engine::scoring_request(state.engine, model, &prompt, req.cache_salt.as_deref());
    if let Some(u) = &used {
        body["kv_transfer_params"] = u.params.clone();
    }
    let (answer, served) = engine::post_ranked(state, path, &body, &route).await?;
    if let (Some(pools), Some(u)) = (&rank.pool, &used) {
        pools.get(served.unwrap_or(0)).observe(u, &answer);
    }
    let s = engine::read_scores(state.engine, &answer, &prompt)?;
    let mut by_item = vec![f64::NEG_INFINITY; req.items.len()];
    for ((_, i), lp) in prompt.labels.iter().zip(&s.logprobs) {
        if let Some(slot) = by_item.get_mut(*i) {
            *slot = *lp;
        }
    }
    Ok((by_item, s.prompt_tokens.saturating_sub(s.cached_tokens)))
}
