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
//! - [`setup`]: the engine and what it serves; [`fit`]: pairs and least squares; [`flops`]:
//!   the FLOP ratio from `config.json`; [`report`]: rows, fit rows (each point at its median
//!   over `--repeat` rounds), the PNG.

pub mod args;
pub mod fit;
pub mod flops;
pub mod pooled;
pub mod probe;
pub mod prompts;
pub mod report;
pub mod setup;

pub use args::{CostfitArgs, Kind};
use report::{Fits, Model, Row};

use crate::error::BenchError;
use crate::http;
use crate::progress::Progress;
use crate::rng::Rng;
use crate::testbed;

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

pub async fn run(args: CostfitArgs) -> Result<(), BenchError> {
    check(&args)?;
    let client = http::client();
    let (instance, mut tb) = setup::engine(&args, &client).await?;
    let upstream = instance.upstream.as_str();
    let served = setup::served(&args, &client, upstream).await?;
    let model = Model {
        kind: args.model.name().to_string(),
        served: served.name.clone(),
    };
    let metrics_url = format!("{upstream}/metrics");
    probe::Scrape::read(&client, &metrics_url).await?;
    let points = prompts::plan(
        &args.kinds,
        &args.fresh_tokens,
        &args.prefix_tokens,
        &args.extend_tokens,
    );
    if let Some(max) = served.max_len
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
        model: &served.name,
        nonce,
    };
    // First requests compile kernels: a short, a long and the longest prompt, unmeasured.
    crate::engine_ops::warm_up(&client, upstream, &served.name).await?;
    let longest = points.iter().map(|p| p.prefix + p.new).max().unwrap_or(0);
    if longest > 1024 {
        let warm = [prompts::Planned {
            kind: Kind::Fresh,
            prefix: 0,
            new: longest,
        }];
        let mut rng = Rng::new(!args.seed);
        prompts::send(&target, &metrics_url, &warm, usize::MAX, &mut rng, &|| ()).await?;
    }
    let pooled = if args.kinds.contains(&Kind::Pooled) {
        let e = pooled::Engine {
            client: &client,
            upstream,
            kv_events: instance.kv_events.as_deref(),
            engine: recache_adapters::Engine::Vllm,
            model: &served.name,
            kv_token_bytes: (served.shape.as_ref())
                .map_or(testbed::KV_TOKEN_BYTES, |s| s.kv_bytes_per_token()),
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
    let sources = Sources {
        target: &target,
        metrics_url: &metrics_url,
        points: &points,
        pooled: pooled.as_ref(),
    };
    let (rows, load_s) = rounds(&args, &model, &sources).await?;
    let unclean = rows.iter().filter(|r| r.prefills != 1).count();
    if unclean > 0 {
        eprintln!(
            "bench costfit: warning: {unclean} requests saw another prefill than their own \
             (something else used the engine); left out of the fits"
        );
    }
    let fits = Fits::of(&rows);
    for v in fits.json(&model, served.flop_ratio(), pooled.as_ref().map(|_| load_s)) {
        println!("{v}");
    }
    if let Some(path) = &args.out {
        fits.plot(path, &model)?;
        eprintln!("bench costfit: wrote {}", path.display());
    }
    // bat-pool's recache before the engine it talks to.
    drop(pooled);
    if let Some(tb) = &mut tb {
        tokio::task::block_in_place(|| tb.stop_all());
    }
    Ok(())
}

/// Where each kind's requests come from.
struct Sources<'a> {
    target: &'a prompts::Target<'a>,
    metrics_url: &'a str,
    /// The fresh and cached points of one round.
    points: &'a [prompts::Planned],
    pooled: Option<&'a pooled::Pooled>,
}

/// `--repeat` rounds of every kind in `--kinds` order, each row printed as it is measured;
/// the rows and the connector's load seconds over the pooled requests.
async fn rounds(
    args: &CostfitArgs,
    model: &Model,
    src: &Sources<'_>,
) -> Result<(Vec<Row>, f64), BenchError> {
    let per_round = src.points.len() + src.pooled.map_or(0, |p| p.requests());
    let label = format!("costfit {}", args.model.name());
    let progress = Progress::new((per_round * args.repeat) as u64, label);
    let tick = || progress.inc(1);
    let client = src.target.client;
    let mut rng = Rng::new(args.seed);
    let (mut rows, mut load_s) = (Vec::new(), 0.0);
    let mut emit = |row: Row| {
        match serde_json::to_string(&row) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("bench costfit: encoding a row: {e}"),
        }
        rows.push(row);
    };
    for round in 0..args.repeat {
        for &kind in &args.kinds {
            if let (Kind::Pooled, Some(p)) = (kind, src.pooled) {
                let salt = format!("costfit-pool-{}-r{round}", src.target.nonce);
                let before = p.load_s();
                let deltas = p.send(client, src.metrics_url, &salt, None, &tick).await?;
                for (i, d) in deltas.iter().enumerate() {
                    emit(Row::new(model, kind, (round, i), d, None));
                }
                load_s += p.load_s() - before;
                continue;
            }
            let mine: Vec<prompts::Planned> = (src.points.iter())
                .filter(|p| p.kind == kind)
                .copied()
                .collect();
            let measured =
                prompts::send(src.target, src.metrics_url, &mine, round, &mut rng, &tick).await?;
            for (i, (p, d)) in measured.iter().enumerate() {
                emit(Row::new(
                    model,
                    kind,
                    (round, i),
                    d,
                    Some((p.prefix, p.new)),
                ));
            }
        }
    }
    progress.finish();
    Ok((rows, load_s))
}
