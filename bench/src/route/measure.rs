//! One strategy's row of `bench route`: empty the replicas' caches (and a Redis store,
//! [`store::flush`]: each strategy starts from an empty store; a Mooncake store is not
//! flushed, the row's `store.store_flushed` says so), start the in-process
//! recache instance(s) with the rule, wait for verified mirrors, precompute the item pools
//! (`--pool-items`), send the load from the workers, and read the engines' and recache's
//! counters into the row (the engines' settled, recache's own calls taken out of them and
//! reported apart as `own_traffic`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::args::RouteArgs;
use super::load::Load;
use super::pool;
use super::report::{decision_p99_us, mirrors, scrape, wait_exact};
use super::store;
use crate::engine_ops;
use crate::error::BenchError;
use crate::http::{self, counter};
use crate::own_traffic;
use crate::snapshot;
use crate::stats::pct;
use recache::harness::Routing;
use recache::harness::ServeArgs;
use recache_adapters::Engine;

pub(super) async fn one(
    args: &RouteArgs,
    engine: Engine,
    model: &str,
    load: &Load,
    routing: Routing,
) -> Result<Value, BenchError> {
    let client = http::client();
    for up in &args.upstream {
        engine_ops::reset_cache(&client, engine, up, false)
            .await
            .map_err(|e| BenchError::Setup(format!("{up}: {e}")))?;
    }
    // After the reset, so the engines have nothing more to write: the connectors put fills
    // on a background thread, which the previous row's settle (and a loopback store's
    // millisecond puts) leaves idle by now.
    let flushed = match &args.pool_store {
        Some(s) => Some(store::flush(s).await?),
        None => None,
    };
    let serve = ServeArgs {
        upstream: args.upstream.clone(),
        engine: Some(engine),
        // Busy CPU engines answer probes late; a missed 2 s probe would eject a replica.
        health_interval: Some(Duration::from_secs(10)),
        kvloop: recache::harness::KvLoopArgs {
            kv_events: args.kv_events.clone(),
            ..Default::default()
        },
        rank: {
            let mut rank = load.rank.clone().unwrap_or_default();
            rank.pool.rank_pool_store = args.pool_store.clone();
            rank
        },
        ..Default::default()
    };
    let mut locals = Vec::new();
    for _ in 0..args.instances {
        let local = recache::harness::LocalServer::start(&serve)
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        local.set_routing(routing);
        locals.push(local);
    }
    let local = &locals[0];
    let mut verified = true;
    for l in &locals {
        if !args.kv_events.is_empty() && !wait_exact(l, Duration::from_secs(60)).await {
            verified = false;
            eprintln!(
                "[route] warning: mirrors not verified exact within 60 s: {:?}",
                l.replica_detail()
            );
        }
    }
    let pooled = match args.pool_items {
        Some(_) => Some(pool::precompute(local, model, &load.past, routing.name()).await?),
        None => None,
    };
    let pool_before = match args.pool_items {
        Some(_) => pool::connector_stats(&client, engine, &args.upstream, model).await?,
        None => Vec::new(),
    };
    // Every instance's own calls (canaries) are read with the engines' counters and taken out.
    let mut engines = async || scrape(&client, &args.upstream).await;
    let mut ours = async || -> Result<Vec<String>, BenchError> {
        Ok(locals.iter().map(|l| l.metrics_text()).collect())
    };
    let before = snapshot::take(&mut engines, &mut ours).await?;
    let urls: Arc<[String]> = (locals.iter())
        .map(|l| format!("{}{}", l.base(), load.path))
        .collect();
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    let shared = load.bodies.clone();
    let n = shared.len();
    let errors = Arc::new(AtomicUsize::new(0));
    let progress = crate::progress::Progress::new(n as u64, format!("route {}", routing.name()));
    for _ in 0..args.concurrency.max(1) {
        let progress = progress.clone();
        let (client, urls, next) = (client.clone(), urls.clone(), next.clone());
        let bodies = shared.clone();
        let errors = errors.clone();
        workers.spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                let t = Instant::now();
                let url = &urls[i % urls.len()];
                let (status, v) = http::post(&client, url, body).await?;
                if status != 200 {
                    // Counted and shown, not fatal: one engine hiccup should not throw away
                    // minutes of measurement (the row says how many failed).
                    eprintln!("[route] request {i} answered {status}: {v}");
                    errors.fetch_add(1, Ordering::Relaxed);
                    progress.inc(1);
                    continue;
                }
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                progress.inc(1);
            }
            Ok::<_, BenchError>(lat)
        });
    }
    let mut lat = Vec::new();
    while let Some(done) = workers.join_next().await {
        lat.extend(done.map_err(|e| BenchError::Setup(format!("worker: {e}")))??);
    }
    progress.finish();
    let wall = t0.elapsed().as_secs_f64();
    let failed = errors.load(Ordering::Relaxed);
    if failed * 10 > n {
        return Err(BenchError::Setup(format!(
            "{failed} of {n} requests failed under {}: the engines are not healthy",
            routing.name()
        )));
    }
    let answered = n - failed;
    let names = snapshot::engine_counters(engine);
    let done = |now: &snapshot::Snapshot| {
        let Some(name) = engine.requests_counter() else {
            return Ok(());
        };
        let own = own_traffic::between(&before.recache, &now.recache, &args.upstream);
        let engines: f64 = (before.engines.iter().zip(&now.engines))
            .map(|(b, a)| counter(a, name) - counter(b, name))
            .sum();
        match engines - own_traffic::Own::total(&own).requests {
            c if c >= answered as f64 => Ok(()),
            c => Err(format!("{c} of {answered} answered requests counted")),
        }
    };
    let after = snapshot::settled("route", &mut engines, &mut ours, &names, done).await?;
    let own = own_traffic::between(&before.recache, &after.recache, &args.upstream);
    let (before, after) = (before.engines, after.engines);
    let store = match args.pool_items {
        Some(_) => {
            let pool_after = pool::connector_stats(&client, engine, &args.upstream, model).await?;
            let store = args.pool_store.as_deref();
            let memory = match store {
                Some(s) => pool::store_memory(s).await,
                None => None,
            };
            let mut fields = pool::store_fields(&pool_before, &pool_after, store, memory);
            if let (Some(f), Some(o)) = (flushed, fields.as_object_mut()) {
                o.insert("store_flushed".into(), json!(f));
            }
            fields
        }
        None => Value::Null,
    };
    let (mut queries, mut hits, mut pool_hits) = (0.0, 0.0, 0.0);
    for (b, a) in before.iter().zip(&after) {
        let (q, h) = engine_ops::cache_deltas(engine, b, a);
        queries += q;
        hits += h;
        // Tokens the item pool connector supplied count as hits (bench gr's hit rate).
        if let Some(name) = engine.external_hits_counter() {
            pool_hits += counter(a, name) - counter(b, name);
        }
    }
    // recache's own calls hit the engines' own caches, never the item pool.
    let (queries, local_hits) = own_traffic::less_cache((queries, hits), &own);
    let hits = local_hits + pool_hits;
    // Requests each replica got, from every instance.
    let mut shares = vec![0.0; args.upstream.len()];
    for l in &locals {
        let theirs = l.metrics_text();
        for (share, r) in shares.iter_mut().zip(l.mirrors()) {
            let series = format!("recache_upstream_routed_total{{upstream=\"{}\"}}", r.label);
            *share += counter(&theirs, &series);
        }
    }
    let ours = local.metrics_text();
    let mean = shares.iter().sum::<f64>() / shares.len().max(1) as f64;
    let max_share = shares.iter().copied().fold(0.0, f64::max) / mean.max(1.0);
    lat.sort_by(f64::total_cmp);
    Ok(json!({
        "strategy": routing.name(), "routing": routing, "requests": n, "workload": load.about,
        "errors": errors.load(Ordering::Relaxed),
        "concurrency": args.concurrency, "hit_rate": hits / queries.max(1.0),
        "rps": n as f64 / wall, "p50_ms": pct(&lat, 0.5), "p99_ms": pct(&lat, 0.99),
        "requests_per_replica": shares, "max_share": max_share,
        "decision_p99_us": decision_p99_us(&ours),
        "replicas": args.upstream.len(), "kv_blocks_per_replica": args.kv_blocks,
        "instances": args.instances,
        "mirrors": mirrors(local, &ours, args.kv_events.is_empty(), verified),
        "pool_hit_rate": pooled.as_ref().map(|_| pool_hits / queries.max(1.0)),
        "pool": pooled,
        "pool_bytes_per_replica": store["pool_bytes_per_replica"],
        "store_hit_rate": store["store_hit_rate"],
        "store": store,
        "own_traffic": own_traffic::json(&own), "model": model,
    }))
}
