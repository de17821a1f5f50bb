//! Tests of the policy configuration: names and specs parse and round-trip.

use super::*;

#[test]
fn every_name_parses_and_round_trips() {
    for name in PolicyConfig::NAMES {
        let cfg = PolicyConfig::from_name(name).expect("valid name");
        assert_eq!(cfg.name(), *name);
    }
    let laru: PolicyConfig =
        serde_json::from_str(r#"{"policy":"laru","lambda_min_misses":8}"#).expect("laru");
    let mut expected = PolicyConfig::laru_with_features(None);
    if let PolicyConfig::Laru {
        lambda_min_misses, ..
    } = &mut expected
    {
        *lambda_min_misses = Some(8);
    }
    assert_eq!(laru, expected);
    assert_eq!(
        PolicyConfig::from_name("laru").expect("laru"),
        PolicyConfig::laru_with_features(None)
    );
    let early = PolicyConfig::from_spec("fpb:install_after=100:label_horizon=500").expect("early");
    assert_eq!(early.model_schedule(), (Some(100), Some(500)));
    assert_eq!(
        PolicyConfig::from_name("lru")
            .expect("lru")
            .model_schedule(),
        (None, None)
    );
    let gr = PolicyConfig::from_spec("laru:features=base+gr").expect("features");
    assert_eq!(
        gr.features().map(|f| f.to_string()).as_deref(),
        Some("base+gr")
    );
    assert!(matches!(
        PolicyConfig::from_spec("fpb:features=base+nope"),
        Err(PolicyError::BadParams { .. })
    ));
}

#[test]
fn a_learned_policy_may_name_the_reuse_predictor() {
    let reuse = PolicyConfig::from_spec("laru:predictor=reuse").expect("reuse");
    assert_eq!(reuse.predictor(), Some(PredictorChoice::Reuse));
    assert!(reuse.uses_predictor() && !reuse.needs_lightgbm());
    let plain = PolicyConfig::from_name("fpb").expect("fpb");
    assert_eq!(plain.predictor(), None);
    assert!(plain.needs_lightgbm());
    assert!(
        !PolicyConfig::from_name("lru")
            .expect("lru")
            .needs_lightgbm()
    );
    assert!(matches!(
        PolicyConfig::from_spec("hf:predictor=oracle"),
        Err(PolicyError::BadParams { .. })
    ));
    let env = PolicyEnv {
        capacity: 8,
        predictor: Some(Box::new(crate::predict::ReuseHist::new())),
        future: None,
    };
    assert!(build(&reuse, env).is_ok());
}

#[test]
fn unknown_name_lists_valid_ones() {
    let err = PolicyConfig::from_spec("hf:candidates=8").map(|c| c.name());
    assert_eq!(err.ok(), Some("hf"));
    assert!(matches!(
        PolicyConfig::from_spec("lru:bogus=1"),
        Err(PolicyError::BadParams { .. })
    ));
    let err = PolicyConfig::from_name("arc").expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "unknown policy \"arc\", valid: lru, lfu, sieve, fpb, hf, laru, opt, dead-first"
    );
}
