//! Feature sets really restrict what a model reads: a model trained on a set ignores every
//! column outside it.

#![cfg(feature = "lightgbm")]

mod common;

use recache_eviction::predict::FeatureSet;

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
