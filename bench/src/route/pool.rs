//! `bench route --pool-items N`: each strategy's item pools precomputed before its timed
//! stream, as a deployment would precompute its catalog at start-up.
//!
//! Every replica has its own pool (`itempool::replicas`), so what goes where is the
//! strategy's placement: under `least-loaded`, `prefix` and `gr` (its default
//! `pool_hot_share` 1) every replica pools the past period's hottest items; `gr` with a
//! `pool_hot_share` below 1 pools the hot ones everywhere and each other item on its home
//! replica only. Each pool takes up to N items. What the precompute computed is reported
//! (`precompute_tokens`, `precompute_s`), not counted in the stream's hit rate.

use std::time::Duration;

use serde_json::{Value, json};

use super::gr_load::PastItem;
use crate::error::BenchError;
use crate::progress::Progress;
use recache::harness::LocalServer;
use recache::harness::{Wanted, pool_key};

/// Precomputes `past` (hottest first) into the local recache's pools under its routing rule;
/// returns the row's fields about it.
pub async fn precompute(
    local: &LocalServer,
    model: &str,
    past: &[PastItem],
    name: &str,
) -> Result<Value, BenchError> {
    let state = local.ranker();
    let Some(pools) = local.pools() else {
        return Err(BenchError::Setup(
            "--pool-items: this run's recache has no item pool".into(),
        ));
    };
    let model = Some(model);
    pools.sync(&state.engine, model).await.map_err(|e| {
        BenchError::Setup(format!(
            "reading the replicas' item pools: {e} (start each replica with `{}`)",
            crate::testbed::up_command("--item-pool")
        ))
    })?;
    let wanted: Vec<Wanted> = (past.iter())
        .map(|it| Wanted {
            key: pool_key(model, &it.id),
            count: it.count,
            tokens: it.tokens.clone(),
        })
        .collect();
    let share = local.routing().pool_hot_share();
    let progress = std::sync::OnceLock::new();
    let show = |done: usize, total: usize| {
        progress
            .get_or_init(|| Progress::new(total as u64, format!("{name} pool precompute")))
            .set(done as u64);
    };
    let limit = Duration::from_secs(3600);
    let done = pools
        .precompute(&state.engine, model, wanted, share, limit, &show)
        .await
        .map_err(|e| BenchError::Setup(format!("{name}: {e}")))?;
    if let Some(p) = progress.get() {
        p.finish();
    }
    // The share the precompute used: the rule's, else Alg. 1's with a store.
    let share = pools.metrics.hot_share.get();
    let resident: Vec<usize> = pools.iter().map(|p| p.counts().0).collect();
    eprintln!(
        "[route] {name}: pools hold {resident:?} items ({} computed: {} tokens in {:.1}s)",
        done.filled, done.tokens, done.seconds
    );
    Ok(json!({
        "pool_hot_share": share,
        "pool_items_resident": resident,
        "precompute_tokens": done.tokens,
        "precompute_s": done.seconds,
    }))
}

/// Each replica's connector counters: a `list` request each (it claims and stores nothing).
pub async fn connector_stats(
    client: &crate::http::HttpClient,
    engine: recache_adapters::Engine,
    upstreams: &[String],
    model: &str,
) -> Result<Vec<Value>, BenchError> {
    let mut out = Vec::new();
    for up in upstreams {
        let (path, body) = engine.pool_call(&[0], json!({"list": true}), Some(model));
        let url = format!("{up}{path}");
        let (status, v) = crate::http::post(client, &url, &body).await?;
        let mut report = engine.pool_report(&v).clone();
        if status != 200 || !report.is_object() {
            return Err(BenchError::Setup(format!(
                "{up}: no item pool report ({status}: {v}); start it with `{}`",
                crate::testbed::up_command("--item-pool")
            )));
        }
        if let Some(r) = report.as_object_mut() {
            r.remove("list"); // the entries themselves: not a counter
        }
        out.push(report);
    }
    Ok(out)
}

/// The store's own count of the bytes it holds: Redis' `used_memory` and
/// `used_memory_dataset` (an `INFO memory` on its port); None for another store or when it
/// does not answer (the row then has only the bytes the connectors wrote).
pub async fn store_memory(store: &str) -> Option<(u64, u64)> {
    let text = super::store::call(store, "INFO memory").await.ok()?;
    let field = |name: &str| {
        (text.lines())
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("used_memory")?, field("used_memory_dataset")?))
}

/// The row's pool and store fields from the connectors' counters before and after the
/// stream: host pool bytes per replica at the end, and, with a store, the share of cold reads
/// it served, the bytes the connectors wrote to it since the engines started (a store
/// flushed meanwhile holds less), and (`memory`) what the store itself says it holds
/// ([`store_memory`]).
pub fn store_fields(
    before: &[Value],
    after: &[Value],
    store: Option<&str>,
    memory: Option<(u64, u64)>,
) -> Value {
    let sum = |rows: &[Value], f: &str| -> f64 {
        rows.iter().map(|r| r[f].as_f64().unwrap_or(0.0)).sum()
    };
    let delta = |f: &str| sum(after, f) - sum(before, f);
    let n = after.len().max(1) as f64;
    let (hits, misses) = (delta("store_hits"), delta("store_misses"));
    let reads = hits + misses;
    json!({
        "pool_bytes_per_replica": sum(after, "bytes") / n,
        "pool_store": store,
        "store_hit_rate": store.and((reads > 0.0).then(|| hits / reads)),
        "store_reads": store.map(|_| reads),
        "store_loaded_tokens": store.map(|_| delta("store_loaded_tokens")),
        "store_bytes_written_total": store.map(|_| sum(after, "store_bytes_written")),
        "store_fetch_s": store.map(|_| delta("total_store_fetch_s")),
        "store_used_memory": memory.map(|m| m.0),
        "store_dataset_bytes": memory.map(|m| m.1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn store_memory_reads_redis_info() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut c, _) = l.accept().await.expect("accept");
            let mut cmd = [0u8; 64];
            let _ = c.read(&mut cmd).await;
            let text = "# Memory\r\nused_memory:1000\r\nused_memory_dataset:800\r\n";
            let reply = format!("${}\r\n{text}\r\n", text.len());
            c.write_all(reply.as_bytes()).await.expect("write");
        });
        assert_eq!(
            store_memory(&format!("redis://{addr}")).await,
            Some((1000, 800))
        );
        assert_eq!(store_memory("127.0.0.1:1").await, None, "not a Redis URL");
    }

    #[test]
    fn store_fields_from_counter_deltas() {
        let before = [
            json!({"bytes": 10, "store_hits": 1, "store_misses": 0}),
            json!({}),
        ];
        let after = [
            json!({"bytes": 30, "store_hits": 7, "store_misses": 2, "store_bytes_written": 100}),
            json!({"bytes": 10, "store_hits": 2, "store_misses": 0, "store_bytes_written": 50}),
        ];
        let f = store_fields(&before, &after, Some("127.0.0.1:1"), Some((9, 8)));
        assert_eq!(f["pool_bytes_per_replica"], json!(20.0));
        assert_eq!(
            f["store_hit_rate"],
            json!(0.8),
            "8 hits of 10 reads in the stream"
        );
        assert_eq!(f["store_bytes_written_total"], json!(150.0));
        assert_eq!(f["store_dataset_bytes"], json!(8));
        let none = store_fields(&before, &after, None, None);
        assert_eq!(none["store_hit_rate"], Value::Null);
        assert_eq!(none["pool_bytes_per_replica"], json!(20.0));
    }
}
