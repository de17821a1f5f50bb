//! One row per layout or baseline (the JSON contract: `layout`, `recall_at_10`, `ndcg_at_10`,
//! `mrr_at_10`, ...) and the text table, with each layout's difference from UP.

use serde::Serialize;

use super::metrics::Quality;
use crate::gr::report::ModeResult;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// A `bench gr` mode name, or `popularity` / `random`.
    pub layout: String,
    /// Requests ranked (answered or not).
    pub requests: usize,
    /// Requests recache did not answer: each counts as a miss.
    pub errors: usize,
    #[serde(flatten)]
    pub quality: Quality,
    /// Requests laid out user-first (the rest item-first); 0 for baselines.
    pub user_prefix: usize,
    /// Prompt tokens the engine reused (its prefix cache and the item pool) over all.
    pub hit_rate: f64,
    /// Of those, tokens the item pool supplied.
    pub pool_hit_tokens: u64,
    /// Prompt tokens the engine computed for the layout's requests (recomputed link tokens
    /// included; pool fills are counted by `bench gr`, not here); 0 for baselines.
    pub computed_tokens: u64,
    /// The pooled layouts' recompute setting (`--rank-pool-recompute`); `none` otherwise.
    pub pool_recompute: String,
    /// Which token scored a candidate (`--rank-readout`); `label` for the baselines.
    pub readout: String,
}

impl Row {
    pub fn layout(name: &str, quality: Quality, run: &ModeResult) -> Self {
        Self {
            layout: name.to_string(),
            requests: run.requests + run.errors,
            errors: run.errors,
            quality,
            user_prefix: run.user_prefix,
            hit_rate: run.hit_rate,
            pool_hit_tokens: run.pool_hit_tokens,
            computed_tokens: run.computed_tokens,
            pool_recompute: run.pool_recompute.clone(),
            readout: run.readout.clone(),
        }
    }

    pub fn baseline(name: &str, quality: Quality, requests: usize) -> Self {
        Self {
            layout: name.to_string(),
            requests,
            errors: 0,
            quality,
            user_prefix: 0,
            hit_rate: 0.0,
            pool_hit_tokens: 0,
            computed_tokens: 0,
            pool_recompute: "none".to_string(),
            readout: "label".to_string(),
        }
    }
}

/// A Markdown table; Δ columns are absolute differences from the `up` row when there is one.
pub fn table(rows: &[Row]) -> String {
    let up = rows.iter().find(|r| r.layout == "up").map(|r| r.quality);
    let mut out = String::from(
        "| layout | requests | Recall@5 | Recall@10 | MRR@10 | NDCG@5 | NDCG@10 | ΔRecall@10 vs UP \
         | ΔNDCG@10 vs UP | user-first | hit rate | errors |\n| --- | ---: | ---: | ---: | ---: \
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        let q = r.quality;
        let delta = |f: fn(&Quality) -> f64| {
            up.map_or("".to_string(), |u| format!("{:+.4}", f(&q) - f(&u)))
        };
        out += &format!(
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {} | {} | {} | {:.3} | {} |\n",
            r.layout,
            r.requests,
            q.recall_at_5,
            q.recall_at_10,
            q.mrr_at_10,
            q.ndcg_at_5,
            q.ndcg_at_10,
            delta(|q| q.recall_at_10),
            delta(|q| q.ndcg_at_10),
            r.user_prefix,
            r.hit_rate,
            r.errors
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_carry_the_contract_fields_and_deltas() {
        let q = |r: f64| Quality {
            recall_at_10: r,
            ndcg_at_10: r / 2.0,
            ..Default::default()
        };
        let rows = vec![
            Row::baseline("up", q(0.5), 10),
            Row::baseline("ip", q(0.45), 10),
        ];
        let v = serde_json::to_value(&rows[1]).expect("json");
        for key in [
            "layout",
            "recall_at_10",
            "ndcg_at_10",
            "mrr_at_10",
            "recall_at_5",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        let t = table(&rows);
        assert!(t.contains("| ip | 10 |"), "{t}");
        assert!(t.contains("-0.0500 | -0.0250"), "{t}");
    }
}
