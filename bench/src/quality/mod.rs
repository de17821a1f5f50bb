//! `recache bench quality`: does ranking quality survive recache's layouts? Held-out users'
//! next items ranked through `/v1/rank` once per layout (user-first, item-first, item-first with
//! the item KV pool, and recache's own choices bat and bat-pool) and readout (`--rank-readout`
//! may list several: every layout read by the same head), each through a fresh in-process
//! recache on an emptied engine prefix cache exactly as `bench gr` runs its modes, `--repeat`
//! times; Recall@5/10, MRR@10 and NDCG@5/10 with bootstrap intervals over users, next to
//! baselines on the same candidates.
//!
//! - [`args`]: the command line; [`split`]: which users were held out of the ranker's training;
//! - [`plan`]: their requests; [`metrics`]: the measures; [`bootstrap`]: their intervals;
//! - [`baselines`]: the rankings to beat; [`report`]: the rows; [`table`]: the text table.
//!
//! Meant for a model trained for the task (`examples/testbed/up --model ranker`); on the
//! random-weight testbed model every layout is as good as random.

pub mod args;
pub mod baselines;
pub mod bootstrap;
pub mod metrics;
pub mod plan;
pub mod report;
pub mod split;
pub mod table;

use std::sync::Arc;

use serde_json::Value;

pub use args::QualityArgs;
use bootstrap::Resampling;
use report::Row;

use super::gr::bodies::Titles;
use super::gr::{measure, memory, workload};
use crate::error::BenchError;
use crate::http;
use crate::testbed::Instance;

/// Mixed into `--seed` for the bootstrap's draws, apart from the candidates' draws.
const BOOTSTRAP_SALT: u64 = 0x626f_6f74_7374_7270;
/// Mixed into `--seed` for `--reorder`'s shuffles.
const REORDER_SALT: u64 = 0x7265_6f72_6465_7221;

pub async fn run(args: QualityArgs) -> Result<(), BenchError> {
    let readouts = args.rank_readout.clone();
    let Some(&first_readout) = readouts.first() else {
        return Err(BenchError::Setup(
            "--rank-readout: give at least one".into(),
        ));
    };
    let gr = args.gr(first_readout)?;
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
    // Every candidate ranked, not gr's top 10: rows carry each user's full rank.
    let bodies: Vec<Arc<Value>> = cases
        .iter()
        .map(|c| {
            let mut body = (*titles.body(&c.planned, &data, args.item_tokens, &model)).clone();
            body["top_k"] = serde_json::json!(c.planned.items.len());
            Arc::new(body)
        })
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
    let instance = Instance {
        name: "upstream".into(),
        upstream: upstream.clone(),
        kv_events: args.kv_events.clone(),
    };

    let how = Resampling {
        resamples: args.bootstrap,
        seed: args.seed ^ BOOTSTRAP_SALT,
    };
    let mut rows = Vec::new();
    for repeat in 0..args.repeat {
        for &readout in &readouts {
            eprintln!(
                "bench quality: run {}/{}, readout {readout}",
                repeat + 1,
                args.repeat
            );
            let gr = args.gr(readout)?;
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
            let order = send_order(cases.len(), args.reorder, repeat, args.seed);
            let visits = visits(&order, args.revisit);
            let sent: Vec<Arc<Value>> = visits.iter().map(|&(i, _)| bodies[i].clone()).collect();
            let arrivals = vec![0.0; sent.len()];
            let mut group = Vec::new();
            for &mode in &args.layouts {
                let run = measure::Run {
                    mode,
                    instance: &instance,
                    bodies: &sent,
                    arrivals: &arrivals,
                    offered_rps: 0.0,
                    round: repeat,
                };
                let (result, answers) = measure::run_mode_answers(&ctx, run).await?;
                // Back in the users' own order, whatever order they were sent in.
                let mut ranks = vec![None; cases.len()];
                for (&(i, scored), a) in visits.iter().zip(&answers) {
                    if scored {
                        ranks[i] = a.as_ref().and_then(|a| answer_rank(a, cases[i].target));
                    }
                }
                group.push(Row::layout(mode.name(), ranks, &result, repeat, how));
            }
            let against = group.clone();
            compare_all(&mut group, &against, how);
            for row in &group {
                emit(&args, row)?;
            }
            rows.extend(group);
        }
    }
    // Baselines against run 0's layouts as read by the first readout.
    let against: Vec<Row> = rows.iter().take(args.layouts.len()).cloned().collect();
    let mut base: Vec<Row> = baselines::ranks(&data, &cases, args.seed)
        .into_iter()
        .map(|(name, ranks)| Row::baseline(name, ranks, how))
        .collect();
    compare_all(&mut base, &against, how);
    for row in &base {
        emit(&args, row)?;
    }
    rows.extend(base);
    let text = table::same_head(&rows);
    if args.json {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    Ok(())
}

/// The order run `repeat` sends the users in (indices into the cases): theirs, or with
/// `reorder` and after the first run, a shuffle seeded by the run.
fn send_order(n: usize, reorder: bool, repeat: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if reorder && repeat > 0 {
        crate::rng::Rng::new(seed ^ REORDER_SALT ^ repeat as u64).shuffle(&mut order);
    }
    order
}

/// Users per chunk with `--revisit`: their first visits, then their second ones. Small
/// enough that a chunk's profiles stay in a testbed engine's cache between the two.
const REVISIT_CHUNK: usize = 32;

/// What a run sends, in order: (case index, whether its answer is scored). Without
/// `revisit` each user once; with it each chunk of users twice, the second visit scored.
fn visits(order: &[usize], revisit: bool) -> Vec<(usize, bool)> {
    if !revisit {
        return order.iter().map(|&i| (i, true)).collect();
    }
    (order.chunks(REVISIT_CHUNK))
        .flat_map(|c| {
            c.iter()
                .map(|&i| (i, false))
                .chain(c.iter().map(|&i| (i, true)))
        })
        .collect()
}

/// Sets every row's `vs` against each row of `against` (another layout's).
fn compare_all(rows: &mut [Row], against: &[Row], how: Resampling) {
    for r in rows.iter_mut() {
        for other in against {
            r.compare_to(other, how);
        }
    }
}

/// 1-based place of `target` in a `/v1/rank` answer's ranking (`None`: not in it).
fn answer_rank(answer: &Value, target: u64) -> Option<usize> {
    answer["ranking"]
        .as_array()?
        .iter()
        .position(|r| r["id"].as_u64() == Some(target))
        .map(|p| p + 1)
}

fn emit(args: &QualityArgs, row: &Row) -> Result<(), BenchError> {
    if args.json {
        let line =
            serde_json::to_string(row).map_err(|e| BenchError::Setup(format!("encoding: {e}")))?;
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_send_users_in_their_order_unless_reordered() {
        let own: Vec<usize> = (0..50).collect();
        assert_eq!(send_order(50, false, 3, 1), own);
        assert_eq!(
            send_order(50, true, 0, 1),
            own,
            "run 0 keeps the users' order"
        );
        let second = send_order(50, true, 1, 1);
        assert_ne!(second, own);
        assert_eq!(second, send_order(50, true, 1, 1), "seeded");
        assert_ne!(second, send_order(50, true, 2, 1));
        let mut sorted = second.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, own, "a permutation");
    }

    #[test]
    fn a_revisit_sends_each_chunk_twice_and_scores_the_second() {
        assert_eq!(visits(&[2, 0], false), [(2, true), (0, true)]);
        let order: Vec<usize> = (0..40).collect();
        let v = visits(&order, true);
        assert_eq!(v.len(), 80);
        assert_eq!(v[31], (31, false));
        assert_eq!(v[32], (0, true));
        assert_eq!(v[64], (32, false));
        assert_eq!(v[79], (39, true));
    }

    #[test]
    fn an_answer_gives_the_targets_place() {
        let answer = serde_json::json!({"ranking": [{"id": 7}, {"id": 3}, {"id": 9}]});
        assert_eq!(answer_rank(&answer, 3), Some(2));
        assert_eq!(answer_rank(&answer, 4), None);
        assert_eq!(answer_rank(&serde_json::json!({"error": {}}), 3), None);
    }
}
