//! `bench predictor`'s quality report on a small generated GR trace: one row per feature set
//! plus the upper bound, AUCs in [0, 1], hit ratios between 0 and OPT's.

#![cfg(feature = "lightgbm")]

use clap::Parser;
use recache_bench::predictor::quality_report;
use recache_bench::tracegen::{self, gr};
use recache_eviction::predict::FeatureSet;

#[derive(Parser)]
struct A {
    #[command(flatten)]
    s: gr::GrShape,
}

#[test]
fn report_has_a_row_per_set_and_an_upper_bound() {
    let shape = A::parse_from(["x", "--requests", "450", "--synth-users", "300"]).s;
    let mut rng = tracegen::rng::Rng::new(2);
    let pop = gr::Population::synthetic(shape.synth_users, shape.synth_items, &mut rng);
    let trace = gr::generate(&shape, &pop, 3).expect("shape fits");
    let sets: Vec<FeatureSet> = ["base", "base+gr"]
        .iter()
        .map(|s| s.parse().expect("set"))
        .collect();
    let rows = quality_report(&trace, "gr", 0.05, &sets, 100_000).expect("report");
    let names: Vec<&str> = rows.iter().map(|r| r.features.as_str()).collect();
    assert_eq!(names, ["base", "base+gr", "base+gr+future"]);
    assert!(rows[2].upper_bound && !rows[0].upper_bound);
    for r in &rows {
        assert!(r.windows >= 1, "{r:?}");
        assert!(
            (0.0..=1.0).contains(&r.auc_gap) && (0.0..=1.0).contains(&r.auc_opt),
            "{r:?}"
        );
        assert!(r.laru_hit_ratio <= r.opt_hit_ratio && r.fpb_hit_ratio <= r.opt_hit_ratio);
        assert!(r.lru_hit_ratio > 0.0);
    }
}
