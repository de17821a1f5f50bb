//! What `bench route`'s workers send ([`Load`]): the start of a Mooncake trace to
//! `/v1/completions`, or GR ranking load to `/v1/rank` ([`super::gr_load`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::args::RouteArgs;
use super::gr_load;
use crate::error::BenchError;
use crate::replay::trace::{load_trace, tokens};

/// What the workers send: one body per request, to one recache path.
pub struct Load {
    pub path: &'static str,
    pub bodies: Arc<[Arc<Value>]>,
    /// Token prompts for the decisions-only rows.
    pub prompts: Vec<Vec<u32>>,
    /// recache's ranking settings (GR load only).
    pub rank: Option<recache::harness::RankArgs>,
    /// What the rows say about the load.
    pub about: Value,
    /// The item pools' precompute set, hottest first (`--pool-items`).
    pub past: Vec<gr_load::PastItem>,
}

/// The trace's first requests as token prompts.
pub fn trace_prompts(args: &RouteArgs) -> Result<Vec<Vec<u32>>, BenchError> {
    let Some(trace) = &args.trace else {
        return Err(BenchError::Setup(
            "pass --trace FILE (a Mooncake-format JSONL trace) or --data FILE --items FILE \
             (GR ranking load)"
                .into(),
        ));
    };
    let reqs = load_trace(trace, args.requests, args.max_model_len)?;
    if reqs.is_empty() {
        return Err(BenchError::Setup("the trace has no requests".into()));
    }
    Ok(reqs
        .iter()
        .enumerate()
        .map(|(i, r)| tokens(r, i as u64))
        .collect())
}

pub async fn load(
    args: &RouteArgs,
    client: &crate::http::HttpClient,
    model: &str,
) -> Result<Load, BenchError> {
    if let (Some(data), Some(items)) = (&args.data, &args.items) {
        let gr = gr_load::build(
            client,
            &args.upstream[0],
            model,
            data,
            items,
            args.requests,
            args.users,
            args.max_model_len,
            args.seed,
            // Enough for every replica's pool even when `gr` shards the cold ones.
            gr_load::Past::Hottest(args.pool_items.unwrap_or(0) * args.upstream.len()),
        )
        .await?;
        eprintln!(
            "[route] GR load: {} requests, {} distinct users, returning share {:.3}",
            gr.bodies.len(),
            gr.distinct_users,
            gr.returning_share
        );
        return Ok(Load {
            path: "/v1/rank",
            bodies: gr.bodies.into(),
            prompts: gr.prompts,
            rank: Some(gr_load::rank_args(
                args.kv_blocks,
                args.max_model_len,
                args.pool_items.unwrap_or(0),
            )),
            about: json!({"load": "gr", "seed": args.seed, "users": args.users,
                "distinct_users": gr.distinct_users, "returning_share": gr.returning_share,
                "pool_items_per_replica": args.pool_items}),
            past: gr.past,
        });
    }
    let prompts = trace_prompts(args)?;
    let bodies = (prompts.iter())
        .map(|p| Arc::new(json!({"model": model, "prompt": p, "max_tokens": 1, "temperature": 0})))
        .collect();
    Ok(Load {
        path: "/v1/completions",
        bodies,
        prompts,
        rank: None,
        about: json!({"load": "trace"}),
        past: Vec::new(),
    })
}
