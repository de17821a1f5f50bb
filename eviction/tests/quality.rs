//! `bench predictor`'s quality report on a small generated GR trace: one row per feature set
//! plus the upper bound, AUCs in [0, 1], hit ratios between 0 and OPT's; and feature sets
//! really restrict what a model reads.

#![cfg(feature = "lightgbm")]

mod common;

use clap::Parser;
use recache_eviction::bench::quality_report;
use recache_eviction::predict::FeatureSet;
use recache_eviction::tracegen::{self, gr};

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

#[test]
fn a_model_trained_on_a_set_reads_only_its_columns() {
    use recache_eviction::predict::features::ALL;
    use recache_eviction::predict::lgbm::train;
    let gr: FeatureSet = "gr".parse().expect("set");
    let cols = gr.columns();
    let target = cols[2];
    let mut x = Vec::new();
    let mut y = Vec::new();
    let mut rows = Vec::new();
    for i in 0..3000u32 {
        let mut row = [0f32; ALL];
        for (c, v) in row.iter_mut().enumerate() {
            *v = ((i as usize * 7 + c * 13) % 97) as f32;
        }
        y.push(row[target] * 0.5 + row[0]);
        x.extend(cols.iter().map(|&c| row[c]));
        rows.push(row);
    }
    let m = train(&x, &y, &cols, &common::small_lgbm_params()).expect("train");
    let mut a = rows[5];
    let base = m.predict(&a);
    a[0] += 50.0; // a base column: not in the set
    assert_eq!(m.predict(&a), base, "column 0 is not read");
    a[target] += 40.0;
    assert_ne!(m.predict(&a), base, "the set's column is");
}
