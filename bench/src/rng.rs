//! A small seeded PRNG (splitmix64) so a workload is the same on every machine and build; the
//! bench needs reproducible streams, not cryptographic quality.

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ recache_hash::GOLDEN)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(recache_hash::GOLDEN);
        recache_hash::finalize(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with the given rate (0 or less: always 0, i.e. back-to-back arrivals).
    pub fn exponential(&mut self, rate: f64) -> f64 {
        if rate <= 0.0 {
            return 0.0;
        }
        -(1.0 - self.unit()).ln() / rate
    }

    /// Uniform in `0..n` (`n` > 0); the modulo bias is below 2^-40 for any `n` the bench uses.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Standard normal (Box–Muller; one of the pair is dropped to keep the state simple).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit(); // (0, 1]: ln stays finite
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// `items` in a uniformly random order (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }

    pub fn cumulative(weights: &[f64]) -> Vec<f64> {
        let mut acc = 0.0;
        weights
            .iter()
            .map(|w| {
                acc += w.max(0.0);
                acc
            })
            .collect()
    }

    /// An index drawn with probability proportional to its weight (`cum` from [`cumulative`]).
    pub fn weighted(&mut self, cum: &[f64]) -> usize {
        let total = cum.last().copied().unwrap_or(0.0);
        let x = self.unit() * total;
        cum.partition_point(|c| *c <= x)
            .min(cum.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_weighted() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.next_u64(), b.next_u64());
        let cum = Rng::cumulative(&[0.0, 3.0, 1.0]);
        let mut hits = [0; 3];
        for _ in 0..4000 {
            hits[a.weighted(&cum)] += 1;
        }
        assert_eq!(hits[0], 0);
        assert!(hits[1] > 2 * hits[2], "{hits:?}");
    }
}
