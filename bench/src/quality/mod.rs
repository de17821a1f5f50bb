//! `recache bench quality`: does ranking quality survive recache's layouts? Held-out users'
//! next items ranked through `/v1/rank` once per layout (user-first, item-first, item-first with
//! the item KV pool, and recache's own choices bat and bat-pool), each through a fresh
//! in-process recache exactly as `bench gr` runs its modes; Recall@5/10, MRR@10 and NDCG@5/10
//! per layout next to popularity and random baselines on the same candidates.
//!
//! - [`args`]: the command line; [`split`]: which users were held out of the ranker's training;
//! - [`plan`]: their requests; [`metrics`]: the measures; [`report`]: rows and the table.
//!
//! Meant for a model trained for the task (`examples/testbed/up --model ranker`); on the
//! random-weight testbed model every layout is as good as random.

pub mod args;
pub mod metrics;
pub mod plan;
pub mod report;
pub mod split;

use std::sync::Arc;

use serde_json::Value;

pub use args::QualityArgs;
use metrics::{quality, rank_by};
use report::Row;

use super::gr::bodies::Titles;
use super::gr::{measure, memory, workload};
use crate::error::BenchError;
use crate::http;
use crate::rng::Rng;
use crate::testbed::Instance;

pub async fn run(args: QualityArgs) -> Result<(), BenchError> {
    let gr = args.gr()?;
    let client = http::client();
    let data = workload::load(&args.data, &args.items)?;
    let cases = plan::cases(
        &data,
        args.candidates,
        args.item_tokens,
        args.history_items,
        args.users,
        args.seed,
    )?;
    let upstream = args.upstream.trim_end_matches('/').to_string();
    let engine = super::engine_ops::resolve(&client, &upstream, args.engine).await;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => http::first_model(&client, &upstream).await?,
    };
    let memory = memory::plan(&gr, &data, &[])?;
    let warm_n = args
        .pool_warm
        .unwrap_or(memory.pool_items.len())
        .min(memory.pool_items.len());
    let pooled = args.layouts.iter().any(|m| m.uses_pool());
    let warm_ids = if pooled {
        &memory.pool_items[..warm_n]
    } else {
        &[][..]
    };
    eprintln!(
        "bench quality: {} held-out users, {} candidates, profile <= {} items, model {model}",
        cases.len(),
        args.candidates,
        args.history_items
    );
    let used = cases
        .iter()
        .flat_map(|c| c.planned.items.iter().chain(&c.planned.history).copied())
        .chain(warm_ids.iter().copied());
    let titles = Titles::tokenize(&client, &upstream, &model, &data, used)
        .await?
        .with_id_base(args.item_id_base);
    let bodies: Vec<Arc<Value>> = cases
        .iter()
        .map(|c| titles.body(&c.planned, &data, args.item_tokens, &model))
        .collect();
    let warm: Vec<(u64, Arc<Vec<u32>>)> = warm_ids
        .iter()
        .map(|&i| (i, Arc::new(titles.item(&data, args.item_tokens, i))))
        .collect();
    let population = workload::Population {
        distinct_users: cases.len(),
        returning_share: 0.0,
    };
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let ctx = measure::Ctx {
        args: &gr,
        client: &client,
        engine,
        model: &model,
        memory: &memory,
        warm: &warm,
        population: &population,
        nonce,
    };
    let instance = Instance {
        name: "upstream".into(),
        upstream: upstream.clone(),
        kv_events: args.kv_events.clone(),
    };
    let arrivals = vec![0.0; bodies.len()];
    let mut rows = Vec::new();
    for &mode in &args.layouts {
        let run = measure::Run {
            mode,
            instance: &instance,
            bodies: &bodies,
            arrivals: &arrivals,
            offered_rps: 0.0,
            round: 0,
        };
        let (result, answers) = measure::run_mode_answers(&ctx, run).await?;
        let ranks: Vec<Option<usize>> = cases
            .iter()
            .zip(&answers)
            .map(|(c, a)| a.as_ref().and_then(|a| answer_rank(a, c.target)))
            .collect();
        let row = Row::layout(mode.name(), quality(&ranks), &result);
        emit(&args, &row)?;
        rows.push(row);
    }
    for row in baselines(&data, &cases, args.seed) {
        emit(&args, &row)?;
        rows.push(row);
    }
    if !args.json {
        print!("{}", report::table(&rows));
    }
    Ok(())
}

/// 1-based place of `target` in a `/v1/rank` answer's ranking (`None`: not in it).
fn answer_rank(answer: &Value, target: u64) -> Option<usize> {
    answer["ranking"]
        .as_array()?
        .iter()
        .position(|r| r["id"].as_u64() == Some(target))
        .map(|p| p + 1)
}

/// Popularity (interaction counts a deployment knows before the held-out events) and random
/// order, on the same candidates.
fn baselines(data: &workload::Data, cases: &[plan::Case], seed: u64) -> Vec<Row> {
    let counts = plan::train_counts(data);
    let popular: Vec<Option<usize>> = cases
        .iter()
        .map(|c| {
            let score = |i: &u64| counts.get(i).copied().unwrap_or(0) as f64;
            Some(rank_by(&c.planned.items, &c.target, score))
        })
        .collect();
    let mut rng = Rng::new(seed ^ 0x7261_6e64);
    let random: Vec<Option<usize>> = cases
        .iter()
        .map(|c| Some(rng.below(c.planned.items.len()) + 1))
        .collect();
    vec![
        Row::baseline("popularity", quality(&popular), cases.len()),
        Row::baseline("random", quality(&random), cases.len()),
    ]
}

fn emit(args: &QualityArgs, row: &Row) -> Result<(), BenchError> {
    if args.json {
        let line =
            serde_json::to_string(row).map_err(|e| BenchError::Setup(format!("encoding: {e}")))?;
        println!("{line}");
    }
    Ok(())
}
