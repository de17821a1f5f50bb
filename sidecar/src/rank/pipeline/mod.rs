//! From a validated request to the prompt the engine gets: token ids for every part, the
//! prefix decision, the candidate order, the rewritten prompt. Shared by `/v1/rank` and the
//! completions extension so both produce the same tokens for the same request.
//!
//! [`prepare`] runs the stages in order, each a function of its own:
//! 1. tokens ([`resolve_parts`]) and the hot-first item order ([`Request`]);
//! 2. what each replica's item pool holds of the items ([`pool::residency`]);
//! 3. the layout ([`choose::layout`]) and, for an item-first prompt with per-replica pools,
//!    the replica it is built for ([`pool::target`]);
//! 4. the prompt ([`build`]) and its readout;
//! 5. what the engine loop and the item pools are told ([`keep_in_shadow`],
//!    [`pool::offer`]), the route hint ([`route::hint`]) and the trace line.

mod choose;
mod pool;
mod route;

use std::sync::Arc;

use tokio::task::JoinSet;

use super::api::Validated;
use super::layout::{self, Prompt};
use super::pooled::{self, Parts};
use super::select::PrefixKind;
use super::{RankState, Ranker};
use crate::client::route::GrHint;
use crate::engine::{EngineError, tokens};
use crate::itempool::recompute::RecomputeSpec;
use crate::itempool::replicas::Pools;

/// A request ready to send.
#[derive(Debug)]
pub struct Prepared {
    pub kind: PrefixKind,
    pub prompt: Prompt,
    /// Item-first prompts with the item pool on: the connector's `kv_transfer_params`.
    pub pool: Option<crate::itempool::PoolUse>,
    /// Leading items the pool holds (item-first prompts with the pool), as recache sees it.
    pub pooled: usize,
    /// Tokens the pool recompute setting sends again after the pooled run (computed).
    pub link_tokens: usize,
    /// The pool recompute setting this request was built with.
    pub spec: RecomputeSpec,
    /// Tokens of the user's profile, and of each item in prompt order (label included).
    pub user_len: usize,
    pub item_lens: Vec<usize>,
    /// The prompt's sides for the `gr` routing rule.
    pub route: GrHint,
}

/// The request's token ids and its items' hot-first order, as every stage reads them.
struct Request<'a> {
    req: &'a Validated,
    model: Option<&'a str>,
    user: &'a [u32],
    /// Token ids of each item, in request order.
    items: Vec<&'a [u32]>,
    instruction: &'a [u32],
    /// Each item's key, in request order.
    keys: Vec<&'a str>,
    /// Request indices, hottest first, and their keys in that order.
    hot_first: Vec<usize>,
    hot_keys: Vec<&'a str>,
}

impl<'a> Request<'a> {
    fn new(
        rank: &RankState,
        req: &'a Validated,
        user: &'a [u32],
        items: &'a [Arc<Vec<u32>>],
        instruction: &'a [u32],
    ) -> Self {
        let keys: Vec<&str> = req.items.iter().map(|i| i.key.as_str()).collect();
        let hot_first = rank.popularity.order(&keys);
        let hot_keys = hot_first.iter().map(|&i| keys[i]).collect();
        Self {
            req,
            model: req.model.as_deref(),
            user,
            items: items.iter().map(|t| t.as_slice()).collect(),
            instruction,
            keys,
            hot_first,
            hot_keys,
        }
    }
}

/// Token ids of all items, tokenizing uncached texts concurrently.
async fn item_tokens(
    state: &Arc<Ranker>,
    req: &Validated,
) -> Result<Vec<Arc<Vec<u32>>>, EngineError> {
    let model = req.model.clone();
    let mut set = JoinSet::new();
    for (i, item) in req.items.iter().enumerate() {
        let (engine, model, item) = (state.engine.clone(), model.clone(), item.clone());
        set.spawn(async move {
            let t = tokens::resolve(&engine, model.as_deref(), "item", &item.key, &item.content);
            (i, t.await)
        });
    }
    let mut out: Vec<Option<Arc<Vec<u32>>>> = vec![None; req.items.len()];
    while let Some(joined) = set.join_next().await {
        let (i, t) = joined.map_err(|e| EngineError::Internal(format!("tokenizer task: {e}")))?;
        out[i] = Some(t?);
    }
    out.into_iter()
        .map(|t| t.ok_or_else(|| EngineError::Internal("a tokenizer task went missing".into())))
        .collect()
}

/// Token ids of the request's user, items and instruction (the default one if it gave none).
pub async fn resolve_parts(
    state: &Arc<Ranker>,
    req: &Validated,
) -> Result<(Arc<Vec<u32>>, Vec<Arc<Vec<u32>>>, Arc<Vec<u32>>), EngineError> {
    let model = req.model.as_deref();
    let engine = &state.engine;
    let user = tokens::resolve(engine, model, "user", &req.user.key, &req.user.content).await?;
    let items = item_tokens(state, req).await?;
    let default_instruction =
        crate::engine::api::TextOrTokens::Text(state.rank.config.default_instruction.clone());
    let instruction = req.instruction.as_ref().unwrap_or(&default_instruction);
    let instruction = tokens::resolve(engine, model, "instruction", "", instruction).await?;
    Ok((user, items, instruction))
}

/// Tokenizes, chooses the layout, orders the items and builds the prompt.
pub async fn prepare(state: &Arc<Ranker>, req: &Validated) -> Result<Prepared, EngineError> {
    let rank = &state.rank;
    if let Some(refused) = rank.vocab.refusal() {
        return Err(refused);
    }
    let (user, items, instruction) = resolve_parts(state, req).await?;
    let r = Request::new(rank, req, &user, &items, &instruction);
    // The request's recompute setting, else the one in force (hot-swapped by the admin API).
    let spec = req
        .pool_recompute
        .unwrap_or_else(|| **rank.recompute.load());
    let pools = pool::usable(rank, r.model, spec);
    let held = pool::residency(pools, &r, spec);
    let (kind, rule) = choose::layout(state, &r, held.best.map(|b| held.supplied[b]));
    rank.metrics
        .decisions
        .with_label_values(&[kind.as_str(), rule])
        .inc();
    // A user-first prompt with the pool: items after the profile, padded to whole blocks.
    let lead = match (pools, kind) {
        (Some(_), PrefixKind::User) if rank.config.pool_after_user => {
            pool::padded(&user, pad_token(state, req).await, BLOCK)
        }
        _ => None,
    };
    let target = match kind == PrefixKind::Item || lead.is_some() {
        true => pool::target(state, &r, pools, lead.as_deref(), &held),
        false => None,
    };
    if kind == PrefixKind::Item {
        rank.item_prefixes.record(&r.hot_keys);
    }
    rank.popularity.record(&r.keys);
    let built = build(
        rank,
        &r,
        pools,
        kind,
        target,
        &held.hot_pool,
        spec,
        lead.as_deref(),
    );
    let Built {
        order,
        mut prompt,
        pool_use,
        pooled,
        link_tokens,
    } = built;
    let readout = req.readout.unwrap_or(rank.config.readout);
    super::readout::apply(&mut prompt, &r.items, &r.keys, readout, pool_use.is_some())?;
    let item_lens: Vec<usize> = order.iter().map(|&i| r.items[i].len() + 1).collect();
    let lead_len = lead.as_ref().map(Vec::len);
    keep_in_shadow(state, kind, &prompt, &r.items, link_tokens, lead_len);
    pool::offer(state, &r, &items);
    let mut route = route::hint(state, req, kind, &r.keys);
    if target.is_some() {
        route.pooled = held.supplied;
        route.cold = held.cold;
        route.replica = target;
    }
    let prepared = Prepared {
        kind,
        prompt,
        pool: pool_use,
        pooled,
        link_tokens,
        spec,
        user_len: lead.as_ref().map_or(user.len(), Vec::len),
        item_lens,
        route,
    };
    if let Some(sink) = &rank.trace {
        sink.write(&prepared.trace_line(req, sink.block(), sink.now_ms()));
    }
    Ok(prepared)
}

/// Block size the user-first pooled prompt pads its profile to: vLLM's on the testbed (16,
/// GPU vLLM's default, divides it).
const BLOCK: usize = crate::client::route::keys::TOKENS_PER_KEY;

/// The token a user-first pooled prompt pads the profile with: the last token of " " in the
/// request's model (cached like the instruction); None where it has none.
async fn pad_token(state: &Arc<Ranker>, req: &Validated) -> Option<u32> {
    let space = crate::engine::api::TextOrTokens::Text(" ".into());
    let t = tokens::resolve(&state.engine, req.model.as_deref(), "pad", "", &space).await;
    t.ok().and_then(|t| t.last().copied())
}

/// A built prompt: request indices in prompt order, the prompt, and with the item pool the
/// connector's part, the items it holds and the link tokens sent after them.
struct Built {
    order: Vec<usize>,
    prompt: Prompt,
    pool_use: Option<crate::itempool::PoolUse>,
    pooled: usize,
    link_tokens: usize,
}

/// The prompt in layout `kind`: an item-first one with the item pool, or a user-first one
/// with a padded profile (`lead`), is built for replica `target`'s pool (`hot_pool`: the
/// hot-first items' pool keys); others with positional labels.
#[allow(clippy::too_many_arguments)]
fn build(
    rank: &RankState,
    r: &Request<'_>,
    pools: Option<&Pools>,
    kind: PrefixKind,
    target: Option<usize>,
    hot_pool: &[String],
    spec: RecomputeSpec,
    lead: Option<&[u32]>,
) -> Built {
    let pooled = kind == PrefixKind::Item || lead.is_some();
    if let (Some(ps), true) = (pools, pooled) {
        let parts = Parts {
            user: lead.unwrap_or(r.user),
            user_first: lead.is_some(),
            items: &r.items,
            instruction: r.instruction,
            hot_first: &r.hot_first,
            hot_keys: hot_pool,
            label_base: rank.config.label_base,
        };
        let b = pooled::build(ps, target.unwrap_or(0), &parts, spec);
        return Built {
            order: b.order,
            prompt: b.prompt,
            pool_use: Some(b.pool),
            pooled: b.resident,
            link_tokens: b.link_tokens,
        };
    }
    let order = match kind {
        PrefixKind::Item => r.hot_first.clone(),
        PrefixKind::User => (0..r.keys.len()).collect(),
    };
    let labels = layout::labels(rank.config.label_base, &vec![None; order.len()]);
    let prompt = layout::build_labeled(kind, r.user, &r.items, &order, r.instruction, &labels);
    Built {
        order,
        prompt,
        pool_use: None,
        pooled: 0,
        link_tokens: 0,
    }
}

/// Tells the engine loop's shadow cache what recache wants kept: a user-first prompt whole
/// (with the pool, only its padded profile: the items after it come from the pool), an
/// item-first one only up to its items (the user part after them is reusable by nobody
/// else). With eviction steering the rest goes first, which is what makes a refused
/// admission keep the cache for the admitted users.
fn keep_in_shadow(
    state: &Ranker,
    kind: PrefixKind,
    prompt: &Prompt,
    items: &[&[u32]],
    link_tokens: usize,
    lead_len: Option<usize>,
) {
    let Some(kvloop) = &state.kvloop else {
        return;
    };
    let keep = match kind {
        PrefixKind::User => prompt.tokens[..lead_len.unwrap_or(prompt.tokens.len())].to_vec(),
        PrefixKind::Item => {
            let items_end = (layout::item_tokens(items) + link_tokens).min(prompt.tokens.len());
            prompt.tokens[..items_end].to_vec()
        }
    };
    kvloop.observe_tokens(keep);
}

impl Prepared {
    /// This prompt's line of the GR block trace (`--rank-trace-out`, `bench gr --trace-out`).
    pub fn trace_line(
        &self,
        req: &Validated,
        block: usize,
        timestamp_ms: u64,
    ) -> recache_eviction::trace::Request {
        let item_ids: Vec<&str> = (self.prompt.labels.iter())
            .map(|&(_, i)| req.items.get(i).map_or("", |it| it.key.as_str()))
            .collect();
        super::trace::request(
            &super::trace::PromptShape {
                kind: self.kind,
                tokens: &self.prompt.tokens,
                user_len: self.user_len,
                item_lens: &self.item_lens,
                item_ids: &item_ids,
                pooled: self.pooled,
                link: self.link_tokens,
                user_id: &req.user.key,
                salt: req.cache_salt.as_deref(),
            },
            block,
            timestamp_ms,
        )
    }
}
