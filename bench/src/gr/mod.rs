//! `recache bench gr`: the same GR ranking stream through recache's `/v1/rank` once per mode
//! (recompute, UP, IP, cache-agnostic, BAT, and the item-pool modes) against a real engine,
//! the engine's prefix cache emptied between modes; reports throughput, latency, the engine's
//! own hit rate and computed tokens, and where the time went.
//!
//! - [`args`]: the command line; [`workload`]: the request stream (today's default),
//!   [`workload_bat`]: BAT §6.1's whole population; [`bodies`]: tokenized `/v1/rank` bodies;
//! - [`memory`]: equal memory (`--kv-bytes`) and BAT's pool/engine split ([`budget`]);
//!   the engines per memory layout (`--testbed`) come from [`crate::testbed`];
//! - [`modes`]: what each mode configures; [`proxy`]: a mode's in-process recache;
//!   [`measure`]: one mode's run and row; [`run`]: sending a stream (open loop, latency from
//!   each request's planned arrival); [`pool`]: a pool mode's pool before and after it;
//! - [`report`]: rows, the table, the
//!   `--out` PNG; [`summary`]: medians and spreads over rounds; [`sweep`]: the
//!   `--sweep-out` PNG; [`trace`]: `--trace-out` and `--trace-only`
//!   (the GR block traces `recache sim` reads).
//!
//! Rounds × offered loads × modes: within a round the modes alternate on the same request
//! stream (paired runs), every round repeats them, and the summary rows give the median and
//! the spread per (mode, offered load).

pub mod args;
pub mod bodies;
pub mod budget;
pub mod measure;
pub mod memory;
pub mod modes;
pub mod past_split;
pub mod pool;
pub mod proxy;
pub mod replay_out;
pub mod report;
pub mod run;
pub mod summary;
pub mod sweep;
pub mod trace;
pub mod workload;
pub mod workload_bat;

use std::sync::Arc;

use crate::error::BenchError;
use crate::http;
use crate::testbed::{self, Instance, Testbed};
pub use args::{GrArgs, Workload};
use bodies::Titles;
use modes::Mode;

/// The past period of `--kv-bytes`' split uses the planner with this seed offset.
const PAST_SEED: u64 = 0x9a57_9e51;

/// Where the modes' engines come from.
enum Engines {
    Given { plain: Instance, pooled: Instance },
    Testbed(Testbed),
}

impl Engines {
    fn get(&mut self, pooled: bool, memory: &memory::Memory) -> Result<Instance, BenchError> {
        match self {
            Engines::Given { plain, pooled: p } => {
                Ok(if pooled { p.clone() } else { plain.clone() })
            }
            Engines::Testbed(tb) => {
                let layout = memory.layout(pooled);
                tokio::task::block_in_place(|| tb.get(layout))
            }
        }
    }
}

fn check(args: &GrArgs) -> Result<(), BenchError> {
    let bad = |m: &str| Err(BenchError::Setup(m.into()));
    if args.repeat == 0 {
        return bad("--repeat must be at least 1");
    }
    if args
        .rates
        .iter()
        .chain([&args.rate])
        .any(|r| !r.is_finite() || *r < 0.0)
    {
        return bad("--rate/--rates must be finite and >= 0 (0 = closed loop)");
    }
    // Caught here rather than by the plot after every run: a sweep plot needs offered loads.
    if args.trace_only
        && let Some(why) = args.modes.iter().find_map(|&m| trace::refuse_trace_only(m))
    {
        return Err(BenchError::Setup(why));
    }
    if args.sweep_out.is_some() && !args.rates.iter().any(|r| *r > 0.0) {
        return bad("--sweep-out plots against offered load: give --rates with a rate > 0");
    }
    memory::check_equal(args)?;
    if args.kv_bytes.is_some() && !args.testbed {
        let pooled = args.modes.iter().any(|m| m.uses_pool());
        let plain = args.modes.iter().any(|m| !m.uses_pool());
        if pooled && plain && args.pool_upstream.is_none() {
            return bad(
                "--kv-bytes gives the pool modes and the others different engine caches: use \
                 --testbed, or --pool-upstream for an engine started with the pool's split \
                 (the bench prints it), or run them separately",
            );
        }
    }
    Ok(())
}

pub async fn run(mut args: GrArgs) -> Result<(), BenchError> {
    check(&args)?;
    let testbed_model = testbed::Model::resolve(args.testbed_model)?;
    // Byte budgets become blocks of the served model's own KV size, not the tiny model's.
    args.kv_token_bytes
        .get_or_insert(testbed_model.kv_token_bytes);
    let client = http::client();
    let data = workload::load(&args.data, &args.items)?;
    let block_bytes = args.block_size * args.token_bytes();
    // The plain layout never depends on the traffic, so its engine can come first and serve
    // tokenization; the pooled layout needs the planned traffic's past period.
    let mut memory = memory::plan(&args, &data, &[])?;
    let mut engines = if args.testbed {
        let mut tb = Testbed::new(&args.testbed_dir, block_bytes)?
            .with_model(args.testbed_model)
            .with_engine(args.engine);
        tokio::task::block_in_place(|| tb.get(memory.plain))?;
        Engines::Testbed(tb)
    } else {
        let up = args.upstream.clone().unwrap_or_default();
        let up = up.trim_end_matches('/').to_string();
        let plain = Instance {
            name: "upstream".into(),
            upstream: up.clone(),
            kv_events: args.kv_events.clone(),
        };
        let pooled = match &args.pool_upstream {
            Some(p) => Instance {
                name: "pool-upstream".into(),
                upstream: p.trim_end_matches('/').to_string(),
                kv_events: None,
            },
            None => plain.clone(),
        };
        Engines::Given { plain, pooled }
    };
    let first = engines.get(false, &memory)?;
    let engine = super::engine_ops::resolve(&client, &first.upstream, args.engine).await;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => http::first_model(&client, &first.upstream).await?,
    };
    let instruction = http::tokenize(
        &client,
        &first.upstream,
        &model,
        recache::harness::DEFAULT_INSTRUCTION,
    )
    .await?;
    let sweep = !args.rates.is_empty();
    let shape = workload::Shape {
        requests: args.requests,
        users: args.users,
        candidates: args.candidates,
        item_tokens: args.item_tokens,
        min_profile_tokens: args.min_profile_tokens,
        max_prompt_tokens: args.max_prompt_tokens,
        instruction_tokens: instruction.len(),
        // A sweep plans at 1 request/s and scales the arrival times per offered load.
        rate: if sweep { 1.0 } else { args.rate },
    };
    let planner = match args.workload {
        Workload::Default => workload::plan,
        Workload::Bat => workload_bat::plan_bat,
    };
    let plan = planner(&data, &shape, args.seed)?;
    let population = workload::population(&plan);
    if args.kv_bytes.is_some() {
        let past_shape = workload::Shape {
            requests: args.past_requests,
            ..shape.clone()
        };
        let past = planner(&data, &past_shape, args.seed.wrapping_add(PAST_SEED))?;
        memory = memory::plan(&args, &data, &past)?;
    }
    if let Some(asked) = args.kv_bytes
        && asked != memory.total_bytes(memory.plain)
    {
        eprintln!(
            "bench gr: --kv-bytes {asked} is not whole KV blocks of {} bytes: every mode gets {}",
            memory.block_bytes,
            memory.total_bytes(memory.plain)
        );
    }
    eprintln!(
        "bench gr: {} workload: {} requests, {} distinct users, returning share {:.3}; memory \
         ({}, model {model} at {} KV bytes a token): plain {} KV bytes, pooled {} KV bytes; \
         plain engine {} blocks, pooled engine {} blocks + pool {} bytes ({} items, split \
         threshold {:.2e}, user tokens by value {})",
        args.workload.name(),
        plan.len(),
        population.distinct_users,
        population.returning_share,
        if memory.equal {
            "equal"
        } else {
            "UNEQUAL: --allow-unequal-memory"
        },
        args.token_bytes(),
        memory.total_bytes(memory.plain),
        memory.total_bytes(memory.pooled),
        memory.plain.kv_blocks,
        memory.pooled.kv_blocks,
        memory.pooled.pool_bytes,
        memory.pool_items.len(),
        memory.threshold,
        memory.user_tokens,
    );
    let warm_n = args
        .pool_warm
        .unwrap_or(if args.kv_bytes.is_some() {
            memory.pool_items.len()
        } else {
            0
        })
        .min(memory.pool_items.len());
    let warm_ids = &memory.pool_items[..warm_n];
    let used = plan
        .iter()
        .flat_map(|p| p.items.iter().chain(&p.history).copied())
        .chain(warm_ids.iter().copied());
    let titles = Titles::tokenize(&client, &first.upstream, &model, &data, used).await?;
    let bodies: Vec<Arc<serde_json::Value>> = plan
        .iter()
        .map(|p| titles.body(p, &data, args.item_tokens, &model))
        .collect();
    let warm: Vec<(u64, Arc<Vec<u32>>)> = warm_ids
        .iter()
        .map(|&i| (i, Arc::new(titles.item(&data, args.item_tokens, i))))
        .collect();
    if args.trace_only {
        let base = args
            .trace_out
            .as_deref()
            .unwrap_or(std::path::Path::new("gr.jsonl"));
        let arrivals: Vec<f64> = plan.iter().map(|p| p.at_s).collect();
        let upstream = first.upstream.clone();
        let replay = match &args.replay_out {
            Some(p) => Some(replay_out::ReplayOut::create(p, &args, &memory)?),
            None => None,
        };
        let out = trace::Outputs {
            base,
            replay: replay.as_ref(),
        };
        trace::write_only(&args, &upstream, engine, &bodies, &arrivals, out).await?;
        if let Engines::Testbed(tb) = &mut engines {
            tokio::task::block_in_place(|| tb.stop_all());
        }
        return Ok(());
    }
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    warm_up(&client, &first, engine, &args, &bodies, nonce).await?;
    let ctx = measure::Ctx {
        args: &args,
        client: &client,
        engine,
        model: &model,
        memory: &memory,
        warm: &warm,
        population: &population,
        nonce,
    };
    let rates = if sweep {
        args.rates.clone()
    } else {
        vec![args.rate]
    };
    let mut rows = Vec::new();
    for round in 0..args.repeat {
        for &rate in &rates {
            let arrivals: Vec<f64> = plan
                .iter()
                .map(|p| match (sweep, rate) {
                    (false, _) => p.at_s,
                    (true, r) if r > 0.0 => p.at_s / r,
                    (true, _) => 0.0,
                })
                .collect();
            for &mode in &args.modes {
                let instance = engines.get(mode.uses_pool(), &memory)?;
                let run = measure::Run {
                    mode,
                    instance: &instance,
                    bodies: &bodies,
                    arrivals: &arrivals,
                    offered_rps: if sweep { rate } else { args.rate },
                    round,
                };
                let row = measure::run_mode(&ctx, run).await?;
                if args.json {
                    let line = serde_json::to_string(&row)
                        .map_err(|e| BenchError::Setup(format!("encoding: {e}")))?;
                    println!("{line}");
                }
                rows.push(row);
            }
        }
    }
    finish(&args, &rows)?;
    if let Engines::Testbed(tb) = &mut engines {
        tokio::task::block_in_place(|| tb.stop_all());
    }
    Ok(())
}

/// First-request compilation and connection set-up on the first engine: uncounted, never
/// cached (a fresh salt per request).
async fn warm_up(
    client: &crate::http::HttpClient,
    first: &Instance,
    engine: recache_adapters::Engine,
    args: &GrArgs,
    bodies: &[Arc<serde_json::Value>],
    nonce: u128,
) -> Result<(), BenchError> {
    let warm = proxy::LocalProxyRun::new(
        &first.upstream,
        None,
        engine,
        Mode::Re,
        args,
        (0, 0, 0),
        None,
    )
    .await?;
    let n = bodies.len().min(4);
    let few = run::Stream {
        bodies: &bodies[..n],
        arrivals_s: &[0.0; 4][..n],
        concurrency: 1,
        open: false,
    };
    let salt = |i: usize| format!("warmup-{nonce}-{i}");
    let progress = crate::progress::Progress::new(n as u64, "warm-up");
    run::run(client, &warm.url, &few, "user_prefix", &salt, &progress).await?;
    progress.finish();
    Ok(())
}

/// Summaries, the table, the PNGs.
fn finish(args: &GrArgs, rows: &[report::ModeResult]) -> Result<(), BenchError> {
    let summaries = summary::summarize(rows);
    if args.json {
        if args.repeat > 1 || !args.rates.is_empty() {
            for s in &summaries {
                let mut v = serde_json::to_value(s)
                    .map_err(|e| BenchError::Setup(format!("encoding: {e}")))?;
                v["summary"] = serde_json::Value::Bool(true);
                println!("{v}");
            }
        }
    } else {
        print!("{}", report::table(rows));
        if args.repeat > 1 || !args.rates.is_empty() {
            print!("{}", summary::table_summary(&summaries));
        }
    }
    eprintln!(
        "bench gr: {} requests/mode, {} workload, concurrency {}, {} round(s)",
        args.requests,
        args.workload.name(),
        args.concurrency,
        args.repeat
    );
    if let Some(path) = &args.out {
        report::plot(path, rows, &summary::ratios_to_up(&summaries))?;
        eprintln!("bench gr: wrote {}", path.display());
    }
    if let Some(path) = &args.sweep_out {
        sweep::plot_sweep(path, &summaries)?;
        eprintln!("bench gr: wrote {}", path.display());
    }
    Ok(())
}
