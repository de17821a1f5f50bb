//! Unit tests of `retrieve::api`.

use super::*;

fn lookup(id: &str) -> Option<usize> {
    id.parse().ok().filter(|&i: &usize| i < 10)
}

fn err(body: serde_json::Value) -> (String, Option<String>) {
    match parse(body.to_string().as_bytes(), 64, lookup) {
        Err(ApiError::BadRequest { message, param }) => (message, param),
        other => panic!("expected 400, got {other:?}"),
    }
}

#[test]
fn defaults_and_exclusions() {
    let v = parse(
        br#"{"user":{"id":"u","text":"hi"},"exclude":[3,"4","zz"]}"#,
        64,
        lookup,
    )
    .expect("valid");
    assert_eq!((v.beam_width, v.top_k), (32, 10));
    assert_eq!(v.exclude, vec![3, 4]);
}

#[test]
fn rejects_naming_the_field() {
    let user = serde_json::json!({"id": "u", "text": "hi"});
    let (m, p) = err(serde_json::json!({"user": user, "beam_width": 65}));
    assert!(m.contains("1..=64"), "{m}");
    assert_eq!(p.as_deref(), Some("beam_width"));
    let (m, p) = err(serde_json::json!({"user": user, "beam_width": 4, "top_k": 5}));
    assert!(m.contains("1..=beam_width (4)"), "{m}");
    assert_eq!(p.as_deref(), Some("top_k"));
    let (_, p) = err(serde_json::json!({"user": user, "exclude": [1.5]}));
    assert_eq!(p.as_deref(), Some("exclude"));
    let (_, p) = err(serde_json::json!({"user": {"id": "u", "text": ""}}));
    assert_eq!(p.as_deref(), Some("user"));
    let (m, _) = err(serde_json::json!({"user": user, "items": []}));
    assert!(m.contains("unknown field `items`"), "{m}");
}
