//! One row per layout, readout and run, or per baseline (the JSON contract: `layout`,
//! `recall_at_10`, `ndcg_at_10`, `mrr_at_10`, ...), each with its 95% bootstrap interval over
//! users (`ci95`), its paired difference from every other layout read by the same readout
//! (`vs`) and the per-user ranks it was computed from (`ranks`), so any number can be
//! recomputed from the JSON. The text table is [`super::table`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::bootstrap::{self, Delta, Interval, Resampling};
use super::metrics::{Quality, quality};
use crate::gr::report::ModeResult;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// A `bench gr` mode name, or a baseline's (`popularity`, `popularity-recent`,
    /// `transition`, `random`).
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
    /// Which of `--repeat` runs (0-based); baselines are computed once, in run 0.
    pub run: usize,
    /// 95% percentile-bootstrap interval of each measure over users.
    pub ci95: Interval,
    /// Resamples behind `ci95` and `vs`.
    pub resamples: usize,
    /// This row minus each other layout's row (by layout name), with a paired 95% interval:
    /// the rows of the same run read by `vs_readout` (a layout's own readout; for baselines
    /// the first readout's, run 0).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub vs: BTreeMap<String, Delta>,
    /// The readout of the rows in `vs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_readout: Option<String>,
    /// 1-based rank of each held-out user's item, in `bench quality`'s user order (`null`: the
    /// request failed).
    pub ranks: Vec<Option<usize>>,
}

impl Row {
    pub fn layout(
        name: &str,
        ranks: Vec<Option<usize>>,
        run: &ModeResult,
        repeat: usize,
        how: Resampling,
    ) -> Self {
        Self {
            user_prefix: run.user_prefix,
            hit_rate: run.hit_rate,
            pool_hit_tokens: run.pool_hit_tokens,
            computed_tokens: run.computed_tokens,
            pool_recompute: run.pool_recompute.clone(),
            readout: run.readout.clone(),
            errors: run.errors,
            run: repeat,
            ..Self::baseline(name, ranks, how)
        }
    }

    pub fn baseline(name: &str, ranks: Vec<Option<usize>>, how: Resampling) -> Self {
        Self {
            layout: name.to_string(),
            requests: ranks.len(),
            errors: 0,
            quality: quality(&ranks),
            user_prefix: 0,
            hit_rate: 0.0,
            pool_hit_tokens: 0,
            computed_tokens: 0,
            pool_recompute: "none".to_string(),
            readout: "label".to_string(),
            run: 0,
            ci95: bootstrap::interval(&ranks, how),
            resamples: how.resamples,
            vs: BTreeMap::new(),
            vs_readout: None,
            ranks,
        }
    }

    /// Adds `other` (the same users in the same order) to `vs`; not the row itself.
    pub fn compare_to(&mut self, other: &Row, how: Resampling) {
        if other.layout == self.layout {
            return;
        }
        if let Some(delta) = bootstrap::paired(&self.ranks, &other.ranks, how) {
            self.vs.insert(other.layout.clone(), delta);
            self.vs_readout = Some(other.readout.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOW: Resampling = Resampling {
        resamples: 200,
        seed: 1,
    };

    #[test]
    fn rows_carry_the_contract_fields_and_the_new_ones() {
        let up = Row::baseline("up", vec![Some(1), Some(20), Some(3), None], HOW);
        let mut ip = Row::baseline("ip", vec![Some(1), Some(2), Some(30), Some(4)], HOW);
        ip.compare_to(&up, HOW);
        let v = serde_json::to_value(&ip).expect("json");
        for key in [
            "layout",
            "requests",
            "errors",
            "recall_at_10",
            "ndcg_at_10",
            "mrr_at_10",
            "recall_at_5",
            "ndcg_at_5",
            "user_prefix",
            "hit_rate",
            "pool_hit_tokens",
            "computed_tokens",
            "pool_recompute",
            "readout",
            "run",
            "ci95",
            "resamples",
            "vs",
            "vs_readout",
            "ranks",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        assert_eq!(v["vs_readout"], "label");
        assert_eq!(v["vs"]["up"]["delta"]["recall_at_10"], 0.25);
        assert_eq!(v["ranks"][3], 4);
        assert!(v["ci95"]["lo"]["recall_at_10"].as_f64() <= Some(0.75));
        assert!(serde_json::to_value(&up).expect("json").get("vs").is_none());
    }
}
