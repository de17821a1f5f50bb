//! Open-loop arrival times: Poisson (exponential gaps) or gamma gaps with a chosen coefficient
//! of variation (shape k = 1/cv², scale 1/(rate·k): mean gap 1/rate, bursty for cv > 1).
//! Seeded with the bench's own PRNG, so both modes of a pair see the same sequence.
//!
//! With an exact count ([`schedule`]) a window gets exactly `round(rate × length)` arrivals:
//! `n + 1` gaps are drawn from the same process and scaled so they fill the window. Bursts keep
//! their shape (only the gaps' relative sizes matter), but the window's load is its nominal
//! load, where a free-running gamma CV 3 stream lands anywhere from a fifth to three times
//! it over 30 s. (For Poisson this is exactly the process conditioned on its count: uniform
//! order statistics.)

use super::args::Arrivals;
use crate::rng::Rng;

/// Arrival times in seconds in `[0, duration_s)` at mean `rate` requests/s.
pub fn times(kind: Arrivals, rate: f64, cv: f64, duration_s: f64, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    if rate.is_nan() || rate <= 0.0 || duration_s.is_nan() || duration_s <= 0.0 {
        return out;
    }
    let shape = 1.0 / (cv * cv);
    let mut t = 0.0;
    loop {
        t += gap(&mut rng, kind, rate, shape);
        if t >= duration_s {
            return out;
        }
        out.push(t);
    }
}

/// One gap between arrivals at mean `rate`: exponential, or gamma of shape `shape`.
fn gap(rng: &mut Rng, kind: Arrivals, rate: f64, shape: f64) -> f64 {
    match kind {
        Arrivals::Poisson => rng.exponential(rate),
        Arrivals::Gamma => gamma(rng, shape) / (rate * shape),
    }
}

/// Exactly `round(rate × span_s)` arrival times in `[0, span_s)` (see the module doc).
pub fn exact_times(kind: Arrivals, rate: f64, cv: f64, span_s: f64, seed: u64) -> Vec<f64> {
    if rate.is_nan() || rate <= 0.0 || span_s.is_nan() || span_s <= 0.0 {
        return Vec::new();
    }
    let n = (rate * span_s).round() as usize;
    let mut rng = Rng::new(seed);
    let shape = 1.0 / (cv * cv);
    // Gamma(k) can underflow to 0 for a small shape; a tiny floor keeps the sum above 0. The
    // gaps' scale does not matter: they are normalised by their sum below.
    let gaps: Vec<f64> = (0..=n)
        .map(|_| gap(&mut rng, kind, 1.0, shape).max(f64::MIN_POSITIVE))
        .collect();
    let total: f64 = gaps.iter().sum();
    let mut at = 0.0;
    let mut out = Vec::with_capacity(n);
    for g in &gaps[..n] {
        at += g;
        out.push((span_s * at / total).min(span_s * (1.0 - f64::EPSILON)));
    }
    out
}

/// A run's arrival times: `warmup_s` of warm-up, then the measured `duration_s`. Free-running,
/// one stream over both; with `exact`, each part gets exactly its nominal count.
pub fn schedule(
    kind: Arrivals,
    rate: f64,
    cv: f64,
    (warmup_s, duration_s): (f64, f64),
    exact: bool,
    seed: u64,
) -> Vec<f64> {
    if !exact {
        return times(kind, rate, cv, warmup_s + duration_s, seed);
    }
    let mut out = exact_times(
        kind,
        rate,
        cv,
        warmup_s,
        recache_hash::finalize(seed ^ 0x77),
    );
    out.extend(
        exact_times(kind, rate, cv, duration_s, seed)
            .into_iter()
            .map(|t| warmup_s + t),
    );
    out
}

/// Gamma(k, 1): Marsaglia–Tsang for k >= 1; for k < 1, Gamma(k + 1) · U^(1/k).
pub fn gamma(rng: &mut Rng, k: f64) -> f64 {
    if k < 1.0 {
        let u = 1.0 - rng.unit(); // (0, 1]
        return gamma(rng, k + 1.0) * u.powf(1.0 / k);
    }
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = rng.normal();
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = 1.0 - rng.unit();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// A seed per (load index, repeat): pairs share it, loads and repeats differ.
pub fn seed(base: u64, load_index: usize, repeat: usize) -> u64 {
    recache_hash::finalize(
        base ^ ((load_index as u64) << 32) ^ (repeat as u64).wrapping_mul(0x9e37),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean rate and CV of the gaps of a long sequence.
    fn stats(t: &[f64]) -> (f64, f64) {
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n;
        (1.0 / mean, var.sqrt() / mean)
    }

    #[test]
    fn poisson_rate_and_cv() {
        let t = times(Arrivals::Poisson, 5.0, 3.0, 20_000.0, 7);
        let (rate, cv) = stats(&t);
        assert!((rate - 5.0).abs() < 0.1, "rate {rate}");
        assert!((cv - 1.0).abs() < 0.05, "cv {cv}");
        assert!(t.windows(2).all(|w| w[0] <= w[1]) && t.iter().all(|x| *x < 20_000.0));
    }

    #[test]
    fn gamma_rate_and_cv() {
        for (cv_want, tol) in [(0.5, 0.05), (2.0, 0.2), (3.0, 0.35)] {
            let t = times(Arrivals::Gamma, 4.0, cv_want, 50_000.0, 11);
            let (rate, cv) = stats(&t);
            assert!((rate - 4.0).abs() < 0.2, "cv {cv_want}: rate {rate}");
            assert!((cv - cv_want).abs() < tol, "cv {cv_want}: got {cv}");
        }
    }

    #[test]
    fn exact_counts_fill_their_window_and_keep_the_bursts() {
        for kind in [Arrivals::Poisson, Arrivals::Gamma] {
            for seed in 0..20 {
                let t = exact_times(kind, 0.55, 3.0, 30.0, seed);
                assert_eq!(t.len(), 17, "{kind:?} {seed}");
                assert!(t.windows(2).all(|w| w[0] <= w[1]));
                assert!(t.iter().all(|x| (0.0..30.0).contains(x)), "{t:?}");
            }
        }
        // Gaps keep their CV (long window, so the scaling is ~1).
        let t = exact_times(Arrivals::Gamma, 4.0, 3.0, 50_000.0, 11);
        let (rate, cv) = stats(&t);
        assert!((rate - 4.0).abs() < 0.01, "rate {rate}");
        assert!((cv - 3.0).abs() < 0.35, "cv {cv}");
        // A warm-up and a measured part, each with its own exact count, in order.
        let s = schedule(Arrivals::Gamma, 2.0, 3.0, (10.0, 30.0), true, 5);
        assert_eq!(s.iter().filter(|x| **x < 10.0).count(), 20);
        assert_eq!(s.len(), 80);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            schedule(Arrivals::Gamma, 2.0, 3.0, (10.0, 30.0), false, 5),
            times(Arrivals::Gamma, 2.0, 3.0, 40.0, 5)
        );
        assert!(exact_times(Arrivals::Gamma, 2.0, 3.0, 0.0, 1).is_empty());
    }

    #[test]
    fn seeded_and_empty_cases() {
        let a = times(Arrivals::Gamma, 2.0, 3.0, 30.0, 1);
        assert_eq!(a, times(Arrivals::Gamma, 2.0, 3.0, 30.0, 1));
        assert_ne!(a, times(Arrivals::Gamma, 2.0, 3.0, 30.0, 2));
        assert!(times(Arrivals::Poisson, 0.0, 1.0, 10.0, 1).is_empty());
        assert_ne!(seed(1, 0, 0), seed(1, 1, 0));
        assert_ne!(seed(1, 0, 0), seed(1, 0, 1));
    }
}
