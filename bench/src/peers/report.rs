//! What `bench peers` prints: a row per system × workload × round as it is measured, then one
//! summary row per system × workload (medians and ranges over rounds, `"summary": true`) and
//! one goals row per workload (recache against the best peer of the same run on each of the
//! workload's goals), a table on stderr, and one PNG per workload.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::error::BenchError;
use crate::plot::Panel;
use crate::stats::Spread;

/// The numbers a summary row carries (where the workload has them).
const FIELDS: &[&str] = &[
    "rps",
    "hit_rate",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "max_share",
    "errors",
    "computed_tokens",
    "engine_cpu_ms_per_request",
    "kv_bytes",
    "added_p50_us",
    "added_p99_us",
    "rps_vs_direct",
    "valid_items_per_s",
    "invalid_share",
    "latency_p50_ms",
    "latency_p99_ms",
    "engine_requests_per_retrieval",
    "recall_at_10",
    "ndcg_at_10",
];

/// One summary row per system of `workload` (per system × `beam_width` where rows carry
/// one), in the order they first appear.
pub fn summaries(workload: &str, rows: &[Value]) -> Vec<Value> {
    let mine: Vec<&Value> = rows.iter().filter(|r| r["workload"] == workload).collect();
    let mut systems: Vec<(&str, Option<u64>)> = Vec::new();
    for r in &mine {
        if let Some(s) = r["system"].as_str()
            && !systems.contains(&(s, r["beam_width"].as_u64()))
        {
            systems.push((s, r["beam_width"].as_u64()));
        }
    }
    systems
        .into_iter()
        .map(|(s, width)| {
            let runs: Vec<&&Value> = (mine.iter())
                .filter(|r| r["system"] == s && r["beam_width"].as_u64() == width)
                .collect();
            let mut out = Map::new();
            out.insert("system".into(), json!(s));
            out.insert("workload".into(), json!(workload));
            if let Some(w) = width {
                out.insert("beam_width".into(), json!(w));
            }
            out.insert("summary".into(), json!(true));
            out.insert("rounds".into(), json!(runs.len()));
            if let Some(m) = runs.iter().find_map(|r| r.get("model")) {
                out.insert("model".into(), m.clone());
            }
            for f in FIELDS {
                let xs: Vec<f64> = runs.iter().filter_map(|r| r[*f].as_f64()).collect();
                if xs.is_empty() {
                    out.insert((*f).into(), Value::Null);
                    continue;
                }
                let sp = Spread::of(xs);
                out.insert((*f).into(), json!(sp.median));
                out.insert(format!("{f}_range"), json!([sp.min, sp.max]));
            }
            Value::Object(out)
        })
        .collect()
}

/// A goal: the field, whether lower is better, and the factor recache must reach against the
/// best peer (recache ≤ factor × best when lower is better, else ≥ factor × best).
struct Goal {
    field: &'static str,
    lower_better: bool,
    factor: f64,
}

fn goals(workload: &str) -> &'static [Goal] {
    match workload {
        "overhead" => &[
            Goal {
                field: "added_p50_us",
                lower_better: true,
                factor: 0.3,
            },
            Goal {
                field: "rps",
                lower_better: false,
                factor: 2.0,
            },
        ],
        "trace" => &[
            Goal {
                field: "hit_rate",
                lower_better: false,
                factor: 1.0,
            },
            Goal {
                field: "ttft_p99_ms",
                lower_better: true,
                factor: 1.0,
            },
        ],
        // At width 32 (retrieve::verdict): >= 3x the best peer's valid items/s, 0 invalid.
        "retrieve" => &[
            Goal {
                field: "valid_items_per_s",
                lower_better: false,
                factor: 3.0,
            },
            Goal {
                field: "invalid_share",
                lower_better: true,
                factor: 0.0,
            },
        ],
        // GR at equal memory: twice the best peer's throughput, ranking no worse.
        "gr" => &[
            Goal {
                field: "rps",
                lower_better: false,
                factor: 2.0,
            },
            Goal {
                field: "recall_at_10",
                lower_better: false,
                factor: 1.0,
            },
        ],
        // Returning users (profiles every system caches): never less than the best peer.
        "gr-returning" => &[
            Goal {
                field: "rps",
                lower_better: false,
                factor: 1.0,
            },
            Goal {
                field: "recall_at_10",
                lower_better: false,
                factor: 1.0,
            },
        ],
        // 0 errors where a peer errors: recache <= 0 x the best peer.
        "faults" => &[Goal {
            field: "errors",
            lower_better: true,
            factor: 0.0,
        }],
        _ => &[],
    }
}

/// recache against the best peer on each goal of `workload`, from the summary rows.
pub fn verdict(workload: &str, sums: &[Value]) -> Option<Value> {
    let recache = sums.iter().find(|r| r["system"] == "recache")?;
    // recache-loop is recache's other retrieval design, not a peer.
    let peers: Vec<&Value> = (sums.iter())
        .filter(|r| r["system"] != "recache" && r["system"] != "recache-loop")
        .collect();
    if peers.is_empty() {
        return None;
    }
    let checks: Vec<Value> = goals(workload)
        .iter()
        .filter_map(|g| {
            let ours = recache[g.field].as_f64()?;
            let best = peers
                .iter()
                .filter_map(|p| Some((p["system"].as_str()?, p[g.field].as_f64()?)))
                .reduce(|a, b| match (g.lower_better, a.1 <= b.1) {
                    (true, true) | (false, false) => a,
                    _ => b,
                })?;
            let met = if g.lower_better {
                ours <= g.factor * best.1
            } else {
                ours >= g.factor * best.1
            };
            Some(
                json!({"field": g.field, "recache": ours, "best_peer": best.0,
                "best_peer_value": best.1, "goal": goal_text(g), "met": met}),
            )
        })
        .collect();
    let all = checks.iter().all(|c| c["met"] == json!(true));
    Some(
        json!({"workload": workload, "system": "recache", "summary": true, "goals": checks,
        "all_met": all, "model": recache.get("model")}),
    )
}

fn goal_text(g: &Goal) -> String {
    if g.factor == 0.0 {
        return format!("{} = 0", g.field);
    }
    let op = if g.lower_better { "<=" } else { ">=" };
    format!("{} {op} {}x best peer", g.field, g.factor)
}

/// The summary rows as a table, on stderr.
pub fn table(sums: &[Value]) {
    eprintln!(
        "{:<10} {:<14} {:>9} {:>8} {:>10} {:>10} {:>9} {:>7} {:>12}",
        "workload",
        "system",
        "rps",
        "hit",
        "ttft p50",
        "ttft p99",
        "max_shr",
        "errors",
        "added p50 us"
    );
    let f = cell;
    for r in sums.iter().filter(|r| r.get("goals").is_none()) {
        eprintln!(
            "{:<10} {:<14} {:>9} {:>8} {:>10} {:>10} {:>9} {:>7} {:>12}",
            r["workload"].as_str().unwrap_or("?"),
            r["system"].as_str().unwrap_or("?"),
            f(r, "rps", 1),
            f(r, "hit_rate", 3),
            f(r, "ttft_p50_ms", 1),
            f(r, "ttft_p99_ms", 1),
            f(r, "max_share", 2),
            f(r, "errors", 0),
            f(r, "added_p50_us", 0),
        );
    }
}

/// One PNG of `workload`'s summary rows: its main numbers per system.
pub fn plot(out: &Path, workload: &str, sums: &[Value]) -> Result<std::path::PathBuf, BenchError> {
    let rows: Vec<&Value> = sums.iter().filter(|r| r.get("goals").is_none()).collect();
    let names: Vec<String> = (rows.iter())
        .map(|r| match r["beam_width"].as_u64() {
            // Six bars share a panel: "-router" goes so the labels do not overlap.
            Some(w) => {
                let s = r["system"].as_str().unwrap_or("?");
                format!("{} w{w}", s.trim_end_matches("-router"))
            }
            None => r["system"].as_str().unwrap_or("?").to_string(),
        })
        .collect();
    let fields: &[(&str, &str)] = match workload {
        "overhead" => &[
            ("added_p50_us", "added p50 latency at c=1 (µs)"),
            ("rps_vs_direct", "throughput at c=N, × direct"),
        ],
        "trace" => &[
            ("hit_rate", "engine prefix-cache hit rate"),
            ("ttft_p99_ms", "TTFT p99 from arrival (ms)"),
            ("max_share", "busiest replica / mean"),
        ],
        "retrieve" => &[
            ("valid_items_per_s", "valid items per second"),
            ("invalid_share", "invalid share of returned"),
            ("latency_p99_ms", "latency p99 per retrieval (ms)"),
        ],
        "gr" | "gr-returning" => &[
            ("rps", "ranking requests/s (equal memory)"),
            ("hit_rate", "engine hit rate (pool included)"),
            ("recall_at_10", "Recall@10 of the held-out item"),
        ],
        _ => &[("errors", "requests failed")],
    };
    let values: Vec<Vec<f64>> = fields
        .iter()
        .map(|(k, _)| rows.iter().map(|r| r[*k].as_f64().unwrap_or(0.0)).collect())
        .collect();
    let panels: Vec<Panel<'_>> = fields
        .iter()
        .zip(&values)
        .map(|((_, title), v)| Panel::Bars {
            title,
            names: &names,
            values: v,
        })
        .collect();
    let stem = out.with_extension("");
    let path = std::path::PathBuf::from(format!("{}-{workload}.png", stem.display()));
    crate::plot::draw(&path, (500 * panels.len() as u32, 440), &panels)
        .map_err(|msg| BenchError::Setup(format!("plot {}: {msg}", path.display())))?;
    Ok(path)
}

/// A table cell: `v[k]` with `p` decimals, or "-" when the row has no such number.
pub fn cell(v: &Value, k: &str, p: usize) -> String {
    match v[k].as_f64() {
        Some(x) => format!("{x:.p$}"),
        None => "-".into(),
    }
}
