//! From a validated request to the prompt the engine gets: token ids for every part, the
//! prefix decision, the candidate order, the rewritten prompt. Shared by `/v1/rank` and the
//! completions extension so both produce the same tokens for the same request.

use std::sync::Arc;

use tokio::task::JoinSet;

use super::api::{Mode, Validated};
use super::config::ItemReuse;
use super::layout::{self, Prompt};
use super::pool::cold::Held;
use super::pooled::{self, Parts};
use super::recompute::RecomputeSpec;
use super::select::{CacheProbe, EngineView, PrefixKind, SelectInput};
use super::{RankError, tokens};
use crate::client::route::{GrHint, RouteHint, RouteKeys, placement};
use crate::kvloop::resident::Snapshot;
use crate::rank::Ranker;

impl CacheProbe for Snapshot {
    fn holds(&self, block: u64) -> bool {
        Snapshot::holds(self, block)
    }
    fn cached_tokens(&self) -> usize {
        self.len() * self.block_size()
    }
}

/// A request ready to send.
#[derive(Debug)]
pub struct Prepared {
    pub kind: PrefixKind,
    pub prompt: Prompt,
    /// Item-first prompts with the item pool on: the connector's `kv_transfer_params`.
    pub pool: Option<super::pool::PoolUse>,
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

/// Token ids of all items, tokenizing uncached texts concurrently.
async fn item_tokens(
    state: &Arc<Ranker>,
    req: &Validated,
) -> Result<Vec<Arc<Vec<u32>>>, RankError> {
    let model = req.model.clone();
    let mut set = JoinSet::new();
    for (i, item) in req.items.iter().enumerate() {
        let (state, model, item) = (state.clone(), model.clone(), item.clone());
        set.spawn(async move {
            let t = tokens::resolve(&state, model.as_deref(), "item", &item.key, &item.content);
            (i, t.await)
        });
    }
    let mut out: Vec<Option<Arc<Vec<u32>>>> = vec![None; req.items.len()];
    while let Some(joined) = set.join_next().await {
        let (i, t) = joined.map_err(|e| RankError::Internal(format!("tokenizer task: {e}")))?;
        out[i] = Some(t?);
    }
    out.into_iter()
        .map(|t| t.ok_or_else(|| RankError::Internal("a tokenizer task went missing".into())))
        .collect()
}

/// Token ids of the request's user, items and instruction (the default one if it gave none).
pub async fn resolve_parts(
    state: &Arc<Ranker>,
    req: &Validated,
) -> Result<(Arc<Vec<u32>>, Vec<Arc<Vec<u32>>>, Arc<Vec<u32>>), RankError> {
    let model = req.model.as_deref();
    let user = tokens::resolve(state, model, "user", &req.user.key, &req.user.content).await?;
    let items = item_tokens(state, req).await?;
    let default_instruction =
        super::api::TextOrTokens::Text(state.rank.config.default_instruction.clone());
    let instruction = req.instruction.as_ref().unwrap_or(&default_instruction);
    let instruction = tokens::resolve(state, model, "instruction", "", instruction).await?;
    Ok((user, items, instruction))
}

/// Tokenizes, chooses the layout, orders the items and builds the prompt.
pub async fn prepare(state: &Arc<Ranker>, req: &Validated) -> Result<Prepared, RankError> {
    let rank = &state.rank;
    if let Some(refused) = rank.vocab.refusal() {
        return Err(refused);
    }
    let model = req.model.as_deref();
    let (user, items, instruction) = resolve_parts(state, req).await?;
    let item_refs: Vec<&[u32]> = items.iter().map(|t| t.as_slice()).collect();
    let keys: Vec<&str> = req.items.iter().map(|i| i.key.as_str()).collect();
    let hot_first = rank.popularity.order(&keys);
    let hot_keys: Vec<&str> = hot_first.iter().map(|&i| keys[i]).collect();
    // The request's recompute setting, else the one in force (hot-swapped by the admin API).
    let spec = req
        .pool_recompute
        .unwrap_or_else(|| **rank.recompute.load());
    // The pool as far as layout goes: off for this model and setting while the quality guard
    // measures pooled rankings disagreeing with user-first. Fills go on (`rank.pool` below),
    // so the guard's probes find resident items when it looks again.
    let pools = rank.pool.as_ref().filter(|_| {
        (rank.guard.as_ref()).is_none_or(|g| g.pool_allowed(model.unwrap_or(""), &spec.to_string()))
    });
    // Item-first order. With the item pool, resident items go first: the connector supplies a
    // leading run, and their order does not matter (each was computed alone from the same
    // start position); the rest follow hot-first. With several replicas each has its own
    // pool, so what is resident depends on where the prompt goes (decided below).
    let hot_pool: Vec<String> = match pools {
        Some(_) => (hot_keys.iter())
            .map(|k| super::pool::key(model, k))
            .collect(),
        None => Vec::new(),
    };
    let held: Vec<Held> = pools
        .map(|ps| (0..ps.len()).map(|r| ps.held_on(r, &hot_pool)).collect())
        .unwrap_or_default();
    // Per replica, the prompt tokens its pool (or the store) would supply, labels included.
    // A store fetch costs about what a local load does, both ~0.1% of computing the item
    // (docs/store.md), so a cold item counts as supplied in full; that it is dearer than a
    // local one orders replicas only after cost, placement and load (`cold` below). Counted
    // one token short per item, it sent 57% of the requests to the replica holding the
    // hotter items (docs/store.md, "Why placement and routing are as they are").
    let supplied: Vec<usize> = (held.iter())
        .map(|h| {
            let pooled: Vec<&[u32]> = (0..h.resident.len())
                .filter(|&j| h.resident[j])
                .map(|j| item_refs[hot_first[j]])
                .collect();
            // Link tokens are computed again: what the pool supplies is the rest.
            let link: usize = pooled.iter().map(|t| spec.link_count(t.len() + 1)).sum();
            layout::item_tokens(&pooled).saturating_sub(link)
        })
        .collect();
    let cold: Vec<usize> = (held.iter())
        .map(|h| h.cold.iter().filter(|&&c| c).count())
        .collect();
    // The pool that serves the item side best, as far as recache knows before routing.
    let best = (0..supplied.len()).max_by_key(|&r| {
        let c = std::cmp::Reverse(cold[r]);
        (supplied[r], c, std::cmp::Reverse(r))
    });
    let (kind, rule) = match req.mode {
        Mode::Fixed(kind) => (kind, "request"),
        Mode::Auto => {
            let item_tokens = layout::item_tokens(&item_refs);
            // The engine's cache from its KV events, when recache follows them.
            let snapshot = state.kvloop.as_ref().and_then(|l| l.resident());
            let reusable_item_tokens = match (rank.config.item_reuse, &snapshot) {
                // The connector supplies every resident item (they lead the prompt).
                (ItemReuse::Pool, _) => match best {
                    Some(r) => supplied[r],
                    None => item_tokens,
                },
                (ItemReuse::Prefix, Some(snap)) => {
                    // The item-first prompt's leading cached run, items region only.
                    let base = rank.config.label_base;
                    let region =
                        layout::build(PrefixKind::Item, &[], &item_refs, &hot_first, &[], base);
                    snap.cached_prefix_tokens(&region.tokens).min(item_tokens)
                }
                (ItemReuse::Prefix, None) => {
                    let run = rank.item_prefixes.reusable_items(&hot_keys);
                    let shared: Vec<&[u32]> =
                        hot_first[..run].iter().map(|&i| item_refs[i]).collect();
                    layout::item_tokens(&shared)
                }
            };
            let engine = snapshot.as_deref().map(|snap| EngineView {
                cached_user_tokens: snap.cached_prefix_tokens(&user),
                user_block: snap.first_block(&user),
                cache: snap,
            });
            let input = SelectInput {
                user: &req.user.key,
                user_tokens: user.len(),
                item_tokens,
                reusable_item_tokens,
                engine,
            };
            let kind = rank.selector.choose(&input);
            tracing::debug!(?input, ?kind, "rank: prefix chosen");
            (kind, rank.selector.name())
        }
    };
    rank.metrics
        .decisions
        .with_label_values(&[kind.as_str(), rule])
        .inc();
    // An item-first prompt with per-replica pools is built for the replica it goes to.
    let target = match (pools, kind) {
        (Some(ps), PrefixKind::Item) if ps.len() > 1 => {
            let pool = (&supplied[..], &cold[..]);
            let pick = pick_replica(state, req, &keys, &item_refs, &instruction, pool);
            pick.or(best)
        }
        _ => None,
    };
    if kind == PrefixKind::Item {
        rank.item_prefixes.record(&hot_keys);
    }
    rank.popularity.record(&keys);
    let (order, mut prompt, pool_use, pooled, link_tokens) = match (pools, kind) {
        (Some(ps), PrefixKind::Item) => {
            let parts = Parts {
                user: &user,
                items: &item_refs,
                instruction: &instruction,
                hot_first: &hot_first,
                hot_keys: &hot_pool,
                label_base: rank.config.label_base,
            };
            let b = pooled::build(ps, target.unwrap_or(0), &parts, spec);
            (b.order, b.prompt, Some(b.pool), b.resident, b.link_tokens)
        }
        _ => {
            let order = match kind {
                PrefixKind::Item => hot_first.clone(),
                PrefixKind::User => (0..keys.len()).collect(),
            };
            let labels = layout::labels(rank.config.label_base, &vec![None; order.len()]);
            let p = layout::build_labeled(kind, &user, &item_refs, &order, &instruction, &labels);
            (order, p, None, 0, 0)
        }
    };
    let readout = req.readout.unwrap_or(rank.config.readout);
    super::readout::apply(&mut prompt, &item_refs, &keys, readout, pool_use.is_some())?;
    let item_lens: Vec<usize> = order.iter().map(|&i| item_refs[i].len() + 1).collect();
    if let Some(kvloop) = &state.kvloop {
        // The engine loop's shadow cache sees what recache wants kept: a user-first prompt
        // whole, an item-first one only up to its items (the user part after them is reusable
        // by nobody else). With eviction steering the rest goes first, which is what makes a
        // refused admission keep the cache for the admitted users.
        let keep = match kind {
            PrefixKind::User => prompt.tokens.clone(),
            PrefixKind::Item => {
                let items_end =
                    (layout::item_tokens(&item_refs) + link_tokens).min(prompt.tokens.len());
                prompt.tokens[..items_end].to_vec()
            }
        };
        kvloop.observe_tokens(keep);
    }
    if let Some(ps) = rank.pool.as_ref() {
        // Every request's candidates count, user-first ones too: they are the hotness signal.
        let counts = rank.popularity.counts(&keys);
        let wanted = (0..keys.len())
            .map(|i| super::pool::Wanted {
                key: super::pool::key(model, keys[i]),
                count: counts[i],
                tokens: items[i].clone(),
            })
            .collect();
        // Which candidates every replica pools (all of them unless `gr` or, with a store,
        // Alg. 1 shards the tail).
        ps.shape
            .record(keys.len(), user.len(), layout::item_tokens(&item_refs));
        let item_tokens = layout::item_tokens(&item_refs) as f64 / keys.len().max(1) as f64;
        let hot_share = ps.hot_share(state.client.routing().pool_hot_share(), item_tokens);
        let hot = if ps.len() < 2 || hot_share >= 1.0 {
            vec![true; keys.len()]
        } else {
            rank.popularity.hot(&keys, hot_share)
        };
        ps.want(state, model, wanted, &hot);
    }
    let mut route = route_hint(state, req, kind, &keys);
    if target.is_some() {
        route.pooled = supplied;
        route.cold = cold;
        route.replica = target;
    }
    let prepared = Prepared {
        kind,
        prompt,
        pool: pool_use,
        pooled,
        link_tokens,
        spec,
        user_len: user.len(),
        item_lens,
        route,
    };
    if let Some(sink) = &rank.trace {
        sink.write(&prepared.trace_line(req, sink.block(), sink.now_ms()));
    }
    Ok(prepared)
}

/// Where an item-first prompt goes when every replica has its own item pool: the routing
/// rule's pick now, before the prompt is built for that replica's pool. The rule sees the
/// prompt's length and, under `gr`, what each replica's pool would supply and how many of
/// those items it would read from the store (`pool`: supplied tokens, cold items).
fn pick_replica(
    state: &Ranker,
    req: &Validated,
    keys: &[&str],
    items: &[&[u32]],
    instruction: &[u32],
    pool: (&[usize], &[usize]),
) -> Option<usize> {
    let mut gr = route_hint(state, req, PrefixKind::Item, keys);
    gr.pooled = pool.0.to_vec();
    gr.cold = pool.1.to_vec();
    // The prompt's length; no keys: its leading items depend on the replica it goes to.
    let tokens = RouteKeys {
        keys: Vec::new(),
        tokens: layout::item_tokens(items) + instruction.len(),
        token_ids: true,
    };
    let hint = RouteHint {
        path: state.engine.scoring_path(),
        keys: &tokens,
        gr: Some(&gr),
    };
    state.client.pick(&hint)
}

/// What the `gr` routing rule needs of this prompt (empty unless that rule is active).
fn route_hint(state: &Ranker, req: &Validated, kind: PrefixKind, keys: &[&str]) -> GrHint {
    let Some(hot_share) = state.client.routing().hot_share() else {
        return GrHint::default();
    };
    let hot = state.rank.popularity.hot(keys, hot_share);
    GrHint {
        user_first: kind == PrefixKind::User,
        user: placement::id(&req.user.key),
        cold_items: (keys.iter().zip(hot))
            .filter(|(_, h)| !h)
            .map(|(k, _)| placement::id(k))
            .collect(),
        ..GrHint::default()
    }
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
