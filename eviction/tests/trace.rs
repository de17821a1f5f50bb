//! Trace parsing errors name the line; the LightGBM evaluator matches the
//! library's own predictions.

use std::io::Write;

use recache_eviction::trace::{TraceError, load_mooncake};

#[test]
fn bad_line_is_a_typed_error_with_its_number() {
    let dir = std::env::temp_dir().join(format!("recache-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("t.jsonl");
    let mut f = std::fs::File::create(&path).expect("create");
    writeln!(
        f,
        r#"{{"timestamp":0,"input_length":10,"output_length":1,"hash_ids":[1,2]}}"#
    )
    .expect("w");
    writeln!(f).expect("w");
    writeln!(f, r#"{{"timestamp":1,"hash_ids":"oops"}}"#).expect("w");
    drop(f);
    match load_mooncake(&path) {
        Err(TraceError::Parse { line, .. }) => assert_eq!(line, 3),
        other => panic!("expected a parse error, got {other:?}"),
    }
    assert!(matches!(
        load_mooncake(&dir.join("missing")),
        Err(TraceError::Io { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(feature = "lightgbm")]
#[test]
fn rust_evaluator_matches_lightgbm() {
    use recache_eviction::predict::features::NF;
    use recache_eviction::predict::lgbm::params;
    use recache_eviction::predict::trees::Ensemble;
    // Synthetic rows with a nonlinear target, including -1 "missing" values.
    let n = 3000;
    let mut x = Vec::with_capacity(n * NF);
    let mut y = Vec::with_capacity(n);
    let mut s = 12345u64;
    for _ in 0..n {
        let mut row = [0f32; NF];
        for v in &mut row {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            *v = if s % 7 == 0 {
                -1.0
            } else {
                (s % 1000) as f32 / 10.0
            };
        }
        y.push(if row[0] > 50.0 {
            row[3].ln_1p()
        } else {
            row[5] * 0.1
        });
        x.extend_from_slice(&row);
    }
    let ds = lightgbm3::Dataset::from_slice(&x, &y, NF as i32, true).expect("dataset");
    let booster = lightgbm3::Booster::train(ds, &params(20, 15)).expect("train");
    let model = Ensemble::parse(&booster.save_string().expect("dump")).expect("parse");
    let native = booster.predict(&x, NF as i32, true).expect("predict");
    for (row, want) in x.chunks_exact(NF).zip(native) {
        assert!((model.predict(row) - want).abs() < 1e-9);
    }
}
