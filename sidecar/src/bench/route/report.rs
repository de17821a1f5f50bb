//! What `bench route` prints and reads back: rows, the table, the mirrors' part of a row,
//! the engines' and recache's metrics.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::RouteArgs;
use crate::bench::BenchError;
use crate::bench::gr::http::{self, counter};

pub fn print_row(args: &RouteArgs, row: &Value) {
    if args.json {
        println!("{row}");
    } else {
        eprintln!("{row}");
    }
}

/// Waits until every replica's routing mirror is `exact`.
pub async fn wait_exact(local: &crate::local::LocalServer, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let replicas = local.state.client.replicas();
        if replicas
            .iter()
            .all(|r| r.mirror.state() == crate::client::mirror::MirrorState::Exact)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// The mirrors' part of a row: per replica its state at the end, canary outcomes, and the
/// cached tokens predicted against delivered on the checked calls.
pub fn mirrors(local: &crate::local::LocalServer, ours: &str, none: bool, verified: bool) -> Value {
    if none {
        return json!("none (approximate mode: recache's record of what it sent where)");
    }
    let per: Vec<Value> = local
        .state
        .client
        .replicas()
        .iter()
        .map(|r| {
            let l = &r.label;
            let series = |name: &str| counter(ours, &format!("{name}{{upstream=\"{l}\"}}"));
            let outcome = |o: &str| {
                counter(
                    ours,
                    &format!("recache_route_canary_total{{outcome=\"{o}\",upstream=\"{l}\"}}"),
                )
            };
            json!({
                "upstream": l, "state": r.mirror.state().name(), "why": r.mirror.why(),
                "canary_agree": outcome("agree"), "canary_missed_events": outcome("missed_events"),
                "canary_silent_zero": outcome("silent_zero"), "canary_evicted": outcome("evicted"),
                "predicted_cached_tokens": series("recache_route_predicted_cached_tokens_total"),
                "delivered_cached_tokens": series("recache_route_delivered_cached_tokens_total"),
                "mirror_blocks": series("recache_route_mirror_blocks"),
            })
        })
        .collect();
    json!({"verified_before_run": verified, "replicas": per})
}

/// Every replica's `/metrics` text, in order.
pub async fn scrape(
    client: &crate::bench::HttpClient,
    ups: &[String],
) -> Result<Vec<String>, BenchError> {
    let mut out = Vec::new();
    for up in ups {
        out.push(http::get_text(client, &format!("{up}/metrics")).await?);
    }
    Ok(out)
}

/// The upper bound (µs) of the first decision-time bucket holding 99% of decisions.
pub fn decision_p99_us(metrics: &str) -> Option<f64> {
    let name = "recache_route_decision_seconds_bucket{le=\"";
    let buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (le, count) = rest.split_once("\"} ")?;
            Some((le.parse().ok()?, count.trim().parse().ok()?))
        })
        .collect();
    let total = buckets.last()?.1;
    buckets
        .iter()
        .find(|(_, c)| *c >= 0.99 * total)
        .map(|(le, _)| le * 1e6)
}

pub fn table(rows: &[Value]) {
    println!(
        "{:<14} {:>9} {:>8} {:>8} {:>8} {:>10} {:>12}",
        "strategy", "hit_rate", "rps", "p50_ms", "p99_ms", "max_share", "decision_us"
    );
    for r in rows {
        println!(
            "{:<14} {:>9.4} {:>8.2} {:>8.1} {:>8.1} {:>10.3} {:>12}",
            r["strategy"].as_str().unwrap_or(""),
            r["hit_rate"].as_f64().unwrap_or(0.0),
            r["rps"].as_f64().unwrap_or(0.0),
            r["p50_ms"].as_f64().unwrap_or(0.0),
            r["p99_ms"].as_f64().unwrap_or(0.0),
            r["max_share"].as_f64().unwrap_or(0.0),
            r["decision_p99_us"]
        );
    }
}

/// The `--out` PNG: per strategy the engines' hit rate, rps and the busiest replica's share
/// over the mean, side by side (bench gr's bar panels).
pub fn plot(path: &std::path::Path, rows: &[Value]) -> Result<(), BenchError> {
    use plotters::prelude::*;
    let fail = |msg: String| BenchError::Setup(format!("plot {}: {msg}", path.display()));
    crate::bench::gr::report::register_font().map_err(fail)?;
    let names: Vec<String> = (rows.iter())
        .map(|r| r["strategy"].as_str().unwrap_or("?").to_string())
        .collect();
    let field =
        |k: &str| -> Vec<f64> { rows.iter().map(|r| r[k].as_f64().unwrap_or(0.0)).collect() };
    let root = BitMapBackend::new(path, (1500, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let panels = root.split_evenly((1, 3));
    let bars = crate::bench::gr::report::bars;
    bars(
        &panels[0],
        "engine prefix-cache hit rate",
        &names,
        &field("hit_rate"),
    )
    .map_err(fail)?;
    bars(&panels[1], "throughput (requests/s)", &names, &field("rps")).map_err(fail)?;
    bars(
        &panels[2],
        "busiest replica / mean share",
        &names,
        &field("max_share"),
    )
    .map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}
