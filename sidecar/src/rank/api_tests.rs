//! Unit tests of `rank::api`.

use super::*;

fn err(body: serde_json::Value) -> String {
    match parse(body.to_string().as_bytes(), 3) {
        Err(ApiError::BadRequest { message, .. }) => message,
        other => panic!("expected 400, got {other:?}"),
    }
}

#[test]
fn accepts_text_tokens_and_integer_ids() {
    let v = parse(
        br#"{"model":"m","user":{"id":5,"tokens":[1,2]},"items":[{"id":"a","text":"x"},{"id":7,"tokens":[3]}],"top_k":9}"#,
        3,
    )
    .expect("valid");
    assert_eq!(v.user.key, "5");
    assert_eq!(v.items[1].key, "7");
    assert_eq!(v.items[1].id, serde_json::json!(7));
    assert_eq!(v.top_k, 2);
    assert_eq!(v.mode, Mode::Auto);
}

#[test]
fn rejects_with_a_message_naming_the_problem() {
    let user = serde_json::json!({"id": "u", "text": "hi"});
    let item = |id: &str| serde_json::json!({"id": id, "text": "x"});
    let m = err(serde_json::json!({"user": user, "items": []}));
    assert!(m.contains("at least one candidate"), "{m}");
    let m = err(serde_json::json!({"user": user, "items": [item("a"), item("a")]}));
    assert!(m.contains("duplicate id \"a\""), "{m}");
    let m = err(serde_json::json!({"user": {"id": "u", "text": ""}, "items": [item("a")]}));
    assert!(m.contains("'user' (u) needs a non-empty"), "{m}");
    let m = err(serde_json::json!({"user": user, "items": [item("a")], "mode": "x"}));
    assert!(m.contains("'mode' must be one of"), "{m}");
    let m =
        err(serde_json::json!({"user": user, "items": [item("a")], "pool_recompute": "link:k=0"}));
    assert!(m.contains("pool recompute 'link:k=0'"), "{m}");
    let four = [item("a"), item("b"), item("c"), item("d")];
    let m = err(serde_json::json!({"user": user, "items": four}));
    assert!(m.contains("has 4 candidates; at most 3"), "{m}");
    let m = err(serde_json::json!({"items": [item("a")]}));
    assert!(m.contains("missing field `user`"), "{m}");
}
