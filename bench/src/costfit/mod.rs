//! `recache bench costfit`: where a vLLM prefill's time goes. Prefill-only requests
//! (`max_tokens: 1`), one at a time, of three kinds — fresh prompts, new tokens after a cached
//! prefix, bat-pool ranking prompts after items loaded from the item pool — each timed by vLLM's
//! own clock (its prefill histogram) and split by its own counters into tokens computed and
//! tokens already in KV; then `time ≈ a·tokens + b·pairs + c` fitted by least squares, over all
//! and per kind, `b/a` next to the model's FLOP ratio.
//!
//! - [`args`]: the command line; [`probe`]: one request between two `/metrics` scrapes;
//! - [`prompts`]: the fresh and cached kinds; [`pooled`]: the pooled kind (`bench gr`'s
//!   workload and bat-pool recache);
//! - [`fit`]: pairs and least squares; [`flops`]: the FLOP ratio from `config.json`;
//!   [`report`]: rows, fit rows, the PNG.

pub mod args;
pub mod fit;
pub mod flops;
pub mod pooled;
pub mod probe;
pub mod prompts;
pub mod report;

use std::path::PathBuf;

pub use args::{CostfitArgs, Kind};
use report::{Fits, Model, Row};

use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::rng::Rng;
use crate::testbed::{self, Instance, Layout, Testbed};
use recache::harness::Progress;

fn check(args: &CostfitArgs) -> Result<(), BenchError> {
    let bad = |m: &str| Err(BenchError::Setup(m.into()));
    if args.repeat == 0 {
        return bad("--repeat must be at least 1");
    }
    if args.kinds.is_empty() {
        return bad("--kinds names no kind (fresh, cached, pooled)");
    }
    let lengths = [&args.fresh_tokens, &args.prefix_tokens, &args.extend_tokens];
    if lengths.iter().any(|l| l.contains(&0)) {
        return bad("--fresh-tokens, --prefix-tokens and --extend-tokens must be at least 1");
    }
    if args.kinds.contains(&Kind::Pooled) {
        if args.pooled_requests == 0 {
            return bad("--pooled-requests must be at least 1 with the pooled kind");
        }
        // Before an engine is started for minutes: the files the pooled kind reads.
        for (flag, path) in [("--data", &args.data), ("--items", &args.items)] {
            match path {
                Some(p) if !p.is_file() => {
                    return Err(BenchError::Setup(format!(
                        "{flag} {}: no such file",
                        p.display()
                    )));
                }
                None => {
                    return Err(BenchError::Setup(format!(
                        "the pooled kind needs --data and --items (bench gr's workload); {flag} \
                         is missing (or leave pooled out of --kinds)"
                    )));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The engine: given, or started with the testbed (with the item pool's connector).
async fn engine(
    args: &CostfitArgs,
    client: &HttpClient,
) -> Result<(Instance, Option<Testbed>), BenchError> {
    let (instance, tb) = match &args.upstream {
        Some(up) => {
            let instance = Instance {
                name: "upstream".into(),
                upstream: up.trim_end_matches('/').to_string(),
                kv_events: args.kv_events.clone(),
            };
            (instance, None)
        }
        None => {
            let block_bytes = testbed::BLOCK_TOKENS * testbed::KV_TOKEN_BYTES;
            let mut tb =
                Testbed::new(&args.testbed_dir, block_bytes)?.with_model(Some(args.model.clone()));
            let layout = Layout {
                kv_blocks: args.kv_blocks,
                pool_bytes: args.pool_bytes,
            };
            let name = format!("costfit-{}", args.model);
            let i = tokio::task::block_in_place(|| tb.start_named(&name, layout))?;
            (i, Some(tb))
        }
    };
    let health = format!("{}/health", instance.upstream);
    let ready = match health.parse() {
        Ok(uri) => client.get(uri).await.map(|r| r.status().as_u16()).ok(),
        Err(_) => None,
    };
    if ready != Some(200) {
        return Err(BenchError::Setup(format!(
            "the engine at {} is not ready (GET /health: {}); start one with {}",
            instance.upstream,
            ready.map_or("no answer".to_string(), |s| s.to_string()),
            testbed::up_command("--item-pool")
        )));
    }
    Ok((instance, tb))
}

/// The served model's name, its longest prompt, and its `config.json` (the model directory
/// vLLM names as the model's `root`).
async fn served(
    args: &CostfitArgs,
    client: &HttpClient,
    upstream: &str,
) -> Result<(String, Option<u64>, Option<PathBuf>), BenchError> {
    let text = http::get_text(client, &format!("{upstream}/v1/models")).await?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let models = v["data"].as_array().cloned().unwrap_or_default();
    let entry = match &args.served_model {
        Some(name) => models.iter().find(|m| m["id"] == name.as_str()),
        None => models.first(),
    };
    let name = match (&args.served_model, entry) {
        (Some(n), _) => n.clone(),
        (None, Some(m)) => m["id"].as_str().unwrap_or_default().to_string(),
        (None, None) => {
            return Err(BenchError::Setup(format!(
                "{upstream}/v1/models lists no model: {text}"
            )));
        }
    };
    let max_len = entry.and_then(|m| m["max_model_len"].as_u64());
    let config = (args.model_config.clone()).or_else(|| {
        let root = entry?["root"].as_str()?;
        Some(PathBuf::from(root).join("config.json"))
    });
    Ok((name, max_len, config))
}

pub async fn run(args: CostfitArgs) -> Result<(), BenchError> {
    check(&args)?;
    let client = http::client();
    let (instance, mut tb) = engine(&args, &client).await?;
    let upstream = instance.upstream.as_str();
    let engine =
        crate::engine_ops::resolve(&client, upstream, Some(recache_adapters::Engine::Vllm)).await;
    let (served, max_len, config) = served(&args, &client, upstream).await?;
    let model = Model {
        kind: args.model.clone(),
        served: served.clone(),
    };
    let flop_ratio = match &config {
        Some(path) => match flops::Shape::read(path) {
            Ok(shape) => Some(shape.ratio()),
            Err(e) => {
                eprintln!("bench costfit: warning: no FLOP ratio: {e} (give --model-config)");
                None
            }
        },
        None => {
            eprintln!(
                "bench costfit: warning: no FLOP ratio: the engine names no model root (give --model-config)"
            );
            None
        }
    };
    let metrics_url = format!("{upstream}/metrics");
    probe::Scrape::read(&client, &metrics_url).await?;
    let points = prompts::plan(
        &args.kinds,
        &args.fresh_tokens,
        &args.prefix_tokens,
        &args.extend_tokens,
    );
    if let Some(max) = max_len
        && let Some(p) = points.iter().find(|p| p.prefix + p.new >= max)
    {
        return Err(BenchError::Setup(format!(
            "a prompt of {} + {} tokens does not fit the engine's max_model_len {max} (one \
             position is the generated token)",
            p.prefix, p.new
        )));
    }
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let target = prompts::Target {
        client: &client,
        upstream,
        model: &served,
        nonce,
    };
    // First requests compile kernels: a short, a long and the longest prompt, unmeasured.
    crate::engine_ops::warm_up(&client, upstream, &served).await?;
    let longest = points.iter().map(|p| p.prefix + p.new).max().unwrap_or(0);
    if longest > 1024 {
        let warm = [prompts::Planned {
            kind: Kind::Fresh,
            prefix: 0,
            new: longest,
        }];
        prompts::send(
            &target,
            &metrics_url,
            &warm,
            usize::MAX,
            &mut Rng::new(!args.seed),
            &|| (),
        )
        .await?;
    }
    let pooled = if args.kinds.contains(&Kind::Pooled) {
        let e = pooled::Engine {
            client: &client,
            upstream,
            kv_events: instance.kv_events.as_deref(),
            engine,
            model: &served,
        };
        let p = pooled::prepare(&args, &e).await?;
        // The connector's load path's first use, unmeasured.
        let salt = format!("costfit-pool-{nonce}-warm");
        p.send(&client, &metrics_url, &salt, Some(1), &|| ())
            .await?;
        Some(p)
    } else {
        None
    };
    let per_round = points.len() + pooled.as_ref().map_or(0, |p| p.requests());
    let progress = Progress::new(
        (per_round * args.repeat) as u64,
        format!("costfit {}", args.model),
    );
    let mut rng = Rng::new(args.seed);
    let mut rows: Vec<Row> = Vec::new();
    let mut load_s = 0.0;
    let emit = |row: &Row| match serde_json::to_string(row) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("bench costfit: encoding a row: {e}"),
    };
    for round in 0..args.repeat {
        for &kind in &args.kinds {
            if kind == Kind::Pooled {
                let Some(p) = &pooled else { continue };
                let salt = format!("costfit-pool-{nonce}-r{round}");
                let before = p.load_s();
                for d in p
                    .send(&client, &metrics_url, &salt, None, &|| progress.inc(1))
                    .await?
                {
                    let row = Row::new(&model, kind, round, &d, None);
                    emit(&row);
                    rows.push(row);
                }
                load_s += p.load_s() - before;
                continue;
            }
            let mine: Vec<prompts::Planned> =
                points.iter().filter(|p| p.kind == kind).copied().collect();
            for (p, d) in prompts::send(&target, &metrics_url, &mine, round, &mut rng, &|| {
                progress.inc(1)
            })
            .await?
            {
                let row = Row::new(&model, kind, round, &d, Some((p.prefix, p.new)));
                emit(&row);
                rows.push(row);
            }
        }
    }
    progress.finish();
    let unclean = rows.iter().filter(|r| r.prefills != 1).count();
    if unclean > 0 {
        eprintln!(
            "bench costfit: warning: {unclean} requests saw another prefill than their own \
             (something else used the engine); left out of the fits"
        );
    }
    let fits = Fits::of(&rows);
    for v in fits.json(&model, flop_ratio, pooled.as_ref().map(|_| load_s)) {
        println!("{v}");
    }
    if let Some(path) = &args.out {
        fits.plot(path, &model)?;
        eprintln!("bench costfit: wrote {}", path.display());
    }
    drop(pooled);
    if let Some(tb) = &mut tb {
        tokio::task::block_in_place(|| tb.stop_all());
    }
    Ok(())
}
