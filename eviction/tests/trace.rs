//! Trace parsing errors name the line; the LightGBM evaluator matches the
//! library's own predictions.

mod common;

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
    let booster = lightgbm3::Booster::train(ds, &common::small_lgbm_params()).expect("train");
    let model = Ensemble::parse(&booster.save_string().expect("dump")).expect("parse");
    let native = booster.predict(&x, NF as i32, true).expect("predict");
    for (row, want) in x.chunks_exact(NF).zip(native) {
        assert!((model.predict(row) - want).abs() < 1e-9);
    }
}

#[test]
fn gr_segments_split_chains_and_round_trip() {
    use recache_eviction::trace::{Request, Segment, SegmentKind, to_line};
    let seg = |len, kind, entity, root| Segment {
        len,
        kind,
        entity,
        root,
    };
    let req = Request {
        timestamp: Some(5),
        input_length: Some(300),
        output_length: Some(1),
        hash_ids: vec![1, 2, 3, 40, 41, 50, 60],
        segments: Some(vec![
            seg(3, SegmentKind::User, Some(9), false),
            seg(2, SegmentKind::Items, None, false),
            seg(1, SegmentKind::Item, Some(77), true),
            seg(1, SegmentKind::Other, None, true),
        ]),
    };
    // user + items continue one chain; each root segment starts its own.
    assert_eq!(req.chains(), vec![(0, 5), (5, 6), (6, 7)]);
    let kinds: Vec<SegmentKind> = req
        .block_segments()
        .expect("segments")
        .iter()
        .map(|s| s.kind)
        .collect();
    assert_eq!(kinds[4], SegmentKind::Items);
    assert_eq!(kinds[5], SegmentKind::Item);
    // Entity context per block: user-first (the user segment comes before any pooled item),
    // positions within each segment.
    assert_eq!(req.user_first(), Some(true));
    let ents = req.entities();
    assert_eq!(ents.len(), 7);
    assert_eq!(
        (ents[2].seg_pos, ents[2].seg_len, ents[2].entity),
        (2, 3, Some(9))
    );
    assert_eq!(
        (ents[5].kind, ents[5].entity),
        (SegmentKind::Item, Some(77))
    );
    assert!(ents.iter().all(|e| e.user_first == Some(true)));
    let dir = std::env::temp_dir().join(format!("recache-gr-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("gr.jsonl");
    std::fs::write(&path, format!("{}\n", to_line(&req))).expect("write");
    let back = recache_eviction::trace::load_mooncake(&path).expect("load");
    assert_eq!(back, vec![req.clone()]);
    // A plain line is one chain.
    let plain = Request {
        segments: None,
        ..req
    };
    assert_eq!(plain.chains(), vec![(0, 7)]);
    // Lens that do not add up are refused, naming the line.
    std::fs::write(
        &path,
        "{\"hash_ids\":[1],\"segments\":[{\"len\":2,\"kind\":\"user\"}]}\n",
    )
    .expect("write");
    let err = recache_eviction::trace::load_mooncake(&path).expect_err("bad lens");
    assert!(
        err.to_string().contains(":1: segment lengths sum to 2"),
        "{err}"
    );
}

#[test]
fn block_tokens_from_input_lengths() {
    use recache_eviction::trace::{Request, Segment, SegmentKind, block_tokens};
    let req = |input: Option<u64>, blocks: usize, pooled: bool| Request {
        timestamp: None,
        input_length: input,
        output_length: None,
        hash_ids: (0..blocks as u64).collect(),
        segments: pooled.then(|| {
            vec![Segment {
                len: blocks,
                kind: SegmentKind::Item,
                entity: Some(1),
                root: true,
            }]
        }),
    };
    // Mooncake-like: ~500 tokens per block; GR-like: ~32; pooled requests are ignored.
    assert_eq!(block_tokens(&[req(Some(12_000), 24, false)]), 512);
    let gr = [
        req(Some(3036), 94, false),
        req(Some(3300), 103, false),
        req(Some(19), 100, true),
    ];
    assert_eq!(block_tokens(&gr), 32);
    assert_eq!(
        block_tokens(&[req(None, 3, false)]),
        512,
        "no lengths: Mooncake's"
    );
}
