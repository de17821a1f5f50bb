//! Paired comparison of two runs of the same request stream: how far a policy's TTFT
//! quantiles sit from a baseline's, with a bootstrap interval over the requests.
//!
//! Why: one 4,000-request run's P99 is its 40th-slowest request, so two runs of the same
//! stream differ by several percent with no change at all. Both runs sent the same requests
//! in the same order, so resampling request indices (the same indices for both runs) gives
//! the spread that the request mix alone puts on the difference; what the interval does not
//! hold is the machine's drift between the two runs, which only repeated rounds show.

use serde_json::json;

use crate::stats::pct;

/// Bootstrap resamples per comparison: enough for a stable 95% interval, ~1 s for 4,000
/// requests.
pub const RESAMPLES: usize = 1000;

/// The `q` quantile of `v` (nearest rank, as [`pct`]), reordering `v`.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    let (_, x, _) = v.select_nth_unstable_by(i, f64::total_cmp);
    *x
}

fn pct_diff(base: f64, other: f64) -> f64 {
    if base > 0.0 {
        (other - base) / base * 100.0
    } else {
        0.0
    }
}

/// `other` against `base`, request by request (both in trace order, the same length): per
/// quantile (P50, P99) the difference in percent of the baseline, its bootstrap 95% interval,
/// and the share of resamples in which `other` is not slower. Requests missing from either
/// run (NaN) are left out. None when the runs are not of the same stream.
pub fn compare(base: &[f64], other: &[f64], seed: u64) -> Option<serde_json::Value> {
    if base.len() != other.len() {
        return None;
    }
    let pairs: Vec<(f64, f64)> = base
        .iter()
        .zip(other)
        .filter(|(b, o)| b.is_finite() && o.is_finite())
        .map(|(&b, &o)| (b, o))
        .collect();
    let n = pairs.len();
    if n == 0 {
        return None;
    }
    let mut out = json!({"requests_paired": n, "resamples": RESAMPLES});
    let (mut bs, mut os) = (vec![0.0; n], vec![0.0; n]);
    for (name, q) in [("ttft_p50", 0.5), ("ttft_p99", 0.99)] {
        let mut b: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let mut o: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let diff = pct_diff(quantile(&mut b, q), quantile(&mut o, q));
        let mut diffs = Vec::with_capacity(RESAMPLES);
        let mut draw = seed;
        for _ in 0..RESAMPLES {
            for k in 0..n {
                draw = draw.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let (pb, po) = pairs[(recache_hash::mix64(draw) % n as u64) as usize];
                (bs[k], os[k]) = (pb, po);
            }
            diffs.push(pct_diff(quantile(&mut bs, q), quantile(&mut os, q)));
        }
        diffs.sort_by(f64::total_cmp);
        let not_slower = diffs.iter().filter(|d| **d <= 0.0).count() as f64 / RESAMPLES as f64;
        out[format!("{name}_diff_pct")] = json!(diff);
        out[format!("{name}_diff_ci95_pct")] = json!([pct(&diffs, 0.025), pct(&diffs, 0.975)]);
        out[format!("{name}_not_slower_share")] = json!(not_slower);
    }
    Some(out)
}

/// One paired row per (round, concurrency) and policy other than the baseline: `native` when
/// it ran, else the first policy listed. `runs` holds each run's row and its TTFTs in trace
/// order.
pub fn rows(runs: &[(serde_json::Value, Vec<f64>)]) -> Vec<serde_json::Value> {
    let key = |r: &serde_json::Value| (r["round"].as_u64(), r["concurrency"].as_u64());
    let mut out = Vec::new();
    for (row, ttft) in runs {
        let same = |r: &&(serde_json::Value, Vec<f64>)| key(&r.0) == key(row);
        let group: Vec<&(serde_json::Value, Vec<f64>)> = runs.iter().filter(same).collect();
        let base = group
            .iter()
            .find(|r| r.0["policy"] == "native")
            .or_else(|| group.first());
        let Some((base_row, base_ttft)) = base.map(|r| (&r.0, &r.1)) else {
            continue;
        };
        if std::ptr::eq(base_row, row) {
            continue;
        }
        let seed = recache_hash::mix64((key(row).0.unwrap_or(0) << 32) | key(row).1.unwrap_or(0));
        if let Some(mut c) = compare(base_ttft, ttft, seed) {
            c["paired"] = json!(true);
            c["policy"] = row["policy"].clone();
            c["baseline"] = base_row["policy"].clone();
            c["concurrency"] = row["concurrency"].clone();
            c["round"] = row["round"].clone();
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(n: usize, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|i| scale * (1.0 + (recache_hash::mix64(i as u64) % 1000) as f64))
            .collect()
    }

    #[test]
    fn identical_runs_differ_by_nothing() {
        let a = stream(2000, 1.0);
        let c = compare(&a, &a, 7).expect("same length");
        assert_eq!(c["ttft_p99_diff_pct"], 0.0);
        assert_eq!(c["ttft_p99_diff_ci95_pct"], json!([0.0, 0.0]));
        assert_eq!(c["ttft_p99_not_slower_share"], 1.0);
    }

    #[test]
    fn a_uniformly_faster_run_is_faster_in_every_resample() {
        let (a, b) = (stream(2000, 1.0), stream(2000, 0.9));
        let c = compare(&a, &b, 7).expect("same length");
        let d = c["ttft_p99_diff_pct"].as_f64().unwrap_or(0.0);
        assert!((d + 10.0).abs() < 1e-9, "{d}");
        let ci = c["ttft_p99_diff_ci95_pct"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            (ci[0].as_f64().unwrap_or(0.0) + 10.0).abs() < 1e-9,
            "{ci:?}"
        );
        assert_eq!(c["ttft_p50_not_slower_share"], 1.0);
    }

    #[test]
    fn a_slow_tail_shows_in_p99_not_p50() {
        let a = stream(4000, 1.0);
        let mut b = a.clone();
        // The slowest 2% of requests take twice as long; P50 does not move.
        let mut order: Vec<usize> = (0..b.len()).collect();
        order.sort_by(|&i, &j| a[j].total_cmp(&a[i]));
        for &i in &order[..80] {
            b[i] *= 2.0;
        }
        let c = compare(&a, &b, 1).expect("same length");
        assert_eq!(c["ttft_p50_diff_pct"], 0.0);
        assert!(c["ttft_p99_diff_pct"].as_f64().unwrap_or(0.0) > 50.0);
        assert!(c["ttft_p99_not_slower_share"].as_f64().unwrap_or(1.0) < 0.05);
    }

    #[test]
    fn missing_requests_are_left_out_and_other_streams_refused() {
        let a = stream(100, 1.0);
        let mut b = a.clone();
        b[3] = f64::NAN;
        let c = compare(&a, &b, 1).expect("same length");
        assert_eq!(c["requests_paired"], 99);
        assert!(compare(&a, &a[..50], 1).is_none());
    }

    #[test]
    fn rows_pair_each_policy_with_native_in_its_round_and_concurrency() {
        let run = |round: u64, c: u64, p: &str, s: f64| {
            (
                json!({"round": round, "concurrency": c, "policy": p}),
                stream(500, s),
            )
        };
        let runs = vec![
            run(0, 1, "native", 1.0),
            run(0, 1, "laru", 0.9),
            run(0, 4, "laru", 1.0),
            run(0, 4, "native", 1.1),
            run(1, 1, "lru", 1.0),
            run(1, 1, "laru", 1.0),
        ];
        let r = rows(&runs);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0]["policy"].as_str(), r[0]["baseline"].as_str()),
            (Some("laru"), Some("native"))
        );
        assert!(r[0]["ttft_p99_diff_pct"].as_f64().unwrap_or(0.0) < -9.0);
        assert_eq!(
            (r[1]["concurrency"].as_u64(), r[1]["policy"].as_str()),
            (Some(4), Some("laru"))
        );
        // No native in round 1: the first policy listed is the baseline.
        assert_eq!(
            (r[2]["policy"].as_str(), r[2]["baseline"].as_str()),
            (Some("laru"), Some("lru"))
        );
    }
}
