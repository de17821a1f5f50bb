//! `recache bench retrieve`: `/v1/retrieve` on a real engine per beam width — latency, engine
//! tokens computed per retrieval against one greedy decode of the same depth plus the prompt,
//! the cached share of prompt tokens — and the invalid-item rate of an unconstrained beam
//! search on the same prompts (post-filtered against the catalog) next to ours. JSON on
//! stdout, progress on stderr, a PNG with `--png`.
//!
//! Every width runs on an emptied prefix cache, the same users in the same order, one
//! retrieval at a time (latency is a single request's, not a loaded server's).
//!
//! - [`args`]: flags; [`users`]: prompts from an interaction file and item titles; [`codes`]:
//!   prompts of item codes for the trained retrieval model, and the quality figures;
//! - [`unconstrained`]: the engine's own top tokens per beam, no trie;
//! - [`report`]: the rows and the table; [`plot`]: the PNG.

pub mod args;
pub mod codes;
pub mod plot;
pub mod report;
pub mod unconstrained;
pub mod users;

use std::time::Instant;

use serde_json::json;

use args::PromptKind;
pub use args::RetrieveBenchArgs;
use report::{Popularity, Report, WidthRow, table};

use crate::engine_ops;
use crate::error::BenchError;
use crate::http::HttpClient;
use crate::http::{self, first_model, tokenize};
use crate::stats::quantile;
use recache::harness::LocalServer;
use recache::harness::RETRIEVE_INSTRUCTION as DEFAULT_INSTRUCTION;
use recache::harness::RetrieveArgs;
use recache::harness::RetrieveIndex;
use recache::harness::ServeArgs;

pub async fn run(args: RetrieveBenchArgs) -> Result<(), BenchError> {
    let client = http::client();
    let upstream = args.upstream.trim_end_matches('/').to_string();
    let engine = engine_ops::resolve(&client, &upstream, args.engine).await;
    // The unconstrained baseline reads vLLM's token-id logprobs; on SGLang recache's own
    // search and the greedy decode are measured, from SGLang's own token counters.
    let vllm = engine == recache_adapters::Engine::Vllm;
    let model = first_model(&client, &upstream).await?;
    let (index_path, _keep) = args::index_path(&args)?;
    let index = RetrieveIndex::load(&index_path).map_err(|e| BenchError::Setup(e.to_string()))?;
    let (users, popular) = match args.prompt {
        PromptKind::Titles => (users::load(&args)?, None),
        PromptKind::Codes => {
            let c = codes::load(
                &args.data,
                &args.items,
                &index,
                args.users,
                args.history,
                args.seed,
            )?;
            (c.users, Some(c.popular))
        }
    };
    let popularity = popular.as_deref().map(|p| {
        let (recall_at_10, ndcg_at_10) = codes::popularity(&users, p);
        Popularity {
            recall_at_10,
            ndcg_at_10,
        }
    });
    let pad = match args.pad_token {
        Some(t) => t,
        None => *tokenize(&client, &upstream, &model, "\n")
            .await?
            .first()
            .ok_or_else(|| BenchError::Setup("the engine tokenized \"\\n\" to nothing".into()))?,
    };
    eprintln!(
        "bench retrieve: {} users, index {} items (depth {}), widths {:?}, align {} (pad token {pad})",
        users.len(),
        index.file.items.len(),
        index.depth,
        args.widths,
        args.align
    );
    let max_width = args.widths.iter().copied().max().unwrap_or(1);
    let serve = |align: usize| ServeArgs {
        upstream: vec![upstream.clone()],
        engine: Some(engine),
        retrieve: RetrieveArgs {
            retrieve_index: Some(index_path.clone()),
            retrieve_max_beam_width: Some(max_width.max(1)),
            retrieve_align: Some(align),
            retrieve_pad_token: Some(pad),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut notes = Vec::new();
    if !vllm && args.unconstrained() {
        notes.push(format!(
            "no unconstrained baseline on {engine}: it reads vLLM's token-id logprobs"
        ));
    }
    // Prompts as recache builds them (same tokenizer call, same padding), for the baselines.
    let mut prompts = Vec::with_capacity(users.len());
    for u in &users {
        let mut t = match u.base_tokens() {
            Some(t) => t,
            None => {
                let text = format!("{}{DEFAULT_INSTRUCTION}", u.text);
                tokenize(&client, &upstream, &model, &text).await?
            }
        };
        if args.align > 1 && t.len() % args.align != 0 {
            let n = args.align - t.len() % args.align;
            t.splice(0..0, std::iter::repeat_n(pad, n));
        }
        prompts.push(t);
    }
    let mean_prompt = prompts.iter().map(Vec::len).sum::<usize>() as f64 / prompts.len() as f64;
    reset(&client, engine, &upstream).await?;
    let greedy = greedy(&client, (engine, &upstream), &model, &prompts, index.depth).await?;
    let mut rows = Vec::new();
    let mut plan: Vec<(usize, usize)> = args.widths.iter().map(|&w| (w, args.align)).collect();
    if args.compare_align && args.align > 1 {
        plan.push((32.min(max_width), 0));
    }
    for (width, align) in plan {
        let server = LocalServer::start(&serve(align))
            .await
            .map_err(|e| BenchError::Setup(format!("starting recache: {e}")))?;
        reset(&client, engine, &upstream).await?;
        let mut row = ours(
            &client,
            &server,
            (engine, &upstream),
            &model,
            &users,
            &index,
            width,
            args.top_k,
            align,
        )
        .await?;
        row.computed_vs_greedy = row.computed_tokens / greedy;
        if args.unconstrained() && vllm && align == args.align {
            reset(&client, engine, &upstream).await?;
            let targets: Vec<Option<String>> = users.iter().map(|u| u.target.clone()).collect();
            let u = unconstrained::run(
                &client, &upstream, &model, &prompts, &targets, &index, width, args.top_k,
            )
            .await?;
            row.unconstrained_invalid_rate = Some(u.invalid_rate);
            row.unconstrained_recall_at_10 = u.recall_at_10;
            row.unconstrained_computed_tokens = Some(u.computed_tokens);
            row.unconstrained_fanout = Some(u.fanout);
        }
        eprintln!(
            "bench retrieve: {}",
            serde_json::to_string(&row).unwrap_or_default()
        );
        rows.push(row);
        server.stopped().await;
    }
    let goal = rows
        .iter()
        .find(|r| r.beam_width == 32 && r.align == args.align)
        .map(|r| r.computed_vs_greedy <= 1.2);
    if goal == Some(false) {
        notes.push(format!(
            "width 32 computes more than 1.2x greedy: each live beam's call recomputes its own \
             code tokens (1 + 2 + ... per beam over the levels) on top of the shared prompt of \
             {mean_prompt:.0} tokens; the ratio falls as prompts grow"
        ));
    }
    if let Some(f) = rows.iter().find_map(|r| r.unconstrained_fanout) {
        notes.push(format!(
            "the unconstrained search extends each beam by the engine's top {f} tokens (vLLM \
             returns at most 20 logprobs by default), then keeps the best beam_width"
        ));
    }
    let report = Report {
        upstream,
        model,
        engine: engine.to_string(),
        users: users.len(),
        prompt: match args.prompt {
            PromptKind::Titles => "titles",
            PromptKind::Codes => "codes",
        },
        popularity,
        top_k: args.top_k,
        index_items: index.file.items.len(),
        index_depth: index.depth,
        mean_prompt_tokens: mean_prompt,
        greedy_computed_tokens: greedy,
        goal_computed_at_32: goal,
        rows,
        notes,
    };
    if let Some(png) = &args.png {
        plot::plot(png, &report)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", table(&report));
    }
    Ok(())
}

async fn reset(
    client: &HttpClient,
    engine: recache_adapters::Engine,
    upstream: &str,
) -> Result<(), BenchError> {
    engine_ops::reset_cache(client, engine, upstream, false)
        .await
        .map_err(|why| {
            BenchError::Setup(format!("emptying the prefix cache between widths: {why}"))
        })
}

/// One greedy decode of `depth` tokens per prompt on an empty cache: computed tokens =
/// uncached prompt + (depth - 1) decode steps, mean over users. The uncached prompt is vLLM's
/// usage of each call; SGLang's usage may not report cached tokens, so there it is the
/// engine's prompt and cached token counters over all the calls.
async fn greedy(
    client: &HttpClient,
    (engine, upstream): (recache_adapters::Engine, &str),
    model: &str,
    prompts: &[Vec<u32>],
    depth: usize,
) -> Result<f64, BenchError> {
    let metrics_url = format!("{upstream}/metrics");
    let before = match engine {
        recache_adapters::Engine::Vllm => None,
        _ => Some(http::get_text(client, &metrics_url).await?),
    };
    let mut total = 0.0;
    for p in prompts {
        let body = json!({"model": model, "prompt": p, "max_tokens": depth, "temperature": 0,
                          "ignore_eos": true});
        let (status, v) = http::post(client, &format!("{upstream}/v1/completions"), &body).await?;
        if status != 200 {
            return Err(BenchError::Setup(format!(
                "greedy baseline: engine answered {status}: {v}"
            )));
        }
        let prompt = v["usage"]["prompt_tokens"]
            .as_f64()
            .unwrap_or(p.len() as f64);
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_f64()
            .unwrap_or(0.0);
        if before.is_none() {
            total += prompt - cached;
        }
        total += depth.saturating_sub(1) as f64;
    }
    if let Some(before) = before {
        let after = http::get_text(client, &metrics_url).await?;
        let (prompt, cached) = engine_ops::cache_deltas(engine, &before, &after);
        total += prompt - cached;
    }
    Ok(total / prompts.len().max(1) as f64)
}

#[allow(clippy::too_many_arguments)]
async fn ours(
    client: &HttpClient,
    server: &LocalServer,
    (engine, upstream): (recache_adapters::Engine, &str),
    model: &str,
    users: &[users::User],
    index: &RetrieveIndex,
    width: usize,
    top_k: usize,
    align: usize,
) -> Result<WidthRow, BenchError> {
    let url = server.url("/v1/retrieve");
    let k = top_k.min(width);
    let (mut lat, mut calls, mut early) = (Vec::new(), 0.0, 0usize);
    let (mut invalid, mut dups) = (0, 0);
    let (mut recall, mut ndcg, mut scored) = (0.0, 0.0, 0usize);
    let progress =
        crate::progress::Progress::new(users.len() as u64, format!("retrieve width {width}"));
    // Tokens from the engine's own counters: vLLM's usage of a call with several prompts
    // reports the cached tokens of its last prompt only.
    let metrics_url = format!("{upstream}/metrics");
    let metrics_before = http::get_text(client, &metrics_url).await?;
    for u in users {
        let (user, instruction) = u.request();
        let mut body = json!({"model": model, "user": user, "beam_width": width, "top_k": k});
        if let Some(i) = instruction {
            body["instruction"] = i;
        }
        let started = Instant::now();
        let (status, v) = http::post(client, &url, &body).await?;
        lat.push(started.elapsed().as_secs_f64() * 1e3);
        if status != 200 {
            return Err(BenchError::Setup(format!(
                "/v1/retrieve answered {status}: {v}"
            )));
        }
        let usage = &v["usage"];
        calls += usage["engine_calls"].as_f64().unwrap_or(0.0);
        early += usage["stopped_early"].as_bool().unwrap_or(false) as usize;
        let ids: Vec<&str> = v["items"]
            .as_array()
            .map(|a| a.iter().filter_map(|i| i["id"].as_str()).collect())
            .unwrap_or_default();
        invalid += ids
            .iter()
            .filter(|i| !index.by_id.contains_key(**i))
            .count();
        if let Some(t) = &u.target {
            let ranked: Vec<Option<String>> = ids.iter().map(|i| Some(i.to_string())).collect();
            let (r, g) = codes::hit(&ranked, t);
            (recall, ndcg, scored) = (recall + r, ndcg + g, scored + 1);
        }
        let mut d = ids.clone();
        d.sort_unstable();
        d.dedup();
        dups += ids.len() - d.len();
        progress.inc(1);
    }
    progress.finish();
    let metrics_after = http::get_text(client, &metrics_url).await?;
    let (prompt, cached) = engine_ops::cache_deltas(engine, &metrics_before, &metrics_after);
    let computed = prompt - cached;
    lat.sort_by(f64::total_cmp);
    let n = users.len().max(1) as f64;
    Ok(WidthRow {
        beam_width: width,
        align,
        retrievals: users.len(),
        p50_ms: quantile(&lat, 0.5),
        p99_ms: quantile(&lat, 0.99),
        computed_tokens: computed / n,
        computed_vs_greedy: f64::NAN,
        cached_share: if prompt > 0.0 { cached / prompt } else { 0.0 },
        engine_calls: calls / n,
        stopped_early_share: early as f64 / n,
        invalid_items: invalid,
        duplicate_items: dups,
        unconstrained_invalid_rate: None,
        unconstrained_computed_tokens: None,
        unconstrained_fanout: None,
        recall_at_10: (scored > 0).then(|| recall / scored as f64),
        ndcg_at_10: (scored > 0).then(|| ndcg / scored as f64),
        unconstrained_recall_at_10: None,
    })
}
