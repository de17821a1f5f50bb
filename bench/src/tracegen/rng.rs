//! A small deterministic RNG (SplitMix64) for the trace generators: the same seed gives the
//! same trace on every machine, with no RNG crate.

use recache_eviction::hash::mix64;

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(mix64(seed ^ 0x005e_ed0f_7ace))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Poisson with mean `lambda` (Knuth; small means only).
    pub fn poisson(&mut self, lambda: f64) -> u64 {
        let l = (-lambda).exp();
        let (mut k, mut p) = (0, 1.0);
        loop {
            p *= self.unit();
            if p <= l {
                return k;
            }
            k += 1;
        }
    }

    /// Log-normal with the given median and log-space sigma.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        let (u1, u2) = (1.0 - self.unit(), self.unit());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        median * (sigma * z).exp()
    }

    /// An index drawn with probability proportional to `weights`, given their running sums
    /// ([`cumulative`]).
    pub fn weighted(&mut self, cum: &[f64]) -> usize {
        let total = cum.last().copied().unwrap_or(0.0);
        let x = self.unit() * total;
        cum.partition_point(|&c| c <= x)
            .min(cum.len().saturating_sub(1))
    }
}

/// Running sums of `weights`, for [`Rng::weighted`].
pub fn cumulative(weights: &[f64]) -> Vec<f64> {
    weights
        .iter()
        .scan(0.0, |acc, w| {
            *acc += w.max(0.0);
            Some(*acc)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_draws_and_sane_moments() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        assert_eq!(a.next_u64(), b.next_u64());
        let n = 20_000;
        let mean = (0..n).map(|_| a.exponential(10.0)).sum::<f64>() / n as f64;
        assert!((mean - 10.0).abs() < 0.5, "{mean}");
        let pm = (0..n).map(|_| a.poisson(2.0) as f64).sum::<f64>() / n as f64;
        assert!((pm - 2.0).abs() < 0.1, "{pm}");
        let cum = cumulative(&[1.0, 0.0, 3.0]);
        let hits = (0..n).filter(|_| a.weighted(&cum) == 2).count();
        assert!((hits as f64 / n as f64 - 0.75).abs() < 0.02);
        assert!(
            (0..1000).all(|_| a.weighted(&cum) != 1),
            "zero weight never drawn"
        );
    }
}
