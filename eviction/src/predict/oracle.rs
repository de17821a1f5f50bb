//! The oracle: the true next access from the trace's future, with noise as in
//! LCR §5.3: with probability `p` the prediction is replaced by the negative
//! of the true next-access time (p = 1: fully adversarial, the block about to
//! be reused looks furthest). The coin is a hash of (seed, block, last
//! access), so results do not depend on call order.

use std::sync::Arc;

use super::{Predictor, PredictorStats};
use crate::BlockId;
use crate::future::FutureIndex;
use crate::hash::unit;
use crate::policy::AccessEvent;

/// Stands in for "never again": far beyond any trace, still finite.
pub const NEVER: f64 = 1e15;

pub struct OracleNoise {
    future: Arc<FutureIndex>,
    p: f64,
    seed: u64,
    stats: PredictorStats,
}

impl OracleNoise {
    pub fn new(future: Arc<FutureIndex>, p: f64, seed: u64) -> Self {
        Self {
            future,
            p: p.clamp(0.0, 1.0),
            seed,
            stats: PredictorStats::default(),
        }
    }
}

impl Predictor for OracleNoise {
    fn kind(&self) -> &'static str {
        "oracle"
    }

    fn observe(&mut self, _ev: &AccessEvent) {
        self.stats.observed += 1;
    }

    fn model_version(&self) -> Option<u64> {
        Some(1)
    }

    fn predict(&mut self, blocks: &[(BlockId, u64)], out: &mut Vec<f64>) -> bool {
        out.clear();
        for &(b, last) in blocks {
            let t = self.future.next_after(b, last).map_or(NEVER, |t| t as f64);
            let flip = self.p > 0.0 && unit(self.seed, b, last) < self.p;
            out.push(if flip { -t } else { t });
        }
        self.stats.predict_calls += 1;
        self.stats.predict_rows += blocks.len() as u64;
        true
    }

    fn stats(&self) -> PredictorStats {
        self.stats.clone()
    }
}
