//! The request pipeline: what happens to a proxied body between reading it and sending it.
//!
//! A body on a route no step inspects is forwarded as read, unparsed. Otherwise it is parsed
//! once into a JSON object and these steps run over it, in order:
//!
//! 0. **retrieve extension** — a completions body with `recache_retrieve` is answered by
//!    recache's beam search (`crate::retrieve::handler::completion`); nothing is forwarded;
//! 1. **rank extension** — a completions body with `recache_rank` is rewritten into a GR
//!    prompt (`crate::rank::extension`); its headers go on the response;
//! 2. **validation** — OpenAI-route checks with 400s naming the field (`recache_adapters::openai`);
//! 3. **prompts** — the token-id prompts, read once (the engine's dialect says which field),
//!    for routing, priority and observation; when the routing rule wants them, the prompt's
//!    route keys (`crate::client::route::keys`, text prompts too);
//! 4. **priority** — `--sglang-priority`: the policy's view of the prompt as `priority`;
//! 5. **deadline demand** — with a deadline, what the call asks of the engine (prompt and
//!    output tokens) for the deadline gate, and with `--slo-engine-priority` the deadline as
//!    the engine's `priority` (`crate::slo`);
//! 6. **observation** — the engine loop's shadow cache sees the prompts. Not for rank-rewritten
//!    bodies: the ranker already handed it the part it wants kept; `recache_keep_tokens: N`
//!    (removed before forwarding) keeps only a prompt's first N tokens in the shadow, so the
//!    engine evicts the request-unique rest first (`bench replay --shadow-segments`).
//!
//! The body is re-encoded once, only when a step changed it; otherwise the client's bytes go
//! to the engine byte for byte.

use bytes::Bytes;
use http::HeaderMap;
use recache_adapters::openai;
use serde_json::{Map, Value};

use super::Proxy;
use crate::client::route::{GrHint, RouteKeys};
use crate::engine::EngineError;
use crate::error::ApiError;
use crate::rank::extension;
use crate::slo::Demand;

/// A body ready to send.
#[derive(Debug)]
pub struct Prepared {
    pub body: Bytes,
    /// Token-id prompts of the request (empty for text or uninspected routes).
    pub prompts: Vec<Vec<u32>>,
    /// The prompt's route keys, when the routing rule reads them.
    pub route_keys: RouteKeys,
    /// A GR prompt's sides (`recache_rank` requests), for the `gr` routing rule.
    pub gr: Option<GrHint>,
    /// Headers a step adds to the response.
    pub response_headers: HeaderMap,
    /// What the call asks of the engine, for the deadline gate (only with a deadline).
    pub demand: Demand,
    /// The answer, when a step answered the request itself (nothing is sent).
    pub answered: Option<Value>,
}

/// Runs the steps that apply to `path` over `bytes`.
pub async fn run(proxy: &Proxy, path: &str, bytes: Bytes) -> Result<Prepared, EngineError> {
    let mut out = Prepared {
        body: bytes,
        prompts: Vec::new(),
        route_keys: RouteKeys::default(),
        gr: None,
        response_headers: HeaderMap::new(),
        demand: Demand::default(),
        answered: None,
    };
    let validated = openai::is_parsed_route(path);
    let prompt_field = proxy.engine.token_prompt_field(path);
    let kv = proxy.kvloop.as_deref();
    let steered = kv.is_some_and(|k| k.priority(path, &[]).is_some());
    let routed = proxy.client.wants_keys();
    if !validated && !steered && (prompt_field.is_none() || (kv.is_none() && !routed)) {
        return Ok(out);
    }
    let mut obj = match serde_json::from_slice::<Value>(&out.body) {
        Ok(Value::Object(obj)) => obj,
        // Routes recache validates get the validator's 400; others go on as they came.
        _ if validated => return Err(invalid(path, &out.body)),
        _ => return Ok(out),
    };
    if path == openai::COMPLETIONS && obj.contains_key(crate::retrieve::handler::KEY) {
        let answer = crate::retrieve::handler::completion(proxy.retriever.as_ref(), obj).await?;
        out.answered = Some(answer);
        return Ok(out);
    }
    let keep = keep_tokens(&mut obj)?;
    let mut changed = keep.is_some();
    let ranked = path == openai::COMPLETIONS && obj.contains_key(extension::KEY);
    if ranked {
        let (headers, gr) = extension::rewrite(&proxy.ranker, &mut obj).await?;
        out.response_headers = headers;
        out.gr = Some(gr);
        changed = true;
    }
    openai::validate_object(path, &obj).map_err(|e| ApiError::BadRequest {
        message: e.message,
        param: e.param,
    })?;
    if crate::slo::current().is_some() {
        out.demand = crate::slo::demand_of(prompt_field, &obj);
        changed |= crate::slo::stamp_priority(&proxy.client.settings.slo, path, &mut obj);
    }
    if let Some(field) = prompt_field {
        out.prompts = obj
            .get(field)
            .map(openai::token_prompts)
            .unwrap_or_default();
    }
    if routed {
        out.route_keys = route_keys(&obj, &out.prompts);
    }
    if let Some(kv) = kv {
        // Read before this request reaches the shadow: the priority says how much of the
        // prompt the policy kept from earlier requests.
        if let Some(p) = kv.priority(path, &out.prompts) {
            obj.insert("priority".into(), Value::from(p));
            changed = true;
        }
        if !ranked && !out.prompts.is_empty() {
            let cut = |p: &Vec<u32>| p[..keep.unwrap_or(p.len()).min(p.len())].to_vec();
            kv.observe(out.prompts.iter().map(cut).collect());
        }
    }
    if changed {
        out.body = encode(obj)?;
    }
    Ok(out)
}

/// Takes `recache_keep_tokens` out of the body: how many leading tokens of each prompt the
/// shadow cache should see (None: all of them). Not a count: a 400 naming the field.
fn keep_tokens(obj: &mut Map<String, Value>) -> Result<Option<usize>, ApiError> {
    let Some(v) = obj.remove(KEEP_KEY) else {
        return Ok(None);
    };
    let message = format!("{KEEP_KEY} must be a non-negative integer (tokens), got {v}");
    let bad = || ApiError::BadRequest {
        message,
        param: Some(KEEP_KEY.to_string()),
    };
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .map(Some)
        .ok_or_else(bad)
}

/// The body field [`keep_tokens`] reads.
pub const KEEP_KEY: &str = "recache_keep_tokens";

/// Token prompts by their tokens; a text `prompt` by its bytes; chat `messages` by their JSON.
fn route_keys(obj: &Map<String, Value>, prompts: &[Vec<u32>]) -> RouteKeys {
    if !prompts.is_empty() {
        return RouteKeys::from_tokens(prompts);
    }
    match (obj.get("prompt"), obj.get("messages")) {
        (Some(Value::String(text)), _) => RouteKeys::from_text(text.as_bytes()),
        (_, Some(messages)) => serde_json::to_vec(messages)
            .map(|b| RouteKeys::from_text(&b))
            .unwrap_or_default(),
        _ => RouteKeys::default(),
    }
}

fn encode(obj: Map<String, Value>) -> Result<Bytes, EngineError> {
    serde_json::to_vec(&Value::Object(obj))
        .map(Bytes::from)
        .map_err(|e| EngineError::Internal(format!("encoding the request: {e}")))
}

/// The validator's verdict on a body that is not a JSON object.
fn invalid(path: &str, body: &[u8]) -> EngineError {
    match openai::validate_body(path, body) {
        Err(e) => ApiError::BadRequest {
            message: e.message,
            param: e.param,
        }
        .into(),
        Ok(_) => ApiError::BadRequest {
            message: "request body must be a JSON object".into(),
            param: None,
        }
        .into(),
    }
}
