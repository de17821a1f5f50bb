//! `recache bench gr`: the same GR ranking stream through recache's `/v1/rank` once per mode
//! (recompute, UP, IP, cache-agnostic, BAT) against a real engine, with the engine's prefix
//! cache emptied between modes; reports throughput, latency and the engine's own hit rate.
//!
//! - [`workload`]: the request stream from an interaction file and an item-title file;
//! - [`modes`]: what each mode configures; [`run`]: sending one mode's stream;
//! - [`http`]: HTTP helpers, engine operations, the in-process recache;
//! - [`report`]: JSON rows, table, PNG; [`rng`]: the seeded PRNG.

pub mod http;
pub mod modes;
pub mod pool;
pub mod report;
pub mod rng;
pub mod run;
pub mod workload;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::BenchError;
use modes::Mode;
use report::ModeResult;

#[derive(clap::Args, Debug)]
pub struct GrArgs {
    /// Interaction file: one line per user, `user_id item_id item_id ...` in time order
    #[arg(long)]
    pub data: PathBuf,
    /// Item file: JSON object `{"<index>": {"title": ...}}`; item id i takes title i mod count
    #[arg(long)]
    pub items: PathBuf,
    /// Engine base URL (vLLM started with VLLM_SERVER_DEV_MODE=1 so the cache can be reset)
    #[arg(long)]
    pub upstream: String,
    /// Requests per mode
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// Modes to run, in order
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "re,up,ip,agnostic,bat"
    )]
    pub modes: Vec<Mode>,
    /// Print one JSON object per mode (else a table)
    #[arg(long)]
    pub json: bool,
    /// Write a PNG plot (throughput and hit rate per mode)
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Longest prompt the workload makes (the longest history maps to it)
    #[arg(long, default_value_t = 8192)]
    pub max_prompt_tokens: usize,
    /// Profile tokens of a user with a one-item history
    #[arg(long, default_value_t = 1024)]
    pub min_profile_tokens: usize,
    /// Candidates per request (the held-out item + popularity-drawn others)
    #[arg(long, default_value_t = 100)]
    pub candidates: usize,
    /// Tokens per item text
    #[arg(long, default_value_t = 18)]
    pub item_tokens: usize,
    /// Distinct active users the stream draws from (by activity)
    #[arg(long, default_value_t = 64)]
    pub users: usize,
    /// Mean arrival rate in requests/s (exponential inter-arrival times); 0 = all at once
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Requests in flight at most
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The engine's KV cache in blocks (as started), to size bat's user-prefix cache
    #[arg(long)]
    pub kv_blocks: Option<u64>,
    #[arg(long, default_value_t = 32)]
    pub block_size: u64,
    /// bat's user-prefix cache in tokens [default: (kv_blocks-1)*block_size - max_prompt_tokens]
    #[arg(long)]
    pub user_cache_tokens: Option<u64>,
    /// bat's frequency window in requests
    #[arg(long, default_value_t = 1000)]
    pub window: usize,
    /// Served model name [default: the engine's first model]
    #[arg(long)]
    pub model: Option<String>,
    /// The engine's KV-event publisher (the testbed's KV_EVENTS=): recache follows the
    /// engine's cache for the bat modes, as `recache serve --kv-events` does; without it bat
    /// uses its own model of the cache
    #[arg(long)]
    pub kv_events: Option<String>,
    /// The engine's dialect: vllm or sglang [default: detected]
    #[arg(long)]
    pub engine: Option<recache_adapters::Engine>,
    /// With --kv-events: publish the eviction order to this file for the bat modes, as
    /// `recache serve --publish` does (the testbed started with `--shim` the same path steers
    /// vLLM's eviction); bat's admission test is then on (`--rank-admission auto`)
    #[arg(long, requires = "kv_events")]
    pub publish: Option<String>,
    /// Items recache keeps resident in the engine's item KV pool (ip-pool, bat-pool modes;
    /// needs LABEL_BASE + 128 + N <= the model's vocabulary: 3584 fits the testbed's 4096)
    #[arg(long, default_value_t = 3584)]
    pub pool_items: usize,
    /// Pool modes: fill the N most popular catalog items (by interaction count in --data)
    /// before the timed stream, as a deployment fills its pool ahead of time [default: 0, cold]
    #[arg(long, default_value_t = 0)]
    pub pool_warm: usize,
}

/// Token ids of every title the stream uses, fitted to `n` tokens.
async fn title_tokens(
    client: &crate::service::HttpClient,
    args: &GrArgs,
    model: &str,
    data: &workload::Data,
    titles: BTreeSet<usize>,
) -> Result<HashMap<usize, Vec<u32>>, BenchError> {
    let mut out = HashMap::new();
    let titles: Vec<usize> = titles.into_iter().collect();
    for chunk in titles.chunks(8) {
        let mut set = tokio::task::JoinSet::new();
        for &t in chunk {
            let (client, up, model) = (client.clone(), args.upstream.clone(), model.to_string());
            let text = data.titles[t].clone();
            set.spawn(async move { (t, http::tokenize(&client, &up, &model, &text).await) });
        }
        while let Some(j) = set.join_next().await {
            let (t, tokens) = j.map_err(|e| BenchError::Setup(format!("tokenizer task: {e}")))?;
            out.insert(t, tokens?);
        }
    }
    Ok(out)
}

/// Item `i`'s text tokens as every request sends them (its title fitted to `n` tokens).
fn item_tokens(
    data: &workload::Data,
    tok: &HashMap<usize, Vec<u32>>,
    n: usize,
    i: u64,
) -> Vec<u32> {
    tok.get(&data.title_of(i))
        .map(|t| workload::fit(t, n))
        .unwrap_or_default()
}

fn body(
    p: &workload::Planned,
    data: &workload::Data,
    tok: &HashMap<usize, Vec<u32>>,
    n: usize,
    model: &str,
) -> Value {
    let item = |i: u64| item_tokens(data, tok, n, i);
    let history: Vec<u32> = p.history.iter().flat_map(|&i| item(i)).collect();
    let items: Vec<Value> = p
        .items
        .iter()
        .map(|&i| json!({"id": i, "tokens": item(i)}))
        .collect();
    json!({
        "model": model,
        "user": {"id": p.user, "tokens": workload::fit(&history, p.profile_tokens)},
        "items": items,
        "top_k": 10,
    })
}

pub async fn run(args: GrArgs) -> Result<(), BenchError> {
    let args = GrArgs {
        upstream: args.upstream.trim_end_matches('/').to_string(),
        ..args
    };
    let client = http::client();
    let engine = super::engine_ops::resolve(&client, &args.upstream, args.engine).await;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => http::first_model(&client, &args.upstream).await?,
    };
    let data = workload::load(&args.data, &args.items)?;
    let instruction = http::tokenize(
        &client,
        &args.upstream,
        &model,
        crate::rank::config::DEFAULT_INSTRUCTION,
    )
    .await?;
    let shape = workload::Shape {
        requests: args.requests,
        users: args.users,
        candidates: args.candidates,
        item_tokens: args.item_tokens,
        min_profile_tokens: args.min_profile_tokens,
        max_prompt_tokens: args.max_prompt_tokens,
        instruction_tokens: instruction.len(),
        rate: args.rate,
    };
    let plan = workload::plan(&data, &shape, args.seed)?;
    let warm_items: Vec<u64> = data.items.iter().take(args.pool_warm).copied().collect();
    let used: BTreeSet<usize> = plan
        .iter()
        .flat_map(|p| p.items.iter().chain(&p.history).map(|&i| data.title_of(i)))
        .chain(warm_items.iter().map(|&i| data.title_of(i)))
        .collect();
    eprintln!(
        "bench gr: tokenizing {} item titles on the engine ...",
        used.len()
    );
    let tok = title_tokens(&client, &args, &model, &data, used).await?;
    let bodies: Vec<Arc<Value>> = plan
        .iter()
        .map(|p| Arc::new(body(p, &data, &tok, args.item_tokens, &model)))
        .collect();
    let arrivals: Vec<f64> = plan.iter().map(|p| p.at_s).collect();
    let user_cache = args
        .user_cache_tokens
        .unwrap_or_else(|| match args.kv_blocks {
            Some(b) => (b.saturating_sub(1) * args.block_size)
                .saturating_sub(args.max_prompt_tokens as u64),
            None => crate::rank::config::DEFAULT_USER_CACHE_TOKENS,
        });
    let stream = run::Stream {
        bodies: &bodies,
        arrivals_s: &arrivals,
        concurrency: args.concurrency,
    };
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    // Warm-up (first-request compilation, connection set-up), uncounted, never cached.
    let warm = LocalProxyRun::new(&args.upstream, engine, Mode::Re, &args, user_cache).await?;
    let few = run::Stream {
        bodies: &bodies[..bodies.len().min(4)],
        arrivals_s: &[0.0; 4],
        concurrency: 1,
    };
    let salt = |i: usize| format!("warmup-{nonce}-{i}");
    run::run(
        &client,
        &warm.url,
        &few,
        "user_prefix",
        &salt,
        &ProgressBar::hidden(),
    )
    .await?;
    let mut rows = Vec::new();
    for mode in &args.modes {
        // recache first, so that a recache following the engine's KV events sees the reset.
        let proxy = LocalProxyRun::new(&args.upstream, engine, *mode, &args, user_cache).await?;
        if proxy.follows_engine && !proxy.proxy.wait_for_kv_events(Duration::from_secs(5)).await {
            eprintln!(
                "bench gr: warning: no KV events from {:?} within 5 s; bat uses its own model",
                args.kv_events
            );
        }
        if let Err(why) = super::engine_ops::reset_cache(&client, engine, &args.upstream).await {
            eprintln!("bench gr: warning: {why}; modes are kept apart by cache_salt only");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        if mode.uses_pool() && !warm_items.is_empty() {
            let items = warm_items
                .iter()
                .map(|&i| (i, item_tokens(&data, &tok, args.item_tokens, i)))
                .collect();
            let state = &proxy.proxy.server.state;
            let limit = Duration::from_secs(600);
            let (resident, secs) = pool::warm(state, &model, items, limit).await?;
            eprintln!(
                "bench gr: {}: pool warm: {resident} items in {secs:.1}s",
                mode.name()
            );
        }
        let metrics_url = format!("{}/metrics", args.upstream);
        let before = http::get_text(&client, &metrics_url).await?;
        let bar = ProgressBar::new(bodies.len() as u64).with_message(mode.name());
        bar.set_style(
            ProgressStyle::with_template("{msg:>9} [{bar:40}] {pos}/{len} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let name = mode.name();
        let per_request = proxy.salt_per_request;
        let salt = move |i: usize| {
            if per_request {
                format!("{name}-{nonce}-{i}")
            } else {
                format!("{name}-{nonce}")
            }
        };
        let out = run::run(
            &client,
            &proxy.url,
            &stream,
            proxy.request_mode,
            &salt,
            &bar,
        )
        .await?;
        bar.finish();
        // vLLM updates its counters as outputs are processed; give the last ones a moment.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = http::get_text(&client, &metrics_url).await?;
        let delta = |name: &str| http::counter(&after, name) - http::counter(&before, name);
        let counters = engine.cache_counters();
        let queries = delta(counters.queries);
        // Local prefix-cache hits plus tokens the item pool's connector supplied.
        let external = delta(modes::EXTERNAL_HITS);
        let hits = delta(counters.hits) + external;
        if let Some(e) = &out.first_error {
            eprintln!("bench gr: {name}: {} errors, first: {e}", out.errors);
        }
        let ok = out.latencies_ms.len();
        rows.push(ModeResult {
            mode: name.to_string(),
            requests: ok,
            rps: ok as f64 / out.wall_s.max(1e-9),
            p50_ms: report::quantile(&out.latencies_ms, 0.5),
            p99_ms: report::quantile(&out.latencies_ms, 0.99),
            hit_rate: if queries > 0.0 { hits / queries } else { 0.0 },
            computed_tokens: (queries - hits).max(0.0) as u64,
            pool_hit_tokens: external.max(0.0) as u64,
            errors: out.errors,
            user_prefix: out.user_prefix,
            prompt_tokens: out.prompt_tokens,
            cached_tokens: out.cached_tokens,
            wall_s: out.wall_s,
        });
        if args.json {
            let row = rows.last().map(serde_json::to_string).transpose();
            let row = row.map_err(|e| BenchError::Setup(format!("encoding: {e}")))?;
            println!("{}", row.unwrap_or_default());
        }
    }
    if !args.json {
        print!("{}", report::table(&rows));
    }
    eprintln!(
        "bench gr: {} requests/mode, {} users, rate {}/s, concurrency {}, bat user cache {} tokens, window {}",
        args.requests, args.users, args.rate, args.concurrency, user_cache, args.window
    );
    if let Some(path) = &args.out {
        report::plot(path, &rows)?;
        eprintln!("bench gr: wrote {}", path.display());
    }
    Ok(())
}

/// One mode's recache and how its requests are sent.
struct LocalProxyRun {
    proxy: http::LocalProxy,
    /// This mode's recache follows the engine's KV events.
    follows_engine: bool,
    url: String,
    request_mode: &'static str,
    salt_per_request: bool,
}

impl LocalProxyRun {
    async fn new(
        upstream: &str,
        engine: recache_adapters::Engine,
        mode: Mode,
        args: &GrArgs,
        user_cache: u64,
    ) -> Result<Self, BenchError> {
        let setup = mode.setup(args.window, user_cache, args.pool_items);
        // Only the cache-aware rule reads the engine's cache; the others never subscribe.
        let follows_engine = mode.reads_engine_cache() && args.kv_events.is_some();
        let kvloop = crate::kvloop::config::KvLoopArgs {
            kv_events: args.kv_events.clone().filter(|_| follows_engine),
            publish: args.publish.clone().filter(|_| follows_engine),
            // A token-granular engine (SGLang) counts its capacity and events in tokens.
            kv_engine_blocks: args.kv_blocks.map(|b| {
                let per = engine
                    .kv_event_block_size()
                    .unwrap_or(args.block_size as usize);
                b as usize * args.block_size as usize / per
            }),
            kv_block_size: Some(
                engine
                    .kv_event_block_size()
                    .unwrap_or(args.block_size as usize),
            ),
            ..Default::default()
        };
        let proxy = http::LocalProxy::start(upstream, engine, setup.rank, kvloop).await?;
        Ok(Self {
            url: format!("{}/v1/rank", proxy.base),
            proxy,
            follows_engine,
            request_mode: setup.request_mode,
            salt_per_request: setup.salt_per_request,
        })
    }
}
