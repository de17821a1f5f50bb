//! recache's side of the `gr` workload: the `recache serve` flags (its GR defaults: `gr`
//! routing sized to the engines' caches, bat, the item pool of the stream's slots per
//! replica reused wherever items sit, as a deployment with the pool runs it, and the
//! stream's past period as `--rank-item-catalog`), the wait until the start-up precompute
//! has put the catalog in every replica's pool (read from recache's own `/metrics`), and
//! what the row says about the pool.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::load::Stream;
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::peers::args::PeersArgs;
use crate::peers::replicas::Replicas;
use crate::peers::system::RecacheSetup;
use crate::route::gr_load;
use recache::harness::RankArgs;

const RESIDENT: &str = "recache_rank_pool_items{state=\"resident\"}";
const PENDING: &str = "recache_rank_pool_items{state=\"pending\"}";
const FILL_ERRORS: &str = "recache_rank_pool_fills_total{result=\"error\"}";
/// A precompute that has not grown for this long is taken as done (with what it holds).
const STALL: Duration = Duration::from_secs(90);

/// recache's command line for `stream` on `replicas` (recache's set, the stream's
/// `sets.recache`): bench gr's and bench route's `bat-pool` settings (`gr_load::rank_args`)
/// and the catalog.
pub fn recache_setup(args: &PeersArgs, replicas: &Replicas, stream: &Stream) -> RecacheSetup {
    let blocks = stream.sets.recache.kv_blocks;
    let mut rank = gr_load::rank_args(blocks as usize, args.max_model_len, stream.pool_items);
    rank.rank_pool_after_user = args.pool_after_user;
    let mut extra = rank_flags(&rank);
    if args.engine == recache_adapters::Engine::Sglang {
        extra.extend(["--engine".into(), "sglang".into()]);
    }
    // A split that pools nothing (the stream's users take the budget) runs bat alone.
    if stream.pool_items > 0 {
        extra.extend([
            "--rank-item-catalog".into(),
            stream.catalog.display().to_string(),
        ]);
    }
    RecacheSetup {
        routing: Some(match &args.recache_route_params {
            Some(more) => format!("gr:blocks={blocks}:{}", more.trim_start_matches(':')),
            None => format!("gr:blocks={blocks}"),
        }),
        kv_events: replicas.kv_events.clone(),
        extra,
    }
}

fn name(v: impl clap::ValueEnum) -> Option<String> {
    v.to_possible_value().map(|p| p.get_name().to_string())
}

/// The `recache serve` flags of the ranking settings `r` sets.
pub fn rank_flags(r: &RankArgs) -> Vec<String> {
    let pairs = [
        ("--rank-selector", r.rank_selector.and_then(name)),
        ("--rank-window", r.rank_window.map(|w| w.to_string())),
        (
            "--rank-user-cache-tokens",
            r.rank_user_cache_tokens.map(|t| t.to_string()),
        ),
        ("--rank-admission", r.rank_admission.and_then(name)),
        (
            "--rank-item-pool",
            r.pool.rank_item_pool.map(|n| n.to_string()),
        ),
        ("--rank-item-reuse", r.rank_item_reuse.and_then(name)),
    ];
    let mut flags: Vec<String> = (pairs.into_iter())
        .filter_map(|(flag, v)| Some([flag.to_string(), v?]))
        .flatten()
        .collect();
    if r.rank_pool_after_user {
        flags.push("--rank-pool-after-user".into());
    }
    flags
}

async fn metrics(client: &HttpClient, base: &str) -> Result<String, BenchError> {
    http::get_text(client, &format!("{base}/metrics")).await
}

/// Waits until recache's pools hold `want` items with no fill pending (or the count stops
/// growing for [`STALL`]); returns what the precompute did.
pub async fn wait_precompute(
    client: &HttpClient,
    base: &str,
    want: usize,
    stream: &str,
) -> Result<Value, BenchError> {
    let t0 = Instant::now();
    let progress = crate::progress::Progress::new(
        want as u64,
        format!("gr {stream}: recache pool precompute"),
    );
    let (mut last, mut grew) = (0.0, Instant::now());
    loop {
        let text = metrics(client, base).await?;
        let (resident, pending) = (
            http::counter(&text, RESIDENT),
            http::counter(&text, PENDING),
        );
        progress.set(resident as u64);
        if resident > last {
            (last, grew) = (resident, Instant::now());
        }
        let done = resident >= want as f64 && pending == 0.0;
        if done || (grew.elapsed() > STALL && pending == 0.0) {
            progress.finish();
            if !done {
                eprintln!(
                    "[peers] gr {stream}: recache's pools hold {resident} of {want} items \
                     (fill errors: {}); measuring with those",
                    http::counter(&text, FILL_ERRORS)
                );
            }
            return Ok(json!({"precompute_s": t0.elapsed().as_secs_f64(),
                "items_resident_at_start": resident, "items_wanted": want,
                "precompute_fill_errors": http::counter(&text, FILL_ERRORS) + 0.0}));
        }
        if t0.elapsed() > Duration::from_secs(3600) {
            return Err(BenchError::Setup(format!(
                "gr {stream}: recache's pool precompute still running after an hour \
                 ({resident} of {want} items)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits (up to a minute) until no fill is pending.
pub async fn settle(client: &HttpClient, base: &str) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        match metrics(client, base).await {
            Ok(t) if http::counter(&t, PENDING) > 0.0 => {}
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The row's `pool` object: the precompute, and the stream's pool counters (tokens the pool
/// supplied, fills it computed, items resident at the end).
pub fn fields(precompute: Value, before: &str, after: &str) -> Value {
    // `+ 0.0`: an empty sum is -0.0.
    let d = |n: &str| http::counter(after, n) - http::counter(before, n) + 0.0;
    let mut v = json!({
        "loaded_tokens": d("recache_rank_pool_loaded_tokens_total"),
        "fill_tokens": d("recache_rank_pool_fill_tokens_total"),
        // The connectors' time writing pooled K/V into requests' blocks (both replicas):
        // engine time the pool costs that computed tokens do not show.
        "engine_load_s": d("recache_rank_pool_engine_load_seconds"),
        "items_resident_at_end": http::counter(after, RESIDENT) + 0.0,
        "requested_items": d("recache_rank_pool_requested_items_total"),
        "present_items": d("recache_rank_pool_present_items_total"),
    });
    if let (Some(o), Value::Object(p)) = (v.as_object_mut(), precompute) {
        o.extend(p);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recache_runs_bat_with_the_pool_as_bench_gr_does() {
        let flags = rank_flags(&gr_load::rank_args(430, 8192, 1000)).join(" ");
        for want in [
            "--rank-selector bat",
            "--rank-admission on",
            "--rank-item-pool 1000",
            "--rank-item-reuse pool",
            "--rank-window 1000",
        ] {
            assert!(flags.contains(want), "{flags}");
        }
    }

    #[test]
    fn pool_fields_are_deltas_plus_the_precompute() {
        let before = "recache_rank_pool_loaded_tokens_total 100\n";
        let after = "recache_rank_pool_loaded_tokens_total 250\n\
                     recache_rank_pool_items{state=\"resident\"} 7\n\
                     recache_rank_pool_items{state=\"pending\"} 1\n";
        let v = fields(json!({"precompute_s": 2.0}), before, after);
        assert_eq!(v["loaded_tokens"], 150.0);
        assert_eq!(v["items_resident_at_end"], 7.0);
        assert_eq!(v["precompute_s"], 2.0);
    }
}
