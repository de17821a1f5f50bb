//! What `bench route` prints and reads back: rows, the table, the mirrors' part of a row,
//! the engines' and recache's metrics.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::args::RouteArgs;
use crate::error::BenchError;
use crate::http::{self, counter};
use crate::plot::Panel;
use recache::harness::{LocalServer, MirrorState};

pub fn print_row(args: &RouteArgs, row: &Value) {
    if args.json {
        println!("{row}");
    } else {
        eprintln!("{row}");
    }
}

/// Waits until every replica's routing mirror is `exact`.
pub async fn wait_exact(local: &LocalServer, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if (local.mirrors().iter()).all(|m| m.state == MirrorState::Exact) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// The mirrors' part of a row: per replica its state at the end, canary outcomes, and the
/// cached tokens predicted against delivered on the checked calls.
pub fn mirrors(local: &LocalServer, ours: &str, none: bool, verified: bool) -> Value {
    if none {
        return json!("none (approximate mode: recache's record of what it sent where)");
    }
    let per: Vec<Value> = (local.mirrors().iter())
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
                "upstream": l, "state": r.state.name(), "why": r.why,
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
    client: &crate::http::HttpClient,
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
/// over the mean, side by side (bar charts, [`crate::plot`]).
pub fn plot(path: &std::path::Path, rows: &[Value]) -> Result<(), BenchError> {
    let names: Vec<String> = (rows.iter())
        .map(|r| r["strategy"].as_str().unwrap_or("?").to_string())
        .collect();
    let field =
        |k: &str| -> Vec<f64> { rows.iter().map(|r| r[k].as_f64().unwrap_or(0.0)).collect() };
    let (hit, rps, share) = (field("hit_rate"), field("rps"), field("max_share"));
    let bars = |title, values| Panel::Bars {
        title,
        names: &names,
        values,
    };
    let panels = [
        bars("engine prefix-cache hit rate", &hit),
        bars("throughput (requests/s)", &rps),
        bars("busiest replica / mean share", &share),
    ];
    crate::plot::draw(path, (1500, 440), &panels)
        .map_err(|msg| BenchError::Setup(format!("plot {}: {msg}", path.display())))
}
