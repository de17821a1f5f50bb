//! The pooled kind: bat-pool ranking prompts exactly as `bench gr --workload bat` builds them
//! (its workload, bodies and in-process recache in bat-pool mode), with every item they name
//! computed into the engine's item pool first, then sent one at a time: the engine loads the
//! items' K/V through the connector and computes the rest (profile, instruction).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::args::CostfitArgs;
use super::probe::{self, Delta};
use crate::error::BenchError;
use crate::gr::bodies::Titles;
use crate::gr::modes::Mode;
use crate::gr::proxy::LocalProxyRun;
use crate::gr::{GrArgs, Workload, pool, workload, workload_bat};
use crate::http::{self, HttpClient};

/// The engine the pooled requests go to.
pub struct Engine<'a> {
    pub client: &'a HttpClient,
    pub upstream: &'a str,
    pub kv_events: Option<&'a str>,
    pub engine: recache_adapters::Engine,
    pub model: &'a str,
    /// KV bytes of one token of the served model (sizes the pool the requests need).
    pub kv_token_bytes: u64,
}

/// bat-pool's recache, its requests, and the pool it filled.
pub struct Pooled {
    proxy: LocalProxyRun,
    bodies: Vec<Arc<Value>>,
}

/// `bench gr`'s settings for the pooled requests: its defaults, bat's workload, closed loop.
fn gr_args(args: &CostfitArgs, upstream: &str, model: &str) -> Result<GrArgs, BenchError> {
    let (Some(data), Some(items)) = (&args.data, &args.items) else {
        return Err(BenchError::Setup(
            "the pooled kind needs --data and --items (bench gr's workload, e.g. --data \
             ../shared/data/amazon/Beauty.txt --items \
             ../shared/data/items/Industrial_and_Scientific.item.json), or leave it out of \
             --kinds"
                .into(),
        ));
    };
    let mut gr = GrArgs::defaults(data, items, upstream)?;
    gr.workload = Workload::Bat;
    gr.requests = args.pooled_requests;
    gr.seed = args.seed;
    gr.rate = 0.0;
    gr.concurrency = 1;
    gr.model = Some(model.to_string());
    gr.kv_blocks = Some(args.kv_blocks);
    gr.allow_unequal_memory = true;
    Ok(gr)
}

/// Plans the requests, tokenizes their items, starts bat-pool's recache and computes every
/// item the requests name into the pool (untimed).
pub async fn prepare(args: &CostfitArgs, e: &Engine<'_>) -> Result<Pooled, BenchError> {
    let gr = gr_args(args, e.upstream, e.model)?;
    let data = workload::load(&gr.data, &gr.items)?;
    let instruction = http::tokenize(
        e.client,
        e.upstream,
        e.model,
        recache::harness::DEFAULT_INSTRUCTION,
    )
    .await?;
    let shape = workload::Shape {
        requests: gr.requests,
        users: gr.users,
        candidates: gr.candidates,
        item_tokens: gr.item_tokens,
        min_profile_tokens: gr.min_profile_tokens,
        max_prompt_tokens: gr.max_prompt_tokens,
        instruction_tokens: instruction.len(),
        rate: 0.0,
    };
    let plan = workload_bat::plan_bat(&data, &shape, gr.seed)?;
    // Every candidate, in first use order: all resident, so no request waits on a fill.
    let mut seen = HashSet::new();
    let items: Vec<u64> = (plan.iter().flat_map(|p| p.items.iter().copied()))
        .filter(|i| seen.insert(*i))
        .collect();
    let item_bytes = (gr.item_tokens as u64 + 1) * e.kv_token_bytes;
    let need = items.len() as u64 * item_bytes;
    if need > args.pool_bytes {
        return Err(BenchError::Setup(format!(
            "{} pooled requests name {} items ({need} pool bytes): more than --pool-bytes {} \
             (the engine's up --item-pool-bytes); ask for fewer --pooled-requests or a larger \
             pool",
            plan.len(),
            items.len(),
            args.pool_bytes
        )));
    }
    let used = (plan.iter()).flat_map(|p| p.items.iter().chain(&p.history).copied());
    let titles = Titles::tokenize(e.client, e.upstream, e.model, &data, used).await?;
    let bodies = (plan.iter())
        .map(|p| titles.body(p, &data, gr.item_tokens, e.model))
        .collect();
    let warm: Vec<(u64, Arc<Vec<u32>>)> = (items.iter())
        .map(|&i| (i, Arc::new(titles.item(&data, gr.item_tokens, i))))
        .collect();
    let user_cache = ((args.kv_blocks.saturating_sub(1)) * gr.block_size)
        .saturating_sub(gr.max_prompt_tokens as u64);
    let proxy = LocalProxyRun::new(
        e.upstream,
        e.kv_events,
        e.engine,
        Mode::BatPool,
        &gr,
        (user_cache, args.kv_blocks, warm.len()),
        None,
    )
    .await?;
    if proxy.follows_engine && !proxy.proxy.wait_for_kv_events(Duration::from_secs(5)).await {
        eprintln!("bench costfit: warning: no KV events within 5 s; bat uses its own model");
    }
    pool::prepare(&proxy.proxy.server, e.model, &warm, "costfit pooled").await?;
    Ok(Pooled { proxy, bodies })
}

impl Pooled {
    pub fn requests(&self) -> usize {
        self.bodies.len()
    }

    /// The connector's cumulative seconds loading pooled K/V (recache reads them from the
    /// engine's answers, one engine step late).
    pub fn load_s(&self) -> f64 {
        self.proxy.proxy.server.rank_counters().load_s
    }

    /// Sends the requests (the first `first` of them, else all) under `salt` (a round's own:
    /// no profile cached in an earlier round is found), one at a time; each one's deltas.
    pub async fn send(
        &self,
        client: &HttpClient,
        metrics_url: &str,
        salt: &str,
        first: Option<usize>,
        each: &dyn Fn(),
    ) -> Result<Vec<Delta>, BenchError> {
        let n = first.unwrap_or(self.bodies.len()).min(self.bodies.len());
        let mut out = Vec::with_capacity(n);
        for body in &self.bodies[..n] {
            let mut body = (**body).clone();
            body["mode"] = self.proxy.request_mode.into();
            body["cache_salt"] = salt.into();
            let url = &self.proxy.url;
            let send = async {
                let (status, answer) = http::post(client, url, &body).await?;
                if status != 200 {
                    let text: String = answer.to_string().chars().take(300).collect();
                    return Err(BenchError::Setup(format!(
                        "{url} answered {status}: {text}"
                    )));
                }
                Ok(answer["usage"]["cached_tokens"].as_u64())
            };
            let (cached, delta) = probe::around(client, metrics_url, send).await?;
            // `bench gr`'s attended_pairs takes a request's prefix from its answer's usage:
            // say so when that is not what the engine's counters split off.
            if cached != Some(delta.prefix()) && delta.prefills == 1 {
                eprintln!(
                    "bench costfit: note: /v1/rank usage.cached_tokens {cached:?}, engine \
                     counters {} (local {} + pool {})",
                    delta.prefix(),
                    delta.local_hits,
                    delta.external_hits
                );
            }
            out.push(delta);
            each();
        }
        // Fills a request started (none expected: every item is resident) are not measured.
        let (_, pending) = pool::settle(&self.proxy.proxy.server, pool::SETTLE_LIMIT).await;
        if pending > 0 {
            eprintln!("bench costfit: warning: {pending} item pool fills still running");
        }
        Ok(out)
    }
}
