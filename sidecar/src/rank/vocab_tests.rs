//! Unit tests of `rank::vocab`.

use super::*;
use crate::itempool::config::PoolArgs;
use crate::rank::config::RankArgs;
use http::StatusCode;
use serde_json::json;

#[test]
fn highest_label_counts_the_pool_and_a_refusal_names_the_flags() {
    let config = RankArgs {
        pool: PoolArgs {
            rank_item_pool: Some(1000),
            ..Default::default()
        },
        ..Default::default()
    }
    .resolve();
    let check = VocabCheck::new(&config, 1);
    assert_eq!(check.highest, 256 + 128 + 1000 - 1);
    assert_eq!(check.verdict(), Verdict::Unknown);
    assert!(check.refusal().is_none());
    let refused = Err(EngineError::Engine {
        status: StatusCode::BAD_REQUEST,
        body: json!({"error": {"message": "Token id 1383 is out of vocabulary"}}),
    });
    let Verdict::TooSmall(msg) = check.record(&refused) else {
        panic!("a 400 is a refusal");
    };
    assert!(msg.contains("--rank-item-pool 1000"), "{msg}");
    assert!(msg.contains("out of vocabulary"), "{msg}");
    assert!(check.refusal().is_some());
    let down: Result<Value, EngineError> = Err(EngineError::Upstream(
        crate::client::ClientError::NoHealthyUpstream,
    ));
    assert_eq!(check.record(&down), Verdict::Unknown);
    assert_eq!(check.record(&Ok(json!({}))), Verdict::Fits);
}

#[test]
fn with_a_store_each_replica_has_its_own_pool_labels() {
    let config = RankArgs {
        pool: PoolArgs {
            rank_item_pool: Some(1000),
            rank_pool_store: Some("127.0.0.1:50051".into()),
            ..Default::default()
        },
        ..Default::default()
    }
    .resolve();
    assert_eq!(VocabCheck::new(&config, 1).highest, 256 + 128 + 1000 - 1);
    let check = VocabCheck::new(&config, 3);
    assert_eq!(check.highest, 256 + 128 + 3 * 1000 - 1);
    let refused = Err(EngineError::Engine {
        status: StatusCode::BAD_REQUEST,
        body: json!({"error": {"message": "out of vocabulary"}}),
    });
    let Verdict::TooSmall(msg) = check.record(&refused) else {
        panic!("a 400 is a refusal");
    };
    assert!(msg.contains("3 replicas x --rank-item-pool 1000"), "{msg}");
}
