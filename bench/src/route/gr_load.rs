//! GR ranking load for `bench route` (`--data FILE --items FILE`): the bipartite bench's
//! stream (`bench gr --workload bat`, BAT §6.1: users drawn with replacement by activity, 100
//! candidates of 18 tokens, profiles of at least 1,024 tokens; with `--users N`, bench gr's
//! default workload over N users instead), each request a `/v1/rank` body
//! in `auto` mode, sent to the in-process recache's `/v1/rank` with BAT's hotness-aware
//! selection on. So both sides of a ranking prompt lead some requests, and the `gr` rule's
//! user and item placement both come into play.
//!
//! With `--pool-items N` the load also carries a *past period* (the same planner, another
//! seed, [`PAST_REQUESTS`] requests, never the measured stream): its candidates by how often
//! they were asked for, hottest first, tokenized, for each strategy's item pools to be
//! precomputed from before its timed stream (BAT §5.2 step 3, as `bench gr` does). [`Past`]
//! says which: the `N` hottest, or the items BAT's split of a KV budget pools
//! (`gr::past_split`, as `bench gr --kv-bytes` sizes its pool; `bench peers --workloads gr`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::BenchError;
use crate::gr::bodies::Titles;
use crate::gr::budget::{Split, SplitError};
use crate::gr::modes::Mode;
use crate::gr::past_split::{self, PastBudget};
use crate::gr::{workload, workload_bat};
use crate::http;
use crate::http::HttpClient;
use recache::harness::RankArgs;

/// Bench gr's defaults: candidates per request, tokens per item, shortest profile.
pub const CANDIDATES: usize = 100;
const ITEM_TOKENS: usize = 18;
const MIN_PROFILE_TOKENS: usize = 1024;
/// BAT's frequency window (bench gr's `--window`).
const WINDOW: usize = 1000;
/// Requests of the past period the pools are precomputed from.
pub const PAST_REQUESTS: usize = 5000;
/// Seed offset of the past period (bench gr's).
const PAST_SEED: u64 = 0x9a57_9e51;

/// Which of the past period's items the load carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Past {
    /// None (no past period is planned).
    None,
    /// The `n` items it asked for most.
    Hottest(usize),
    /// The items BAT's split of one replica's KV budget pools, most valuable first.
    Split(Budget),
}

/// One replica's KV budget, for [`Past::Split`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// KV bytes in all (engine cache + pool), whole blocks.
    pub kv_bytes: u64,
    pub token_bytes: u64,
    /// Bytes of one token in the item pool (`token_bytes` unless `--pool-codec` says less).
    pub pool_token_bytes: u64,
    /// Tokens the engine needs for the requests in flight.
    pub working_tokens: u64,
    /// recache's pool also serves user-first prompts (`--rank-pool-after-user`).
    pub after_user: bool,
}

/// An item of the past period: its id as requests send it, title tokens and how many
/// requests named it.
pub struct PastItem {
    pub id: String,
    pub tokens: Arc<Vec<u32>>,
    pub count: u64,
}

/// The planned stream, ready to send.
pub struct GrLoad {
    pub bodies: Vec<Arc<Value>>,
    /// Per request, the user-first prompt's tokens without labels (profile, then items):
    /// what the decisions-only rows time.
    pub prompts: Vec<Vec<u32>>,
    /// The default instruction's tokens, as the engine tokenized them for this load.
    pub instruction: Vec<u32>,
    pub distinct_users: usize,
    pub returning_share: f64,
    /// The past period's items, hottest first (empty unless asked for).
    pub past: Vec<PastItem>,
    /// With [`Past::Split`]: the split (`past` lists its pooled items in its order).
    pub split: Option<Split>,
}

/// Plans `requests` ranking requests from `data`/`items` and tokenizes their titles on
/// `upstream`.
#[allow(clippy::too_many_arguments)]
pub async fn build(
    client: &HttpClient,
    upstream: &str,
    model: &str,
    data: &std::path::Path,
    items: &std::path::Path,
    requests: usize,
    users: Option<usize>,
    max_prompt_tokens: usize,
    seed: u64,
    past_items: Past,
) -> Result<GrLoad, BenchError> {
    let data = workload::load(data, items)?;
    let instruction = http::tokenize(
        client,
        upstream,
        model,
        recache::harness::DEFAULT_INSTRUCTION,
    )
    .await?;
    let shape = workload::Shape {
        requests,
        users: users.unwrap_or(64), // the bat planner draws from every user
        candidates: CANDIDATES,
        item_tokens: ITEM_TOKENS,
        min_profile_tokens: MIN_PROFILE_TOKENS,
        max_prompt_tokens,
        instruction_tokens: instruction.len(),
        rate: 0.0, // closed loop: the workers send as fast as answers come
    };
    let planner = match users {
        Some(_) => workload::plan,
        None => workload_bat::plan_bat,
    };
    let plan = planner(&data, &shape, seed)?;
    let population = workload::population(&plan);
    let past_plan = match past_items {
        Past::None | Past::Hottest(0) => Vec::new(),
        Past::Hottest(_) | Past::Split(_) => {
            let past_shape = workload::Shape {
                requests: PAST_REQUESTS,
                ..shape.clone()
            };
            planner(&data, &past_shape, seed.wrapping_add(PAST_SEED))?
        }
    };
    let (hottest, split) = match past_items {
        Past::None => (Vec::new(), None),
        Past::Hottest(n) => (by_count(&past_plan, n), None),
        Past::Split(budget) => {
            let split = split_past(&data, &past_plan, budget)
                .map_err(|e| BenchError::Setup(format!("the pool's share of memory: {e}")))?;
            let counts: std::collections::HashMap<u64, u64> =
                by_count(&past_plan, usize::MAX).into_iter().collect();
            let pooled = (split.pool.iter())
                .map(|&i| {
                    (
                        data.items[i],
                        counts.get(&data.items[i]).copied().unwrap_or(0),
                    )
                })
                .collect();
            (pooled, Some(split))
        }
    };
    let used = (plan.iter())
        .flat_map(|p| p.items.iter().chain(&p.history).copied())
        .chain(hottest.iter().map(|&(i, _)| i));
    let titles = Titles::tokenize(client, upstream, model, &data, used).await?;
    let past = (hottest.into_iter())
        .map(|(i, count)| PastItem {
            id: i.to_string(),
            tokens: Arc::new(titles.item(&data, ITEM_TOKENS, i)),
            count,
        })
        .collect();
    let mut bodies = Vec::with_capacity(plan.len());
    let mut prompts = Vec::with_capacity(plan.len());
    for p in &plan {
        let mut body = (*titles.body(p, &data, ITEM_TOKENS, model)).clone();
        body["mode"] = json!("auto");
        let mut prompt = token_ids(&body["user"]["tokens"]);
        for item in body["items"].as_array().into_iter().flatten() {
            prompt.extend(token_ids(&item["tokens"]));
        }
        prompts.push(prompt);
        bodies.push(Arc::new(body));
    }
    Ok(GrLoad {
        bodies,
        prompts,
        distinct_users: population.distinct_users,
        returning_share: population.returning_share,
        past,
        split,
        instruction,
    })
}

/// BAT's split of `budget` from `past` (items of [`ITEM_TOKENS`] and their label).
fn split_past(
    data: &workload::Data,
    past: &[workload::Planned],
    budget: Budget,
) -> Result<Split, SplitError> {
    past_split::split(&PastBudget {
        kv_bytes: budget.kv_bytes,
        token_bytes: budget.token_bytes,
        pool_token_bytes: budget.pool_token_bytes,
        working_tokens: budget.working_tokens,
        item_tokens: ITEM_TOKENS as u64 + 1,
        data,
        past,
        after_user: budget.after_user,
    })
}

/// The `n` items `plan` asks for most, with their counts, hottest first (ties by id).
fn by_count(plan: &[workload::Planned], n: usize) -> Vec<(u64, u64)> {
    let mut counts = std::collections::HashMap::<u64, u64>::new();
    for p in plan {
        for &i in &p.items {
            *counts.entry(i).or_default() += 1;
        }
    }
    let mut all: Vec<(u64, u64)> = counts.into_iter().collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(n);
    all
}

fn token_ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_u64().map(|t| t as u32))
        .collect()
}

/// recache's ranking settings for the run: bench gr's `bat` mode (`bat-pool` with
/// `pool_items` > 0: that many item pool slots per replica), the user cache sized to one
/// replica's KV cache (`kv_blocks` 32-token blocks) less one prompt.
pub fn rank_args(kv_blocks: usize, max_prompt_tokens: usize, pool_items: usize) -> RankArgs {
    let tokens = (kv_blocks.saturating_sub(1) * 32).saturating_sub(max_prompt_tokens) as u64;
    let user_cache = if tokens == 0 {
        recache::harness::DEFAULT_USER_CACHE_TOKENS
    } else {
        tokens
    };
    let mode = if pool_items > 0 {
        Mode::BatPool
    } else {
        Mode::Bat
    };
    mode.setup(WINDOW, user_cache, pool_items).rank
}
