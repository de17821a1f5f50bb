//! Summary rows of a repeated replay: per (concurrency, policy), the median and the spread
//! of each measure over the rounds.

use serde_json::json;

use crate::stats::pct;

/// Per (concurrency, policy) over the rounds: the median, min and max of each measure.
pub fn summarize(rows: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let mut keys: Vec<(u64, String)> = Vec::new();
    for r in rows {
        let k = (
            r["concurrency"].as_u64().unwrap_or(0),
            r["policy"].as_str().unwrap_or("").to_string(),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(c, policy)| {
            let runs: Vec<&serde_json::Value> = rows
                .iter()
                .filter(|r| r["concurrency"].as_u64() == Some(c) && r["policy"] == policy.as_str())
                .collect();
            let mut out = json!({"summary": true, "policy": policy, "concurrency": c,
                                 "rounds": runs.len()});
            for m in [
                "hit_rate",
                "rps",
                "p50_ms",
                "p99_ms",
                "ttft_p50_ms",
                "ttft_p99_ms",
                "recache_cpu_s",
                "shim_steer_s",
                "engine_cpu_s",
            ] {
                let mut v: Vec<f64> = runs.iter().filter_map(|r| r[m].as_f64()).collect();
                if v.is_empty() {
                    continue; // e.g. engine_cpu_s with no shim status: absent, not 0
                }
                v.sort_by(f64::total_cmp);
                out[m] = json!(pct(&v, 0.5));
                out[format!("{m}_min")] = json!(v.first().copied().unwrap_or(0.0));
                out[format!("{m}_max")] = json!(v.last().copied().unwrap_or(0.0));
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_rows_per_concurrency_and_policy() {
        let row = |c: u64, p: &str, ttft: f64| {
            json!({"concurrency": c, "policy": p, "hit_rate": 0.5, "rps": 1.0, "p50_ms": 1.0,
                   "p99_ms": 2.0, "ttft_p50_ms": ttft, "ttft_p99_ms": ttft * 2.0})
        };
        let rows = vec![
            row(1, "lru", 10.0),
            row(1, "laru", 8.0),
            row(1, "lru", 30.0),
            row(1, "laru", 6.0),
            row(1, "lru", 20.0),
            row(4, "lru", 50.0),
        ];
        let s = summarize(&rows);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0]["policy"], "lru");
        assert_eq!(s[0]["rounds"], 3);
        assert_eq!(s[0]["ttft_p50_ms"], 20.0);
        assert_eq!(s[0]["ttft_p50_ms_min"], 10.0);
        assert_eq!(s[0]["ttft_p99_ms_max"], 60.0);
        assert_eq!(
            (s[2]["concurrency"].as_u64(), s[2]["rounds"].as_u64()),
            (Some(4), Some(1))
        );
    }
}
