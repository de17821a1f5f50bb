//! The online cost model: how long a call takes on one replica, learned from the calls that
//! replica has served (no hand-set constants).
//!
//! Service time is modelled as linear in what the engine must do and the load it meets:
//! `ms = w0 + w1·(uncached prompt tokens / 1000) + w2·(output tokens / 100) + w3·(calls in
//! flight when it started)`. The weights are fitted by recursive least squares with a
//! forgetting factor, so the model follows an engine whose speed drifts (another tenant, a
//! cache that warmed up) and costs O(1) per observation, off any lock the request path takes
//! for long.

/// What one call asks of the engine.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    /// Prompt tokens the replica is expected to compute (not served from its prefix cache).
    pub uncached_tokens: u32,
    /// Tokens it is asked to generate (`max_tokens`).
    pub output_tokens: u32,
}

/// Features per observation.
const N: usize = 4;
/// Observations before predictions are trusted (before that, [`CostModel::predict_ms`] is None
/// and the gate admits without refusing).
pub const MIN_OBSERVATIONS: u64 = 12;
/// Old observations fade with weight 0.995^age: about the last 200 calls count.
const FORGET: f64 = 0.995;
/// Initial covariance scale: weights start uncertain on a millisecond scale.
const DELTA: f64 = 1e4;
/// A covariance grown past this (a feature that has stopped varying, e.g. constant load) is
/// reset so the forgetting factor cannot blow it up.
const P_LIMIT: f64 = 1e9;
/// No call is predicted faster than this.
const FLOOR_MS: f64 = 0.5;

/// Recursive least squares over [`Demand`] and load.
#[derive(Debug, Clone)]
pub struct CostModel {
    w: [f64; N],
    p: [[f64; N]; N],
    seen: u64,
    /// Mean of observed times, the prediction until the fit is trusted.
    mean_ms: f64,
    /// Smoothed absolute prediction error (ms), as a metric of how far to trust the model.
    abs_error_ms: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        let mut p = [[0.0; N]; N];
        for (i, row) in p.iter_mut().enumerate() {
            row[i] = DELTA;
        }
        Self {
            w: [0.0; N],
            p,
            seen: 0,
            mean_ms: 0.0,
            abs_error_ms: 0.0,
        }
    }
}

fn features(d: Demand, load: f64) -> [f64; N] {
    [
        1.0,
        f64::from(d.uncached_tokens) / 1000.0,
        f64::from(d.output_tokens) / 100.0,
        load,
    ]
}

impl CostModel {
    /// Predicted service time in ms of `d` started with `load` calls in flight; None until
    /// [`MIN_OBSERVATIONS`] have been seen.
    pub fn predict_ms(&self, d: Demand, load: f64) -> Option<f64> {
        (self.seen >= MIN_OBSERVATIONS).then(|| self.raw(d, load))
    }

    fn raw(&self, d: Demand, load: f64) -> f64 {
        let x = features(d, load);
        let y: f64 = self.w.iter().zip(&x).map(|(w, x)| w * x).sum();
        // A young fit can extrapolate below zero; the observed mean is a sane floor then.
        if y.is_finite() {
            y.max(FLOOR_MS)
        } else {
            self.mean_ms.max(FLOOR_MS)
        }
    }

    /// Milliseconds each extra call in flight adds to a call's service time (≥ 0).
    pub fn per_load_ms(&self) -> f64 {
        self.w[3].max(0.0)
    }

    /// The fitted weights (`intercept`, `per_1k_uncached`, `per_100_output`, `per_in_flight`).
    pub fn weights(&self) -> [f64; N] {
        self.w
    }

    pub fn observations(&self) -> u64 {
        self.seen
    }

    pub fn abs_error_ms(&self) -> f64 {
        self.abs_error_ms
    }

    /// Learns from one finished call: `d` started with `load` in flight and took `ms`.
    pub fn observe(&mut self, d: Demand, load: f64, ms: f64) {
        if !ms.is_finite() || ms < 0.0 {
            return;
        }
        let x = features(d, load);
        let predicted = self.raw(d, load);
        self.seen += 1;
        self.mean_ms += (ms - self.mean_ms) / (self.seen.min(200) as f64);
        if self.seen > MIN_OBSERVATIONS {
            let e = (ms - predicted).abs();
            self.abs_error_ms += 0.05 * (e - self.abs_error_ms);
        }
        // k = P x / (λ + xᵀ P x)
        let px: [f64; N] = std::array::from_fn(|i| (0..N).map(|j| self.p[i][j] * x[j]).sum());
        let denom = FORGET + x.iter().zip(&px).map(|(a, b)| a * b).sum::<f64>();
        if !denom.is_finite() || denom <= 0.0 {
            *self = Self::default();
            return;
        }
        let k: [f64; N] = std::array::from_fn(|i| px[i] / denom);
        let err = ms - x.iter().zip(&self.w).map(|(a, b)| a * b).sum::<f64>();
        for (w, k) in self.w.iter_mut().zip(&k) {
            *w += k * err;
        }
        // P = (P − k (P x)ᵀ) / λ   (P is symmetric, so xᵀP = (Px)ᵀ)
        let mut trace = 0.0;
        for (i, (row, ki)) in self.p.iter_mut().zip(&k).enumerate() {
            for (p, pxj) in row.iter_mut().zip(&px) {
                *p = (*p - ki * pxj) / FORGET;
            }
            trace += row[i];
        }
        if !trace.is_finite() || trace > P_LIMIT {
            let keep = (self.w, self.seen, self.mean_ms, self.abs_error_ms);
            *self = Self::default();
            (self.w, self.seen, self.mean_ms, self.abs_error_ms) = keep;
        }
    }
}

#[cfg(test)]
#[path = "cost_tests.rs"]
mod tests;
