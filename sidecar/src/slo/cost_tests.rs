//! Unit tests of `slo::cost`.

use super::*;

fn demand(u: u32, o: u32) -> Demand {
    Demand {
        uncached_tokens: u,
        output_tokens: o,
    }
}

#[test]
fn learns_a_linear_engine_and_predicts_nothing_before_it_has_seen_enough() {
    let mut m = CostModel::default();
    assert_eq!(m.predict_ms(demand(100, 1), 0.0), None);
    // An engine: 5 ms fixed, 20 ms per 1k uncached tokens, 30 ms per 100 output tokens,
    // 4 ms per call in flight; inputs vary like real traffic (a deterministic walk).
    let truth = |u: u32, o: u32, l: f64| 5.0 + 0.02 * f64::from(u) + 0.3 * f64::from(o) + 4.0 * l;
    let mut s = 7u64;
    for _ in 0..600 {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (u, o, l) = (
            (s >> 20) as u32 % 4000,
            (s >> 40) as u32 % 64,
            ((s >> 50) % 16) as f64,
        );
        m.observe(demand(u, o), l, truth(u, o, l));
    }
    for (u, o, l) in [(0, 1, 0.0), (3000, 16, 8.0), (1200, 50, 15.0)] {
        let p = m.predict_ms(demand(u, o), l).expect("trusted");
        assert!(
            (p - truth(u, o, l)).abs() < 0.5,
            "{u} {o} {l}: {p} vs {}",
            truth(u, o, l)
        );
    }
    assert!((m.per_load_ms() - 4.0).abs() < 0.05, "{:?}", m.weights());
    assert!(m.abs_error_ms() < 0.5);
}

#[test]
fn constant_features_and_garbage_do_not_break_it() {
    let mut m = CostModel::default();
    // Same demand and load every time: only the intercept is identifiable.
    for _ in 0..20_000 {
        m.observe(demand(500, 8), 2.0, 40.0);
    }
    m.observe(demand(500, 8), 2.0, f64::NAN);
    m.observe(demand(500, 8), 2.0, -1.0);
    let p = m.predict_ms(demand(500, 8), 2.0).expect("trusted");
    assert!((p - 40.0).abs() < 1.0, "{p}");
    assert!(m.weights().iter().all(|w| w.is_finite()));
}

#[test]
fn follows_an_engine_that_slows_down() {
    let mut m = CostModel::default();
    for i in 0..400 {
        m.observe(
            demand(0, 1),
            f64::from(i % 4),
            10.0 + 2.0 * f64::from(i % 4),
        );
    }
    for i in 0..800 {
        m.observe(
            demand(0, 1),
            f64::from(i % 4),
            30.0 + 2.0 * f64::from(i % 4),
        );
    }
    let p = m.predict_ms(demand(0, 1), 1.0).expect("trusted");
    assert!((p - 32.0).abs() < 1.5, "{p}");
}
