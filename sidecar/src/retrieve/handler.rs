//! `POST /v1/retrieve` and the `recache_retrieve` completions extension: validate, build the
//! prompt, run the constrained beam search through the engine, answer the items.

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};

use super::Retriever;
use super::api::{self, Item, RetrieveRequest, RetrieveResponse, Usage, Validated};
use super::engine::{self, EngineScorer};
use super::search::{SearchSpec, search};
use crate::Body;
use crate::engine::EngineError;
use crate::engine::api::bad;
use crate::error::{ApiError, json_response};

/// The completions body key that asks for a retrieval.
pub const KEY: &str = "recache_retrieve";

/// Answers one `/v1/retrieve` request.
pub async fn handle(state: &Arc<Retriever>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let bytes = match crate::body::read(body, &parts.headers, state.max_body_bytes).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let index = &state.config.index;
    let lookup = |id: &str| index.by_id.get(id).copied();
    let result = match api::parse(&bytes, state.config.max_beam_width, lookup) {
        Ok(req) => retrieve(state, &req).await,
        Err(e) => Err(e.into()),
    };
    match result.and_then(|r| {
        serde_json::to_value(&r).map_err(|e| EngineError::Internal(format!("encoding: {e}")))
    }) {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err(e) => e.into_response(),
    }
}

/// Runs one validated retrieval.
pub async fn retrieve(
    state: &Arc<Retriever>,
    req: &Validated,
) -> Result<RetrieveResponse, EngineError> {
    let started = Instant::now();
    let model = req.model.as_deref();
    state.check_vocab(model).await?;
    let cfg = &state.config;
    let prompt = engine::prompt(
        &state.client,
        model,
        &req.user.content,
        req.instruction.as_ref(),
        cfg.align,
        cfg.pad_token,
    )
    .await?;
    let spec = SearchSpec {
        beam_width: req.beam_width,
        top_k: req.top_k,
        exclude: req.exclude.clone(),
    };
    let m = &state.metrics;
    let in_engine = (state.in_engine)
        .search(&state.client, state.engine, &prompt, &spec)
        .await;
    let (found, stats) = match in_engine {
        Some(r) => r.inspect(|_| m.in_engine.inc())?,
        None => {
            let scorer = EngineScorer::new(&state.client, state.engine, model, &prompt);
            search(&cfg.index, &spec, &scorer).await?
        }
    };
    m.searches.inc();
    m.engine_calls.inc_by(stats.engine_calls);
    m.prompt_tokens.inc_by(stats.prompt_tokens);
    m.cached_tokens.inc_by(stats.cached_tokens);
    m.pruned_beams.inc_by(stats.pruned_beams);
    if stats.stopped_early {
        m.stopped_early.inc();
    }
    m.latency.observe(started.elapsed().as_secs_f64());
    Ok(RetrieveResponse {
        items: found
            .iter()
            .map(|f| Item {
                id: cfg.index.file.items[f.item].id.clone(),
                score: f.score as f64,
            })
            .collect(),
        usage: Usage {
            prompt_tokens: stats.prompt_tokens,
            cached_tokens: stats.cached_tokens,
            engine_calls: stats.engine_calls,
            steps: stats.steps,
            pruned_beams: stats.pruned_beams,
            stopped_early: stats.stopped_early,
        },
    })
}

/// Answers a completions body carrying [`KEY`] (the proxy's pipeline calls this only then)
/// as an OpenAI text completion: one choice whose text is the item ids, one per line, and
/// the retrieval's own answer under `recache_retrieve`. `model`, `n: 1` and `max_tokens` may
/// sit beside it; any other completions field is refused rather than silently ignored.
pub async fn completion(
    state: Option<&Arc<Retriever>>,
    mut obj: Map<String, Value>,
) -> Result<Value, EngineError> {
    let Some(state) = state else {
        return Err(ApiError::NotFound(format!(
            "'{KEY}' needs a retrieval index: start recache serve with --retrieve-index"
        ))
        .into());
    };
    let spec = obj.remove(KEY).unwrap_or(Value::Null);
    let model = obj.remove("model");
    for (k, v) in &obj {
        let harmless = match k.as_str() {
            "max_tokens" => true,
            "stream" => v != &Value::Bool(true),
            "n" => v == &json!(1),
            _ => false,
        };
        if !harmless {
            return Err(bad(
                format!("'{KEY}' answers from recache's beam search; '{k}' cannot apply to it"),
                k,
            )
            .into());
        }
    }
    let mut req: RetrieveRequest = serde_json::from_value(spec)
        .map_err(|e| bad(format!("invalid '{KEY}' object: {e}"), KEY))?;
    if req.model.is_some() {
        return Err(bad(
            format!("put 'model' in the completions body, not in '{KEY}'"),
            KEY,
        )
        .into());
    }
    req.model = model.as_ref().and_then(Value::as_str).map(str::to_string);
    let index = &state.config.index;
    let req = api::validate(req, state.config.max_beam_width, |id| {
        index.by_id.get(id).copied()
    })?;
    let answer = retrieve(state, &req).await?;
    let text: Vec<&str> = answer.items.iter().map(|i| i.id.as_str()).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(json!({
        "id": format!("cmpl-recache-{:x}", now.as_nanos()),
        "object": "text_completion",
        "created": now.as_secs(),
        "model": model.unwrap_or(Value::Null),
        "choices": [{"index": 0, "text": text.join("\n"), "logprobs": null, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": answer.usage.prompt_tokens,
            "completion_tokens": 0,
            "total_tokens": answer.usage.prompt_tokens,
            "prompt_tokens_details": {"cached_tokens": answer.usage.cached_tokens},
        },
        KEY: answer,
    }))
}
