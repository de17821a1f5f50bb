//! `recache bench route`: routing strategies side by side on real engine replicas.
//!
//! One run: for each strategy, both replicas' prefix caches are emptied, an in-process recache
//! with `--routing STRATEGY` is started in front of all of them, and `--requests` requests go
//! through it from `--concurrency` workers in order: either the start of a Mooncake trace
//! (`--trace`; each hash id a fixed 32-token block, as `bench replay` builds them, sent to
//! `/v1/completions`) or GR ranking load (`--data/--items`, [`gr_load`]: the bipartite
//! bench's stream sent to `/v1/rank`, BAT's prefix selection on). Per strategy it
//! prints the engines' own prefix-cache hit rate (summed over replicas), rps, p50/p99
//! latency, each replica's share of requests and the busiest one's over the mean
//! (`max_share`), and the routing decision p99 (from `recache_route_decision_seconds`,
//! bucket upper bound). A last row times decisions alone with 100k keys per replica
//! ([`decisions`]).
//!
//! With `--instances N`, N recache instances (same settings, nothing shared) stand in front of
//! the same replicas and request i goes to instance i mod N: what several gateways for
//! availability see, each knowing only what it sent unless the replicas' events tell all.
//!
//! With `--kv-events` (one per `--upstream`, same order) each replica gets its routing mirror
//! and canaries: the run waits until both mirrors are verified `exact` (up to 60 s, else it
//! says so in the row) and each row reports the mirrors' states at its end, the canary
//! outcomes and predicted vs delivered cached tokens. Without it `prefix` runs on recache's
//! own record of what it sent where.
//!
//! With `--testbed` the run starts its own replicas (`--replicas` vLLM testbed engines named
//! `route-r{i}`, their KV events followed) and stops them when it ends, also on error; with
//! `--pool-store auto` as well, a Redis server for them to write their item pools through to
//! ([`store::RedisServer`]), stopped after the engines. With a store, each strategy starts
//! from an empty one (a Redis store is flushed when the engines' caches are reset; a
//! Mooncake store is not: the row's `store.store_flushed` says which).
//!
//! The decisions-only rows time the `prefix` rule's lookup (the `gr` rule adds its placement
//! to it only for ranking prompts).

pub mod args;
pub mod decisions;
pub mod gr_load;
pub mod load;
mod measure;
pub mod pool;
pub mod report;
pub mod store;

use serde_json::{Value, json};

use crate::engine_ops;
use crate::error::BenchError;
use crate::http;
use crate::testbed::{self, Layout, Testbed};
pub use args::RouteArgs;
use load::{load, trace_prompts};
use recache::harness::Routing;
use report::{print_row, table};

/// A strategy as the run uses it: `prefix` sized to the engines' caches unless told.
fn strategy(spec: &str, kv_blocks: usize) -> Result<Routing, BenchError> {
    let spec = spec.trim();
    let sized = ["prefix", "gr"]
        .iter()
        .any(|n| spec.split(':').next() == Some(*n));
    let full = if sized && !spec.contains("blocks=") {
        format!("{spec}:blocks={kv_blocks}")
    } else {
        spec.to_string()
    };
    Routing::from_spec(&full).map_err(|e| BenchError::Setup(e.to_string()))
}

/// What the run started itself, stopped when dropped: the engines first, then the store they
/// write to (fields drop in order).
struct Owned {
    _testbed: Option<Testbed>,
    _store: Option<store::RedisServer>,
}

/// Starts the store (`--pool-store auto`) and the replicas (`--testbed`) and points `args` at
/// them (`--pool-store`, `--upstream`, `--kv-events`), as if they had been given.
async fn start_own(args: &mut RouteArgs) -> Result<Owned, BenchError> {
    // The testbed's scripts are checked before anything starts.
    let tb = if args.testbed {
        let model = testbed::Model::resolve(args.testbed_model)?;
        let block_bytes = testbed::BLOCK_TOKENS * model.kv_token_bytes;
        Some(Testbed::new(&args.testbed_dir, block_bytes)?.with_model(args.testbed_model))
    } else {
        None
    };
    let redis = if args.store_auto() {
        let server = store::redis_server(std::path::Path::new(store::INSTALL))?;
        Some(store::RedisServer::start(&server).await?)
    } else {
        None
    };
    if let Some(r) = &redis {
        args.pool_store = Some(r.url());
    }
    let mut owned = Owned {
        _testbed: None,
        _store: redis,
    };
    if let Some(tb) = tb {
        let layout = Layout {
            kv_blocks: args.kv_blocks as u64,
            pool_bytes: args.pool_items.map_or(0, |_| args.pool_bytes),
        };
        // Held while the engines start, so one that fails stops those already up.
        let tb = (owned._testbed).insert(tb.with_pool_store(args.pool_store.clone()));
        for i in 0..args.replicas {
            let inst = tb.start_named(&format!("route-r{i}"), layout)?;
            args.upstream.push(inst.upstream);
            args.kv_events.extend(inst.kv_events);
        }
        if args.kv_events.len() != args.upstream.len() {
            args.kv_events.clear(); // an engine without events: every mirror off, as without
        }
    }
    Ok(owned)
}

pub async fn run(mut args: RouteArgs) -> Result<(), BenchError> {
    args.check()?;
    if args.instances > 1 && args.pool_items.is_some() {
        // Each instance would keep its own view of the same pools.
        return Err(BenchError::Setup(
            "--pool-items runs with one recache instance (--instances 1)".into(),
        ));
    }
    if let (Some(from), Some(out)) = (&args.replot, &args.out) {
        let text = std::fs::read_to_string(from)
            .map_err(|e| BenchError::Setup(format!("{}: {e}", from.display())))?;
        let rows: Vec<Value> = (text.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r.get("hit_rate").is_some())
            .collect();
        if rows.is_empty() {
            return Err(BenchError::Setup(format!(
                "{}: no strategy rows (lines with hit_rate)",
                from.display()
            )));
        }
        return report::plot(out, &rows);
    }
    let routings = args
        .strategies
        .iter()
        .map(|s| strategy(s, args.kv_blocks))
        .collect::<Result<Vec<_>, _>>()?;
    let _owned = start_own(&mut args).await?;
    if args.decisions_only && args.data.is_none() {
        // The record alone (approximate mode), then with exact mirrors (--kv-events).
        let prompts = trace_prompts(&args)?;
        for mirrored in [0, 100_000] {
            for mut row in timed_decisions(&args, &prompts, mirrored) {
                row["model"] = json!("none (decisions only: no engine is called)");
                print_row(&args, &row);
            }
        }
        return Ok(());
    }
    let client = http::client();
    let engine = engine_ops::resolve(&client, &args.upstream[0], args.engine).await;
    let model = http::first_model(&client, &args.upstream[0]).await?;
    let load = load(&args, &client, &model).await?;
    if !args.decisions_only {
        // A fresh engine's first requests can take minutes (kernel warm-up); that must not
        // land in the first strategy's numbers.
        for up in &args.upstream {
            engine_ops::warm_up(&client, up, &model).await?;
        }
        let mut rows = Vec::new();
        for (routing, spec) in routings.iter().zip(&args.strategies) {
            let mut row = measure::one(&args, engine, &model, &load, *routing).await?;
            // The spec as given names the row (two `gr` rows may differ in parameters).
            row["strategy"] = json!(spec.trim());
            row["model"] = json!(model);
            print_row(&args, &row);
            rows.push(row);
        }
        if !args.json {
            table(&rows);
        }
        if let Some(out) = &args.out {
            report::plot(out, &rows)?;
            eprintln!("[route] wrote {}", out.display());
        }
    }
    for mirrored in [0, 100_000] {
        for mut row in timed_decisions(&args, &load.prompts, mirrored) {
            row["model"] = json!(model); // the prompts are its tokens; no engine is called
            print_row(&args, &row);
        }
    }
    Ok(())
}

/// Decisions alone, 100k keys per replica, and `mirrored` blocks in each replica's exact
/// mirror ([`decisions`]), for `prefix` and, when the run compares it, `gr`.
fn timed_decisions(args: &RouteArgs, prompts: &[Vec<u32>], mirrored: usize) -> Vec<Value> {
    let with_gr = args.strategies.iter().any(|s| s.trim().starts_with("gr"));
    let spec = |name| Routing::from_spec(&format!("{name}:blocks=100000"));
    let rules: Vec<Routing> = ["prefix", "gr"]
        .into_iter()
        .filter(|n| *n == "prefix" || with_gr)
        .filter_map(|n| spec(n).ok())
        .collect();
    tokio::task::block_in_place(|| {
        (rules.into_iter())
            .map(|r| decisions::measure(r, args.upstream.len(), prompts, 100_000, mirrored))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::report::decision_p99_us;
    use super::*;

    #[test]
    fn strategies_parse_sized_to_the_engines() {
        let p = strategy("prefix", 512)
            .expect("ok")
            .prefix_params()
            .expect("prefix");
        assert_eq!((p.blocks, p.balance, p.queue_gap), (512, 0.3, 8));
        assert_eq!(
            strategy("least-loaded", 512).expect("ok"),
            Routing::LeastLoaded
        );
        let gr = strategy("gr", 512).expect("ok");
        assert_eq!(gr.prefix_params().map(|p| p.blocks), Some(512));
        assert!(strategy("nearest", 512).is_err());
    }

    #[test]
    fn decision_p99_reads_the_histogram() {
        let m = "recache_route_decision_seconds_bucket{le=\"0.000001\"} 50\n\
                 recache_route_decision_seconds_bucket{le=\"0.000002\"} 99\n\
                 recache_route_decision_seconds_bucket{le=\"+Inf\"} 100\n";
        let p = decision_p99_us(m).expect("p99");
        assert!((p - 2.0).abs() < 1e-9, "{p}");
    }

    #[test]
    fn decisions_with_a_full_record_are_timed() {
        let prompts: Vec<Vec<u32>> = (0..20)
            .map(|u| (0..640).map(|t| u * 1000 + t).collect())
            .collect();
        let v = decisions::measure(
            Routing::from_spec("prefix:blocks=2000").expect("spec"),
            2,
            &prompts,
            200,
            500,
        );
        assert_eq!(v["decisions"], 200);
        assert_eq!(v["mirrored_blocks_per_replica"], 500);
        assert!(v["decision_p99_us"].as_f64().expect("p99") > 0.0);
    }
}
