//! `POST /v1/rank`: validate, rewrite, score on the engine, answer candidates by score.

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::api::{self, RankResponse, Scored, Usage, Validated};
use super::engine;
use super::guard::shadow::{self, Shadow};
use super::pipeline::{Prepared, prepare};
use crate::Body;
use crate::engine::EngineError;
use crate::error::json_response;
use crate::rank::Ranker;

/// Answers one `/v1/rank` request.
pub async fn handle(state: &Arc<Ranker>, req: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let limit = state.max_body_bytes;
    let bytes = match crate::body::read(body, &parts.headers, limit).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let result = match api::parse(&bytes, state.rank.config.max_items) {
        // A body's deadline_ms stands in for the header's (measured from arrival too).
        Ok(req) => match req
            .deadline
            .filter(|_| state.engine.client.settings.slo.enabled)
        {
            Some(budget) => {
                let best_effort = crate::slo::best_effort(&parts.headers).unwrap_or(false);
                let arrived = tokio::time::Instant::from_std(started);
                let d = crate::slo::Deadline::within(budget, arrived, best_effort);
                crate::slo::scope(Some(d), rank(state, &req)).await
            }
            None => rank(state, &req).await,
        },
        Err(e) => Err(e.into()),
    };
    match result.and_then(|r| {
        serde_json::to_value(&r).map_err(|e| EngineError::Internal(format!("encoding: {e}")))
    }) {
        Ok(value) => {
            let m = &state.rank.metrics;
            m.latency.observe(started.elapsed().as_secs_f64());
            m.total_seconds.inc_by(started.elapsed().as_secs_f64());
            json_response(StatusCode::OK, &value)
        }
        Err(e) => e.into_response(),
    }
}

/// Ranks a validated request.
pub async fn rank(state: &Arc<Ranker>, req: &Validated) -> Result<RankResponse, EngineError> {
    let Prepared {
        kind,
        prompt,
        pool,
        route,
        pooled,
        spec,
        link_tokens,
        ..
    } = prepare(state, req).await?;
    let engine_started = Instant::now();
    let dialect = state.engine.dialect;
    let (path, mut body) = engine::scoring_request(
        dialect,
        req.model.as_deref(),
        &prompt,
        req.cache_salt.as_deref(),
    );
    if let Some(used) = &pool {
        dialect.attach_pool_params(&mut body, &used.params);
    }
    let (answer, served) = engine::post_ranked(state, path, &body, &route).await?;
    let m = &state.rank.metrics;
    m.engine_seconds
        .inc_by(engine_started.elapsed().as_secs_f64());
    if let (Some(pools), Some(used)) = (&state.rank.pool, &pool) {
        // The pool of the replica that answered (the one the prompt was built for, unless
        // it failed over): its connector's report is about its own pool.
        pools
            .get(served.unwrap_or(0))
            .observe(used, dialect.pool_report(&answer));
    }
    let scores = engine::read_scores(dialect, &answer, &prompt)?;
    let pool_tokens = match &pool {
        // Also inside cached_tokens on both engines (vLLM counts external hits as computed
        // before the step, SGLang as host hits): reported beside it, never added to it.
        Some(_) => dialect.pool_report(&answer)["loaded_tokens"]
            .as_u64()
            .unwrap_or(0),
        None => 0,
    };
    m.prompt_tokens.inc_by(scores.prompt_tokens);
    m.cached_tokens.inc_by(scores.cached_tokens);
    m.reused_tokens.observe(scores.cached_tokens as f64);
    // Position k of the prompt holds request item labels[k].1; order by score, ties by the
    // request's own order so equal scores rank deterministically.
    let mut scored: Vec<(usize, f64)> = prompt
        .labels
        .iter()
        .zip(&scores.logprobs)
        .map(|((_, item), lp)| (*item, *lp))
        .collect();
    check_quality(state, req, &scored, pool.is_some() && pooled > 0, spec);
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let ranking = scored
        .into_iter()
        .take(req.top_k)
        .map(|(i, score)| Scored {
            id: req.items[i].id.clone(),
            score,
        })
        .collect();
    Ok(RankResponse {
        ranking,
        prefix: kind,
        usage: Usage {
            prompt_tokens: scores.prompt_tokens,
            cached_tokens: scores.cached_tokens,
            pool_tokens: state.rank.pool.as_ref().map(|_| pool_tokens),
            link_tokens: state.rank.pool.as_ref().map(|_| link_tokens as u64),
        },
    })
}

/// Hands a sampled answer to the quality guard (`guard::shadow`): a pool-served one, or one
/// served without the pool while the guard holds it off (a probe). `scored`: (request item
/// index, score) of every candidate.
fn check_quality(
    state: &Arc<Ranker>,
    req: &Validated,
    scored: &[(usize, f64)],
    served_pooled: bool,
    spec: crate::itempool::recompute::RecomputeSpec,
) {
    let Some(guard) = &state.rank.guard else {
        return;
    };
    let model = req.model.as_deref().unwrap_or("");
    let shadow = if served_pooled {
        Shadow::Served
    } else if !guard.pool_allowed(model, &spec.to_string()) {
        Shadow::Probe
    } else {
        return;
    };
    let Some(slot) = guard.sample(model) else {
        return;
    };
    let mut served = vec![f64::NEG_INFINITY; req.items.len()];
    for &(i, score) in scored {
        if let Some(s) = served.get_mut(i) {
            *s = score;
        }
    }
    shadow::spawn(state, guard, slot, req, served, shadow, spec);
}
